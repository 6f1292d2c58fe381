"""Names shared by the engine and the app: the phases of a run and the categories of its memory. Torch-free, so the
app reads them without importing torch.

The engine measures and estimates in these terms; the app translates each name (`cat.<name>`, `phase.<name>`).
"""

from __future__ import annotations

# What a tensor is for, as the storage tracker tags it.
TENSOR_CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "autocast_copies",
    "data",
)
# What ZeRO shards: the model states, as the ZeRO paper counts them per parameter.
MODEL_STATES = ("parameters", "gradients", "optimizer_state")
# On CUDA the allocator's peak also holds what is not a tensor (whole blocks, kernels' scratch memory).
CATEGORIES = TENSOR_CATEGORIES + ("other",)
# A data-parallel rank also keeps buffers that exist only to communicate (DDP's buckets, FSDP2's all-gathers).
RANK_TENSOR_CATEGORIES = TENSOR_CATEGORIES + ("communication",)
RANK_CATEGORIES = CATEGORIES + ("communication",)

SETUP_PHASES = ("model", "optimizer", "data")
STEP_PHASES = ("zero_grad", "forward", "backward", "optimizer_step")
PHASES = SETUP_PHASES + STEP_PHASES
# A rank wraps its model (DDP, ZeRO-1, FSDP2) between building it and making its optimizer.
WRAP_PHASE = "wrap"
RANK_PHASES = ("model", WRAP_PHASE) + PHASES[1:]
# The phases of a step before its optimizer step: where activations and gradients peak.
TRAINING_PHASES = STEP_PHASES[:-1]

# What a setup phase allocates is that phase's category; a step's phases tag theirs "_<phase>" until the phase
# recorder gives what survives its real category (activations, gradients, optimizer state).
SETUP_TAGS = {"model": "parameters", "optimizer": "optimizer_state", "data": "data", WRAP_PHASE: "communication"}


def phase_tag(phase: str) -> str:
    return SETUP_TAGS.get(phase, f"_{phase}")


# Why an estimate has no reserved figure (its "reserved_why"; the app words it as est.reserved_why.<key>).
RESERVED_WHY = {
    "cpu": "a CPU has no caching allocator: what a CPU run holds is what it allocated",
    "extrapolated": "extrapolated from 3-, 4- and 5-layer replays: reserved memory grows in whole segments and is not "
    "extrapolated (`fits` and the full replay give it)",
}
