"""How fp32 matmuls and convolutions compute during a run: PyTorch's defaults, strict fp32, or TF32 for both.

PyTorch's defaults differ by op. fp32 matmuls run in full fp32 (`torch.get_float32_matmul_precision()` is
"highest"), while cuDNN's convolutions may use TF32 tensor cores (`torch.backends.cudnn.allow_tf32` is True),
so a learner's plain fp32 CNN already runs its convolutions in TF32 on an Ampere or later GPU. The modes:

    fp32         PyTorch's defaults, exactly what a script that sets nothing gets
    fp32_strict  the defaults plus `torch.backends.cudnn.allow_tf32 = False`: IEEE fp32 everywhere
    tf32         the defaults plus `torch.set_float32_matmul_precision("high")`: TF32 for both

Since torch 2.9 the same switches also exist as a tree of per-backend, per-op settings
(`torch.backends.fp32_precision`, `torch.backends.cuda.matmul.fp32_precision`,
`torch.backends.cudnn.conv.fp32_precision`, ...), where "none" inherits the parent's value. The legacy
setters write both their own flag and the tree; the tree's setters write only the tree, so a process that
mixes the two can reach states the legacy getters refuse to read. A mode therefore sets every node of the
tree (a parent a learner's code set to "tf32" would otherwise reach a child through inheritance), then the
mode's own line through the legacy API a learner writes, and the context restores what it found.

The switches are process-wide, and one process may run mode blocks on several threads at once (the server's
estimates and exercise 2's background search, a job of the inline worker): a block that gives back what it found
while another thread's block is open gives back a state the other thread set, so each thread's runs compute in
the other's mode and the process keeps whichever state was given back last. Blocks therefore take turns (LOCK);
code that writes the switches itself (a test's leftover) holds LOCK around the write and what reads it. A run seeds
the global RNG and builds its model inside its block, so the turns also keep another thread from reseeding it
between the two (a test's reference loop that seeds it holds LOCK too).
"""

from __future__ import annotations

import contextlib
import threading

import torch

MODES = ("fp32", "fp32_strict", "tf32")
# Re-entrant: a run's block contains the fit check's estimate, whose replay opens a block of its own. Whoever
# holds another lock that a mode block may wait for (the replays' own) takes this one first.
LOCK = threading.RLock()

# (backend, op) -> PyTorch's default, parents first (a parent's setter must not undo a child's value).
# `torch.backends.<...>.fp32_precision` are thin wrappers over the torch._C pair used here, and one of them
# (mkldnn's) writes the generic node instead of its own, so the wrappers cannot set every node.
DEFAULT_TREE = (
    (("generic", "all"), "none"),
    (("cuda", "all"), "none"),
    (("mkldnn", "all"), "none"),
    (("cuda", "matmul"), "none"),
    (("cuda", "conv"), "tf32"),
    (("cuda", "rnn"), "tf32"),
    (("mkldnn", "matmul"), "none"),
    (("mkldnn", "conv"), "none"),
    (("mkldnn", "rnn"), "none"),
)
DEFAULT_MATMUL_PRECISION = "highest"
DEFAULT_CUDNN_TF32 = True


def _has_tree() -> bool:
    return hasattr(torch._C, "_get_fp32_precision_getter") and hasattr(torch._C, "_set_fp32_precision_setter")


def _get_node(backend: str, op: str) -> str:
    return torch._C._get_fp32_precision_getter(backend, op)


def _set_node(backend: str, op: str, value: str) -> None:
    torch._C._set_fp32_precision_setter(backend, op, value)


def _read(getter):
    """A legacy switch's value, or None where torch refuses to read it (a state mixed with the new API)."""
    try:
        return getter()
    except RuntimeError:
        return None


def snapshot() -> dict:
    """Every switch this module sets, as its getters read it now."""
    state = {
        "matmul_precision": _read(torch.get_float32_matmul_precision),
        "cudnn_allow_tf32": _read(lambda: torch.backends.cudnn.allow_tf32),
    }
    if _has_tree():
        state["tree"] = {node: _get_node(*node) for node, _ in DEFAULT_TREE}
    return state


def restore(state: dict) -> None:
    """Puts back a `snapshot`. A legacy switch its getter could not read goes back to PyTorch's default: only the
    tree's setters make such states, and they leave the legacy flag alone; the tree then restores the rest."""
    matmul = state.get("matmul_precision") or DEFAULT_MATMUL_PRECISION
    cudnn = state.get("cudnn_allow_tf32")
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = DEFAULT_CUDNN_TF32 if cudnn is None else cudnn
    for node, value in (state.get("tree") or {}).items():
        _set_node(*node, value)


def set_mode(mode: str) -> None:
    """Sets `mode` (one of MODES) for the whole process."""
    if mode not in MODES:
        raise ValueError(f"precision: got {mode!r}; allowed fp32 modes: {', '.join(MODES)}")
    torch.set_float32_matmul_precision(DEFAULT_MATMUL_PRECISION)
    torch.backends.cudnn.allow_tf32 = DEFAULT_CUDNN_TF32
    if _has_tree():
        for node, value in DEFAULT_TREE:
            _set_node(*node, value)
    if mode == "fp32_strict":
        torch.backends.cudnn.allow_tf32 = False
    elif mode == "tf32":
        torch.set_float32_matmul_precision("high")


@contextlib.contextmanager
def fp32_mode(mode: str):
    """`mode` for the duration of the block; whatever was set before comes back after it, also after an error.
    Other threads' blocks wait until this one has given its state back."""
    with LOCK:
        saved = snapshot()
        try:
            set_mode(mode)
            yield
        finally:
            restore(saved)


def mode_of(precision: str) -> str:
    """The fp32 mode a configuration's precision runs its fp32 ops in: AMP and bf16 keep PyTorch's defaults
    for whatever they leave in fp32, as a learner's autocast script does."""
    return precision if precision in MODES else "fp32"


def convolutions_use_tf32() -> bool:
    """Whether cuDNN may run an fp32 convolution in TF32 now (the switch the convolution itself reads)."""
    if _has_tree():
        return _get_node("cuda", "conv") == "tf32"
    return bool(torch.backends.cudnn.allow_tf32)
