"""The app's only door to experiments/: the engine's vocabulary the pages speak, the worker, estimates, recorded
results and the engine's rules, each through one function that returns a result or an error and never raises into
a page. Only torch-free engine modules are imported, also inside functions: the web server never imports torch
(tests/test_architecture.py); replays run in the estimate processes, runs in the worker's.
"""

from __future__ import annotations

import contextlib

import streamlit as st

from app.job_errors import Failure, classify
from app.memo import Memo
from course import catalog, facts
from course.expectations import RANK_CATEGORIES
from experiments.cli_command import fits_command  # noqa: F401 - the page shows it under What fits
from experiments.core import config as _config
from experiments.core import recorded as _recorded
from experiments.core import timeline as _timeline
from experiments.core import tolerance as _tolerance
from experiments.core.cgroup import with_host_memory
from experiments.core.config import BOOLS, CHOICES, RANGES, ConfigError, ExperimentConfig
from experiments.core.limits import problem as limits_problem  # the operator's limits file's error, once
from experiments.core.metrics import VERDICT_MIN_ROUNDS, net_peak, paired
from experiments.core.vocabulary import CATEGORIES, PHASES
from experiments.jobs.estimates import PENDING, shared_pool

__all__ = [
    "BOOLS",
    "CATEGORIES",
    "CHOICES",
    "PHASES",
    "RANGES",
    "RANK_CATEGORIES",
    "VERDICT_MIN_ROUNDS",
    "ConfigError",
    "ExperimentConfig",
    "limits_problem",
    "net_peak",
    "paired",
]

DEFAULTS = ExperimentConfig().to_dict()
BUDGET_MB = _config.BUDGET_MB  # a memory budget's range in MB (or none)
SANDBOX_OPTIMIZERS = _config.TORCH_OPTIMIZERS  # the lessons' sandboxes; bitsandbytes' are on "Your model"

# ---------------------------------------------------------------------------------------------- the worker


def client():
    """One worker process per server, jobs one at a time (CUDA peaks per job); not in st.cache_resource (no reset)."""
    from experiments.jobs.worker import shared_client

    c = shared_client()
    c.owner_alive = _session_alive
    return c


def session_id() -> str | None:
    """This browser tab's session: the fair queue's unit, and how the worker knows a closed tab's jobs."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx else None


def _session_alive(sid: str) -> bool:
    from streamlit import runtime

    return not runtime.exists() or runtime.get_instance().is_active_session(sid)


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _safe(call, default):
    """(call(), None), or (default, the error message): any engine failure becomes a message on the page."""
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001
        return default, _text(exc)


def get_client():
    """(client, error message)."""
    return _safe(client, None)


def submit(specs: list[dict]) -> tuple[list[str] | None, Failure | None]:
    """Submits every spec ({"kind", "params"}) for this session; (ticket ids, None) or (None, why not)."""
    c, err = get_client()
    if err:
        return None, Failure("Internal", err)
    try:
        return [c.submit(s["kind"], s["params"], owner=session_id(), fresh=bool(s.get("fresh"))) for s in specs], None
    except Exception as exc:  # noqa: BLE001
        return None, classify(getattr(exc, "error_info", None), _text(exc), getattr(exc, "per_session", False))


def status(job_id: str, result: bool = True) -> dict:
    got, err = _safe(lambda: client().status(job_id, result=result), None)
    return got if err is None else {"state": "error", "error": err, "result": None}


def wait_ended(job_ids: list[str], timeout: float) -> bool:
    """Up to `timeout` seconds for every job to end (WorkerClient.wait_ended); False where it cannot wait."""
    with contextlib.suppress(Exception):  # a poll that cannot wait just reads the statuses
        return client().wait_ended(job_ids, timeout)
    return False


def cancel(job_ids: list[str]) -> None:
    c, _ = get_client()
    for job_id in job_ids if c is not None else ():
        with contextlib.suppress(Exception):  # a job that already ended cannot be cancelled
            c.cancel(job_id)


@st.cache_data(ttl=10, show_spinner=False)
def device_info() -> dict:
    # Asked of the worker process: calling torch.cuda here would give the web server a CUDA
    # context of its own, hundreds of MiB of GPU memory the learners' runs cannot use.
    info = client().device_info()
    if info is None:
        raise RuntimeError("the experiment worker did not report its device in time")
    return with_host_memory(info)  # a CPU's free memory read now, not when the worker started


def device_info_nowait() -> dict | None:
    """The worker's device if it has reported already, else None (and the worker is started)."""
    with contextlib.suppress(Exception):  # the page's device panel reports errors; the sidebar stays quiet
        return client().device_info(timeout=0)
    return None


def safe_device_info() -> tuple[dict | None, str | None]:
    return _safe(device_info, None)


def gpu_worker() -> bool:
    info, _ = safe_device_info()
    return bool(info) and info.get("type") == "cuda"


def operator_cap_gib() -> float | None:
    """The server's per-run peak limit (docs/operators.md), None where the teacher set none."""
    from experiments.core.limits import load

    return load().max_peak_gib


# ---------------------------------------------------------------------------------------------- configurations


_configs = Memo(4096)


def _frozen(data: dict):
    return tuple(sorted(data.items()))


def _validate(data: dict) -> tuple[ExperimentConfig | None, ConfigError | None]:
    try:
        return ExperimentConfig.from_dict(data), None
    except ConfigError as exc:
        return None, exc
    except (TypeError, ValueError) as exc:
        return None, ConfigError("config", str(exc))


def config(data: dict) -> tuple[ExperimentConfig | None, ConfigError | None]:
    """The validated configuration of `data`, or the rule it breaks. Each distinct configuration is validated once
    per server, however many panels of a page ask; one with an unhashable value (a list from a hand-made link),
    which cannot be valid anyway, each time it is asked."""
    return _configs.get(_frozen(data), lambda: _validate(data))


def field_value(field_name: str, raw):
    """A URL query value for a config field -> the typed value; ConfigError (a ValueError) if unusable. The engine's
    own rules decide (ExperimentConfig.field_value): the app keeps no copy of them."""
    return ExperimentConfig.field_value(field_name, raw)


# ---------------------------------------------------------------------------------------------- estimates


def capacity_bytes(cfg) -> int | None:
    """What the estimate is compared with: the runner's rule (experiments/core/capacity.py) on the worker's device."""
    from experiments.core.capacity import capacity, cpu_free_for_tensors

    info, _ = safe_device_info()
    if info and info.get("type") == "cuda" and cfg.device == "cpu":
        # The worker reports its GPU; free RAM for a forced-CPU run is not known here: the budget alone.
        return capacity(cfg.budget_mb, None)
    if info and info.get("type") == "cpu":  # the worker's own growth during a run counts, as in the runner
        return capacity(cfg.budget_mb, cpu_free_for_tensors(info.get("free_bytes")))
    return capacity(cfg.budget_mb, (info or {}).get("free_bytes"), (info or {}).get("cached_free_bytes", 0))


def measure_later(signatures: list[str]) -> None:
    """The worker measures these ops' scratch memory on its GPU (once per shape); the next estimate includes them."""
    try:
        client().submit("workspaces", {"signatures": sorted(signatures)}, owner=session_id())
    except Exception:  # noqa: BLE001 - a full queue only delays the measurement until the run itself
        pass


def workspaces() -> tuple | None:
    """The cuDNN workspaces the worker has measured on its GPU so far (experiments/estimate/workspaces.py)."""
    from pathlib import Path

    from experiments.core.workspace_table import load

    info, _ = safe_device_info()
    path = (info or {}).get("workspaces_path")
    return tuple(sorted(load(Path(path)).items())) if path else None


def device_type(cfg) -> str:
    """Where a run of cfg would execute: the worker's device, unless the config asks for the CPU."""
    if cfg.device == "cpu":
        return "cpu"
    return "cuda" if gpu_worker() else "cpu"


ESTIMATE_WAIT_S = 0.8  # experiments/jobs/estimates.py's processes estimate; a page waits this long, then polls


def pending(err: str | None) -> bool:
    """Whether an estimate's error only says it is not ready yet (the page polls and shows it when it is)."""
    return err == PENDING


def estimate(
    cfg,
    capacity: int | None = None,
    *,
    for_device: str | None = None,
    measured_workspaces: bool = True,
    wait: float | None = ESTIMATE_WAIT_S,
) -> tuple[dict | None, str | None]:
    """(estimate, None), (None, PENDING) while it is computed, or (None, error message) for an ExperimentConfig or a
    DistributedConfig on the device its run would use (or `for_device`): a fake-tensor replay, exact in tensor bytes,
    with the scratch memory the worker measured on its GPU; an op not measured yet is measured for the next call."""
    try:
        distributed = not isinstance(cfg, ExperimentConfig)
        where = for_device or device_type(cfg.config if distributed else cfg)
        table = workspaces() if where == "cuda" and measured_workspaces else None
        est = shared_pool(_session_alive).estimate(cfg, capacity, where, table, owner=session_id(), wait=wait)
        if est is PENDING:
            return None, PENDING
        if est.get("unmeasured") and measured_workspaces:
            measure_later(est["unmeasured"])
        return est, None
    except Exception as exc:  # noqa: BLE001 - an estimate failure is a message, not a crash
        return None, _text(exc)


def library(name: str, *args, wait: float | None = None):
    """What the model libraries answer, asked of an estimate process (they import torch): "torchvision" (it imports
    beside this torch, its version or what to install), "head" (a model type's first head); PENDING until then."""
    target = {"torchvision": "source_models:torchvision_status", "head": "hf_models:default_task"}[name]
    pool = shared_pool(_session_alive)
    return pool.get((name, *args), f"experiments.training.{target}", args, {}, wait=wait, max_seconds=150)


def what_fits(dcfg, capacity: int, wait: float | None = ESTIMATE_WAIT_S, **own) -> tuple[dict | None, str | None]:
    """The fewest devices, then the strategy with the least traffic, that hold dcfg by the estimate (None when none
    does); PENDING as estimate's. One GPU (own model; `own`: precisions, overhead, methods, progress): each
    combination's largest batch that runs on the card, or with methods=True which fine-tuning method runs there."""
    try:
        if isinstance(dcfg, ExperimentConfig):  # one GPU: the levers x batch grid (a model of one's own)
            kw = {"owner": session_id(), "wait": wait, **own}
            found = shared_pool(_session_alive).model_fits(dcfg, capacity, "cuda", **kw)
            return (None, PENDING) if found is PENDING else (found, None)
        where = device_type(dcfg.config)
        table = workspaces() if where == "cuda" else None
        found = shared_pool(_session_alive).what_fits(dcfg, capacity, where, table, owner=session_id(), wait=wait)
        return (None, PENDING) if found is PENDING else (found, None)
    except Exception as exc:  # noqa: BLE001
        return None, _text(exc)


def step_time(cfg: ExperimentConfig, est: dict) -> dict | None:
    """Step time and run duration before running: the replay's work over the worker's measured device rates and
    this machine's load; None where the worker has no rates for the device the run would use."""
    info, _ = safe_device_info()
    rates = (info or {}).get("rates")
    if not est.get("step") or not rates or device_type(cfg) != info.get("type"):
        return None
    from experiments.estimate.steptime import current_load, family, predict_run_s, predict_step_ms

    load = current_load()  # the worker runs on this machine: a CPU step shares its cores with this load
    model = family(cfg.model, cfg.model_source, est["step"])
    step = predict_step_ms(est["step"], rates, cfg.precision, info["type"], load, model)
    low_s, high_s = predict_run_s(step, cfg.steps, cfg.timing_steps, rates, est["step"]["kernels"], load)
    return {"step": step, "run_s": (low_s, high_s)}


def center_ms(est: dict, rates: dict | None, precision: str, on: str) -> float | None:
    """The predicted step time's centre on a device with these measured rates (None without rates or work)."""
    if not rates or not est.get("step"):
        return None
    from experiments.estimate.steptime import predict_step_ms

    return predict_step_ms(est["step"], rates, precision, on)["center_ms"]


def gradient_tolerance(precision: str = "fp32") -> float:
    """The guard's relative tolerance for a gradient at this precision (experiments/core/tolerance.py)."""
    return _tolerance.GRADIENT_TOLERANCE[precision]


# ---------------------------------------------------------------------------------------------- data parallel


def distributed_options() -> dict:
    """The engine's data-parallel choices: strategies, batch modes, the world sizes it accepts."""
    lo, hi = _config.WORLD_SIZE
    return {"strategy": _config.STRATEGIES, "batch_mode": _config.BATCH_MODES, "world_size": tuple(range(lo, hi + 1))}


def distributed_config(
    cfg: ExperimentConfig, strategy: str, world_size: int, batch_mode: str
) -> tuple[object | None, ConfigError | None]:
    try:
        return _config.DistributedConfig(cfg, strategy=strategy, world_size=world_size, batch_mode=batch_mode), None
    except ConfigError as exc:
        return None, exc


def distributed_unavailable(dcfg) -> str | None:
    """Why this machine cannot run dcfg (its device type, its GPU count), or None; the page never touches CUDA."""
    from experiments.core.cpu_strategies import check_cpu

    info, _ = safe_device_info()
    try:
        if (info or {}).get("type") == "cuda" and dcfg.config.device != "cpu":
            count = info.get("device_count")  # when the worker reports it; otherwise the engine checks at Run
            if count and dcfg.world_size > count:
                why = f"got {dcfg.world_size}; this machine has {count} GPU(s): allowed range is [1, {count}]"
                raise ConfigError("world_size", why + " (one process per GPU)")
            return None
        check_cpu(dcfg.strategy)
    except ConfigError as exc:
        return str(exc)
    return None


def offload_host_categories(distributed: dict) -> dict[str, int] | None:
    """What a rank under FSDP2's CPU offload keeps in host memory, by the estimate (experiments/distributed/
    estimate.py), for a recorded result's "distributed" settings; None while it is being computed."""
    dcfg, key = _config.DistributedConfig.from_dict(distributed), ("offload_host", repr(sorted(distributed.items())))
    target = "experiments.distributed.estimate:offload_host_categories"  # the model's shapes: torch, in the pool
    got = shared_pool(_session_alive).get(key, target, (dcfg,), {}, session_id(), wait=ESTIMATE_WAIT_S)
    return None if got == PENDING else got


# ---------------------------------------------------------------------------------------------- recorded results


def load_recorded(record_id: str) -> dict | None:
    """A recorded result (shared: read it, never change it), or None when the project has none under this id."""
    return _recorded.load_recorded(record_id)


def safe_list_recorded() -> tuple[list[dict], str | None]:
    return _safe(_recorded.list_recorded, [])


def safe_load_recorded(record_id: str) -> tuple[dict | None, str | None]:
    return _safe(lambda: load_recorded(record_id), None)


def find_recorded(cfg) -> dict | None:
    """The recorded GPU result of the same experiment as cfg (course/experiment.py), if the project ships one."""
    with contextlib.suppress(Exception):  # recorded results are an extra; their absence is not an error
        return _recorded.find_recorded(cfg.to_dict())
    return None


def recorded_file(name: str) -> bytes | None:
    """A file shipped beside the recordings (a run's raw allocator snapshot, gzip), or None."""
    with contextlib.suppress(OSError):
        return (_recorded.ROOT / catalog.RECORDED_FOLDER / name).read_bytes()
    return None


def fact_values(specs: dict) -> dict[str, str]:
    """The numbers a lesson's prose quotes ({{name}}), read off the recordings they are bound to."""
    return facts.resolve(specs or {}, load_recorded)


def history_series(history: dict) -> list[dict]:
    """Live bytes per category after every event of an allocation timeline (experiments/core/timeline.py)."""
    return _timeline.series(history)
