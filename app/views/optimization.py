import streamlit as st

from app import (
    charts,
    claims,
    content,
    engine,
    expect_view,
    frames,
    jobs,
    layout,
    recorded_view,
    results,
    rounds_view,
    sandbox,
    sizing,
    urlstate,
)
from app.i18n import lang, t
from experiments import metrics
from experiments.config import ConfigError, ExperimentConfig

# Achieved fp32 TFLOP/s above which a step on an H100/H200-class GPU is limited by arithmetic, not launches.
COMPUTE_BOUND_TFLOPS = 20


def configs(meta: dict, technique: dict, scale: int = 1) -> tuple[ExperimentConfig, ExperimentConfig]:
    """Technique and baseline configs: each one's overrides on top of the lesson preset, `scale` times smaller in
    width and batch on a CPU (every pair's estimated saving stays within a point: tests/lessons/test_cpu_sizing)."""
    config, baseline = content.technique_configs(meta, technique, scale)
    return ExperimentConfig.from_dict(config), ExperimentConfig.from_dict(baseline)


def _recorded_pair(tech_cfg: ExperimentConfig, base_cfg: ExperimentConfig) -> tuple[dict, dict] | None:
    """Recorded GPU results for exactly these two configs, if the app ships them."""
    tech, base = engine.find_recorded(tech_cfg), engine.find_recorded(base_cfg)
    return (tech, base) if tech and base else None


def regime(base: dict) -> None:
    """Where a speed claim is judged: how busy the baseline kept the GPU (a few TFLOP/s is launch-bound)."""
    if (base.get("device") or {}).get("type") != "cuda" or not base.get("tflops"):
        return
    ms, tflops = (base.get("step_ms") or {}).get("median"), base["tflops"]
    key = "opt.regime.compute" if tflops >= COMPUTE_BOUND_TFLOPS else "opt.regime.launch"
    st.caption(t(key, ms=f"{ms:.2f}", tflops=f"{tflops:.1f}", threshold=COMPUTE_BOUND_TFLOPS))


def _oom(tech: dict, base: dict) -> None:
    for label, result in ((t("opt.technique"), tech), (t("opt.baseline"), base)):
        if result.get("oom"):
            st.error(t("opt.oom", which=label))


def verdict(meta: dict, technique: dict, tech: dict, base: dict, source: str) -> None:
    metric = technique.get("metric", "peak_saving_pct")
    value = claims.measure(metric, tech, base)
    st.metric(t("opt.measured." + metric, default=metric), claims.fmt(metric, value))
    st.caption(t("opt.source", source=source))
    if metric == "step_time_ratio":
        # One pair of runs is one sample of a ratio that moves by tens of percent between runs: no verdict.
        st.info(t("opt.one_pair"))
        regime(base)
        _oom(tech, base)
        return
    ok = claims.holds(value, technique.get("claimed_range"))
    if ok is True:
        st.success(t("opt.holds"))
    elif ok is False:
        st.warning(t("opt.not_holds"))
    else:
        st.info(t("opt.no_verdict"))
    key, checks = claims.explanation(technique, ok)
    why = expect_view.text(meta, technique.get(key)) if key else ""
    if why:
        st.markdown(why)
        # The explanation states what this pair shows: checked against it, like every prompt.
        expect_view.checked(checks, claims.runs(tech, base))
    _oom(tech, base)


def rounds_verdict(meta: dict, technique: dict, summary: dict, source: str, runs: dict) -> None:
    """A time claim judged over interleaved rounds: every round's paired ratio against the claimed range. The
    verdict picks the explanation, which is checked on `runs` (claims.runs: the rounds, and the pair if shown)."""
    rng = technique.get("claimed_range")
    ok = claims.holds_over_rounds(summary, rng)
    st.metric(t("opt.measured.paired_ratio"), f"{summary['median']:.2f}×")
    st.caption(t("opt.paired_spread", lo=f"{summary['lo']:.2f}", hi=f"{summary['hi']:.2f}", rounds=summary["rounds"],
                 range=claims.fmt_range("step_time_ratio", rng)) + " " + t("opt.source", source=source))
    if ok is True:
        st.success(t("opt.rounds.holds"))
    elif ok is False:
        st.warning(t("opt.rounds.not_holds"))
    else:
        st.info(t("opt.rounds.undecided", min=metrics.VERDICT_MIN_ROUNDS))
    key, checks = claims.explanation(technique, ok)
    why = expect_view.text(meta, technique.get(key)) if key else ""
    if why:
        st.markdown(why)
        expect_view.checked(checks, runs)


def _source(result: dict, full_width: int) -> str:
    device = result.get("device") or {}
    source = device.get("name", "?") if device.get("type") == "cuda" else t("opt.cpu_source")
    width = (result.get("config") or {}).get("width")
    if width and width != full_width:
        source = t("opt.sized_source", source=source, k=full_width // width)
    return source


def live_rounds(meta: dict, technique: dict, tech_cfg: ExperimentConfig, base_cfg: ExperimentConfig, ns: str,
                full_width: int, pair: tuple[dict, dict] | None) -> None:
    """The pair timed in interleaved rounds on this machine (at this page's size), judged round by round; `pair`:
    the learner's runs of these two configs, if made, which the explanation's memory and TFLOP/s checks read."""
    _, rset = claims.rounds_ref(meta, technique)
    if rset is not None and not rounds_view.runs_here(rset):
        st.caption(t("rounds.gpu_only"))
        return
    spec = rset or {"rounds": metrics.VERDICT_MIN_ROUNDS}
    params = content.rounds_params(meta, [("baseline", base_cfg.to_dict()), ("technique", tech_cfg.to_dict())],
                                   spec=spec)
    names = {"baseline": t("opt.baseline"), "technique": t("opt.technique")}
    result = rounds_view.live(f"{ns}.rounds", t("rounds.title"), params, meta, names=names,
                              button=t("opt.rounds.run", rounds=params["rounds"]))
    summary = metrics.paired(result, "technique", "baseline") if result else None
    if summary:
        timed = {"device": result.get("device"), "config": result["strategies"][0]["config"]}
        runs = claims.runs(*(pair or (None, None)), rounds=claims.rounds_pair(result, "technique", "baseline"))
        rounds_verdict(meta, technique, summary, _source(timed, full_width), runs)


def _pair_of(statuses: list[dict], tech_cfg: ExperimentConfig, base_cfg: ExperimentConfig) -> tuple[dict, dict] | None:
    """The learner's finished pair if it is of exactly these configs (the page's size may have changed since)."""
    results = [s.get("result") for s in statuses]
    if len(results) != 2 or not all(results):
        return None
    same = all(expect_view.same_experiment(r.get("config") or {}, c.to_dict())
               for r, c in zip(results, (tech_cfg, base_cfg), strict=True))
    return (results[0], results[1]) if same else None


def recorded_rounds(meta: dict, technique: dict) -> tuple[dict | None, dict | None, dict | None, dict | None]:
    """(recorded rounds result, its set, the technique's paired summary in it, the result narrowed to the
    technique's pair as its explanation's checks read it), or Nones until recorded."""
    ref, rset = claims.rounds_ref(meta, technique)
    if rset is None:
        return None, None, None, None
    rec, _ = engine.safe_load_recorded(content.rounds_set_recorded_id(meta.get("id", "optimization"), rset["id"]))
    summary = metrics.paired(rec, ref["strategy"], ref["versus"]) if rec else None
    if not summary:
        return None, None, None, None
    return rec, rset, summary, claims.rounds_pair(rec, ref["strategy"], ref["versus"])


def technique_tab(meta: dict, technique: dict) -> None:
    tid = technique["id"]
    ns = f"optimization.{tid}"
    metric = technique.get("metric", "peak_saving_pct")
    claim = expect_view.text(meta, technique.get("claim"))
    rng = technique.get("claimed_range") or []
    claimed = claims.fmt_range(metric, rng)
    st.markdown(f"**{t('opt.claim')}** {claim}")
    st.caption(t("opt.claimed_range", metric=t("opt.measured." + metric, default=metric), range=claimed))
    try:
        tech_cfg, base_cfg = configs(meta, technique, sizing.scale(meta))
        full_pair = configs(meta, technique)  # what the GPU recordings are of
    except (ConfigError, TypeError) as exc:
        layout.error(str(exc))
        return
    with st.expander(t("opt.configs")):
        diff = {k: (base_cfg.to_dict()[k], v) for k, v in tech_cfg.to_dict().items() if base_cfg.to_dict()[k] != v}
        st.table({t("opt.field"): list(diff), t("opt.baseline"): [str(b) for b, _ in diff.values()],
                  t("opt.technique"): [str(v) for _, v in diff.values()]})
        st.json({"technique": tech_cfg.to_dict(), "baseline": base_cfg.to_dict()}, expanded=False)
    if metric == "peak_saving_pct":
        tech_est, _ = engine.estimate(tech_cfg)
        base_est, _ = engine.estimate(base_cfg)
        if tech_est and base_est and base_est["peak_bytes"]:
            saving = (base_est["peak_bytes"] - tech_est["peak_bytes"]) / base_est["peak_bytes"] * 100
            st.caption(t("opt.estimated", value=claims.fmt(metric, saving)))
    if st.button(t("opt.run"), key=f"{ns}.run", type="primary", disabled=jobs.pending(ns), width="stretch"):
        specs = [{"label": t("opt.technique"), "kind": "run", "params": tech_cfg.to_dict()},
                 {"label": t("opt.baseline"), "kind": "run", "params": base_cfg.to_dict()}]
        jobs.start(ns, specs, tag=tid)
    jobs.poll(ns)
    done = jobs.finished(ns)
    live_pair = None
    if done:
        statuses = done["statuses"]
        failed = [s for s in statuses if s.get("state") != "done" or not s.get("result")]
        if failed:
            for s in failed:
                results.job_error(s.get("error") or t("jobs.state." + str(s.get("state"))))
        else:
            tech, base = statuses[0]["result"], statuses[1]["result"]
            live_pair = _pair_of(statuses, tech_cfg, base_cfg)
            verdict(meta, technique, tech, base, _source(tech, full_pair[0].width))
            pairs = [(t("opt.technique"), tech), (t("opt.baseline"), base)]
            df = frames.compare_frame(pairs)
            st.altair_chart(charts.peak_chart(df), width="stretch")
            sdf = frames.step_time_frame([(label, r.get("step_ms")) for label, r in pairs])
            if not sdf.empty:
                st.altair_chart(charts.step_time_chart(sdf), width="stretch")
    if metric == "step_time_ratio":
        live_rounds(meta, technique, tech_cfg, base_cfg, ns, full_pair[0].width, live_pair)
    pair = _recorded_pair(*full_pair)
    rec, rset, summary, timed = recorded_rounds(meta, technique) if metric == "step_time_ratio" else (None,) * 4
    if pair or summary:
        info, _ = engine.safe_device_info()
        # Without a GPU the recorded verdict is the one that matters, so it starts open.
        no_gpu = not info or info.get("type") != "cuda"
        with st.expander(t("opt.recorded"), icon=":material/history:", expanded=no_gpu and not done):
            if summary:
                name = (rec.get("device") or {}).get("name", "GPU")
                rounds_verdict(meta, technique, summary, t("opt.recorded_source", name=name),
                               claims.runs(*(pair or (None, None)), rounds=timed))
                if pair:
                    regime(pair[1])
                rounds_view.show(rec, meta, key=f"{ns}.recorded_rounds", rset=rset)
            else:
                if metric == "step_time_ratio":
                    st.caption(t("opt.rounds.not_recorded"))
                name = (pair[0].get("device") or {}).get("name", "GPU")
                verdict(meta, technique, pair[0], pair[1], t("opt.recorded_source", name=name))


meta, _, right = layout.lesson_page("optimization")
with right:
    techniques = {x["id"]: x for x in meta.get("techniques") or [] if isinstance(x, dict) and x.get("id")}
    if techniques:
        with st.container(border=True):
            st.subheader(t("opt.title"))
            # A selectbox, not tabs: lessons list about ten techniques, too many tabs for half a screen.
            titles = {tid: content.localized(x.get("title"), lang(), tid) for tid, x in techniques.items()}
            first = next(iter(techniques))
            urlstate.init("optimization_technique", first, lambda raw: raw if raw in techniques else first)
            chosen = st.selectbox(t("opt.pick"), list(techniques), format_func=titles.__getitem__,
                                  key="optimization_technique", persist_state="session")
            urlstate.sync("optimization_technique", chosen, first)
            technique_tab(meta, techniques[chosen])
    sandbox.render("optimization", meta)
    recorded_view.browser("optimization")
