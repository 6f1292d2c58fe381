"""Memory a kernel allocates that is not a tensor the replay sees, measured per op on the device.

The fake-tensor replay sees every tensor a step allocates, but not the scratch buffers a kernel takes from
the caching allocator while one op runs:
- a convolution's cuDNN workspace depends on the algorithm cuDNN's heuristics pick for that exact shape,
  dtype and TF32 setting (on the NVIDIA H200 from nothing to several GiB);
- a reduction that splits one output over several thread blocks (a bias gradient summed over a large
  batch) takes a buffer for the partial sums, sized by its launch configuration on that GPU;
- layer norm's backward keeps partial sums for its weight and bias gradients.
None of these can be computed from shapes alone, so each is measured once per op signature on the device
(the op alone, on random inputs) and cached. The replay adds it as a transient at the moment the op runs,
so it lands in the peak exactly where the real run has it.

A signature's transient is the op's scratch allocations in the order the caching allocator saw them (CUDA's memory
history of the op alone): a convolution's backward takes one workspace for the input's gradient and another for the
weight's, each freed before the next. The reserved figure depends on each size, not only on the largest: the replay
allocates and frees each in turn. Tables written before (one number per signature, the op's peak beyond its outputs)
still load, as one allocation each.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
from pathlib import Path

import torch

from ..core.workspace_table import load
from ..training import fp32_math
from ..training.fp32_math import convolutions_use_tf32, fp32_mode
from . import reduce_scratch

# Ops whose real kernels take scratch memory that depends on the algorithm or launch configuration.
PROBED = {
    torch.ops.aten.convolution.default: "convolution",
    torch.ops.aten.convolution_backward.default: "convolution_backward",
    torch.ops.aten.sum.dim_IntList: "sum",
    torch.ops.aten.native_layer_norm_backward.default: "native_layer_norm_backward",
}

_CACHE_LOCK = threading.Lock()


def _describe(value):
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, torch.SymInt):
        return int(value)
    return value


def signature(func, args, kwargs=None) -> str | None:
    """A stable key for one probed op call: op, argument shapes and dtypes, and whether cuDNN may use TF32 for a
    convolution (on by PyTorch's default; off only in strict fp32), which changes the algorithm and its workspace."""
    name = PROBED.get(func)
    if name is None:
        return None
    spec = {"op": name, "args": _describe(list(args))}
    if name.startswith("convolution"):
        spec["tf32"] = convolutions_use_tf32()
    if kwargs:
        spec["kwargs"] = {k: _describe(v) for k, v in kwargs.items()}
    return json.dumps(spec, sort_keys=True, default=str)


def is_signature(sig) -> bool:
    try:
        return isinstance(sig, str) and json.loads(sig).get("op") in PROBED.values()
    except (ValueError, AttributeError):
        return False


def kinds(signatures) -> dict[str, int]:
    """How many signatures of each op: what the page names when some are not measured yet."""
    out: dict[str, int] = {}
    for sig in signatures:
        op = json.loads(sig)["op"]
        out[op] = out.get(op, 0) + 1
    return out


def computed(sig: str) -> bool:
    """Whether the replay computes this op's scratch without measuring it: a sum of real numbers within 32-bit
    indexing (experiments/estimate/reduce_scratch.py). Its device may still measure it: a measured entry wins."""
    spec = json.loads(sig)
    if spec["op"] != "sum":
        return False
    x = spec["args"][0]
    dtype = getattr(torch, x["dtype"], None)
    if dtype is None or dtype.is_complex:
        return False
    return math.prod(x["shape"]) * dtype.itemsize <= reduce_scratch.INT32_MAX


def missing(signatures, transients) -> list[str]:
    """The signatures whose scratch is neither measured nor computed: what the device still has to measure."""
    return [s for s in signatures if s not in (transients or {}) and not computed(s)]


# Ops whose scratch a CUDA replay gives by rule where the device has not measured it (cuda_kernels.scratch_as_cuda:
# layer norm's backward as norm_scratch.py computes it for the card list's GPUs); a measurement still replaces it.
RULED = frozenset({"native_layer_norm_backward"})


def uncounted(signatures, transients) -> list[str]:
    """The signatures whose scratch an estimate does not count at all: unmeasured, and no rule gives it (a
    convolution's cuDNN workspace, a sum past 32-bit indexing)."""
    return [s for s in missing(signatures, transients) if json.loads(s)["op"] not in RULED]


def _materialize(desc, device):
    if isinstance(desc, dict) and "shape" in desc:
        dtype = getattr(torch, desc["dtype"])
        if dtype.is_floating_point:
            return torch.randn(desc["shape"], dtype=dtype, device=device)
        return torch.zeros(desc["shape"], dtype=dtype, device=device)
    if isinstance(desc, list):
        return [_materialize(d, device) for d in desc]
    return desc


def _round(n: int) -> int:
    return 512 if n < 512 else -(-n // 512) * 512


def measure(sig: str, device: torch.device) -> tuple[int, ...]:
    """Run the op of `sig` alone on `device` (twice: the first call may build cuDNN's plan for the shape); the
    scratch allocations of the call that took more, in order."""
    spec = json.loads(sig)
    func = next(f for f, n in PROBED.items() if n == spec["op"])
    args = _materialize(spec["args"], device)
    if spec["op"] == "native_layer_norm_backward" and args[1].dtype in (torch.bfloat16, torch.float16):
        # CUDA keeps layer norm's mean and rstd in float32 for half inputs (the replay's CPU meta says otherwise).
        args[3], args[4] = args[3].float(), args[4].float()
    kwargs = {k: _materialize(v, device) for k, v in spec.get("kwargs", {}).items()}
    if "dtype" in kwargs and isinstance(kwargs["dtype"], str):
        kwargs["dtype"] = getattr(torch, kwargs["dtype"].removeprefix("torch."))
    op = functools.partial(func, *args, **kwargs)
    del args, kwargs
    with fp32_mode("fp32" if spec.get("tf32", False) else "fp32_strict"):
        calls = [_scratch_of(op, device) for _ in range(2)]
    return max(calls, key=lambda c: max(c, default=0))


def _scratch_of(call, device: torch.device) -> tuple[int, ...]:
    """The scratch allocations of one call, from CUDA's memory history; where a history is already being recorded
    (a run's timeline), the call's peak beyond its outputs, as one allocation."""
    torch.cuda.synchronize(device)
    if getattr(torch._C, "_cuda_isHistoryEnabled", lambda: False)():
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = call()
        torch.cuda.synchronize(device)
        extra = torch.cuda.max_memory_allocated(device) - before - _outputs_bytes(out)
        return (extra,) if extra > 0 else ()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100_000)
    try:
        start = len(_trace(device))
        out = call()
        torch.cuda.synchronize(device)
        events = _trace(device)[start:]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del out
    return scratch_allocations(events)


def _trace(device: torch.device) -> list[dict]:
    traces = torch.cuda.memory._snapshot(device)["device_traces"]
    return traces[device.index if device.index is not None else torch.cuda.current_device()]


def _outputs_bytes(out) -> int:
    outs = [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
    return sum(_round(t.untyped_storage().nbytes()) for t in outs)


def scratch_allocations(events: list[dict]) -> tuple[int, ...]:
    """From an allocator trace of one op ({"action", "addr", "size"}, in order): the allocations freed before the op
    returned (its outputs stay), in order. Scratch allocations alive at the same time count as one, of their peak
    together."""
    open_at: dict[int, int] = {}  # address -> index of the allocation now there
    steps: list[tuple[int, int]] = []  # (allocation index, +size at its allocation / -size at its free)
    for e in events:
        if e["action"] == "alloc" and e["size"] > 0:
            open_at[e["addr"]] = len(steps)
            steps.append((len(steps), e["size"]))
        elif e["action"] == "free_requested" and e["addr"] in open_at:
            i = open_at.pop(e["addr"])
            steps.append((i, -steps[i][1]))
    freed = {i for i, n in steps if n < 0}
    out, live, peak = [], 0, 0
    for i, n in steps:
        if i not in freed:
            continue  # an output
        live += n
        peak = max(peak, live)
        if live == 0:
            out.append(peak)
            peak = 0
    return tuple(out)


def cache_path(device_name: str, kind: str = "workspaces-v2") -> Path:
    """One table per device model and library versions: the algorithm choice depends on all of them.
    `kind`: what the table holds (workspaces-v2: scratch allocations in order, never mixed with v1's one peak per op;
    gpu_efficiency.py's measured efficiencies)."""
    root = Path(os.environ.get("GPU_MEMORY_LAB_CACHE", Path.home() / ".cache" / "gpu-memory-lab"))
    tag = f"{device_name}-torch{torch.__version__}-cudnn{torch.backends.cudnn.version()}"
    return root / (f"{kind}-" + "".join(c if c.isalnum() or c in "-._" else "_" for c in tag) + ".json")


def measure_all(sigs, device: torch.device, path: Path | None = None) -> dict[str, tuple[int, ...]]:
    """Measured transients for `sigs`, from the cache file where present; new ones are measured and saved."""
    with fp32_math.LOCK, _CACHE_LOCK:  # the fp32 modes' lock first: measure opens mode blocks inside
        table = load(path) if path else {}
        missing = [s for s in dict.fromkeys(sigs) if s not in table]
        for sig in missing:
            table[sig] = measure(sig, device)
        if path and missing:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(table))
                tmp.replace(path)
            except OSError:  # a read-only home: measured again at the next start, used now
                pass
        return {s: table[s] for s in sigs}
