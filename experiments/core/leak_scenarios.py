"""The leak lab's scenario names and a leak run's default sizes (experiments/labs/leaks.py runs them). Torch-free:
the command line lists them without importing torch."""

from __future__ import annotations

SCENARIOS = (
    "append_loss_after_backward",  # losses.append(loss) after backward, loss = F.mse_loss: a (batch, width) storage per step
    "append_scalar_loss_after_backward",  # the same with loss = ((out - y) ** 2).mean(): one 0-dim tensor per step
    "append_loss_no_backward",  # an eval loop without no_grad keeping its losses: whole graphs
    "cache_outputs",  # a module keeps every output it returns
    "cache_outputs_detached",  # ... with .detach(): the storage is shared, so nothing changes
    "no_zero_grad",  # gradients accumulate in place: wrong, but no growth
    "reference_cycle",  # each step's output kept by an object in a reference cycle: only gc.collect() frees it
    "fixed",  # losses.append(loss.item()), zero_grad, nothing cached
    "exercise_loop",  # the course's exercise-3 loop with a caching module; `loop` picks which habits are fixed
)

# A leak run's sizes: its own loop (an MLP of `layers` Linear+ReLU), not the sandbox's configuration.
LIMITS = {"steps": (1, 200), "batch": (1, 65536), "width": (8, 8192), "layers": (1, 32)}
DEFAULTS = {"steps": 10, "batch": 64, "width": 512, "layers": 4}
