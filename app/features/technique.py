"""One optimization technique of lesson 3: its claim, the pair of runs that measures it (sized for a CPU where the
page runs there), the verdict, its interleaved rounds for a time claim, and the verdict on the H200's recording."""

from __future__ import annotations

import streamlit as st

from app import backend
from app.backend import VERDICT_MIN_ROUNDS, ExperimentConfig, paired
from app.charts import peak, step_time
from app.features import rounds_view
from app.features.claim_verdict import regime, rounds_verdict, source, verdict
from app.i18n import t
from app.ui import expect_view, jobs, layout, sizing
from app.ui.errors import engine_error
from app.ui.failures import job_failed
from course import catalog, claims, content


def configs(meta: dict, technique: dict, scale: int = 1) -> tuple[ExperimentConfig, ExperimentConfig]:
    """Technique and baseline configs: each one's overrides on top of the lesson preset, `scale` times smaller in
    width and batch on a CPU (every pair's estimated saving stays within a point: tests/lessons/test_cpu_sizing).
    Raises the ConfigError of a lesson whose data breaks an engine rule."""
    config, baseline = content.technique_configs(meta, technique, scale)
    (tech, err), (base, base_err) = backend.config(config), backend.config(baseline)
    if err or base_err:
        raise err or base_err
    return tech, base


def _recorded_pair(tech_cfg: ExperimentConfig, base_cfg: ExperimentConfig) -> tuple[dict, dict] | None:
    """Recorded GPU results for exactly these two configs, if the app ships them."""
    tech, base = backend.find_recorded(tech_cfg), backend.find_recorded(base_cfg)
    return (tech, base) if tech and base else None


def live_rounds(
    meta: dict,
    technique: dict,
    tech_cfg: ExperimentConfig,
    base_cfg: ExperimentConfig,
    ns: str,
    full_width: int,
    pair: tuple[dict, dict] | None,
) -> None:
    """The pair timed in interleaved rounds on this machine (at this page's size), judged round by round; `pair`:
    the learner's runs of these two configs, if made, which the explanation's memory and TFLOP/s checks read."""
    _, rset = content.technique_rounds(meta, technique)
    if rset is not None and not rounds_view.runs_here(rset):
        st.caption(t("rounds.gpu_only"))
        return
    spec = rset or {"rounds": VERDICT_MIN_ROUNDS}
    params = content.rounds_params(
        meta, [("baseline", base_cfg.to_dict()), ("technique", tech_cfg.to_dict())], spec=spec
    )
    names = {"baseline": t("opt.baseline"), "technique": t("opt.technique")}
    result = rounds_view.live(
        f"{ns}.rounds",
        t("rounds.title"),
        params,
        meta,
        names=names,
        button=t("opt.rounds.run", rounds=params["rounds"]),
    )
    summary = paired(result, "technique", "baseline") if result else None
    if summary:
        timed = {"device": result.get("device"), "config": result["strategies"][0]["config"]}
        runs = claims.runs(*(pair or (None, None)), rounds=claims.rounds_pair(result, "technique", "baseline"))
        rounds_verdict(meta, technique, summary, source(timed, full_width), runs)


def recorded_rounds(meta: dict, technique: dict) -> tuple[dict | None, dict | None, dict | None, dict | None]:
    """(recorded rounds result, its set, the technique's paired summary in it, the result narrowed to the
    technique's pair as its explanation's checks read it), or Nones until recorded."""
    ref, rset = content.technique_rounds(meta, technique)
    if rset is None:
        return None, None, None, None
    rec, _ = backend.safe_load_recorded(catalog.rounds_set_id(meta["id"], rset["id"]))
    summary = paired(rec, ref["strategy"], ref["versus"]) if rec else None
    if not summary:
        return None, None, None, None
    return rec, rset, summary, claims.rounds_pair(rec, ref["strategy"], ref["versus"])


def _pair_of(statuses: list[dict], tech_cfg: ExperimentConfig, base_cfg: ExperimentConfig) -> tuple[dict, dict] | None:
    """The learner's finished pair if it is of exactly these configs (the page's size may have changed since)."""
    results = [s.get("result") for s in statuses]
    if len(results) != 2 or not all(results):
        return None
    same = all(
        expect_view.same_experiment(r.get("config") or {}, c.to_dict())
        for r, c in zip(results, (tech_cfg, base_cfg), strict=True)
    )
    return (results[0], results[1]) if same else None


def _measured_pair(meta: dict, technique: dict, done: dict | None, full_width: int) -> dict | None:
    """The pair's job statuses once they are done (verdict and charts shown), or None."""
    if not done:
        return None
    statuses = done["statuses"]
    failed = [s for s in statuses if s.get("state") != "done" or not s.get("result")]
    for s in failed:
        job_failed(s)
    if not failed:
        tech, base = statuses[0]["result"], statuses[1]["result"]
        verdict(meta, technique, tech, base, source(tech, full_width))
        pairs = [(t("opt.technique"), tech), (t("opt.baseline"), base)]
        layout.altair(peak.chart(peak.frame(pairs)))
        sdf = step_time.frame([(label, r.get("step_ms")) for label, r in pairs])
        if not sdf.empty:
            layout.altair(step_time.chart(sdf))
    return done


def _recorded_verdict(meta: dict, technique: dict, full_pair: tuple, ns: str, expanded: bool) -> None:
    metric = technique.get("metric", "peak_saving_pct")
    pair = _recorded_pair(*full_pair)
    rec, rset, summary, timed = recorded_rounds(meta, technique) if metric == "step_time_ratio" else (None,) * 4
    if not (pair or summary):
        return
    with st.expander(t("opt.recorded"), icon=":material/history:", expanded=expanded):
        if summary:
            name = (rec.get("device") or {}).get("name", "GPU")
            rounds_verdict(
                meta,
                technique,
                summary,
                t("opt.recorded_source", name=name),
                claims.runs(*(pair or (None, None)), rounds=timed),
            )
            if pair:
                regime(pair[1])
            rounds_view.show(rec, meta, key=f"{ns}.recorded_rounds", rset=rset)
            return
        if metric == "step_time_ratio":
            st.caption(t("opt.rounds.not_recorded"))
        name = (pair[0].get("device") or {}).get("name", "GPU")
        verdict(meta, technique, pair[0], pair[1], t("opt.recorded_source", name=name))


def render(meta: dict, technique: dict) -> None:
    tid = technique["id"]
    ns = f"optimization.{tid}"
    metric = technique.get("metric", "peak_saving_pct")
    st.markdown(f"**{t('opt.claim')}** {expect_view.text(meta, technique.get('claim'))}")
    st.caption(
        t(
            "opt.claimed_range",
            metric=t("opt.measured." + metric, default=metric),
            range=claims.fmt_range(metric, technique.get("claimed_range") or []),
        )
    )
    try:
        tech_cfg, base_cfg = configs(meta, technique, sizing.of(meta).scale)
        full_pair = configs(meta, technique)  # what the GPU recordings are of
    except ValueError as exc:  # a ConfigError: the lesson's data breaks a rule of the engine
        engine_error(str(exc))
        return
    with st.expander(t("opt.configs")):
        base_dict, tech_dict = base_cfg.to_dict(), tech_cfg.to_dict()
        diff = {k: (base_dict[k], v) for k, v in tech_dict.items() if base_dict[k] != v}
        st.table(
            {
                t("opt.field"): list(diff),
                t("opt.baseline"): [str(b) for b, _ in diff.values()],
                t("opt.technique"): [str(v) for _, v in diff.values()],
            }
        )
        st.json({"technique": tech_dict, "baseline": base_dict}, expanded=False)
    if metric == "peak_saving_pct":
        (tech_est, _), (base_est, _) = backend.estimate(tech_cfg, wait=None), backend.estimate(base_cfg, wait=None)
        if tech_est and base_est and base_est["peak_bytes"]:
            saving = (base_est["peak_bytes"] - tech_est["peak_bytes"]) / base_est["peak_bytes"] * 100
            st.caption(t("opt.estimated", value=claims.fmt(metric, saving)))
    specs = [
        {"label": t("opt.technique"), "kind": "run", "params": tech_cfg.to_dict()},
        {"label": t("opt.baseline"), "kind": "run", "params": base_cfg.to_dict()},
    ]
    done = _measured_pair(meta, technique, jobs.panel(ns, t("opt.run"), specs, tag=tid), full_pair[0].width)
    if metric == "step_time_ratio":
        live_pair = _pair_of(done["statuses"], tech_cfg, base_cfg) if done else None
        live_rounds(meta, technique, tech_cfg, base_cfg, ns, full_pair[0].width, live_pair)
    # Without a GPU the recorded verdict is the one that matters, so it starts open.
    _recorded_verdict(meta, technique, full_pair, ns, expanded=not backend.gpu_worker() and not done)
