"""The "Your model" page's parts: the lesson with its numbers from the recorded replays, what to notice (each sentence
checked against the table it sits under), the model picker (names and numbers only), the estimate, what fits and a
real run beside its estimate."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import backend
from app.charts import breakdown, fits, memory
from app.features import own_model_picker
from app.i18n import lang, t
from app.ui import jobs, layout, results, urlstate, widget_state
from app.ui.errors import engine_error
from course import content, facts
from course import own_model as om
from course.cards import CARDS, RESERVED_MARGIN, overhead
from course.units import GIB, fmt_bytes

NS = "ym"
CAPACITY_GIB = (0.01, 100000.0)  # a card of the learner's own: its memory, from a hundredth of a GiB


def page(lesson_id: str, data=om):
    """Title, the lesson (its {{facts}} from `data`, the lesson's module of recorded numbers) on the left; returns
    (meta, right)."""
    meta = layout.lesson_meta(lesson_id)
    layout.header(lesson_id, meta)
    left, right = layout.columns()
    with left:
        text, _used = content.read_text(lesson_id, "lesson", lang())
        st.markdown(facts.render(text or "", data.facts(meta)))
    return meta, right


def model_words() -> dict:
    """How the recorded table words its id columns: a preset by its short title, a precision by its short name (never
    a raw id such as amp_bf16). The implementation keeps PyTorch's own word (fused, foreach), which the lesson uses."""
    titles = {pid: content.localized(p["title"], lang()).split(" ")[0] for pid, p in om.presets().items()}
    return {
        "model": lambda pid: titles.get(pid, pid),
        "precision": lambda p: t(f"ym.precision.{p}"),
    }


def recorded(meta: dict, data=om, prefix: str = "ym", words: dict | None = None) -> None:
    """The lesson's recorded table (its strings under `prefix`; `words` maps a column to what words its ids) and what
    to notice, each sentence checked."""
    st.subheader(t(f"{prefix}.recorded"))
    rows = pd.DataFrame(data.table_rows())
    for column, word in (model_words() if words is None else words).items():
        if column in rows.columns:
            rows[column] = rows[column].map(word)
    if {"model", "precision"} <= set(rows.columns):  # one column: a seventh does not fit a 1024 px half page
        rows["model"] = rows["model"] + " · " + rows.pop("precision")
    for column in rows.columns:  # a column's figures with as many decimals as the most precise was rounded to
        decimals = max((len(f"{v:g}".partition(".")[2]) for v in rows[column] if isinstance(v, float)), default=0)
        rows[column] = rows[column].map(lambda v, d=decimals: f"{v:.{d}f}" if isinstance(v, float) else v)
    rows = rows.rename(columns={c: t(f"{prefix}.col.{c}") for c in rows.columns})
    # A static table wraps its cells to the column's width: a data grid cut long setup names at 1440 px and hid the
    # peak behind a horizontal scroll, with no sign of it, at 1024 px.
    st.table(rows, hide_index=True, border="horizontal")
    st.caption(t(f"{prefix}.recorded_caption"))
    values, verdicts = data.facts(meta), data.verdicts(meta)
    with st.container(border=True):
        st.markdown(f"**{t('ym.notice')}**")
        for check in meta.get("checks", []):
            states = [verdicts[name] for name in check["facts"]]
            # Material icons: headless browsers and some servers have no emoji font.
            mark = (
                ":material/check_circle:"
                if all(states)
                else (":material/hourglass_empty:" if None in states else ":material/warning:")
            )
            verdict = t("ym.holds") if all(states) else (t("ym.awaiting") if None in states else t("ym.fails"))
            st.markdown(f"{mark} {facts.render(content.localized(check['text'], lang()), values)} *({verdict})*")


def picker(meta: dict):
    """The configuration the learner picked, or None (app/features/own_model_picker.py)."""
    return own_model_picker.picker(meta)


def describe(cfg: dict) -> str:
    """A configuration in the learner's words: the model and every lever, as the picker labels them."""
    source = cfg.get("model_source") or ""
    name = source.split(":", 1)[-1]
    if source.startswith("preset:"):
        pid, _, size = name.partition(":")
        title = om.presets().get(pid, {}).get("title")
        name = (content.localized(title, lang()) if title else pid) + (f" · {t('ym.size.tiny')}" if size else "")
    parts = [name]
    if cfg.get("model_overrides"):
        parts.append(cfg["model_overrides"])
    for field in ("precision", "optimizer", "optimizer_impl"):
        parts.append(t(f"opt.{field}.{cfg[field]}", default=str(cfg[field])))
    parts.append(f"{t('field.checkpoint')}: {t('opt.checkpoint.' + cfg['checkpoint'])}")
    if cfg.get("checkpoint_every", 1) > 1:
        parts.append(f"{t('field.checkpoint_every')}: {cfg['checkpoint_every']}")
    method = cfg.get("finetune", "full")
    if method != "full":
        parts.append(
            f"{t('opt.finetune.' + method)} r={cfg['lora_rank']} alpha={cfg['lora_alpha']} · "
            f"{t('opt.lora_targets.' + cfg['lora_targets'])} · {t('opt.adapter_dtype.' + cfg['adapter_dtype'])}"
        )
    if method == "qlora":
        parts.append(
            t("opt.quant_type." + cfg["quant_type"]) + (f" · {t('field.double_quant')}" if cfg["double_quant"] else "")
        )
    if cfg.get("offload_activations"):
        parts.append(t("field.offload_activations"))
    size = "image_size" if cfg.get("model_source", "").startswith("torchvision") else "seq_len"
    parts.append(f"{t('field.batch')} {cfg['batch']} · {t('field.' + size)} {cfg.get(size)}")
    return " · ".join(parts)


def estimate(cfg) -> None:
    """On a click (a full-size replay takes seconds); shown while the configuration stays the same."""
    st.subheader(t("ym.estimate"))
    if st.button(t("ym.estimate"), key=f"{NS}.estimate", type="primary"):
        with st.spinner(t("ym.estimating")):
            # For a GPU whatever this server has: the question is whether it fits the learner's card.
            # The replay runs in the server's estimate processes; this click waits for it (bounded there).
            st.session_state[f"{NS}.est"] = (cfg.to_dict(), *backend.estimate(cfg, for_device="cuda", wait=None))
    shown = st.session_state.get(f"{NS}.est")
    if not shown or shown[0] != cfg.to_dict():
        return
    _, est, err = shown
    if err and "model_source: " in err:  # the engine's field name is not the learner's word
        st.error(t("ym.bad_model", detail=err.split("model_source: ", 1)[1]))
        return
    if err:
        (st.warning if "cannot be predicted" in err else engine_error)(err.split(": ", 1)[-1])
        return
    show_estimate(est)


def show_estimate(est: dict) -> None:
    device = t("source.estimated") + f" · {est.get('device_type', 'cuda').upper()}"
    phase = t("phase." + est["peak_phase"])
    st.markdown(t("ym.estimate_result", peak=fmt_bytes(est["peak_bytes"]), phase=phase, device=device))
    if est.get("device_type") == "cuda":
        reserved = est.get("reserved_bytes")
        st.caption(t("ym.reserved", reserved=fmt_bytes(reserved)) if reserved else t("ym.reserved_none"))
    total, trains = est.get("parameters"), est.get("trainable_parameters")
    if total and trains is not None and trains != total:
        st.caption(
            t("ym.trainable", trainable=f"{trains:,}", total=f"{total:,}", percent=f"{100 * trains / total:.2f}")
        )
    if est.get("paged_bytes"):
        st.caption(t("ym.paged", paged=fmt_bytes(est["paged_bytes"])))
    if est.get("host_peak_bytes"):
        st.caption(t("ym.host", host=fmt_bytes(est["host_peak_bytes"])))
    rows = [{**p, "reserved_bytes": None, "ms": None} for p in est.get("phases") or []]
    if rows:
        layout.altair(memory.chart(memory.long(memory.frame({"phases": rows}), False)))
    layout.altair(breakdown.estimate_chart(breakdown.frame(None, est["categories"])))


def _card(meta: dict) -> tuple[str, int, dict, str | None]:
    """(the card's name, its memory in bytes, its overhead {"bytes", "source", ...}, its id or None for a size of the
    learner's own) as the learner picks it."""
    ids = [c["id"] for c in CARDS] + ["other"]
    names = {c["id"]: c["name"][lang()] for c in CARDS} | {"other": t("ym.card.other")}
    k = widget_state.labelled(f"{NS}_card")
    urlstate.init(k, "h200-141gb", urlstate.one_of(ids))
    chosen = st.selectbox(t("ym.card"), ids, format_func=names.__getitem__, key=k, persist_state="session")
    urlstate.sync(k, chosen, "h200-141gb")
    if chosen != "other":
        card = next(c for c in CARDS if c["id"] == chosen)
        return names[chosen], card["total_bytes"], overhead(card["arch"]), chosen
    k = f"{NS}_capacity"
    urlstate.init(k, float(meta["capacity_gib"]), urlstate.number_in(*CAPACITY_GIB))
    gib = st.number_input(t("ym.capacity"), *CAPACITY_GIB, key=k, persist_state="session")
    urlstate.sync(k, gib, float(meta["capacity_gib"]))
    return t("ym.card.other").rstrip("…."), int(gib * GIB), overhead(None), None


def what_fits(meta: dict, cfg) -> None:
    st.subheader(t("ym.fits"))
    name, total, over, card_id = _card(meta)
    note_source = t("ym.overhead_assumed") if over.get("assumed_for") else t("ym.overhead_measured")
    st.caption(
        t(
            "ym.fits_card_note",
            card=name,
            total=f"{total / GIB:.2f}",
            overhead=f"{over['bytes'] / GIB:.2f}",
            source=note_source,
            margin=f"{RESERVED_MARGIN * 100:g}",
        )
    )
    options = ("bf16", "amp_bf16", "fp32", "amp_fp16")
    labels = {p: t(f"opt.precision.{p}") for p in options}
    precisions = st.multiselect(
        t("ym.fits_precisions"),
        options,
        default=[cfg.precision] if cfg.precision in options else ["bf16"],
        format_func=labels.__getitem__,
        key=widget_state.labelled(f"{NS}_fits_precisions"),
    )
    if st.button(t("ym.fits_search"), key=f"{NS}.fits", disabled=not precisions):
        res, err = searching(
            lambda step: backend.what_fits(
                cfg, total, wait=None, precisions=tuple(precisions), overhead=over["bytes"], progress=step
            )
        )
        st.session_state[f"{NS}.fits_result"] = (cfg.to_dict(), name, res, err)
    res = _kept_result(f"{NS}.fits_result", cfg)
    if res is not None:
        show_fits(res)
        measure_command(cfg, card_id, total)
    if cfg.model_source.startswith(("preset:", "hf:")):
        methods(cfg, name, total, over["bytes"])


def searching(call):
    """A search with its progress on the page (combinations searched of planned, as the command line prints them):
    `call(step)` runs it, `step(done, planned)` is called as its replays report."""
    bar = st.progress(0.0, text=t("ym.fits_searching"))

    def step(done: int, planned: int) -> None:
        bar.progress(min(1.0, done / max(planned, 1)), text=t("ym.fits_progress", done=done, planned=planned))

    try:
        return call(step)
    finally:
        bar.empty()


def _kept_result(key: str, cfg) -> dict | None:
    """A search's result kept in the session, shown under the model and card it belongs to (marked when the levers
    have changed since), or None after showing its error or when there is none."""
    shown = st.session_state.get(key)
    if not shown:
        return None
    for_cfg, for_card, res, err = shown
    if err:
        engine_error(err)
        return None
    st.caption(t("ym.result_for", what=f"{for_card} · {describe(for_cfg)}"))
    if for_cfg != cfg.to_dict():
        st.warning(t("ym.stale"))
    return res


def methods(cfg, card: str, total: int, overhead: int) -> None:
    """Which fine-tuning method runs on the card at the learner's batch and sequence (experiments/distributed/
    method_fits.py), on a click: each is a full replay."""
    if st.button(t("ym.methods_search"), key=f"{NS}.methods"):
        res, err = searching(
            lambda step: backend.what_fits(cfg, total, wait=None, overhead=overhead, methods=True, progress=step)
        )
        st.session_state[f"{NS}.methods_result"] = (cfg.to_dict(), card, res, err)
    res = _kept_result(f"{NS}.methods_result", cfg)
    if res is None:
        return
    verdicts = {True: t("ym.methods_runs"), False: t("ym.methods_not"), None: t("ym.methods_unpredicted")}

    def cell(r: dict) -> str:
        return verdicts[r["runs"]] + ("" if r["peak_bytes"] is None else f" · {fmt_bytes(r['peak_bytes'])}")

    # A method a row, each checkpointing a column: three columns fit a projector's narrow column (1024 px), and a
    # static table wraps its cells instead of cutting them.
    checkpoints = list(dict.fromkeys(r["checkpoint"] for r in res["methods"]))
    columns = {c: f"{t('field.checkpoint')}: {t(f'opt.checkpoint.{c}')}" for c in checkpoints}
    rows: dict = {}
    for r in res["methods"]:
        row = rows.setdefault(r["finetune"], {t("field.finetune"): t(f"opt.finetune.{r['finetune']}")})
        row[columns[r["checkpoint"]]] = cell(r)
    st.table(pd.DataFrame(list(rows.values())), hide_index=True, border="horizontal")
    st.caption(f"{t('ym.methods_verdict')} · {t('ym.methods_peak')}")
    first = res["first_that_runs"]
    if first is None:
        st.warning(t("ym.methods_none"))
    else:
        method, checkpoint = t(f"opt.finetune.{first['finetune']}"), t(f"opt.checkpoint.{first['checkpoint']}")
        st.success(t("ym.methods_first", method=method, checkpoint=checkpoint, peak=fmt_bytes(first["peak_bytes"])))


def measure_command(cfg, card_id: str | None, total: int) -> None:
    """The command that confirms the answer by real trials on a GPU (experiments/measure/boundary.py)."""
    command = backend.fits_command(cfg.to_dict(), card=card_id, capacity_gib=round(total / GIB, 3))
    if command is None:  # a model of one's own code is named on the command line by its import path only
        return
    with st.expander(t("ym.measure_cmd_title")):
        st.caption(t("ym.measure_cmd"))
        st.code(command, language="bash", wrap_lines=True)


def show_measured(m: dict) -> None:
    """`fits --measure`'s trials, as a command-line result opened here carries them."""
    emulated = t("ym.measured_emulated") if m["emulated"] else ""
    for key in ("default", "expandable"):
        if key not in m:
            continue
        r, allocator = m[key], t(f"ym.alloc.{key}")
        if r["largest_batch"] is None:
            st.warning(t("ym.measured_failed", device=m["device"], allocator=allocator))
            st.text(next((str(x.get("error"))[:300] for x in r["trials"] if x["ran"] is None), ""))
            continue
        listed = {
            ran: t("list.sep").join(
                str(x["batch"]) for x in sorted(r["trials"], key=lambda x: x["batch"]) if x["ran"] is ran
            )
            or t("ym.measured_none")
            for ran in (True, False)
        }
        st.success(
            t(
                "ym.measured",
                device=m["device"],
                emulated=emulated,
                allocator=allocator,
                largest=r["largest_batch"],
                estimate=r["estimate"],
                ran=listed[True],
                failed=listed[False],
            )
        )


def show_fits(res: dict) -> None:
    df = fits.frame(res)
    # Static tables: their columns wrap in a projector's half page (1024 px) where a data grid hid its last ones.
    st.table(fits.shown(fits.table(df)), hide_index=True, border="horizontal")
    layout.altair(fits.chart(df))
    st.markdown(f"**{t('ym.fits_saves_title', batch=res['batch'])}**")
    st.table(fits.shown(fits.saves_table(df, res["batch"])), hide_index=True, border="horizontal")
    if res.get("unmeasured_ops"):
        st.warning(t("ym.fits_uncounted", ops=t("list.sep").join(f"`{op}`" for op in res["unmeasured_ops"])))
    if res.get("measured"):
        show_measured(res["measured"])
    if all(r["largest_batch"] == 0 for r in res["grid"]):
        st.warning(t("ym.fits_never"))
        return
    for r in res["grid"]:
        expandable = r.get("largest_batch_expandable", r["largest_batch"])
        if expandable > r["largest_batch"]:  # the sentence explains a gain, which is the case it is shown in
            st.info(
                t("ym.fits_allocator_differs", expandable=expandable, standard=r["largest_batch"], combo=fits.label(r))
            )
            break
    c = res["cheapest"]
    if c is None:
        st.warning(t("ym.fits_none", batch=res["batch"]))
    else:
        st.success(
            t(
                "ym.fits_cheapest",
                batch=res["batch"],
                precision=t(f"opt.precision.{c['precision']}"),
                impl=t(f"opt.optimizer_impl.{c['optimizer_impl']}"),
                checkpoint=t(f"opt.checkpoint.{c['checkpoint']}"),
                accum=c["accum"],
                peak=fmt_bytes(c["peak_bytes"]),
            )
        )


def run(cfg) -> None:
    st.subheader(t("ym.run"))
    cpu = backend.device_type(cfg) == "cpu"
    if cpu and not cfg.model_source.endswith(":tiny"):
        st.caption(t("ym.run_cpu_tiny"))
    label = t("ym.run_label", model=cfg.model_source) + (" · CPU" if cpu else "")
    spec = {"label": label, "kind": "run", "params": cfg.to_dict()}
    unfit = cpu and not cfg.model_source.endswith(":tiny")
    done = jobs.panel(NS, t("ym.run"), [spec], tag=cfg.to_dict(), disabled=unfit, primary=False)
    for _label, result in results.successful(done) if done else []:
        st.caption(t("ym.result_for", what=describe(result["config"])))
        if {**result["config"], "device": cfg.device} != {**cfg.to_dict(), "device": cfg.device}:
            st.warning(t("ym.stale"))
        show_run(result)


def show_run(result: dict) -> None:
    measured, est = backend.net_peak(result), result["estimate"]["peak_bytes"]
    if est is None:  # forced without an estimate (it cannot be predicted)
        st.markdown(t("ym.run_no_estimate", measured=fmt_bytes(measured), device=result["device"]["type"]))
        layout.altair(breakdown.chart(breakdown.frame(result["breakdown"], None)))
        return
    st.markdown(
        t("ym.run_result", measured=fmt_bytes(measured), device=result["device"]["type"], estimate=fmt_bytes(est))
    )
    same = measured == est
    (st.success if same else st.info)(
        t("ym.run_equal") if same else t("ym.run_differs", diff=fmt_bytes(abs(measured - est)))
    )
    layout.altair(breakdown.chart(breakdown.frame(result["breakdown"], result["estimate"]["categories"])))
