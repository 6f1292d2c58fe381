import streamlit as st

from app.features import fragmentation_view, recorded_view, timeline_view
from app.i18n import t
from app.ui import expect_view, jobs, layout, results, sandbox
from app.ui.failures import job_failed

NS = "analysis.profile"

meta, _, right = layout.lesson_page("analysis")
with right:
    cfg = sandbox.render("analysis", meta)
    timeline_view.lesson_section("analysis")
    with st.container(border=True):
        st.subheader(t("profile.title"))
        st.caption(t("profile.explain"))
        ran = None if cfg is None else cfg.to_dict()
        specs = [{"label": t("profile.title"), "kind": "profile", "params": ran}] if ran else []
        done = jobs.panel(
            NS, t("profile.run"), specs, tag=ran, disabled=not ran, primary=False, key="analysis.profile_run"
        )
        if done:
            status = done["statuses"][0]
            result = status.get("result")
            if status.get("state") != "done" or not result:
                job_failed(status)
            else:
                if cfg is not None and cfg.to_dict() != done["tag"]:
                    st.warning(t("result.stale"))
                results.render_profile(result)
                expect_view.checked(meta.get("profile_expect"), {"run": result})
    fragmentation_view.render("analysis", meta)
    recorded_view.browser("analysis")
