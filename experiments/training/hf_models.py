"""Hugging Face architectures by `model_type`, from the installed transformers, offline: a config built with
`AutoConfig.for_model(model_type, **config)` (shapes only), the matching `AutoModelFor...from_config` built directly
in the parameters' dtype. The allow-listed overrides (experiments/core/model_sources.py) are mapped to the config
class's own attribute names; the config class then validates them itself, and its refusal becomes one line."""

from __future__ import annotations

import difflib
import functools

import torch
from torch import nn

from ..core.errors import ConfigError
from ..core.model_sources import DECODER_TWINS, HF_TASKS, OVERRIDES

_AUTO = {
    "masked_lm": ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    "causal_lm": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    "image_classification": ("AutoModelForImageClassification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    "seq2seq_lm": ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    "sequence_classification": (
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    ),
}


def _refused(detail: str) -> ConfigError:
    return ConfigError("model_source", detail, "model_spec", detail=detail)


def _read(config, name: str, default=None):
    """A config's attribute, or `default`: a heterogeneous config (per-layer settings) raises on a global read of a
    per-layer attribute, and a composite one (a text and a vision part) may lack it."""
    try:
        return getattr(config, name, default)
    except Exception:  # noqa: BLE001 - transformers' AmbiguousGlobalPerLayerAttributeError and the like
        return default


def _text_read(config, name: str):
    """`name` of the config, else of its text part (a composite config: Emu3, BLT, Dots3-Note)."""
    value = _read(config, name)
    if value is None and hasattr(type(config), "get_text_config"):
        try:
            text = config.get_text_config()
        except Exception:  # noqa: BLE001 - a config without a text part
            return None
        value = _read(text, name) if text is not config else None
    return value


@functools.lru_cache(maxsize=1)
def model_types() -> dict[str, tuple[str, ...]]:
    """model_type -> the tasks the installed transformers has an auto class for (masked LM first)."""
    from transformers.models.auto import modeling_auto

    out: dict[str, list[str]] = {}
    for task in HF_TASKS:
        for model_type in getattr(modeling_auto, _AUTO[task][1]):
            out.setdefault(model_type, []).append(task)
    return {k: tuple(v) for k, v in sorted(out.items())}


@functools.lru_cache(maxsize=64)
def _defaults(model_type: str):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type)


def default_task(model_type: str) -> str | None:
    """The head a bare `hf:NAME` trains with (the first of HF_TASKS the model type has), or None for an unknown name."""
    return model_types().get(model_type, (None,))[0]


def check_model_type(model_type: str, task: str | None) -> str:
    """The task this model_type trains with here (the given one, or its first); one line when there is none."""
    import transformers

    types = model_types()
    if model_type not in types:
        close = difflib.get_close_matches(model_type, list(types), n=5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        known = f"{len(types)} model types of transformers {transformers.__version__}"
        raise ConfigError(
            "model_source",
            f"{model_type!r} is not a model type with a head trained here ({', '.join(HF_TASKS)}) in the "
            f"installed transformers {transformers.__version__}{hint} (python -m experiments models lists them)",
            "unknown",
            value=model_type,
            known=known + hint,
        )
    task = task or types[model_type][0]
    if task not in types[model_type]:
        raise _refused(f"{model_type} has no {task} head here; it has {', '.join(types[model_type])}")
    return task


def config_kwargs(model_type: str, base: dict, overrides: dict) -> dict:
    """The config's keyword arguments: a preset's (or none), then each override under the config's own name."""
    default = _defaults(model_type)
    # num_labels is a property of every config (its id2label is what to_dict holds)
    known = set(default.to_dict()) | set(_read(default, "attribute_map", {})) | {"num_labels"}
    config = dict(base)
    for key, value in overrides.items():
        names = OVERRIDES[key][0]
        attr = next((n for n in names if n in known), None)
        if attr is None:
            raise _refused(f"{key}: {type(default).__name__} has no such setting (looked for {', '.join(names)})")
        # A preset may spell it another way (GPT-2's n_layer for num_hidden_layers): one name only.
        for other in names:
            config.pop(other, None)
        for name in (attr, *(t for t in DECODER_TWINS.get(key, ()) if t in known)):
            current = config.get(name, _read(default, name, None))
            # A per-stage setting (Swin's heads and depths): every stage takes the value.
            config[name] = [value] * len(current) if isinstance(current, (list, tuple)) else value
    return _consistent(default, config, overrides)


def _stages(default, config: dict, layers: int) -> None:
    """A staged model (ConvNeXt: `layers` is its `num_stages`) keeps one entry per stage in its per-stage lists
    (depths, hidden sizes): they follow the stage count, as the model reads both (a stage count alone left the last
    norm sized for the fourth stage's width)."""
    if _read(default, "attribute_map", {}).get("num_hidden_layers") != "num_stages":
        return
    before = _read(default, "num_stages", None)
    if not isinstance(before, int):
        return
    if layers > before:
        raise _refused(f"layers: {type(default).__name__} has {before} stages; at most {before}")
    for name, value in default.to_dict().items():
        if isinstance(value, (list, tuple)) and len(value) == before and name not in ("stage_names", "out_features"):
            config[name] = list(config.get(name, value))[:layers]
    for name in ("out_features", "out_indices"):  # a backbone's outputs are named per stage: its defaults again
        config.pop(name, None)


def _consistent(default, config: dict, overrides: dict) -> dict:
    """Settings the config derives from the overridden ones but keeps at their defaults: special token ids inside a
    smaller vocabulary (Phi-3's pad token), a rotary dimension within a smaller head (GPT-J's rotary_dim); and the
    decoder's start token an encoder-decoder trains with; a staged model's per-stage lists."""
    if "layers" in overrides:
        _stages(default, config, overrides["layers"])
    if "vocab" in overrides:
        vocab = overrides["vocab"]
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = config.get(name, _read(default, name, None))
            if isinstance(value, int) and value >= vocab:
                config[name] = vocab - 1
            elif isinstance(value, list) and any(v >= vocab for v in value):
                config[name] = [min(v, vocab - 1) for v in value]
    if _read(default, "is_encoder_decoder", False) and _read(default, "decoder_start_token_id", None) is None:
        # T5's published configs start the decoder with the pad token; its config class leaves it unset, and shifting
        # the labels into the decoder's inputs needs it.
        pad = config.get("pad_token_id", _read(default, "pad_token_id", None))
        config["decoder_start_token_id"] = pad if isinstance(pad, int) else 0
    # The width of one head, where the overrides leave it whole: GPT-J's rotary dimension must fit in it, and XLNet's
    # head size (a setting of its own) must equal it.
    hidden = next((config[n] for n in ("n_embd", "hidden_size", "d_model") if n in config), None)
    hidden = _read(default, "hidden_size", None) if hidden is None else hidden
    heads = config.get("n_head", config.get("num_attention_heads", _read(default, "num_attention_heads", None)))
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads == 0:
        rotary = config.get("rotary_dim", _read(default, "rotary_dim", None))
        if isinstance(rotary, int):
            config["rotary_dim"] = min(rotary, hidden // heads)
        if isinstance(_read(default, "d_head", None), int):
            config["d_head"] = hidden // heads
    return config


def check_shape(model_type: str, config: dict, overrides: dict | None = None):
    """The built config, after what its constructor accepts but the model would fail on later. Read off the config
    as built, so that derived defaults (KV heads = heads, head_dim) are the model's own. `overrides`: the learner's,
    each of which must read back as set under every name the config has for it (Falcon's num_key_value_heads is
    derived from multi_query, whatever num_kv_heads says)."""
    import transformers
    from transformers import AutoConfig

    transformers.logging.set_verbosity_error()  # its config warnings (token ids past a small vocabulary)
    default = _defaults(model_type)
    try:
        cfg = AutoConfig.for_model(model_type, **config)
    except Exception as e:  # noqa: BLE001 - the config class's own validation (a strict dataclass), in its words
        cause = e.__cause__ or e
        raise _refused(f"{type(default).__name__}: {str(cause).strip().splitlines()[-1][:300]}") from None

    def get(*names):
        return next((_read(cfg, n) for n in names if _read(cfg, n, None) is not None), None)

    for key, value in (overrides or {}).items():
        for name in OVERRIDES[key][0]:
            got = _read(cfg, name, None)
            if isinstance(got, (int, bool)) and got != value:
                raise _refused(
                    f"{key}: {type(default).__name__} does not take {value} ({name} stays {got}, derived from its other settings)"
                )

    hidden, heads = get("hidden_size", "n_embd", "d_model"), get("num_attention_heads", "n_head")
    if isinstance(hidden, int) and isinstance(heads, int) and _read(cfg, "head_dim", None) is None and hidden % heads:
        raise _refused(f"hidden {hidden} must be divisible by heads {heads}")
    kv = get("num_key_value_heads")
    if isinstance(kv, int) and isinstance(heads, int) and (kv > heads or heads % kv):
        given = "kv_heads" in (overrides or {})
        raise _refused(
            f"kv_heads {kv} must divide heads {heads}"
            + ("" if given else f" ({kv} is {type(default).__name__}'s own; set kv_heads to a divisor of {heads})")
        )
    experts, top_k = get("num_local_experts", "num_experts", "n_routed_experts"), get("num_experts_per_tok")
    if isinstance(experts, int) and isinstance(top_k, int) and top_k > experts:
        raise _refused(f"experts {experts}: the model routes each token to {top_k} experts, so at least {top_k}")
    return cfg


def for_task(config, task: str):
    """What the head needs of the config beyond its shape: a decoder-only classifier (GPT-2, Llama) reads the last
    token that is not padding and refuses a batch above 1 without a pad token; tutorials give it the end-of-text
    token, as here."""
    if task == "sequence_classification" and _read(config, "pad_token_id", None) is None:
        eos = _read(config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) and eos else eos
        config.pad_token_id = eos if isinstance(eos, int) and 0 <= eos < vocab_size(config) else 0
    return config


def build(model_type: str, task: str, config, dtype: torch.dtype, attn: str | None, experts: str | None) -> nn.Module:
    """`config`: the built config (check_shape). Built on the current default device, in `dtype`."""
    import transformers

    # "use_cache=True is incompatible with checkpointing" and the like: the lesson says what is checkpointed.
    transformers.logging.set_verbosity_error()
    kwargs = {"dtype": dtype}
    if attn:
        kwargs["attn_implementation"] = attn
    if experts:
        kwargs["experts_implementation"] = experts
    if _read(config, "architectures", None) is None:
        # transformers iterates it where a model type maps to several classes (DeiT, LeViT): none means the first.
        config.architectures = []
    try:
        return getattr(transformers, _AUTO[task][0]).from_config(config, **kwargs)
    except ImportError as e:  # a model that needs a package of its own (LayoutLMv2: detectron2)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise _refused(f"{model_type} needs a package that is not installed: {first[:200]}") from None
    except (KeyError, ValueError, TypeError, AttributeError, IndexError, AssertionError) as e:
        # The constructor's own refusal of these settings (Cohere's rope parameters per layer type): a real run would
        # fail the same way.
        where = type(e).__name__ + (f": {str(e).strip().splitlines()[-1][:200]}" if str(e).strip() else "")
        raise _refused(f"{model_type} cannot be built with these settings ({where}); a real run fails too") from None


def enable_checkpointing(model: nn.Module, every: int = 1) -> bool:
    """transformers' own activation checkpointing (every `every`-th layer, non-reentrant); False where the model has
    none."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        return False
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the 5.x name; gradient_checkpointing_enable warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, every_n_layers=every)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs, every_n_layers=every)
    return True


def limits(config) -> dict:
    """The sequence length and image size the built config allows (None where it sets none: XLNet's relative
    positions say -1)."""
    seq = next(
        (v for n in ("max_position_embeddings", "n_positions") if (v := _text_read(config, n)) is not None), None
    )
    image = _read(config, "image_size", None)
    return {
        "seq_len": seq if isinstance(seq, int) and seq > 0 else None,
        "image_size": image if isinstance(image, int) else None,
        "patch": _read(config, "patch_size", None),
    }


def vocab_size(config) -> int:
    size = _text_read(config, "vocab_size")
    if not isinstance(size, int):
        raise _refused(f"{type(config).__name__} names no vocabulary size (vocab_size), nor does its text part")
    return size


def classes(config) -> int:
    return int(_read(config, "num_labels", 1000))
