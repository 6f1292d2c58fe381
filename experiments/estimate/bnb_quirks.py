"""bitsandbytes' paths that fake tensors would take otherwise than a real run (the replay's quirks 7, 8, 10, 11 and 14;
the others are in experiments/estimate/quirks.py, whose `DISABLED` switches these off too, for their tests).

7. bitsandbytes' quantization maps. Its 8-bit optimizers build their 256-value maps (create_dynamic_map) in Python
   from `.tolist()` of small tensors, which reads values. The maps are constants: the patch computes their values on
   real tensors and makes the map as the function's last lines do (`torch.tensor(values)`, then divided by its
   max), so the map and its temporaries are the real run's; only sub-kilobyte temporaries freed before the map
   exists are not replayed.
8. bitsandbytes' paged optimizers on CUDA. A fake tensor is on the CPU, where bitsandbytes falls back to plain
   buffers; on CUDA, every state buffer of a parameter of at least 1e5 elements lives in CUDA managed memory
   (cudaMallocManaged), outside PyTorch's caching allocator: no `memory_allocated`, no `memory_reserved`. A CUDA
   estimate moves those buffers to the tracker's host ledger (`paged_state`), as a real run keeps them off the
   allocator's books.
10. bitsandbytes' 4-bit and 8-bit weights (QLoRA, LLM.int8). `Params4bit` and `Int8Params` are tensor subclasses,
   which a fake tensor cannot become. The patch gives Linear4bit and Linear8bitLt a plain parameter with the same
   storage and the same attributes (quant_state, blocksize, quant type; the int8 rows and their scales);
   quantizing, dequantizing and the 4-bit matmul are bitsandbytes' own ops, whose fake kernels it registers, so the
   packed weights, their scales and the dequantized temporaries are the library's.
11. bitsandbytes' 8-bit matmul in training takes a device's path: on a CPU MatMul8bitFp (the weights dequantized),
   on CUDA MatMul8bitLt, LLM.int8's decomposition, whose outlier columns are found in the activations' values. A
   CUDA estimate takes the CUDA path (`int8_cuda_path`); its outliers have no fake size, so the estimate names the
   op as not predicted rather than give the CPU path's figure.
14. A 4-bit or 8-bit base loaded onto a GPU. from_pretrained first warms the caching allocator up with one segment of
   the loaded model's size, which the load then fills; on the CPU it does not. A CUDA estimate builds its base as
   onto a GPU (`loaded_onto_gpu`), so the replay's segments are laid out as a real load leaves them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging

import torch

from .patching import is_fake, patched


def _dynamic_map(original):
    def create_dynamic_map(*args, **kwargs):
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            values = original(*args, **kwargs).tolist()
        code = torch.tensor(values)  # the function's own tail: the values, then normalised by their max
        code /= code.max()
        return code

    return create_dynamic_map


# bitsandbytes pages a state buffer only from this many elements of its parameter (Optimizer8bit.get_state_buffer).
PAGED_MIN_NUMEL = 1e5


@contextlib.contextmanager
def paged_state(tracker):
    """Quirk 8, for a CUDA estimate: paged state buffers counted apart from the device's allocations."""
    from bitsandbytes.optim.optimizer import Optimizer8bit

    original = Optimizer8bit.get_state_buffer

    def get_state_buffer(self, p, dtype=torch.float32):
        buff = original(self, p, dtype)
        if self.is_paged and p.numel() >= PAGED_MIN_NUMEL and is_fake(buff):
            tracker.move_to_host(buff)
        return buff

    with patched(Optimizer8bit, "get_state_buffer", get_state_buffer):
        yield


def _params4bit(original):
    def params4bit(data=None, requires_grad=False, quant_state=None, blocksize=None, **attrs):
        if data is None or not is_fake(data):
            return original(data, requires_grad, quant_state, blocksize, **attrs)
        p = torch.nn.Parameter(data, requires_grad=requires_grad)
        p.quant_state, p.blocksize = quant_state, blocksize or 64
        for name, value in attrs.items():
            setattr(p, name, value)
        return p

    return params4bit


def _int8params(original):
    def int8params(data=None, requires_grad=True, has_fp16_weights=False, CB=None, SCB=None, **kwargs):  # noqa: N803
        if data is None or not is_fake(data):
            return original(data, requires_grad, has_fp16_weights, CB, SCB, **kwargs)
        p = torch.nn.Parameter(data, requires_grad=requires_grad)
        p.CB, p.SCB, p.has_fp16_weights = CB, SCB, has_fp16_weights
        return p

    return int8params


@contextlib.contextmanager
def loaded_onto_gpu():
    """Quirk 14, for a CUDA estimate of a quantized base: built as from_pretrained builds it on a GPU."""
    from ..training import quantized

    with patched(quantized, "_onto_gpu", lambda device: True):
        yield


@contextlib.contextmanager
def int8_cuda_path():
    """Quirk 11, for a CUDA estimate: bitsandbytes' 8-bit matmul as it runs on CUDA."""
    functional = functional_module()
    if functional is None:
        yield
        return
    functions = importlib.import_module("bitsandbytes.autograd._functions")  # MatMul8bitLt is not exported

    def matmul(A, B, out=None, state=None, threshold=0.0, bias=None):  # noqa: N803 - bitsandbytes' own names
        state = state or functions.MatmulLtState()
        if threshold > 0.0:
            state.threshold = threshold
        return functions.MatMul8bitLt.apply(A, B, out, bias, state)

    import bitsandbytes

    log = logging.getLogger("bitsandbytes.autograd._functions")
    level = log.level
    log.setLevel(logging.ERROR)  # "inputs will be cast to float16": the real run's to say, once, not the replay's
    try:
        with patched(functions, "matmul", matmul), patched(bitsandbytes, "matmul", matmul):  # Linear8bitLt's bnb.matmul
            yield
    finally:
        log.setLevel(level)


def functional_module():
    try:
        from bitsandbytes import functional
    except ImportError:  # not installed: no model of this process can use its optimizers
        return None
    return functional


@contextlib.contextmanager
def every_model(disabled: set[str]):
    """Quirks 7 and 10 (every replay where bitsandbytes is installed), and its process-wide map cache kept apart."""
    functional = functional_module()
    if functional is None:
        yield
        return
    from bitsandbytes.nn import modules

    with contextlib.ExitStack() as stack:
        if "bnb_maps" not in disabled:
            stack.enter_context(patched(functional, "create_dynamic_map", _dynamic_map(functional.create_dynamic_map)))
        # bitsandbytes caches its quantization map per process: a replay's (fake) never reaches a real run.
        stack.enter_context(patched(functional, "name2qmap", {}))
        if "params4bit" not in disabled:
            stack.enter_context(patched(modules, "Params4bit", _params4bit(modules.Params4bit)))
            stack.enter_context(patched(modules, "Int8Params", _int8params(modules.Int8Params)))
        yield
