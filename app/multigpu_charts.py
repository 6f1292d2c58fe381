"""DataFrames and Altair charts of data-parallel results (lesson 6): per rank, and per strategy on one axis."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts import CATEGORY_COLORS, HEIGHT, MIB_FMT
from app.frames import CATEGORIES, phase_label
from app.i18n import t

MIB = 2**20
COLORS = {**CATEGORY_COLORS, "communication": "#17becf"}
ORDER = CATEGORIES + ("communication",)


def ranks_frame(result: dict) -> pd.DataFrame:
    """One row per rank, phase and series (allocated, peak, and reserved where the device has it)."""
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for rank in result.get("ranks") or []:
        base = rank.get("baseline_bytes") or 0
        for i, p in enumerate(rank.get("phases") or []):
            for series in ("allocated", "peak", "reserved"):
                value = p.get(f"{series}_bytes")
                if value is not None:
                    rows.append({"order": i, "label": phase_label(p, accum), "series": t("series." + series),
                                 "rank": t("multigpu.rank", rank=rank["rank"]), "mib": (value - base) / MIB})
    return pd.DataFrame(rows, columns=["order", "label", "series", "rank", "mib"])


def ranks_chart(df: pd.DataFrame) -> alt.Chart:
    order = list(dict.fromkeys(df.sort_values("order")["label"]))
    axis = alt.Axis(labelAngle=-60, labelLimit=140, labelOverlap=False, labelFontSize=10)
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("label:N", sort=order, title=t("axis.phase"), axis=axis),
        y=alt.Y("mib:Q", title=t("axis.mib")),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="top")),
        strokeDash=alt.StrokeDash("rank:N", title=None, legend=alt.Legend(orient="top")),
        tooltip=[alt.Tooltip("rank:N"), alt.Tooltip("label:N", title=t("axis.phase")),
                 alt.Tooltip("series:N", title=t("axis.series")),
                 alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
    ).properties(height=HEIGHT)


def rank_breakdowns(part: dict, result: dict) -> tuple[dict | None, dict | None]:
    """(device, host) categories at the peak of a rank (or of the result's rank 0). A GPU run with CPU offload that
    was recorded before host memory was counted apart has them summed into one: neither is shown then."""
    device, host = part.get("breakdown"), part.get("host_breakdown")
    if host is None and awaits_split({**result, "ranks": [part]}):
        return None, None
    # Every GPU rank keeps a few bytes on the host (Adam's step counters): a bar only when it is worth one.
    if host and sum(host.values()) < 0.01 * sum((device or {}).values()):
        host = None
    return device, host


def awaits_split(result: dict) -> bool:
    """A CPU-offload recording made before host memory was counted apart: its measured categories mean nothing."""
    ranks = result.get("ranks") or [result]
    return result.get("strategy") == "fsdp2_offload" and not any("host_breakdown" in r for r in ranks)


def estimated_split(result: dict) -> tuple[dict | None, dict | None]:
    """(device, host) categories of a CPU-offload rank by the estimate: the recorded estimate's device categories,
    and the rank's shards of the model states that the offload keeps on the host (experiments/sharding.py)."""
    from experiments.distributed import DistributedConfig
    from experiments.sharding import offload_host_categories

    est = result.get("estimate") or {}
    host = est.get("host_categories")
    if host is None and result.get("distributed"):
        host = offload_host_categories(DistributedConfig.from_dict(result["distributed"]))
    return est.get("categories"), host


def as_measured(result: dict) -> dict:
    """The result as the page's checks may read it: a breakdown that summed host and device memory is not one."""
    return {**result, "breakdown": None, "breakdown_steady": None} if awaits_split(result) else result


def categories_frame(items: list[tuple]) -> pd.DataFrame:
    """(label, device breakdown[, host breakdown]) -> label, memory, category, mib: one stacked bar per label.
    Host memory (CPU offload) gets a bar of its own: it is not in the device's peak, and adding it there would show
    offload saving nothing."""
    rows = []
    for label, cats, *rest in items:
        host = rest[0] if rest else None
        for memory, values, name in (("device", cats, label), ("host", host, t("multigpu.host_bar", label=label))):
            for cat in ORDER:
                value = (values or {}).get(cat)
                if value:
                    rows.append({"label": name, "memory": t("multigpu.memory." + memory), "category": t("cat." + cat),
                                 "mib": value / MIB})
    return pd.DataFrame(rows, columns=["label", "memory", "category", "mib"])


def categories_chart(df: pd.DataFrame) -> alt.Chart:
    """Horizontal stacked bars on one shared axis (strategies or ranks), categories in fixed colours; host memory
    bars are paler."""
    labels = list(dict.fromkeys(df["label"]))
    memory = [t("multigpu.memory.device"), t("multigpu.memory.host")]
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("label:N", sort=labels, title=None, axis=alt.Axis(labelLimit=220)),
        x=alt.X("sum(mib):Q", title=t("axis.mib"), stack="zero"),
        color=alt.Color("category:N", title=t("axis.category"),
                        scale=alt.Scale(domain=[t("cat." + c) for c in ORDER], range=[COLORS[c] for c in ORDER]),
                        legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
        opacity=alt.Opacity("memory:N", scale=alt.Scale(domain=memory, range=[1.0, 0.45]), title=None,
                            legend=alt.Legend(orient="bottom", labelLimit=400) if df["memory"].nunique() > 1 else None),
        tooltip=[alt.Tooltip("label:N", title=t("col.strategy")), alt.Tooltip("memory:N", title=t("multigpu.memory")),
                 alt.Tooltip("category:N", title=t("axis.category")),
                 alt.Tooltip("mib:Q", title=t("axis.mib"), format=MIB_FMT)],
    ).properties(height=alt.Step(34))
