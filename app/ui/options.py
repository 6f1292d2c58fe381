"""The sandbox's option lists and bounds, all derived from the engine's own rules (RANGES, CHOICES and the budget's
range in experiments/core/config.py), so a widget never offers what the engine refuses nor hides what it accepts.

The lists are fixed (they depend on no other widget): Streamlit keys a select_slider's identity on its options,
so a list that changed with, say, the model would reset the slider."""

from __future__ import annotations

from app.backend import BUDGET_MB, RANGES


def powers_of_two(field: str, lo: int | None = None, hi: int | None = None) -> list[int]:
    """The powers of two in the field's range (a learner halves and doubles a size), or in the window [lo, hi] of
    it that a panel offers; a window outside the range is an error, not an empty list."""
    first, last = RANGES[field]
    lo, hi = max(first, lo or first), min(last, hi or last)
    values = [2**k for k in range(hi.bit_length()) if lo <= 2**k <= hi]
    if not values:
        raise ValueError(f"{field}: no power of two in [{lo}, {hi}]; the engine's range is [{first}, {last}]")
    return values


def image_sizes() -> list[int]:
    """Square image sizes in steps of 32 px, and the powers of two below (the CNN halves the image every second
    layer while it is at least 16 px)."""
    hi = RANGES["image_size"][1]
    return sorted(v for v in {*powers_of_two("image_size"), *range(32, hi + 1, 32)} if v < 32 or v % 32 == 0)


# The fields drawn as select sliders over a list, and those drawn as plain sliders over the whole range.
LISTS = {
    "width": powers_of_two("width"),
    "batch": powers_of_two("batch"),
    "accum": powers_of_two("accum"),
    "seq_len": powers_of_two("seq_len"),
    "heads": powers_of_two("heads"),
    "image_size": image_sizes(),
}
SLIDERS = ("layers", "segments", "steps", "timing_steps")


def budget_bounds() -> tuple[float, float]:
    """A memory budget in MB (MiB, as the engine counts it)."""
    return float(BUDGET_MB[0]), float(BUDGET_MB[1])
