"""The app's only door to experiments/: cached singletons and calls that never raise into a page."""

from __future__ import annotations

import streamlit as st

MIB = 2**20


def client():
    """One worker process per server: jobs from all browsers run one at a time, so CUDA peaks stay per-job.
    Held by experiments.jobs.worker, not st.cache_resource, so no visitor's "Clear cache" can reset it."""
    from experiments.jobs.worker import shared_client

    c = shared_client()
    c.owner_alive = _session_alive
    return c


def session_id() -> str | None:
    """This browser tab's session: the fair queue's unit, and how the worker knows a closed tab's jobs."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx else None


def _session_alive(sid: str) -> bool:
    from streamlit import runtime

    return not runtime.exists() or runtime.get_instance().is_active_session(sid)


def get_client():
    """(client, error message)."""
    try:
        return client(), None
    except Exception as exc:  # noqa: BLE001 - any engine failure becomes a message on the page
        return None, f"{type(exc).__name__}: {exc}"


@st.cache_data(ttl=10, show_spinner=False)
def device_info() -> dict:
    # Asked of the worker process: calling torch.cuda here would give the web server a CUDA
    # context of its own, hundreds of MiB of GPU memory the learners' runs cannot use.
    info = client().device_info()
    if info is None:
        raise RuntimeError("the experiment worker did not report its device in time")
    return info


def device_info_nowait() -> dict | None:
    """The worker's device if it has reported already, else None (and the worker is started)."""
    try:
        return client().device_info(timeout=0)
    except Exception:  # noqa: BLE001 - the page's device panel reports errors; the sidebar stays quiet
        return None


def safe_device_info() -> tuple[dict | None, str | None]:
    try:
        return device_info(), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def capacity_bytes(cfg) -> int | None:
    """What the estimate is compared with: the runner's rule (experiments/core/capacity.py) on the worker's device view."""
    from experiments.core.capacity import capacity

    info, _ = safe_device_info()
    if info and info.get("type") == "cuda" and cfg.device == "cpu":
        # The worker reports its GPU; free RAM for a forced-CPU run is not known here: the budget alone.
        return capacity(cfg.budget_mb, None)
    return capacity(cfg.budget_mb, (info or {}).get("free_bytes"), (info or {}).get("cached_free_bytes", 0))


@st.cache_data(max_entries=2048, show_spinner=False)
def _estimate(cfg_items: tuple, capacity: int | None, device_type: str, workspaces: tuple | None) -> dict:
    from experiments.core.config import ExperimentConfig
    from experiments.estimate.estimator import estimate

    return estimate(ExperimentConfig.from_dict(dict(cfg_items)), capacity_bytes=capacity, device_type=device_type,
                    transients=dict(workspaces or ()))


def measure_later(signatures: list[str]) -> None:
    """Ask the worker to measure these ops' scratch memory on its GPU (milliseconds, once per shape and server);
    the page's next estimate includes them."""
    try:
        client().submit("workspaces", {"signatures": sorted(signatures)}, owner=session_id())
    except Exception:  # noqa: BLE001 - a full queue only delays the measurement until the run itself
        pass


def workspaces() -> tuple | None:
    """The cuDNN workspaces the worker has measured on its GPU so far (experiments/estimate/workspaces.py)."""
    from pathlib import Path

    from experiments.estimate.workspaces import load

    info, _ = safe_device_info()
    path = (info or {}).get("workspaces_path")
    return tuple(sorted(load(Path(path)).items())) if path else None


def device_type(cfg) -> str:
    """Where a run of cfg would execute: the worker's device, unless the config asks for the CPU."""
    if cfg.device == "cpu":
        return "cpu"
    info, _ = safe_device_info()
    return "cuda" if info and info.get("type") == "cuda" else "cpu"


def estimate(cfg, capacity: int | None = None) -> tuple[dict | None, str | None]:
    """The estimate for the device the run would use (a fake-tensor replay: exact tensor bytes; cached)."""
    try:
        where = device_type(cfg)
        est = _estimate(tuple(sorted(cfg.to_dict().items())), capacity, where,
                        workspaces() if where == "cuda" else None)
        if est.get("unmeasured"):
            measure_later(est["unmeasured"])
        return est, None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


@st.cache_data(ttl=60, show_spinner=False)
def list_recorded() -> list[dict]:
    from experiments.core.recorded import list_recorded as listing

    return listing()


@st.cache_data(max_entries=64, show_spinner=False)
def load_recorded(record_id: str) -> dict:
    from experiments.core.recorded import load_recorded as load

    return load(record_id)


def safe_list_recorded() -> tuple[list[dict], str | None]:
    try:
        return list_recorded(), None
    except Exception as exc:  # noqa: BLE001
        return [], f"{type(exc).__name__}: {exc}"


def safe_load_recorded(record_id: str) -> tuple[dict | None, str | None]:
    try:
        return load_recorded(record_id), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


@st.cache_data(ttl=60, show_spinner=False)
def _find_recorded(cfg_items: tuple) -> dict | None:
    from experiments.core.recorded import find_recorded

    return find_recorded(dict(cfg_items))


def find_recorded(cfg) -> dict | None:
    """The recorded GPU result for this configuration (device and timing settings ignored), if shipped."""
    try:
        return _find_recorded(tuple(sorted(cfg.to_dict().items())))
    except Exception:  # noqa: BLE001 - recorded results are an extra; their absence is not an error
        return None
