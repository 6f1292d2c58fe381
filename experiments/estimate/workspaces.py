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

A signature's transient is the op's own peak above what was allocated before it, minus its outputs:
`max_memory_allocated during the op - allocated before - outputs`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import torch

from ..training import fp32_math
from ..training.fp32_math import convolutions_use_tf32, fp32_mode

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


def measure(sig: str, device: torch.device) -> int:
    """Run the op of `sig` alone on `device`; bytes it held beyond its outputs at its own peak."""
    spec = json.loads(sig)
    func = next(f for f, n in PROBED.items() if n == spec["op"])
    args = _materialize(spec["args"], device)
    if spec["op"] == "native_layer_norm_backward" and args[1].dtype in (torch.bfloat16, torch.float16):
        # CUDA keeps layer norm's mean and rstd in float32 for half inputs (the replay's CPU meta says otherwise).
        args[3], args[4] = args[3].float(), args[4].float()
    kwargs = {k: _materialize(v, device) for k, v in spec.get("kwargs", {}).items()}
    if "dtype" in kwargs and isinstance(kwargs["dtype"], str):
        kwargs["dtype"] = getattr(torch, kwargs["dtype"].removeprefix("torch."))
    peak_extra, out = 0, None
    with fp32_mode("fp32" if spec.get("tf32", False) else "fp32_strict"):
        for _ in range(2):  # the first call may build cuDNN's plan for the shape; a run's peak spans both
            del out
            torch.cuda.synchronize(device)
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            out = func(*args, **kwargs)
            torch.cuda.synchronize(device)
            peak_extra = max(peak_extra, torch.cuda.max_memory_allocated(device) - before)
    outs = [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
    out_bytes = sum(_round(t.untyped_storage().nbytes()) for t in outs)
    del out, outs, args, kwargs
    return max(0, peak_extra - out_bytes)


def cache_path(device_name: str) -> Path:
    """One table per device model and library versions: the algorithm choice depends on all of them."""
    root = Path(os.environ.get("GPU_MEMORY_LAB_CACHE", Path.home() / ".cache" / "gpu-memory-lab"))
    tag = f"{device_name}-torch{torch.__version__}-cudnn{torch.backends.cudnn.version()}"
    return root / ("workspaces-" + "".join(c if c.isalnum() or c in "-._" else "_" for c in tag) + ".json")


def load(path: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def measure_all(sigs, device: torch.device, path: Path | None = None) -> dict[str, int]:
    """Measured transients for `sigs`, from the cache file where present; new ones are measured and saved."""
    with fp32_math.LOCK, _CACHE_LOCK:  # the fp32 modes' lock first: measure opens mode blocks inside
        table = load(path) if path else {}
        missing = [s for s in dict.fromkeys(sigs) if s not in table]
        for sig in missing:
            table[sig] = measure(sig, device)
        if path and missing:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(table))
            tmp.replace(path)
        return {s: table[s] for s in sigs}
