"""A class on one server: N browser sessions press Run at once, through a real `streamlit run` and real browsers.

    python benchmarks/load_test.py --sessions 30 --out docs/load-test-cpu.json

Loopback only, bounded in sessions and time, stops by itself. Every session opens lesson 1 with its own
configuration in the URL (a third share one configuration, the rest differ), presses Run and waits for its
chart, as a class does: one in ten moves a slider first, one in ten switches to Chinese and back first (its run
must be of the configuration it had), one runs out of memory (a CPU budget), one presses Cancel, one client clears
every cache through the server's own protocol while the class runs (the app hides that menu; a hand-written client
does not need it), and the run worker (gml-worker, not the estimate processes) is killed while that session's run
runs, a run another session has joined: the job runs again in the worker that takes its place, and both are shown.
Reported: results shown / lost / errors, p50 and p95 time from Run to chart, queue positions the pages showed, the server's and the lab processes' memory before and after, and whether every peak the pages show equals
the same configuration run alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import app_server
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CJK = re.compile(r"[\u4e00-\u9fff]+")
BASE = {"layers": 2, "width": 64, "batch": 8, "steps": 2, "timing_steps": 2}
KILLED = dict(BASE, layers=8, width=512, batch=256, steps=20, timing_steps=100, seed=5)


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children that have exited, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _workers(server_pid: int, prefix: str = "gml-") -> list[int]:
    """The server's lab processes by the names they give themselves (experiments/jobs/process_names.py): "gml-worker"
    the run worker, "gml-estimate" the estimate processes, "gml-" all of them."""
    found = []
    for pid in _children(server_pid):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(prefix):
            found.append(pid)
    return found


async def _clear_every_cache(base: str) -> None:
    """What a hand-written client can send any Streamlit server: clear_cache (st.cache_data, st.cache_resource, and
    that client's own session), over a websocket of its own."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg()
    msg.clear_cache = True
    url = base.replace("http://", "ws://") + "/_stcore/stream"
    async with websockets.connect(url, subprotocols=["streamlit"]) as ws:
        await ws.send(msg.SerializeToString())
        await asyncio.sleep(1.0)


def plan(n: int) -> list[dict]:
    """Each session's role and configuration."""
    sessions = []
    for i in range(n):
        cfg = dict(BASE) if i % 3 == 0 else dict(BASE, width=64 + 8 * (i % 40), seed=i)
        role = "run"
        if i == 1:
            role, cfg = "oom", dict(BASE, width=256, batch=64, budget_mb=1, force=True)
        elif i == 2:  # long enough to be cancelled while it runs
            role, cfg = "cancel", dict(BASE, layers=8, width=512, batch=256, steps=20, timing_steps=100, seed=2)
        elif i == 4:
            role = "clear_cache"
        elif i % 10 == 3:
            role = "slider"  # moves the batch slider before Run: the run is of the page's configuration then
        elif i % 10 == 7:
            role = "language"  # to Chinese and back before Run: nothing of the configuration may change
        elif i == 5:  # killed while its own run runs: the run is run again by the worker that takes its place
            role, cfg = "kill_worker", KILLED
        elif i == 8:  # joined to the killed run: its learner gets the run again too
            role, cfg = "joined_kill", KILLED
        sessions.append({"i": i, "role": role, "config": cfg})
    return sessions


def _config_from(url: str) -> dict:
    """The sandbox's settings a page's URL holds (its monitoring_* parameters: those that differ from the defaults)."""
    from urllib.parse import parse_qsl, urlsplit

    return {k: v for k, v in parse_qsl(urlsplit(url).query) if k.startswith("monitoring_")}


def _url(base: str, cfg: dict) -> str:
    query = "&".join(f"monitoring_{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in cfg.items())
    return f"{base}/monitoring?lang=en&{query}"


async def _open(browser, base: str, s: dict, out: dict):
    """Open one learner's page (one after another: thirty pages drawn at once are the load generator's
    bottleneck on a small machine, not the server's)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    rec = {"i": s["i"], "role": s["role"], "config": s["config"], "positions": [], "state": "lost"}
    out[s["i"]] = rec
    t0 = time.monotonic()
    try:
        await page.goto(_url(base, s["config"]), timeout=180_000)
        await page.get_by_role("button", name="Run experiment").wait_for(timeout=180_000)
        rec["page_s"] = round(time.monotonic() - t0, 1)
    except Exception as e:  # noqa: BLE001 - a page that does not open is counted as an error
        rec.update(state="error", error=f"{type(e).__name__}: {e}"[:300])
    return context, page


async def _session(page, context, base: str, s: dict, server_pid: int, deadline: float, out: dict) -> None:
    rec = out[s["i"]]
    if rec["state"] == "error":
        await context.close()
        return
    try:
        run = page.get_by_role("button", name="Run experiment")
        if s["role"] == "slider":
            slider = page.get_by_role("slider", name=re.compile("^Batch", re.I)).first
            await slider.focus()
            await slider.press("ArrowRight")
            await page.wait_for_timeout(3000)
            rec["config"] = dict(rec["config"], batch=int(await slider.get_attribute("aria-valuetext")))
        if s["role"] == "language":
            before = _config_from(page.url)
            await page.get_by_text("中文", exact=True).first.click()
            await page.get_by_role("button", name="运行实验").wait_for(timeout=120_000)
            await page.get_by_text("English", exact=True).first.click()
            await run.wait_for(timeout=120_000)
            rec["switched_language"] = _config_from(page.url) == before
        t0 = time.monotonic()
        await run.click()
        if s["role"] == "clear_cache":
            await _clear_every_cache(base)
            rec["cleared_cache"] = True
        results = page.locator(".st-key-monitoring-results")
        killed = False
        while time.monotonic() < deadline:
            text = await page.locator("body").inner_text()
            main = await page.get_by_test_id("stMain").inner_text()
            if CJK.search(main) and "other_language" not in rec:  # an English page showing Chinese text
                rec["other_language"] = CJK.search(main).group(0) + " … " + main[-200:]
            for m in re.finditer(r"(\d+) ahead in the queue", text):
                rec["positions"].append(int(m.group(1)))
            cancel = page.get_by_role("button", name="Cancel", exact=True)
            if s["role"] == "cancel" and not rec.get("cancel_clicked") and await cancel.count():
                await cancel.first.click()
                rec["cancel_clicked"] = True
            if s["role"] == "kill_worker" and not killed and "Running…" in text:
                for pid in _workers(server_pid, "gml-worker"):
                    os.kill(pid, signal.SIGKILL)
                    rec.setdefault("killed", []).append(pid)
                killed = True
            shown = await results.inner_text() if await results.count() else ""
            if rec.get("cancel_clicked") and ("cancelled" in shown.lower() or "cancelled" in text.lower()):
                rec.update(state="cancelled", seconds=time.monotonic() - t0)
                break
            if "worker process died" in shown or "Something went wrong" in text:
                rec.update(state="error", seconds=time.monotonic() - t0, error=shown[-300:])
                break
            peak = re.search(r"Peak allocated\s*\n\s*([\d.,]+ (?:B|KiB|MiB|GiB))", shown)
            # The charts and the figures are drawn in one page run, but read here at any moment of it.
            if (peak and await results.locator(".vega-embed").count()) or "out of memory" in shown.lower():
                rec.update(state="shown", seconds=time.monotonic() - t0)
                rec["peak_text"] = peak.group(1) if peak else None
                rec["oom"] = "out of memory" in shown.lower()
                break
            rec["last_text"] = text[-400:]
            await asyncio.sleep(0.5)
    except Exception as e:  # noqa: BLE001 - a session that breaks is counted, not fatal
        rec.update(state="error", error=f"{type(e).__name__}: {e}"[:300])
    finally:
        await context.close()


def _alone_peaks(sessions: list[dict]) -> dict[str, str]:  # sessions: the records, with what each page ran
    """Each distinct configuration run alone in this process: the page's peak must show the same figure."""
    sys.path.insert(0, str(ROOT))
    from course.units import fmt_bytes
    from experiments.core.config import ExperimentConfig
    from experiments.measure.run import run_experiment

    peaks = {}
    for s in sessions:
        key = json.dumps(s["config"], sort_keys=True)
        if s["role"] != "oom" and key not in peaks:
            r = run_experiment(ExperimentConfig.from_dict(dict(s["config"], device="cpu")))
            peaks[key] = fmt_bytes(r["peak_bytes"])
    return peaks


async def main_async(args) -> dict:
    cpu: dict = {}
    with app_server.running() as (base, server):
        sessions = plan(args.sessions)
        out: dict[int, dict] = {}
        async with async_playwright() as p:
            browser = await p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
            )
            # Warm the server (first page, worker start) before measuring memory.
            warm = await browser.new_page()
            await warm.goto(base + "/monitoring?lang=en")
            await warm.get_by_role("button", name="Run experiment").wait_for(timeout=120_000)
            await warm.close()
            before = {
                "server_mib": _rss_mib(server.pid),
                "workers_mib": sum(_rss_mib(w) or 0 for w in _workers(server.pid)),
            }
            opened = [await _open(browser, base, s, out) for s in sessions]
            deadline = time.monotonic() + args.timeout
            # Every learner presses Run at the same moment.
            cpu0, t0 = _cpu_s(server.pid), time.monotonic()
            await asyncio.gather(
                *(
                    _session(page, context, base, s, server.pid, deadline, out)
                    for s, (context, page) in zip(sessions, opened, strict=True)
                )
            )
            # The server's own share of the machine while the class ran (the browsers share its cores here).
            cpu = {"server_cpu_s": round(_cpu_s(server.pid) - cpu0, 1), "wall_s": round(time.monotonic() - t0, 1)}
            await browser.close()
        after = {
            "server_mib": _rss_mib(server.pid),
            "workers_mib": sum(_rss_mib(w) or 0 for w in _workers(server.pid)),
            "workers": len(_workers(server.pid)),
        }
    records = [out[i] for i in sorted(out)]
    alone = _alone_peaks(records)
    mismatched = [
        r["i"]
        for r in records
        if r["state"] == "shown"
        and not r.get("oom")
        and r.get("peak_text") != alone.get(json.dumps(r["config"], sort_keys=True))
    ]
    times = sorted(r["seconds"] for r in records if r["state"] == "shown")
    summary = {
        "sessions": len(records),
        "shown": sum(r["state"] == "shown" for r in records),
        "cancelled": sum(r["state"] == "cancelled" for r in records),
        "errors": sum(r["state"] == "error" for r in records),
        "lost": sum(r["state"] == "lost" for r in records),
        "killed_run_shown_to_both": all(
            r["state"] == "shown" for r in records if r["role"] in ("kill_worker", "joined_kill")
        ),
        "oom_shown": any(r["role"] == "oom" and r.get("oom") for r in records),
        "p50_s": round(statistics.median(times), 1) if times else None,
        "p95_s": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1) if times else None,
        "page_open_s_median": statistics.median([r["page_s"] for r in records if "page_s" in r] or [0]),
        "positions_seen_by": sum(1 for r in records if r["positions"]),
        "pages_in_the_other_language": [r["i"] for r in records if r.get("other_language")],
        "language_switches_kept_the_configuration": [
            r.get("switched_language") for r in records if r["role"] == "language"
        ],
        "slider_moves": [r["config"].get("batch") for r in records if r["role"] == "slider"],
        "max_position": max((max(r["positions"]) for r in records if r["positions"]), default=0),
        "peaks_equal_alone": not mismatched,
        "peak_mismatches": mismatched,
        "memory_before": before,
        "memory_after": after,
        "cpu_cores": os.cpu_count(),
        **cpu,
    }
    return {"summary": summary, "sessions": records}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for all sessions together")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not 1 <= args.sessions <= 60:
        sys.exit("error: --sessions must be in [1, 60] (loopback load test, bounded)")
    report = asyncio.run(main_async(args))
    print(json.dumps(report["summary"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
