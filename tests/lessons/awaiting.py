"""The one place where lesson checks wait for a recording that cannot be made yet.

recorded/h200x2/multigpu-h200x2-fsdp2_offload.json was recorded before a CPU-offload rank counted its host memory
apart (experiments/distributed/rank.py: `host_breakdown`, `host_peak_bytes`): its breakdown sums host and device
memory, and it has no host peak. Lesson 6's checks and facts that read those wait for a recording on a machine
with two GPUs (COMMAND). test_multigpu_data.py::test_the_offload_recording_still_awaits_its_re_recording fails the
day that recording exists: then delete this module and what uses it (the tests say where)."""

from __future__ import annotations

OFFLOAD_RECORDING = "multigpu-h200x2-fsdp2_offload"
OFFLOAD_RUN = "fsdp2_offload"  # its run key in lesson 6's prompts
# What only the re-recording has: the offload run's categories of device memory alone, and its host peak.
OFFLOAD_METRICS = {"category_mib", "category_ratio", "category_share_pct", "category_per", "host_mib"}
OFFLOAD_FACTS = {"offload_host_mib"}
COMMAND = "python3 benchmarks/record_distributed.py --device cuda --only fsdp2_offload"


def awaits_offload_recording(result: dict | None) -> bool:
    """Whether this offload recording predates the split: a recorded run none of whose ranks counts host memory."""
    ranks = (result or {}).get("ranks") or []
    return bool(ranks) and not any("host_breakdown" in r for r in ranks)


def awaiting_check(spec: dict, device: str) -> bool:
    """A check of lesson 6 that reads what the offload recording does not have yet."""
    return device == "cuda" and spec.get("run") == OFFLOAD_RUN and spec.get("metric") in OFFLOAD_METRICS
