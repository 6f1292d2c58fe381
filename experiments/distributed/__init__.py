"""Data-parallel runs (DDP, ZeRO-1, FSDP2): launching the ranks, one rank's run, its replay on fake tensors, the
per-rank estimate and what fits."""
