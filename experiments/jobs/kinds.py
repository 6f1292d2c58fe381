"""What a job is: a kind and plain parameters in, a JSON-able result out (used by the worker and the CLI)."""

from __future__ import annotations

from ..core.config import ConfigError, ExperimentConfig

KINDS = ("run", "leak", "profile", "guard", "fragmentation", "timing_rounds", "distributed", "workspaces")


def execute(kind: str, params: dict, progress=None, should_cancel=None) -> dict:
    if kind == "run":
        from ..measure.run import run_experiment

        return run_experiment(ExperimentConfig.from_dict(params), progress=progress, should_cancel=should_cancel)
    if kind == "leak":
        from ..labs.leaks import run_leak

        return run_leak(**params)
    if kind == "profile":
        from ..measure.profiling import profile_step

        return profile_step(ExperimentConfig.from_dict(params))
    if kind == "guard":
        from ..training.guard import check_gradients

        return check_gradients(ExperimentConfig.from_dict(params))
    if kind == "fragmentation":
        from ..labs.fragmentation import run_fragmentation

        return run_fragmentation(**params)
    if kind == "timing_rounds":
        from ..measure.timing import time_rounds

        return time_rounds(**params, progress=progress, should_cancel=should_cancel)
    if kind == "distributed":
        from ..distributed.launch import run_distributed

        return run_distributed(params, progress=progress, should_cancel=should_cancel)
    if kind == "workspaces":
        from ..measure.fits import measure_workspaces_job

        return measure_workspaces_job(params.get("signatures"))
    raise ConfigError(
        "kind", f"got {kind!r}; allowed: {', '.join(KINDS)}", "choice", value=kind, allowed=", ".join(KINDS)
    )
