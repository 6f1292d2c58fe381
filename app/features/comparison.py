"""Lesson 5's comparison: the lesson's strategies (each a change to its preset) estimated, run side by side on one
scale, recorded on the GPU, and timed against each other in interleaved rounds."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.charts import peak, step_time
from app.features import rounds_view
from app.i18n import lang, t
from app.ui import jobs, layout, results, sizing
from app.ui.errors import engine_error
from course import catalog, content
from course.units import fmt_bytes

NS = "compare"
ROUNDS_NS = "compare.rounds"
HISTORY = ":material/history:"


def short_title(strategy: dict) -> str:
    """The name charts, tables and pickers show: a projector's half-width column has no room for the full title,
    which the plan's table lists beside it."""
    sid = strategy.get("id", "?")
    return content.localized(strategy.get("short") or strategy.get("title"), lang(), sid)


def strategy_configs(meta: dict) -> list[tuple[str, str, object | None, str | None]]:
    """(id, short title, config over the lesson preset at this page's size, error) per strategy."""
    out, size = [], sizing.of(meta)
    for strategy in meta.get("strategies") or []:
        sid = strategy.get("id", "?")
        title = short_title(strategy)
        cfg, err = backend.config(size.over_preset(strategy.get("config")))
        out.append((sid, title, cfg, None if err is None else str(err)))
    return out


def show_comparison(items: list[tuple[str, str, dict]], meta: dict, key: str, recorded: bool = False) -> None:
    """items: (strategy id, title, result)."""
    first = items[0][2]
    results.device_label(first, recorded_at=first.get("started_at") if recorded else None)
    runs = {sid: r for sid, _, r in items}
    pairs = [(title, r) for _, title, r in items]
    df = peak.frame(pairs)
    st.markdown(f"##### {t('chart.compare_peak')}")
    layout.chart(peak.chart(df), meta, "memory", runs, key=f"{key}.memory")
    sdf = step_time.frame([(title, r.get("step_ms")) for title, r in pairs])
    if not sdf.empty:
        st.markdown(f"##### {t('chart.time')}")
        layout.chart(step_time.chart(sdf), meta, "time", runs, key=f"{key}.time")
    # Short names and a short header keep the peak beside its name at projector widths; the header's full
    # meaning is its help.
    st.dataframe(
        peak.table(df),
        hide_index=True,
        width="stretch",
        column_config={
            t("col.net_peak_mib"): st.column_config.NumberColumn(t("col.net_peak_short"), help=t("col.net_peak_mib"))
        },
    )


def plan(meta: dict, strategies: list) -> None:
    """The strategies' estimated peaks and what each changes, and the Run button for all of them."""
    with st.container(border=True):
        st.subheader(t("compare.title"))
        sizing.banner(sizing.of(meta), NS)
        if not strategies:
            st.info(t("compare.none"))
        full = {s.get("id", "?"): content.localized(s.get("title"), lang(), "") for s in meta.get("strategies") or []}
        lines = []
        for sid, title, cfg, err in strategies:
            if err:
                engine_error(f"{full.get(sid) or title}: {err}")
                continue
            est, _ = backend.estimate(cfg, backend.capacity_bytes(cfg), wait=None)
            changed = {k: v for k, v in cfg.to_dict().items() if v != backend.DEFAULTS[k]}
            peak = fmt_bytes(est["peak_bytes"]) if est else "—"
            settings = ", ".join(f"{t('field.' + k)} = {v}" for k, v in changed.items())
            lines.append(
                f"- **{title}** · {t('compare.estimated_peak')} **{peak}**  \n"
                f"{full.get(sid) or title}  \n:small[{t('compare.settings')}: {settings}]"
            )
        if lines:
            # A line per strategy, wrapped in the column: a table's third and fourth columns were cut at a
            # projector's width (1024 px).
            st.markdown("\n".join(lines))
        valid = [(sid, title, cfg) for sid, title, cfg, err in strategies if cfg is not None]
        specs = [{"label": title, "kind": "run", "params": cfg.to_dict(), "sid": sid} for sid, title, cfg in valid]
        jobs.run_button(NS, t("compare.run"), specs, disabled=not valid, key="compare.run")


def recorded_and_live(meta: dict, valid: list) -> None:
    """The strategies recorded at full size on the GPU, whatever size this page runs at; then this page's runs."""
    full = {s.get("id"): content.over_preset(meta, s.get("config")) for s in meta.get("strategies") or []}
    recorded = [(sid, title, backend.find_recorded(backend.config(full[sid])[0])) for sid, title, _ in valid]
    recorded = [item for item in recorded if item[2]]
    if recorded:
        # Open until this page has a result of its own, then closed, and computed only while open: its two charts
        # cost the result's page run about 0.4 s. A key per state, so the closing is not undone by the kept state.
        after = "after" if jobs.finished(NS) else "before"
        title = t("recorded.compare")
        with layout.lazy_expander(
            title, key=f"compare.recorded_open.{after}", expanded=after == "before", icon=HISTORY
        ) as open_:
            if open_:
                show_comparison(recorded, meta, key="compare.recorded", recorded=True)
    done = jobs.outcome(NS)
    if done:
        ok = results.successful(done)
        sids = {spec["label"]: spec.get("sid") for spec in done["specs"]}
        if ok:
            show_comparison([(sids.get(title) or title, title, r) for title, r in ok], meta, key="compare.live")


def rounds_box(meta: dict, valid: list) -> None:
    """The strategies timed in interleaved rounds here, and the recording the lesson's prose quotes (its facts),
    through the same paired statistic the box shows."""
    with st.container(border=True):
        st.subheader(t("rounds.title"))
        params = content.rounds_params(meta, [(sid, cfg.to_dict()) for sid, _, cfg in valid])
        done = rounds_view.live(ROUNDS_NS, t("rounds.title"), params, meta)
        rec, _ = backend.safe_load_recorded(catalog.rounds_id(meta["id"]))
        if rec:
            name = (rec.get("device") or {}).get("name", "GPU")
            after = "before" if done is None else "after"
            title = t("rounds.recorded", name=name)
            with layout.lazy_expander(
                title, key=f"compare.rounds.recorded_open.{after}", expanded=done is None, icon=HISTORY
            ) as open_:
                if open_:
                    rounds_view.show(rec, meta, key="compare.rounds.recorded")
