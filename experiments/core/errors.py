"""Every rule the engine refuses a configuration value by, and the error that names it: ConfigError carries the
field, the rule's code and its parameters, so a page words it in its own language. Torch-free."""

from __future__ import annotations

# Every rule the engine refuses a value by, once: code -> the parameters its error carries. A page words each code
# in its own language (the app's `config.err.<code>`) with these parameters; the message is the engine's English.
ERROR_CODES = {
    "choice": ("value", "allowed"),  # not one of the allowed values ("allowed": comma-separated)
    "range": ("value", "lo", "hi"),  # not an integer (a number) in [lo, hi]
    "unknown": ("value", "known"),  # a field or name the engine does not know ("known": comma-separated)
    "batch_accum": ("batch", "accum"),  # the (per-rank) batch does not split into accum micro-batches
    "heads_divide": ("width", "heads"),
    "head_dim": ("dim",),  # the transformer's head dimension is not a multiple of 8
    "cnn_width": ("width",),  # the CNN's channels above 512
    "cnn_layers": ("layers",),  # the CNN's conv layers above 16
    "global_batch": ("batch", "world_size"),  # a global batch that the ranks cannot split evenly
    "fsdp_fused_sgd": (),  # FSDP2's sharded parameters have no fused SGD step
    "cuda_unavailable": (),  # "cuda" asked for on a machine without one
    "cuda_only": ("strategy", "allowed"),  # a strategy that needs a GPU, on a CPU run ("allowed": the others)
    "needs_cuda": (),  # an experiment of the CUDA caching allocator, without a GPU
    "same_world_size": (),  # configurations launched together differ in world size
    "same_device": (),  # configurations run together differ in device
    "one_of": ("fields",),  # two flags that say the same thing differently, both given ("fields": comma-separated)
    "needs_model_source": ("value",),  # a fine-tuning method on a built-in family (experiments/core/finetune.py)
    "one_impl": ("optimizer",),  # an implementation asked of a bitsandbytes optimizer, which has one
    "needs_per_layer": ("value",),  # checkpoint_every without per-layer checkpointing
    "offload_on_cpu": (),  # activation offloading asked of a CPU run or a CPU estimate
    "needs_package": ("value", "package"),  # a lever whose library is not installed (bitsandbytes)
    # A model of one's own (experiments/training/source_models.py): a rule of its library or shape, in its words
    # (a Hugging Face config's own validation, heads that do not divide, torchvision that does not import).
    "model_spec": ("detail",),
}


def _rebuilt(cls, args: tuple, state: dict) -> Exception:
    error = Exception.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class _Picklable(ValueError):
    """Survives pickling (a process pool sends its workers' errors back pickled): the default rebuilds an exception by
    calling it with its message alone, which these constructors do not take."""

    def __reduce__(self):
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


class ConfigError(_Picklable):
    """A configuration value is out of range; `field` names the offending field.

    `code` and `params` say which rule failed with what values (ERROR_CODES), so a page can word it in its own
    language (the app's `config.err.<code>`); the message is the engine's English wording of the same."""

    def __init__(self, field: str, message: str, code: str | None = None, **params):
        if code is not None and (code not in ERROR_CODES or set(params) != set(ERROR_CODES[code])):
            raise TypeError(f"ConfigError code {code!r} with parameters {sorted(params)}: see ERROR_CODES")
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.params = params


# The engine's two refusals of a whole run, torch-free so that the command line can catch them before importing torch.


class WouldNotFit(_Picklable):
    """The estimate says it will not fit. `code` says against what (jobs' structured errors carry it):
    "max_peak_gib" the operator's limit, "host_memory" a forced CPU run past the machine's memory, "pinned_memory" a
    CUDA run's offloaded activations past it, "paged_memory" a paged optimizer's managed memory past the GPU's free
    memory, "capacity" the memory available (or a leak run's bound); `params` the figures, in bytes."""

    def __init__(self, message: str, estimate: dict, code: str = "capacity", **params):
        super().__init__(message)
        self.estimate = estimate
        self.code = code
        self.params = params


class CannotPredict(_Picklable):
    """A replay that cannot be done; `info`: {"op", "module", "phase", "step", "where", "reason", "message"}."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


class Cancelled(Exception):
    """A run or job stopped at a phase boundary because it was cancelled (its page closed, or Cancel)."""
