import streamlit as st

from app import backend
from app.features import recorded_view
from app.i18n import lang, t
from app.ui import layout, results
from app.ui.errors import engine_error
from course import catalog, content

meta, left, right = layout.lesson_page("home")

with left:
    st.subheader(t("home.map"))
    for lesson_id in catalog.PAGE_IDS[1:]:
        lesson = content.meta(lesson_id)
        st.page_link(f"views/{lesson_id}.py", label=t("page." + lesson_id))
        summary = content.localized(lesson.get("summary"), lang())
        if summary:
            st.caption(summary)

with right:
    with st.container(border=True):
        st.subheader(t("home.device"))
        if backend.device_info_nowait() is None:
            with st.spinner(t("sidebar.starting")):
                info, err = backend.safe_device_info()
        else:
            info, err = backend.safe_device_info()
        if err:
            engine_error(err)
        elif info:
            if info.get("type") == "cuda":
                st.success(t("home.cuda_mode", name=info.get("name", "GPU")))
            else:
                st.info(t("home.cpu_mode"))
            devices = info.get("devices") or [info]
            for device in devices:
                if len(devices) > 1:
                    st.markdown(
                        f"**{t('home.gpu_index', index=device.get('index', '?'))}** · {device.get('name', '?')}"
                    )
                cols = st.columns(2)
                cols[0].metric(t("home.total"), results.fmt_bytes(device.get("total_bytes")))
                cols[1].metric(t("home.free"), results.fmt_bytes(device.get("free_bytes")))
            if len(devices) > 1:
                st.caption(t("home.gpu_lanes", n=len(devices)))
            if info.get("memory_limit"):
                lim = info["memory_limit"]
                st.caption(t("home.memory_limit", group=lim["group"], limit=results.fmt_bytes(lim["limit_bytes"])))
            versions = t("home.versions", name=info.get("name", "?"), torch=info.get("torch_version", "?"))
            if info.get("cuda_version"):
                versions += " · " + t("home.cuda_version", version=info["cuda_version"])
            st.caption(versions)
    recorded_view.browser(lesson=None, expanded=True)
