import streamlit as st

from app.features import data_parallel, data_parallel_live, data_parallel_result
from app.i18n import t
from app.ui import jobs, layout
from app.ui.failures import job_failed

NS = data_parallel.NS

meta, _, right = layout.lesson_page("multigpu")
with right:
    dcfg, unavailable = data_parallel.controls(meta)
    specs = []
    if dcfg is not None:
        data_parallel.show_estimate(dcfg)
        if unavailable:
            st.warning(t("multigpu.unavailable", message=unavailable))
        label = t("multigpu.job", strategy=t("multigpu.opt." + dcfg.strategy), n=dcfg.world_size)
        specs = [{"label": label, "kind": "distributed", "params": dcfg.to_dict()}]
    # Settings that are not valid leave the button disabled; a run already going on still shows its progress.
    done = jobs.panel(NS, t("multigpu.run"), specs, disabled=not specs or bool(unavailable))
    if done:
        status = done["statuses"][0]
        if status.get("state") == "done" and status.get("result"):
            st.subheader(t("multigpu.result"))
            data_parallel_live.show(status["result"], meta, key=f"{NS}.live")
        else:
            job_failed(status)
    if dcfg is not None:
        data_parallel.show_what_fits(dcfg)
    data_parallel_result.comparison(meta, key=f"{NS}.recorded", expanded=not done)
