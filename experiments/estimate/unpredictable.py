"""What fake tensors cannot replay, said in one line that names the op and the module, instead of a traceback: a value
read (`.item()`, `bool()`, a Python `if` on a tensor), a shape that depends on the data (`nonzero`, boolean indexing),
an op with no fake kernel, a fake kernel that refuses inputs its real kernel takes (aten._grouped_mm's meta
kernel implements CUDA's bf16-only rule up to torch 2.14: named for a CUDA estimate, answered on the CPU by
cpu_kernels.py), or, in a CUDA estimate under autocast, an op whose CUDA
autocast policy the installed torch added after the lab's table (experiments/estimate/cuda_autocast.py). Anything else is a bug, not the learner's model, and is re-raised."""

from __future__ import annotations

import re
import traceback

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)

from ..core.errors import CannotPredict  # noqa: F401 - defined torch-free (the command line), imported from here too
from .cuda_autocast import UnknownAutocastPolicy


class NotPredicted(NotImplementedError):
    """An op whose memory the replay knows it cannot size (`why`): named in the estimate, never guessed."""

    def __init__(self, op: str, why: str):
        super().__init__(f"{op}: {why}")
        self.op, self.why = op, why


_KINDS = (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
    UnknownAutocastPolicy,
    NotPredicted,
)
_NO_FAKE = re.compile(
    r"no fake impl registered for <CustomOpDef\((?P<op>[^)]+)\)>|Could not run '(?P<aten>[^']+)' "
    r"with arguments from the 'Meta' backend"
)
WHAT = {
    "DataDependentOutputException": "reads a tensor's value (.item(), bool(), .tolist() or a Python `if` on a tensor)",
    "DynamicOutputShapeException": "makes a tensor whose shape depends on the data (nonzero, boolean indexing, unique)",
    "UnsupportedOperatorException": "has no fake (shape-only) kernel",
    "refused": "calls an op whose fake kernel refuses these inputs",
    "UnknownAutocastPolicy": f"calls an op whose CUDA autocast policy in torch {torch.__version__} is not known here",
    "NotPredicted": "calls an op whose memory the replay cannot size",
    "raised": "raises an error with this configuration (a real run would too)",
}


# What a model's own code raises on a configuration it cannot take (LeViT's BatchNorm at batch 1, BLT's cache reading
# a setting its config lacks): a real run raises it too.
_RAISED = (ValueError, RuntimeError, TypeError, AssertionError, IndexError, AttributeError, KeyError)


def _refused_by_fake_kernel(e: BaseException) -> str | None:
    op, in_meta = None, False
    for frame, _ in traceback.walk_tb(e.__traceback__):
        path = frame.f_code.co_filename.replace("\\", "/")
        if path.endswith("torch/_subclasses/fake_tensor.py") and frame.f_code.co_name == "_dispatch_impl":
            op = str(frame.f_locals.get("func", "")) or op
        if "torch/_meta_registrations.py" in path or "/torch/_refs/" in path or "/torch/_decomp/" in path:
            in_meta = True
    return op if (op and in_meta) else None


def _in_a_module(e: BaseException) -> bool:
    return any(isinstance(f.f_locals.get("self"), torch.nn.Module) for f, _ in traceback.walk_tb(e.__traceback__))


def classify(e: BaseException, model, phase: tuple) -> dict | None:
    """{"op", "module", ...} when `e` is something fake tensors cannot replay, else None. `model`: for the module's
    qualified name (the innermost module in the traceback: no hooks, which would change what autograd keeps)."""
    kind = next((k.__name__ for k in _KINDS if isinstance(e, k)), None)
    op, detail = str(getattr(e, "func", "") or getattr(e, "op", "") or ""), ""
    if isinstance(e, NotPredicted):
        detail = f" ({e.why})"
    if kind is None:
        m = _NO_FAKE.search(str(e)) if isinstance(e, (RuntimeError, NotImplementedError)) else None
        refused = _refused_by_fake_kernel(e)
        if m:
            kind, op = "UnsupportedOperatorException", m["op"] or m["aten"]
        elif refused:
            kind, op, detail = "refused", refused, f" ({str(e).splitlines()[0][:300]})"
        elif isinstance(e, _RAISED) and _in_a_module(e):
            # The model's own code refuses this configuration (LeViT's BatchNorm at batch 1): a real run would too.
            kind, op = "raised", type(e).__name__
            detail = f" ({(str(e).strip().splitlines() or [''])[0][:300]})"
        else:
            return None
    if op.startswith("aten._local_scalar_dense"):
        op = "aten._local_scalar_dense (.item() / bool() / .tolist())"
    names = {id(m): n for n, m in model.named_modules()} if isinstance(model, torch.nn.Module) else {}
    module = where = None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        obj = frame.f_locals.get("self")
        if isinstance(obj, torch.nn.Module):
            name = names.get(id(obj))
            module = (name or f"the model ({type(obj).__name__})") if name is not None else type(obj).__name__
            where = f"{frame.f_code.co_filename}:{lineno}"
    name, step = phase[0], phase[1]
    message = (
        f"cannot be predicted: {module or 'code outside the model'} {WHAT[kind]}: {op}{detail}, in the {name} phase"
        + (f" of step {step}" if step else "")
        + (f" ({where})" if where else "")
    )
    return {"op": op, "module": module, "phase": name, "step": step, "where": where, "reason": kind, "message": message}
