"""The estimate's explanation, category by category, as data the app words in the learner's language (`term.<category>`):
{"category", "args", "bytes"} per category, everything read off the replay that gave the estimate. Torch-free."""

from __future__ import annotations

from ..core.units import MIB
from ..core.vocabulary import TENSOR_CATEGORIES


def step_temporaries(replayed: dict) -> int:
    """What the steady step's optimizer step holds above what was allocated before it: its temporaries (sqrt(v) and
    the denominators of Adam's foreach path, one tensor's of its for-loop path, none of SGD's)."""
    step2 = [p for p in replayed["phases"] if p["step"] == 2]
    before = [p for p in step2 if p["phase"] != "optimizer_step"][-1]["allocated_bytes"]
    peak = max(p["peak_bytes"] for p in step2 if p["phase"] == "optimizer_step")
    return max(0, peak - before)


def terms(cfg, replayed: dict, categories: dict[str, int]) -> list[dict]:
    """One term per category of `categories` (the estimate's, at its peak): its bytes there, and the figures its
    sentence quotes. `cfg`: the configuration as the learner set it (its optimizer implementation, not the one the
    replay took for "default")."""
    params = replayed["parameters"]
    args = {
        "parameters": {"mib": params["bytes"] / MIB, "dtype": "/".join(params["dtypes"])},
        "optimizer_state": {"optimizer": cfg.optimizer, "mib": replayed["steady"].get("optimizer_state", 0) / MIB},
        "activations": {"micro_batch": cfg.micro_batch, "checkpointed": cfg.checkpoint != "none"},
        "temporaries": {"impl": cfg.optimizer_impl, "mib": step_temporaries(replayed) / MIB},
    }
    names = [c for c in TENSOR_CATEGORIES if c in categories] + [c for c in categories if c not in TENSOR_CATEGORIES]
    return [{"category": c, "args": args.get(c, {}), "bytes": int(categories[c])} for c in names]
