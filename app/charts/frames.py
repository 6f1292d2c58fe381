"""Engine results (plain dicts) -> pandas DataFrames with translated labels, ready for charts and tables."""

from __future__ import annotations

import pandas as pd

from app.backend import CATEGORIES, net_peak, paired
from app.charts.common import mib, phase_label, phase_name
from app.i18n import t
from course.units import MIB, fmt_bytes


def phases_frame(result: dict) -> pd.DataFrame:
    accum = int((result.get("config") or {}).get("accum") or 1)
    rows = []
    for i, p in enumerate(result.get("phases") or []):
        rows.append(
            {
                "order": i,
                "label": phase_label(p, accum),
                "step": p.get("step"),
                "micro": p.get("micro"),
                "phase": p.get("phase"),
                "allocated_mib": mib(p.get("allocated_bytes")),
                "reserved_mib": mib(p.get("reserved_bytes")),
                "peak_mib": mib(p.get("peak_bytes")),
                "ms": p.get("ms"),
            }
        )
    columns = ["order", "label", "step", "micro", "phase", "allocated_mib", "reserved_mib", "peak_mib", "ms"]
    return pd.DataFrame(rows, columns=columns)


def phases_display(df: pd.DataFrame) -> pd.DataFrame:
    """The phases table as learners read it: translated column names, no internal columns."""
    shown = df.drop(columns=["order", "label", "phase"]).assign(phase=df["phase"].map(phase_name))
    shown = shown[["step", "micro", "phase", "allocated_mib", "reserved_mib", "peak_mib", "ms"]].round(
        {"allocated_mib": 2, "reserved_mib": 2, "peak_mib": 2, "ms": 3}
    )
    return shown.rename(columns={c: t("col." + c) for c in shown.columns})


def memory_long(df: pd.DataFrame, with_reserved: bool) -> pd.DataFrame:
    series = ["peak_mib", "allocated_mib"] + (["reserved_mib"] if with_reserved else [])
    long = df.melt(id_vars=["order", "label", "ms"], value_vars=series, var_name="series", value_name="mib")
    long["series"] = long["series"].map(lambda s: t("series." + s.removesuffix("_mib")))
    return long.dropna(subset=["mib"])


def breakdown_frame(measured: dict | None, estimated: dict | None) -> pd.DataFrame:
    rows = []
    for source, cats in (("measured", measured), ("estimated", estimated)):
        for cat in CATEGORIES:
            value = (cats or {}).get(cat)
            if value:
                rows.append({"source": t("source." + source), "category": t("cat." + cat), "mib": value / MIB})
        for cat, value in (cats or {}).items():
            if cat not in CATEGORIES and value:
                rows.append({"source": t("source." + source), "category": cat, "mib": value / MIB})
    return pd.DataFrame(rows, columns=["source", "category", "mib"])


def step_time_frame(items: list[tuple[str, dict | None]]) -> pd.DataFrame:
    rows = []
    for label, step_ms in items:
        if step_ms and step_ms.get("median") is not None:
            rows.append(
                {"label": label, "median": step_ms["median"], "p10": step_ms.get("p10"), "p90": step_ms.get("p90")}
            )
    return pd.DataFrame(rows, columns=["label", "median", "p10", "p90"])


def leak_frame(results: list[tuple[str, dict]]) -> pd.DataFrame:
    rows = []
    for label, result in results:
        for point in result.get("per_step") or []:
            rows.append({"scenario": label, "step": point["step"], "mib": point["allocated_bytes"] / MIB})
    return pd.DataFrame(rows, columns=["scenario", "step", "mib"])


def leak_table(results: list[tuple[str, dict]], verdicts: dict | None = None) -> pd.DataFrame:
    """One row per scenario; bytes formatted in the page's units (a raw integer column hides a factor of 10)."""
    rows = []
    for label, result in results:
        per_step = result.get("per_step") or []
        row = {t("col.scenario"): label, t("col.growth_bytes_per_step"): fmt_bytes(result.get("growth_bytes_per_step"))}
        if verdicts is not None:
            verdict = verdicts.get(label)
            row[t("col.as_expected")] = "—" if verdict is None else ("✓" if verdict else "✗")
        row[t("col.first_mib")] = mib(per_step[0]["allocated_bytes"]) if per_step else None
        row[t("col.last_mib")] = mib(per_step[-1]["allocated_bytes"]) if per_step else None
        if result.get("gc_freed_bytes") is not None:  # results recorded before it was measured have none
            row[t("col.gc_freed")] = fmt_bytes(result["gc_freed_bytes"])
        rows.append(row)
    return pd.DataFrame(rows)


def compare_frame(items: list[tuple[str, dict]]) -> pd.DataFrame:
    rows = []
    for label, result in items:
        step_ms = result.get("step_ms") or {}
        oom = result.get("oom")
        rows.append(
            {
                "label": label,
                # Above the engine's pre-run baseline (CUDA/cuBLAS workspaces), as the estimate and claims count.
                "peak_mib": mib(net_peak(result)),
                "peak_abs_mib": mib(result.get("peak_bytes")),
                "median": step_ms.get("median"),
                "p10": step_ms.get("p10"),
                "p90": step_ms.get("p90"),
                "samples_per_s": result.get("samples_per_s"),
                "oom": bool(oom),
            }
        )
    columns = ["label", "peak_mib", "peak_abs_mib", "median", "p10", "p90", "samples_per_s", "oom"]
    return pd.DataFrame(rows, columns=columns)


def compare_display(df: pd.DataFrame) -> pd.DataFrame:
    shown = df.assign(oom=df["oom"].map(lambda v: t("yes") if v else t("no"))).round(
        {"peak_mib": 1, "peak_abs_mib": 1, "median": 2, "p10": 2, "p90": 2, "samples_per_s": 0}
    )
    return shown.rename(
        columns={
            "label": t("col.strategy"),
            "peak_mib": t("col.net_peak_mib"),
            "peak_abs_mib": t("col.abs_peak_mib"),
            "median": t("col.step_ms"),
            "p10": t("col.p10"),
            "p90": t("col.p90"),
            "samples_per_s": t("col.samples_per_s"),
            "oom": t("col.oom"),
        }
    )


def driver_frame(result: dict) -> pd.DataFrame | None:
    """The three views of 'used memory' after the run: driver (whole process), reserved, allocated."""
    driver = result.get("driver")
    if not driver or driver.get("total_bytes") is None or driver.get("free_bytes") is None:
        return None
    last = (result.get("phases") or [{}])[-1]
    rows = [{"view": t("driver.used"), "mib": (driver["total_bytes"] - driver["free_bytes"]) / MIB}]
    if last.get("reserved_bytes") is not None:
        rows.append({"view": t("driver.reserved"), "mib": last["reserved_bytes"] / MIB})
    if last.get("allocated_bytes") is not None:
        rows.append({"view": t("driver.allocated"), "mib": last["allocated_bytes"] / MIB})
    return pd.DataFrame(rows, columns=["view", "mib"])


def profile_frame(rows: list[dict], device_type: str) -> tuple[pd.DataFrame, str]:
    """Operator table sorted by self device memory (self CPU memory in CPU mode); returns (df, sort column)."""
    df = pd.DataFrame(rows)
    sort_key = "self_device_memory_bytes" if device_type == "cuda" else "self_cpu_memory_bytes"
    if df.empty:
        return df, sort_key
    if sort_key in df:
        df = df.sort_values(sort_key, ascending=False, key=lambda s: s.fillna(float("-inf")))
    # Device columns are all zeros without a GPU: hide them rather than show a column of meaningless zeros.
    keep = [c for c in df.columns if not df[c].isna().all() and (device_type == "cuda" or "device" not in c)]
    df = df[keep]
    return df.rename(columns={c: t("prof." + c, default=c) for c in df.columns}), t("prof." + sort_key, default=sort_key)


def fragmentation_frame(result: dict) -> pd.DataFrame:
    """Allocated and reserved after every allocation and free, per allocator setting (long form)."""
    rows = []
    for allocator, run in (result.get("runs") or {}).items():
        for p in run.get("points") or []:
            for series in ("allocated", "reserved"):
                rows.append({"allocator": t("frag.allocator." + allocator), "i": p["i"], "op": p["op"],
                             "series": t("frag.series." + series), "mib": p[f"{series}_bytes"] / MIB})
    return pd.DataFrame(rows, columns=["allocator", "i", "op", "series", "mib"])


def segments_frame(result: dict) -> pd.DataFrame:
    rows = []
    for allocator, run in (result.get("runs") or {}).items():
        for n, seg in enumerate((run.get("end") or {}).get("segments") or []):
            rows.append({t("frag.col.allocator"): t("frag.allocator." + allocator), t("frag.col.segment"): n + 1,
                         t("frag.col.size"): fmt_bytes(seg["total_bytes"]),
                         t("frag.col.in_use"): fmt_bytes(seg["allocated_bytes"]),
                         t("frag.col.free"): fmt_bytes(seg["total_bytes"] - seg["allocated_bytes"]),
                         t("frag.col.blocks"): seg.get("live_blocks")})
    return pd.DataFrame(rows)


def rounds_frame(result: dict, titles: dict[str, str]) -> pd.DataFrame:
    """One row per strategy and round: the median step time of that round."""
    rows = []
    for s in result.get("strategies") or []:
        for r, ms in enumerate(s.get("round_ms") or []):
            rows.append({"label": titles.get(s["id"], s["id"]), "round": r + 1, "ms": ms, "median": s["median_ms"]})
    return pd.DataFrame(rows, columns=["label", "round", "ms", "median"])


def paired_frame(result: dict, titles: dict[str, str], versus: str) -> pd.DataFrame:
    """One row per strategy (other than `versus`) and round: its time over `versus`'s in that round."""
    rows = []
    for s in result.get("strategies") or []:
        summary = None if s["id"] == versus else paired(result, s["id"], versus)
        for r, ratio in enumerate((summary or {}).get("ratios") or []):
            rows.append({"label": titles.get(s["id"], s["id"]), "round": r + 1, "ratio": ratio,
                         "median": summary["median"]})
    return pd.DataFrame(rows, columns=["label", "round", "ratio", "median"])
