import pandas as pd
import streamlit as st

from app import charts, content, engine, frames, jobs, layout, recorded_view, results
from app.i18n import lang, t
from experiments.config import ConfigError, ExperimentConfig

NS = "compare"


def strategy_configs(meta: dict) -> list[tuple[str, ExperimentConfig | None, str | None]]:
    """(title, config over the lesson preset, error) per strategy."""
    preset = meta.get("preset") or {}
    out = []
    for strategy in meta.get("strategies") or []:
        title = content.localized(strategy.get("title"), lang(), strategy.get("id", "?"))
        try:
            out.append((title, ExperimentConfig.from_dict({**preset, **(strategy.get("config") or {})}), None))
        except (ConfigError, TypeError) as exc:
            out.append((title, None, str(exc)))
    return out


def show_comparison(items: list[tuple[str, dict]], meta: dict, recorded: bool = False) -> None:
    first = items[0][1]
    results.device_label(first, recorded_at=first.get("started_at") if recorded else None)
    df = frames.compare_frame(items)
    st.markdown(f"##### {t('chart.compare_peak')}")
    layout.chart(charts.peak_chart(df), meta, "memory")
    sdf = frames.step_time_frame([(label, r.get("step_ms")) for label, r in items])
    if not sdf.empty:
        st.markdown(f"##### {t('chart.time')}")
        layout.chart(charts.step_time_chart(sdf), meta, "time")
    st.dataframe(frames.compare_display(df), hide_index=True, width="stretch")


meta, _, right = layout.lesson_page("compare")
with right:
    strategies = strategy_configs(meta)
    with st.container(border=True):
        st.subheader(t("compare.title"))
        if not strategies:
            st.info(t("compare.none"))
        rows = []
        for title, cfg, err in strategies:
            if err:
                layout.error(f"{title}: {err}")
                continue
            est, _ = engine.estimate(cfg, engine.capacity_bytes(cfg))
            changed = {k: v for k, v in cfg.to_dict().items() if v != ExperimentConfig().to_dict()[k]}
            rows.append({t("col.strategy"): title,
                         t("compare.estimated_peak"): results.fmt_bytes(est["peak_bytes"]) if est else "—",
                         t("compare.settings"): ", ".join(f"{t('field.' + k)} = {v}" for k, v in changed.items())})
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        valid = [(title, cfg) for title, cfg, err in strategies if cfg is not None]
        if st.button(t("compare.run"), key="compare.run", type="primary", disabled=not valid or jobs.pending(NS),
                     width="stretch"):
            jobs.start(NS, [{"label": title, "kind": "run", "params": cfg.to_dict()} for title, cfg in valid])
    recorded = [(title, engine.find_recorded(cfg)) for title, cfg in valid]
    recorded = [(title, r) for title, r in recorded if r]
    if recorded:
        with st.expander(t("recorded.compare"), icon=":material/history:", expanded=not jobs.finished(NS)):
            show_comparison(recorded, meta, recorded=True)
    jobs.poll(NS)
    done = jobs.finished(NS)
    if done:
        ok = results.successful(done)
        if ok:
            show_comparison(ok, meta)
    recorded_view.browser("compare")
