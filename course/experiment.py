"""When two runs are the same experiment: the one rule for a recorded result of what the learner configured, a
prompt's predicted run, and what a side-by-side view lists as different. Torch-free.

The fields that do not change what a run's steps allocate: where it runs (the device: a recording is shown for
the configuration whatever device the learner has), whether a refusal was overridden (force), and how many steps
are instrumented or timed (steps beyond the second repeat the steady state; timing_steps only time). The same
fields experiments/core/recorded.py's find_recorded ignores: the rule is stated there, once.
"""

from __future__ import annotations

from experiments.core.recorded import NOT_THE_EXPERIMENT, experiment_key

__all__ = ["NOT_THE_EXPERIMENT", "differences", "experiment_key", "same_experiment"]


def same_experiment(a: dict, b: dict) -> bool:
    return experiment_key(a or {}) == experiment_key(b or {})


def differences(a: dict, b: dict, defaults: dict) -> list[tuple[str, object, object]]:
    """(field, value in a, value in b) for every field of the experiment in which b differs from a, in the order
    of `defaults` (the engine's fields); a field a configuration leaves out has its default."""
    ca, cb = {**defaults, **(a or {})}, {**defaults, **(b or {})}
    return [(k, ca[k], cb[k]) for k in defaults if k not in NOT_THE_EXPERIMENT and ca[k] != cb[k]]
