"""The "Your model" picker: the model (a preset, a Hugging Face type, a torchvision name), its structure and its
levers, as every lesson's sandbox keeps them: each value in the session across a language switch and a page switch,
and in the URL where it differs from the model's defaults (a teacher shares a link to an exact configuration). A new
model opens at its own defaults."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.i18n import lang, t
from app.ui import urlstate, widget_state
from course import content
from course import own_model as om

NS = "ym"
OVERRIDES = ("layers", "hidden", "heads", "kv_heads", "experts")
HF_DEFAULTS = {"batch": 1, "seq_len": 512, "precision": "bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
TV_DEFAULTS = {"batch": 32, "image_size": 224, "precision": "amp_bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
LEVERS = ("precision", "optimizer", "optimizer_impl", "checkpoint", "batch", "seq_len", "image_size")
BNB = ("adamw8bit", "paged_adamw", "paged_adamw8bit")
CHECKPOINTS = ("none", "per_layer")


def key(field: str) -> str:
    return widget_state.key(NS, field)


def _new_model() -> None:
    """Another model: its levers and structure open at its own defaults, in the widgets and in the URL."""
    for field in (*LEVERS, *(f"o_{o}" for o in OVERRIDES)):
        st.session_state.pop(key(field), None)
        urlstate.drop(key(field))


def _choice(field: str, options, labels: dict, default, container, radio: bool = False, new_model: bool = False):
    k = key(field)
    if k in st.session_state and st.session_state[k] not in options:
        del st.session_state[k]  # a value another lever ruled out (an implementation of a bitsandbytes optimizer)
    urlstate.init(k, default, urlstate.one_of(options))
    widget_state.labelled(k)
    draw = container.radio if radio else container.selectbox
    extra = {"horizontal": True} if radio else {}
    value = draw(
        t(f"ym.{field}" if field in ("source", "preset", "size", "head") else f"field.{field}"),
        options,
        format_func=labels.__getitem__,
        key=k,
        persist_state="session",
        on_change=_new_model if new_model else None,
        **extra,
    )
    urlstate.sync(k, value, default)
    return value


def _text(field: str, label: str, default: str) -> str:
    k = key(field)
    urlstate.init(k, default, str)
    value = st.text_input(label, key=k, persist_state="session", on_change=_new_model).strip()
    urlstate.sync(k, value, default)
    return value


def _number(field: str, label: str, lo: int, hi: int, default: int, container) -> int:
    k = key(field)
    urlstate.init(k, default, urlstate.number_in(lo, hi, whole=True))
    value = container.number_input(label, lo, hi, key=k, persist_state="session")
    urlstate.sync(k, value, default)
    return int(value)


def _toggle(field: str, label: str, default: bool = False) -> bool:
    k = key(field)
    urlstate.init(k, default, urlstate.on_off)
    value = st.toggle(label, key=k, persist_state="session")
    urlstate.sync(k, value, default)
    return bool(value)


def source(meta: dict) -> tuple[str, dict, str | None] | None:
    """(model_source, its default levers, its task), or None after saying why the choice cannot be used here."""
    presets = om.presets()
    # Labels resolved now: a format_func called later (AppTest does) must not re-read the language.
    kinds = ("preset", "hf", "torchvision")
    kind = _choice("source", kinds, {k: t("ym.source." + k) for k in kinds}, "preset", st, radio=True, new_model=True)
    if kind == "preset":
        ids = list(presets)
        names = {p: content.localized(presets[p]["title"], lang()) for p in ids}
        pid = _choice("preset", ids, names, meta["default_preset"], st, new_model=True)
        sizes = ("full", "tiny")
        size = _choice("size", sizes, {s: t("ym.size." + s) for s in sizes}, "full", st, radio=True, new_model=True)
        src = f"preset:{pid}" + (":tiny" if size == "tiny" else "")
        return src, om.defaults(src), presets[pid]["source"].get("task")
    if kind == "hf":
        name = _text("model_type", t("ym.model_type"), "qwen2")
        heads = ("auto", *om.HEADS)
        head = _choice("head", heads, {h: t("ym.head." + h) for h in heads}, "auto", st, new_model=True)
        task = backend.library("head", name, wait=backend.ESTIMATE_WAIT_S) if head == "auto" else head
        # Its image size or its sequence length: the model type's own head decides, once an estimate process says.
        task = task if task in om.HEADS else None
        return "hf:" + name + ("" if head == "auto" else ":" + head), HF_DEFAULTS, task
    ok, why = backend.library("torchvision")
    if not ok:
        st.info(t("ym.torchvision_missing", why=why))
        return None
    return "torchvision:" + _text("tv", t("ym.torchvision"), "resnet18"), TV_DEFAULTS, "image_classification"


def picker(meta: dict):
    """The configuration the learner picked (an ExperimentConfig), or None after showing why it is not valid."""
    st.subheader(t("ym.pick"))
    chosen = source(meta)
    if chosen is None:
        return None
    src, defaults, task = chosen
    with st.expander(t("ym.overrides")):
        cols = st.columns(len(OVERRIDES))
        structure = {o: _number(f"o_{o}", t("ym.override." + o), 0, 32768, 0, cols[i]) for i, o in enumerate(OVERRIDES)}
    st.markdown(f"**{t('ym.levers')}**")
    c = st.columns(3)
    data = {"model_source": src, "model_overrides": ",".join(f"{k}={v}" for k, v in structure.items() if v)}
    choices = {
        "precision": backend.CHOICES["precision"],
        "optimizer": backend.CHOICES["optimizer"],
        "optimizer_impl": backend.CHOICES["optimizer_impl"],
        "checkpoint": CHECKPOINTS,
    }
    for i, (name, options) in enumerate(choices.items()):
        if name == "optimizer_impl" and data["optimizer"] in BNB:
            options = ("default",)  # bitsandbytes' optimizers have one implementation, their own kernels
        labels = {v: t(f"opt.{name}.{v}", default=str(v)) for v in options}
        default = defaults.get(name, options[0])
        data[name] = _choice(name, options, labels, default if default in options else options[0], c[i % 3])
    data["batch"] = _number("batch", t("field.batch"), 1, 65536, int(defaults.get("batch", 1)), c[1])
    size_field = "image_size" if task == "image_classification" else "seq_len"
    lo, hi = backend.RANGES[size_field]
    data[size_field] = _number(
        size_field,
        t("field." + size_field),
        lo,
        hi,
        int(defaults.get(size_field, 224 if size_field == "image_size" else 512)),
        c[2],
    )
    urlstate.drop(key("seq_len" if size_field == "image_size" else "image_size"))
    if data["checkpoint"] == "per_layer":
        data["checkpoint_every"] = _number("checkpoint_every", t("field.checkpoint_every"), 1, 128, 1, c[0])
    data["offload_activations"] = _toggle("offload_activations", t("field.offload_activations"))
    if src.startswith(("preset:", "hf:")):
        data.update(_finetune())
    data.update(steps=2, timing_steps=0)
    cfg, err = backend.config(data)
    if err is not None:
        st.error(describe_error(err))
    return cfg


def _finetune() -> dict:
    """The fine-tuning levers: the method, and LoRA's target modules, rank, alpha and adapter dtype (in rows, so that
    a narrow column stacks them in this order)."""
    st.markdown(f"**{t('ym.finetune')}**")
    top = st.columns(2)
    methods = tuple(backend.CHOICES["finetune"])
    labels = {m: t(f"opt.finetune.{m}") for m in methods}
    out = {"finetune": _choice("finetune", methods, labels, backend.DEFAULTS["finetune"], top[0])}
    if out["finetune"] == "full":
        return out
    targets = backend.CHOICES["lora_targets"]
    labels = {v: t(f"opt.lora_targets.{v}") for v in targets}
    out["lora_targets"] = _choice("lora_targets", targets, labels, backend.DEFAULTS["lora_targets"], top[1])
    row = st.columns(3)
    out["lora_rank"] = _number("lora_rank", t("field.lora_rank"), 1, 1024, backend.DEFAULTS["lora_rank"], row[0])
    out["lora_alpha"] = _number("lora_alpha", t("field.lora_alpha"), 1, 4096, backend.DEFAULTS["lora_alpha"], row[1])
    dtypes = backend.CHOICES["adapter_dtype"]
    labels = {v: t(f"opt.adapter_dtype.{v}") for v in dtypes}
    out["adapter_dtype"] = _choice("adapter_dtype", dtypes, labels, backend.DEFAULTS["adapter_dtype"], row[2])
    if out["finetune"] == "qlora":
        quant = st.columns(2)
        types = backend.CHOICES["quant_type"]
        labels = {v: t(f"opt.quant_type.{v}") for v in types}
        out["quant_type"] = _choice("quant_type", types, labels, backend.DEFAULTS["quant_type"], quant[0])
        with quant[1]:
            out["double_quant"] = _toggle("double_quant", t("field.double_quant"), default=True)
    return out


def describe_error(err) -> str:
    """A refused configuration in the learner's words: the field's label, the rule in the page's language."""
    from app.ui.sandbox import explain

    if getattr(err, "field", None) == "model_source":
        return t("ym.bad_model", detail=str(err).split(": ", 1)[-1])
    return explain(err)
