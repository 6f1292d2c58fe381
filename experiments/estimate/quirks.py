"""Where a library takes another path on fake tensors than on real ones, and how the replay puts it back.

Each patch is active only inside `neutralised()` (the replay of a model of one's own) and only changes what happens to
fake tensors; a real run in the same process is untouched. Each has a real-vs-fake test on a tiny config
(tests/engine/test_source_models.py) that fails without it (`DISABLED` switches one off). Never the meta device
instead: it takes SDPA's math path and breaks checkpointing.

1. transformers' packed-sequence mask (masking_utils.find_packed_sequence_indices). Without a cache (use_cache=False,
   which activation checkpointing forces) and without an attention mask, transformers checks whether the position
   ids hold several packed sequences: `if not is_tracing(mask) and (mask[:, -1] == 0).all(): return None`.
   `is_tracing` is true for a FakeTensor, so the replay skips the check and keeps the packed-sequence mask; the
   model then materialises a 4-D boolean mask, SDPA gets `attn_mask` instead of `is_causal`, and GQA models
   repeat K/V instead of `enable_gqa`. The real run never builds that mask. The patch runs the real check's ops
   (same temporaries) and returns the real answer, None: the replay's position ids are the model's own
   `arange` (one sequence per row), because the replay's batch passes none.
2. Value-reading initialisation. torch 2.13's `trunc_normal_` samples by rejection, `while (mask).any(): ...`,
   which reads values (DataDependentOutputException on fake tensors). The patch runs it on fake tensors with the
   rejection test answered "nothing rejected", i.e. the allocations of one pass, which is what the real run does
   whenever the bounds are many standard deviations wide (transformers: std 0.02 in [-2, 2], 100 sigma).
   `rejection_possible` in the result flags a call where a real run could loop (and so allocate a little more in
   the model phase only). Any other torch.nn.init function that reads values is skipped on fake tensors (its
   name is listed in `init_skipped`): initial values do not change memory.
3. Saved statistics of mixed-dtype normalisations on the CPU. With a bf16/fp16 input and fp32 weights (what CPU
   autocast leaves to layer_norm, and to batch_norm under any AMP), the CPU kernels of native_layer_norm,
   native_group_norm and native_batch_norm keep mean and rstd (or save_mean / save_invstd) in fp32; PyTorch's fake
   kernels give them the input's dtype (torch/_refs: "if input.device.type == 'cpu': mean = convert(mean,
   input.dtype)"), half the bytes. `stat_nbytes` gives the tracker the real size. These tensors are saved for
   backward, so the error is in every forward and backward peak (BERT's MLM head, every BatchNorm of a ResNet).
   For CUDA, the fake kernel already keeps layer_norm's statistics in fp32, as CUDA's kernel does.
4. Fake kernels that are stricter than the CPU kernel: up to torch 2.14, aten._grouped_mm's meta kernel implements
   CUDA's checks (bf16 only), so transformers' default MoE experts (grouped_mm) in fp32 or AMP (fp32 expert weights)
   could not be replayed, while a real CPU run works. A CPU estimate answers it as the CPU kernel does
   (experiments/estimate/cpu_kernels.py); a CUDA estimate reports "cannot be predicted" with the kernel's message:
   on CUDA the real kernel refuses those inputs too (experiments/estimate/unpredictable.py). From torch 2.15 both
   kernels take fp32 and fp16, and a CUDA estimate predicts them (cpu_kernels.meta_grouped_mm_takes_fp32).
5. oneDNN's LSTM (aten.mkldnn_rnn_layer, the CPU's LSTM in training) returns a workspace for backward that its fake
   kernel returns empty: 29 % of a small LSTM step's peak. `rnn_workspace_nbytes` reads its size off the real kernel,
   on zeros, once per shape (a CUDA estimate names cuDNN's RNN instead: experiments/estimate/cuda_kernels.py).
6. A module's conversion (`module.to(dtype)`, as peft's LoRA layers move their adapters to the base layer's device
   and dtype). For a FakeTensor parameter, nn.Module._apply always swaps the tensors (torch.utils.swap_tensors),
   which refuses a fake tensor (its mode holds a weakref to it): "Couldn't swap Linear.weight". A real parameter
   takes the `param.data = converted` path, freeing the old storage as the new one arrives; for two fake tensors
   the patched swap does that same assignment.
7, 8, 10 and 11: bitsandbytes' paths (its quantization maps, paged state, 4- and 8-bit weights, its 8-bit matmul
   on CUDA), in experiments/estimate/bnb_quirks.py.
9. Activation offloading on CUDA (torch.autograd.graph.save_on_cpu). On fake CPU tensors a saved tensor's "copy to
   host" and "copy back" would stay where they are; on CUDA the copy goes to pinned host memory (CUDA's host
   allocator rounds each block to a power of two) and backward brings it back as a new device tensor. `offloaded`
   replays those hooks with the copy on the tracker's host ledger and a new device tensor in backward.
12. Schedules a constructor computes on the host from numbers alone: ConvNeXt, PVT, CvT and a score of vision
   models build their drop-path rates as `torch.linspace(0, rate, depth, device="cpu")`, Hiera its stage ends as
   `torch.tensor(config.depths, device="cpu").cumsum(0)`, and read them back (`.tolist()`, `.item()`), which a fake
   tensor cannot. Such a call (device "cpu", numbers only; torch.tensor only while the model is built) is computed for
   real, outside fake mode, as a `HostValues` tensor whose own operations stay real: the values are Python numbers
   again, and the tracker sees the same small host tensors a real CPU run makes.
13. Masks a model makes itself (`torch.ones(batch, seq)` where no mask is passed: every encoder-decoder's decoder),
   whose "does it pad anything?" question transformers skips on fake tensors and so builds the 4-D mask a real run
   skips: experiments/estimate/uniform_masks.py.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode

from ..training.source_models import SourceSpec
from . import bnb_quirks, uniform_masks
from .patching import is_fake, patched

_local_scalar_dense = torch.ops.aten._local_scalar_dense.default
aten = torch.ops.aten
_HALF = (torch.bfloat16, torch.float16)
# op -> positions of the arguments whose dtype decides the statistics' dtype (the first one given counts)
_NORMS = {
    aten.native_layer_norm.default: (2, 3),
    aten.native_group_norm.default: (1, 2),
    aten.native_batch_norm.default: (1, 2, 3, 4),
}


def stat_nbytes(func, args, t: torch.Tensor, device_type: str) -> int | None:
    """The real storage size of a normalisation's saved statistic `t`, where the fake kernel gets its dtype wrong;
    None where it does not."""
    if func not in _NORMS or t.dtype not in _HALF or not args or "norm_stats" in DISABLED:
        return None
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.dtype not in _HALF or tuple(t.shape) == tuple(x.shape):
        return None  # the normalised output itself has the input's dtype on every device
    if device_type == "cuda":
        # CUDA's layer_norm keeps its statistics in fp32 for every 16-bit input (the refs' rule for non-CPU
        # devices); batch_norm and group_norm are left as the fake kernel has them (not checked on a GPU).
        return t.numel() * 4 if func is aten.native_layer_norm.default else None
    params = [args[i] for i in _NORMS[func] if i < len(args) and isinstance(args[i], torch.Tensor)]
    if params and params[0].dtype == torch.float32:
        return t.numel() * 4
    return None


_MKLDNN_RNN = aten.mkldnn_rnn_layer.default
_PROBED: dict[tuple, int] = {}
# One LSTM layer's forward at the real shape, to read oneDNN's workspace size: a fraction of a second up to this many
# multiply-adds on a CPU; past it the estimate names the op instead of waiting.
PROBE_MACS = 4 * 10**9


def _zeros_like(t: torch.Tensor) -> torch.Tensor:
    # oneDNN keeps its workspace only where autograd will need it: the weights require grad as in training.
    return torch.zeros(t.shape, dtype=t.dtype, requires_grad=t.requires_grad and t.is_floating_point())


def rnn_workspace_nbytes(func, args, t: torch.Tensor) -> int | None:
    """oneDNN's LSTM layer (aten.mkldnn_rnn_layer, the CPU's LSTM in training) returns a workspace that backward reads;
    its fake kernel returns it empty. Its size is oneDNN's (page-rounded, in the sequence x batch and hidden size): read
    off the real kernel once per shape, on zeros. None for any other tensor."""
    if func is not _MKLDNN_RNN or t.dtype is not torch.uint8 or t.dim() != 1 or "rnn_workspace" in DISABLED:
        return None
    import torch.utils._python_dispatch as python_dispatch

    from .unpredictable import NotPredicted

    shapes = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else repr(a) for a in args)
    dtypes = tuple(str(a.dtype) for a in args if isinstance(a, torch.Tensor))
    key = (shapes, dtypes)
    if key not in _PROBED:
        x, w_ih, w_hh = args[0], args[1], args[2]
        macs = x.numel() * w_ih.shape[0] + x.shape[0] * x.shape[1] * w_hh.numel()
        if macs > PROBE_MACS:
            raise NotPredicted("aten.mkldnn_rnn_layer (LSTM on the CPU)", "oneDNN's workspace, too large to probe")
        with (
            python_dispatch._disable_current_modes()
        ):  # the real kernel, outside the replay's modes, as training calls it
            real = [_zeros_like(a) if isinstance(a, torch.Tensor) else a for a in args]
            out = func(*real)
            _PROBED[key] = out[3].untyped_storage().nbytes()
    return _PROBED[key]


class Report:
    """What the neutralisations did during one replay (shown with its result)."""

    def __init__(self):
        self.packed_sequence_checks = 0
        self.trunc_normal_calls = 0
        self.rejection_possible: list[str] = []
        self.init_skipped: list[str] = []

    def to_dict(self) -> dict:
        return {
            "packed_sequence_checks": self.packed_sequence_checks,
            "trunc_normal_calls": self.trunc_normal_calls,
            "rejection_possible": sorted(set(self.rejection_possible)),
            "init_skipped": sorted(set(self.init_skipped)),
        }


class _NothingRejected(TorchDispatchMode):
    """Answers a boolean read of a fake tensor with False ("no sample was rejected"); every other op runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _local_scalar_dense and is_fake(args[0]) and args[0].dtype is torch.bool:
            return False
        return func(*args, **(kwargs or {}))


def _trunc_normal(report: Report):
    original = torch.nn.init._no_grad_trunc_normal_

    def trunc_normal(tensor, mean, std, a, b, generator=None):
        if not is_fake(tensor):
            return original(tensor, mean, std, a, b, generator)
        report.trunc_normal_calls += 1
        # Chance that one of the tensor's samples falls outside [a, b] on the first draw (the real loop runs again).
        z = min((b - mean) / std, (mean - a) / std) if std > 0 else math.inf
        p_out = math.erfc(z / math.sqrt(2)) if math.isfinite(z) else 0.0
        if tensor.numel() * p_out > 1e-9:
            report.rejection_possible.append(f"trunc_normal_(std={std:g}, a={a:g}, b={b:g})")
        with _NothingRejected():
            return original(tensor, mean, std, a, b, generator)

    return trunc_normal


_INIT_NAMES = (
    "uniform_",
    "normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)


def _skipping(name: str, fn, report: Report):
    def init(tensor, *args, **kwargs):
        if not is_fake(tensor):
            return fn(tensor, *args, **kwargs)
        try:
            return fn(tensor, *args, **kwargs)
        except DataDependentOutputException:
            report.init_skipped.append(name)
            return tensor

    return init


def _packed_sequence(report: Report):
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        mask = original(position_ids)
        if mask is None or not is_fake(mask):
            return mask
        report.packed_sequence_checks += 1
        (mask[:, -1] == 0).all()  # the real run's check, for its temporaries; its answer on our batch: not packed
        return None

    return masking_utils, find_packed_sequence_indices


class HostValues(torch.Tensor):
    """Quirk 12: a host tensor computed from numbers alone; its own operations run for real, outside fake mode."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with unset_fake_temporarily():
            return super().__torch_function__(func, types, args, kwargs or {})


def _numbers(value) -> bool:
    """Python numbers, or lists and tuples of them at any depth."""
    if isinstance(value, (list, tuple)):
        return all(_numbers(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _host_schedule(original, data_args: int):
    """`original` (torch.linspace, torch.tensor) computed for real where its first `data_args` arguments are numbers
    and its device is "cpu"."""

    def host(*args, **kwargs):
        data = (*args[:data_args], *(kwargs[k] for k in ("start", "end", "data") if k in kwargs))
        if _numbers(data) and str(kwargs.get("device")) == "cpu":
            with unset_fake_temporarily() as fake:
                if fake is not None:  # inside a replay: the values, for real
                    return original(*args, **kwargs).as_subclass(HostValues)
        return original(*args, **kwargs)

    return host


def _host_tensors_while_building(build):
    """A model's construction with torch.tensor(numbers, device="cpu") computed for real. Only there: a forward that
    makes such a tensor (Mixtral's attention) goes on to mix it with fake tensors, which a real one cannot join."""

    def building(*args, **kwargs):
        with patched(torch, "tensor", _host_schedule(torch.tensor, 1)):
            return build(*args, **kwargs)

    return building


# Names of neutralisations switched off, for the tests that show what each one is for.
DISABLED: set[str] = set()
NAMES = (
    "packed_sequence",
    "trunc_normal",
    "init_skip",
    "norm_stats",
    "module_to",
    "bnb_maps",
    "params4bit",
    "host_schedule",
    "uniform_masks",
)


def _offloading(tracker):
    def offload_context(cfg, device):
        if not cfg.offload_activations:
            return contextlib.nullcontext()

        def pack(t):
            with tracker.on_host(lambda n: 1 << max(0, n - 1).bit_length() if n else 0):
                host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout)
                host.copy_(t)
            return host

        def unpack(host):
            return host.clone()  # `.to(device)` on a GPU: a new device tensor

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    return offload_context


@contextlib.contextmanager
def offloaded(tracker):
    """Quirk 9, for a CUDA estimate: save_on_cpu's copies on the tracker's host ledger."""
    from ..training import step

    with patched(step, "offload_context", _offloading(tracker)):
        yield


def _swap(original):
    def swap_tensors(t1, t2):
        if not (is_fake(t1) and is_fake(t2)):
            return original(t1, t2)
        t1.data = t2.detach()

    return swap_tensors


@contextlib.contextmanager
def neutralised(with_transformers: bool):
    """Every patch above, for one replay. Yields the Report."""
    report = Report()
    with contextlib.ExitStack() as stack:
        if "trunc_normal" not in DISABLED:
            stack.enter_context(patched(torch.nn.init, "_no_grad_trunc_normal_", _trunc_normal(report)))
        for name in _INIT_NAMES if "init_skip" not in DISABLED else ():
            stack.enter_context(patched(torch.nn.init, name, _skipping(name, getattr(torch.nn.init, name), report)))
        if with_transformers and "init_skip" not in DISABLED:
            from transformers import initialization

            for name in _INIT_NAMES:
                if name in initialization.TORCH_INIT_FUNCTIONS:
                    fn = initialization.TORCH_INIT_FUNCTIONS[name]
                    stack.enter_context(
                        _patched_item(initialization.TORCH_INIT_FUNCTIONS, name, _skipping(name, fn, report))
                    )
        if "host_schedule" not in DISABLED:
            stack.enter_context(patched(torch, "linspace", _host_schedule(torch.linspace, 3)))
            stack.enter_context(patched(SourceSpec, "build", _host_tensors_while_building(SourceSpec.build)))
        if with_transformers and "packed_sequence" not in DISABLED:
            module, fn = _packed_sequence(report)
            stack.enter_context(patched(module, "find_packed_sequence_indices", fn))
        if with_transformers and "uniform_masks" not in DISABLED:
            stack.enter_context(uniform_masks.known_masks())
        stack.enter_context(every_model())
        yield report


@contextlib.contextmanager
def every_model():
    """The patches that a built-in family needs too (6; 7 and 10: a module's conversion, bitsandbytes' maps and its 4-
    and 8-bit weights)."""
    with contextlib.ExitStack() as stack:
        if "module_to" not in DISABLED:
            stack.enter_context(patched(torch.utils, "swap_tensors", _swap(torch.utils.swap_tensors)))
        stack.enter_context(bnb_quirks.every_model(DISABLED))
        yield


@contextlib.contextmanager
def _patched_item(d: dict, key: str, value):
    old = d[key]
    d[key] = value
    try:
        yield
    finally:
        d[key] = old
