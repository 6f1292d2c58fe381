"""How long a learner waits on a CPU, measured in a real browser against a real `streamlit run` (issue 17's goals).

    python benchmarks/cpu_speed.py --rounds 5 --out docs/cpu-speed.json

Each action is timed in the page, from the click on its button to the DOM change that shows its result, in
`--rounds` rounds, each in a fresh browser context (a new learner). A first Run uses a configuration this server has
not run yet (the round's seed, steps or choice goes into the URL, which the pages restore their widgets from); the
cached action repeats a configuration already run. Compare's "Run all" and exercise 3, whose jobs no URL changes,
get a server of their own each round. Every server is warmed first (one page opened until its Run button is drawn,
the worker has started, and the server's processes are idle: see warm_up), not counted. The machine's load average is printed before and after: a loaded machine
measures the load, so quote only a run on idle cores. `--only REGEX` times a subset of the actions.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import app_server
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator, Page, async_playwright

ROOT = app_server.ROOT
sys.path.insert(0, str(ROOT))
from course import catalog  # noqa: E402
from course.grading import ex2, ex3  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
# Issue 17's goals, seconds from the click to the result.
GOALS = {"first_run": 3.0, "cached": 0.5, "compare": 10.0, "multigpu": 10.0, "grading": 10.0}
# Charts a learner sees on the page, not those folded away in an expander (recordings).
LOOSE_CHARTS = '[data-testid="stMain"] .vega-embed:not([data-testid="stExpander"] .vega-embed)'
RUNNING = '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stStatusWidgetRunningManIcon"]'
CJK = re.compile(r"[\u4e00-\u9fff]")
SEED0 = 1000  # first-run seeds: SEED0 + 100 * page + round, none of them a preset's


def key_class(key: str) -> str:
    """The CSS class Streamlit gives a keyed element (its frontend replaces what a class name cannot hold)."""
    return ".st-key-" + re.sub(r"[^a-zA-Z0-9_-]", "-", key.strip())


def _strings() -> dict[str, str]:
    """The app's English strings (chrome, then each lesson's), read as data: the benchmark finds what the page says."""
    found: dict[str, str] = {}
    for path in [ROOT / "app/i18n/strings.json", *sorted((ROOT / "lessons").glob("*/strings.json"))]:
        for k, v in json.loads(path.read_text(encoding="utf-8")).items():
            found.setdefault(k, v.get("en") or k)
    return found


EN = _strings()


def template(key: str) -> re.Pattern:
    """A string with {placeholders} as a pattern that matches it filled in."""
    parts = re.split(r"\{[^}]*\}", EN[key])
    return re.compile("^" + ".+".join(re.escape(p) for p in parts) + "$")


def _meta(lesson: str) -> dict:
    return json.loads((ROOT / "lessons" / lesson / "meta.json").read_text(encoding="utf-8"))


def sandbox_pages() -> list[str]:
    """Every lesson page whose view draws the experiment sandbox (app/ui/sandbox.py) with its preset."""
    views = [ROOT / "app/views" / f"{page}.py" for page in catalog.PAGE_IDS]
    return [v.stem for v in views if v.exists() and re.search(rf'sandbox\.render\("{v.stem}"', v.read_text("utf-8"))]


@dataclass
class Action:
    name: str
    goal: str  # a key of GOALS
    url: Callable[[int], str]  # round -> path and query
    button: Callable[[Page], Locator]
    done: Callable[[int], str]  # loose charts before the click -> a JavaScript expression, true once the result shows
    # A page whose configuration no URL changes: each round on a server of its own, or its cache would answer.
    fresh_server: bool = False


def _keyed_button(key: str) -> Callable[[Page], Locator]:
    return lambda page: page.locator(key_class(key)).get_by_role("button").first


def _charts_in(selector: str) -> str:
    return f"document.querySelector({json.dumps(selector + ' .vega-embed')}) !== null"


def _charts(at_least: int) -> str:
    return f"document.querySelectorAll({json.dumps(LOOSE_CHARTS)}).length >= {at_least}"


def _more_charts(n: int) -> Callable[[int], str]:
    return lambda before: _charts(before + n)


def _heading(pattern: re.Pattern, charts: int = 0) -> Callable[[int], str]:
    # A Python pattern of escaped literals and ".+" reads the same in JavaScript.
    test = f"new RegExp({json.dumps(pattern.pattern)}).test(h.textContent.replace(/\\s+/g, ' ').trim())"
    return lambda before: f"[...document.querySelectorAll('h3')].some(h => {test}) && {_charts(before + charts)}"


def actions() -> list[Action]:
    out = []
    pages = sandbox_pages()
    for p, ns in enumerate(pages):
        out.append(
            Action(
                f"{ns}: Run (first)",
                "first_run",
                lambda i, ns=ns, p=p: f"/{ns}?lang=en&{ns}_seed={SEED0 + 100 * p + i}",
                _keyed_button(f"{ns}.run"),
                lambda _b, ns=ns: _charts_in(key_class(f"{ns}-results")),
            )
        )
    first = pages[0]
    out.append(
        Action(
            f"{first}: Run (cached)",
            "cached",
            lambda i: f"/{first}?lang=en&{first}_seed={SEED0}",  # the configuration its first round ran
            _keyed_button(f"{first}.run"),
            lambda _b: _charts_in(key_class(f"{first}-results")),
        )
    )
    if "leaks" in pages:  # the leak scenarios' own Run, over the preset scenarios, one more step each round
        out.append(
            Action(
                "leaks: scenarios Run (first)",
                "first_run",
                lambda i: f"/leaks?lang=en&leaks_leak_steps={11 + i}",
                _keyed_button("leaks_leak.run"),
                _more_charts(1),
            )
        )
    # Compare's default strategies are the lesson's: no URL changes them, so each round gets a server of its own.
    out.append(
        Action(
            "compare: Run all",
            "compare",
            lambda i: "/compare?lang=en",
            _keyed_button("compare.run"),
            _more_charts(2),  # its peak chart and its step-time chart
            fresh_server=True,  # its strategies are the lesson's, which no URL changes
        )
    )
    out.append(
        Action(
            "multigpu: Run on every rank",
            "multigpu",
            lambda i: f"/multigpu?lang=en&multigpu_seed={SEED0 + i}",
            _keyed_button("multigpu.run"),
            _heading(re.compile("^" + re.escape(EN["multigpu.result"]) + "$"), charts=1),
        )
    )
    ex1_meta = _meta("exercise1")
    layers = ex1_meta["preset"]["layers"]
    ex1_cats = ex1_meta["grading"]["categories"]
    predictions = "&".join(f"ex1g_p_{c}=1" for c in ex1_cats) + "&ex1g_p_phase=backward"
    out.append(
        Action(
            "exercise1: Run and grade",
            "grading",
            lambda i: f"/exercise1?lang=en&ex1g_layers={layers + 1 + i}&{predictions}",
            lambda page: page.get_by_role("button", name=EN["ex1.run"]).first,
            _heading(template("ex1.grade_title")),
        )
    )
    s2 = ex2.settings(_meta("exercise2"))
    grid = ex2.grid(s2, "cpu")[1:]  # the first combination is the page's default
    out.append(
        Action(
            "exercise2: Run and grade",
            "grading",
            lambda i: "/exercise2?lang=en&" + "&".join(f"ex2g_{f}={v}" for f, v in grid[i % len(grid)].items()),
            _keyed_button("ex2g.run"),
            _heading(template("ex2.score")),
        )
    )
    s3 = ex3.settings(_meta("exercise3"))
    subsets = [[f for j, f in enumerate(s3.fixes) if mask >> j & 1] for mask in range(1, 2 ** len(s3.fixes))]
    subsets = [f for f in subsets if not ex3.validate(s3, f)]
    solved = re.compile("^(" + re.escape(EN["ex3.solved"]) + "|" + re.escape(EN["ex3.not_yet"]) + ")$")
    out.append(
        Action(
            "exercise3: Run and grade",
            "grading",
            lambda i: "/exercise3?lang=en&" + "&".join(f"ex3g_{f}=true" for f in subsets[i % len(subsets)]),
            _keyed_button("ex3g.run"),
            _heading(solved),
            fresh_server=True,  # the course's own loop runs beside the learner's every time: the same job each round
        )
    )
    return out


# Timed in the page: from the click's pointerdown to the first DOM change after which the result shows (a mutation
# observer tests `DONE` on each). Neither the harness's own checks before it clicks (about 45 ms: the button scrolled
# into view and stable for two frames) nor the interval at which it asks count.
WATCH = """() => {
  const gml = window.__gml = {click: null, done: null};
  const check = () => { if (gml.click !== null && gml.done === null && (DONE)) gml.done = performance.now(); };
  document.addEventListener("pointerdown", () => { if (gml.click === null) gml.click = performance.now(); check(); },
                            {capture: true});
  new MutationObserver(check).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                      characterData: true});
}"""


async def _settled(page: Page, button: Locator, deadline: float) -> None:
    """Until the page has drawn itself: the button enabled and no script run for 0.5 s (a learner clicks a page
    that has stopped moving; polling fragments may still run later)."""
    quiet_since = None
    while time.monotonic() < deadline:
        if await button.is_enabled() and not await page.locator(RUNNING).count():
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 0.5:
                return
        else:
            quiet_since = None
        await asyncio.sleep(0.1)
    raise TimeoutError("the page did not settle (button disabled or script still running)")


async def one_round(browser, base: str, action: Action, i: int, timeout_s: float) -> dict:
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = await context.new_page()
    rec: dict = {"round": i, "url": action.url(i)}
    try:
        deadline = time.monotonic() + timeout_s
        await page.goto(base + rec["url"], timeout=timeout_s * 1000)
        button = action.button(page)
        await button.wait_for(state="visible", timeout=timeout_s * 1000)
        await _settled(page, button, deadline)
        before = await page.locator(LOOSE_CHARTS).count()
        await page.evaluate(WATCH.replace("DONE", action.done(before)))
        t0 = time.monotonic()
        await button.click()
        while time.monotonic() - t0 < timeout_s:
            seen = await page.evaluate("window.__gml")
            if seen["done"] is not None:
                rec.update(state="shown", seconds=round((seen["done"] - seen["click"]) / 1000, 3))
                rec["said_cached"] = await page.get_by_text(EN["result.cached"]).count() > 0
                return rec
            if await page.get_by_test_id("stException").count():
                rec.update(state="error", error=(await page.get_by_test_id("stException").first.inner_text())[:300])
                return rec
            await asyncio.sleep(0.1)
        main = await page.get_by_test_id("stMain").inner_text()
        # An English page drawn in Chinese never shows the English result it is waited for: said, not just a timeout.
        rec.update(state="timeout", last_text=main[-300:], chinese_on_english_page=bool(CJK.search(main)))
    except (PlaywrightError, TimeoutError) as e:
        rec.update(state="error", error=f"{type(e).__name__}: {e}"[:300])
    finally:
        await context.close()
    return rec


def summarize(action: Action, recs: list[dict]) -> dict:
    times = [r["seconds"] for r in recs if r["state"] == "shown"]
    goal = GOALS[action.goal]
    median = round(statistics.median(times), 2) if times else None
    return {
        "action": action.name,
        "median_s": median,
        "min_s": min(times) if times else None,
        "max_s": max(times) if times else None,
        "goal_s": goal,
        "ok": median is not None and len(times) == len(recs) and median <= goal,
        "shown": len(times),
        "rounds": len(recs),
        "timeouts": sum(r["state"] == "timeout" for r in recs),
        "errors": sum(r["state"] == "error" for r in recs),
        "said_cached": sum(bool(r.get("said_cached")) for r in recs),
        "runs": recs,
    }


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    procs = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            procs[int(d.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(procs[pid][1] for pid in tree if pid in procs)


async def _idle(server_pid: int, timeout_s: float, window_s: float = 1.0, busy: float = 0.05) -> None:
    """Until the server and its processes use less than `busy` of one core over `window_s` (or `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    before = _tree_cpu_s(server_pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(window_s)
        now = _tree_cpu_s(server_pid)
        if now - before < busy * window_s:
            return
        before = now


async def warm_up(browser, base: str, server_pid: int, timeout_s: float) -> float:
    """Seconds until the first page draws its Run button, the sidebar no longer says the worker is starting, and the
    server with its processes is idle: the worker has measured its device's rates and the processes it starts
    ahead (estimates, a data-parallel launcher) have imported torch. A teacher starts the server before class; a
    learner's first click should not be timed against the server's own start."""
    page = await browser.new_page()
    t0 = time.monotonic()
    try:
        await page.goto(f"{base}/{sandbox_pages()[0]}?lang=en", timeout=timeout_s * 1000)
        await page.get_by_role("button", name=EN["sandbox.run"]).wait_for(timeout=timeout_s * 1000)
        starting = page.get_by_test_id("stSidebar").get_by_text(EN["sidebar.starting"])
        await starting.wait_for(state="hidden", timeout=timeout_s * 1000)
    finally:
        await page.close()
    await _idle(server_pid, timeout_s)
    return round(time.monotonic() - t0, 2)


async def main_async(args) -> dict:
    load_before = os.getloadavg()
    chosen = [a for a in actions() if not args.only or re.search(args.only, a.name)]
    rows, warm = [], []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        with app_server.running() as (base, server):
            warm.append(await warm_up(browser, base, server.pid, args.timeout))
            print(f"warm-up: /{sandbox_pages()[0]} ready (Run button, server idle) in {warm[0]} s, not counted")
            print(HEADER, flush=True)
            for action in (a for a in chosen if not a.fresh_server):
                recs = [await one_round(browser, base, action, i, args.timeout) for i in range(args.rounds)]
                rows.append(summarize(action, recs))
                print(_line(rows[-1]), flush=True)
        for action in (a for a in chosen if a.fresh_server):
            recs = []
            for i in range(args.rounds):
                with app_server.running() as (base, server):
                    warm.append(await warm_up(browser, base, server.pid, args.timeout))
                    recs.append(await one_round(browser, base, action, i, args.timeout))
            rows.append(summarize(action, recs))
            print(_line(rows[-1]) + "  (a fresh, warmed server each round)", flush=True)
        await browser.close()
    return {
        "rounds": args.rounds,
        "timeout_s": args.timeout,
        "warmup_s": warm,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "torch": importlib.metadata.version("torch"),  # the worker runs this interpreter
        "actions": rows,
    }


HEADER = f"{'action':<34} {'median':>7} {'min':>7} {'max':>7} {'goal':>6}  ok"


def _line(row: dict) -> str:
    def f(x):
        return f"{x:7.2f}" if x is not None else "      —"

    extra = "" if row["shown"] == row["rounds"] else f"  ({row['timeouts']} timeout, {row['errors']} error)"
    if any(r.get("chinese_on_english_page") for r in row["runs"]):
        extra += "  (the English page showed Chinese)"
    ok = "yes" if row["ok"] else "NO"
    return f"{row['action']:<34} {f(row['median_s'])} {f(row['min_s'])} {f(row['max_s'])} {row['goal_s']:6.1f}  {ok}{extra}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per action, each in a fresh browser context")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one action may take before it is a timeout")
    ap.add_argument("--only", help="a regular expression: time only the actions whose name matches")
    ap.add_argument("--out", help="write the medians and every round here (JSON)")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 50:
        sys.exit(f"error: --rounds must be in [1, 50], got {args.rounds}")
    if not 1 <= args.timeout <= 1800:
        sys.exit(f"error: --timeout must be in [1, 1800] seconds, got {args.timeout}")
    print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    report = asyncio.run(main_async(args))
    print(f"load average before {report['loadavg_before']}, after {report['loadavg_after']}; torch {report['torch']}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
