"""How an estimate of the pool (experiments/jobs/estimates.py) can fail, as the page and the tests tell them apart."""

from __future__ import annotations


class EstimateTooLong(RuntimeError):
    def __init__(self, seconds: float):
        super().__init__(
            f"this configuration would take more than {seconds:g} s to estimate (the server's limit for one "
            "estimate); reduce layers, steps or accum, or run it to measure it"
        )
        self.seconds = seconds


class EngineRefusal(RuntimeError):
    """The estimator's own answer that it cannot estimate this configuration (its message, from the process)."""


class EstimateCancelled(RuntimeError):
    pass
