"""End-to-end: a real `streamlit run`, driven by Debian's chromium through Playwright.

Opens every page by deep link in both languages (screenshots to artifacts/screenshots/ with
GPU_MEMORY_LAB_SCREENSHOTS=1), then runs one small experiment and waits for its chart.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.app_server import command
from course import catalog

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "screenshots"
# Screenshots are for people to look at, not assertions: GPU_MEMORY_LAB_SCREENSHOTS=1 writes them.
WANT_SHOTS = os.environ.get("GPU_MEMORY_LAB_SCREENSHOTS") == "1"
PAGES = catalog.PAGE_IDS

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)
expect = playwright_api.expect


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    cmd = command(port)  # the benchmarks' launcher spells the command line once (benchmarks/app_server.py)
    log = open(ROOT / "artifacts" / "e2e-server.log", "w") if (ROOT / "artifacts").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("streamlit did not become healthy in 60 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        yield b
        b.close()


def _open(browser, url: str, width: int = 1500, height: int = 1800):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    expect(page.get_by_test_id("stMainBlockContainer").locator("h1").first).to_be_visible(timeout=60_000)
    return page


def _settle(page) -> None:
    """Wait until Streamlit finished the run (no 'running' indicator, no skeletons) and the charts drew."""
    expect(page.get_by_test_id("stSkeleton")).to_have_count(0, timeout=60_000)
    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=60_000)
    charts = page.locator(".vega-embed").filter(visible=True)  # charts in closed expanders stay hidden
    for i in range(charts.count()):
        expect(charts.nth(i).locator("canvas, svg").first).to_be_visible(timeout=30_000)


def test_deep_link_on_a_fresh_server(server, browser):
    """The first request the server ever gets is a deep link: main.py must still route it (not app/pages/)."""
    page = _open(browser, f"{server}/exercise2?lang=zh&exercise2_batch=64")
    _settle(page)
    expect(page.get_by_test_id("stSidebar").get_by_role("link", name="练习 2 · 让它装得下")).to_be_visible()
    # The graded challenge comes first; the free sandbox, which the link's settings fill, is the second tab.
    # On a fresh server the graded tab's first estimates wait for the estimate processes to start (torch's import).
    expect(page.get_by_role("button", name="运行并评分")).to_be_visible(timeout=90_000)
    page.get_by_role("tab", name="自由实验").click()
    expect(page.get_by_role("button", name="运行实验")).to_be_visible()
    assert "exercise2_batch=64" in page.url and "lang=zh" in page.url
    page.close()


def _shoot(page, path: Path) -> None:
    """Streamlit scrolls inside its main area, so grow the viewport to the content before a full-page shot."""
    if not WANT_SHOTS:
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = page.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": page.viewport_size["width"], "height": min(max(height, 900), 12000)})
    _settle(page)
    page.screenshot(path=str(path), full_page=True)


def test_run_experiment_shows_chart(server, browser):
    query = "lang=en&monitoring_layers=2&monitoring_width=64&monitoring_batch=8&monitoring_steps=2"
    page = _open(browser, f"{server}/monitoring?{query}")
    _settle(page)
    page.get_by_role("button", name="Run experiment").click()
    results = page.locator(".st-key-monitoring-results")
    expect(results.locator(".vega-embed").first).to_be_visible(timeout=180_000)
    expect(results.get_by_text("Memory per phase")).to_be_visible()
    expect(results.get_by_role("button", name="Download phases (CSV)")).to_be_visible()
    _settle(page)
    _shoot(page, SHOTS / "monitoring.result.en.png")
    page.close()


# What a projector shows wrong first: a metric cut to "191.…", a chart squeezed to nothing, columns drawn over
# each other, the page under the sidebar.
_LAYOUT_FAULTS = """() => {
  const bad = [];
  // A collapsed expander keeps its body laid out, marked inert: it is not on the screen.
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && !el.closest('[inert]'); };
  document.querySelectorAll('[data-testid=stMetricValue]').forEach(el => {
    if (shown(el) && el.scrollWidth > el.clientWidth + 1) bad.push('metric cut: ' + el.innerText); });
  document.querySelectorAll('[data-testid=stMetricLabel]').forEach(el => {
    if (shown(el) && el.scrollWidth > el.clientWidth + 1) bad.push('metric label cut: ' + el.innerText); });
  document.querySelectorAll('.vega-embed').forEach(el => {
    if (!shown(el)) return;
    const c = el.querySelector('canvas, svg');
    if (!c || c.getBoundingClientRect().width < 120 || c.getBoundingClientRect().height < 60)
      bad.push('chart without room: ' + (c ? Math.round(c.getBoundingClientRect().width) : 0) + ' px'); });
  document.querySelectorAll('[data-testid=stHorizontalBlock]').forEach(block => {
    const cols = [...block.children].filter(shown).map(c => c.getBoundingClientRect());
    for (let i = 1; i < cols.length; i++) {
      const a = cols[i - 1], b = cols[i];
      if (b.left < a.right - 1 && b.top < a.bottom - 1 && a.top < b.bottom - 1) bad.push('columns overlap');
    } });
  document.querySelectorAll('[data-testid=stColumn] table, [data-testid=stColumn] [data-testid=stDataFrame], '
      + '[data-testid=stColumn] .vega-embed, [data-testid=stColumn] [data-testid=stMetric]').forEach(el => {
    const col = el.closest('[data-testid=stColumn]');
    if (shown(el) && el.getBoundingClientRect().right > col.getBoundingClientRect().right + 2)
      bad.push('wider than its column: ' + el.tagName.toLowerCase() + ' ' + (el.getAttribute('data-testid') || '')); });
  const side = document.querySelector('[data-testid=stSidebar]');
  const main = document.querySelector('[data-testid=stMainBlockContainer]');
  if (side && main && shown(side) && main.getBoundingClientRect().left < side.getBoundingClientRect().right - 1)
    bad.push('page under the sidebar');
  // Lesson code wraps; raw tool output in an expander (memory_summary's table) may scroll sideways instead.
  document.querySelectorAll('[data-testid=stMarkdownContainer] pre').forEach(el => {
    if (shown(el) && !el.closest('details') && el.scrollWidth > el.clientWidth + 1)
      bad.push('code cut: ' + el.textContent.slice(0, 40)); });
  return bad;
}"""


# Vega draws on a canvas: what it writes (axis labels, legend entries) is recorded as drawn, with its box on the
# canvas, so that the check can tell a label Vega cut ("…") or drew over another. A full redraw clears the canvas
# first and starts a new record; a resize blanks the canvas without a clearRect, so each text also notes the canvas
# size it was drawn at, and what was drawn at another size is no longer on the screen.
CANVAS_SPY = """(() => {
  const P = CanvasRenderingContext2D.prototype, fill = P.fillText, clear = P.clearRect;
  P.clearRect = function (...a) { this.canvas.__texts = []; return clear.apply(this, a); };
  P.fillText = function (text, x, y, ...rest) {
    const m = this.getTransform(), w = this.measureText(String(text)).width;
    const px = parseFloat((this.font.match(/([0-9.]+)px/) || [0, 10])[1]);
    const x0 = this.textAlign === 'center' ? x - w / 2 : (this.textAlign === 'right' || this.textAlign === 'end') ? x - w : x;
    const y0 = this.textBaseline === 'top' ? y : this.textBaseline === 'middle' ? y - px / 2 : y - px * 0.8;
    const pt = (u, v) => [m.a * u + m.c * v + m.e, m.b * u + m.d * v + m.f];
    const box = [pt(x0, y0), pt(x0 + w, y0), pt(x0 + w, y0 + px), pt(x0, y0 + px)];
    (this.canvas.__texts = this.canvas.__texts || []).push(
      {text: String(text), px: px * Math.hypot(m.a, m.b) / (window.devicePixelRatio || 1), box,
       size: this.canvas.width + 'x' + this.canvas.height});
    return fill.call(this, text, x, y, ...rest);
  };
})();"""

# What a projector shows cut or unreadable: a selectbox value or multiselect chip, a legend entry or an axis label Vega cut to "…",
# axis labels drawn over each other or smaller than 12 px, a table whose columns scroll out of view.
_PROJECTOR_FAULTS = """() => {
  const bad = [];
  // A collapsed expander keeps its body laid out, marked inert: it is not on the screen.
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 && !el.closest('[inert]'); };
  const drawn = c => (c.__texts || []).filter(x => x.size === c.width + 'x' + c.height);
  document.querySelectorAll('[data-testid=stSelectbox] input, [data-testid=stMultiSelect] input').forEach(el => {
    if (shown(el) && el.value && el.scrollWidth > el.clientWidth + 1) bad.push('selectbox value cut: ' + el.value); });
  document.querySelectorAll('[data-testid=stMultiSelect] [data-tag] > span[title]').forEach(el => {
    if (shown(el) && el.innerText && el.scrollWidth > el.clientWidth + 1) bad.push('chip cut: ' + el.innerText); });
  const overlap = (p, q) => {  // two convex quadrilaterals, by separating axes; touching is not overlapping
    for (const poly of [p, q]) for (let i = 0; i < 4; i++) {
      const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % 4], nx = y2 - y1, ny = x1 - x2;
      const proj = r => r.map(([x, y]) => nx * x + ny * y), a = proj(p), b = proj(q), len = Math.hypot(nx, ny) || 1;
      if (Math.max(...a) - Math.min(...b) < 1.5 * len || Math.max(...b) - Math.min(...a) < 1.5 * len) return false;
    }
    return true; };
  // Labels Vega thinned out (labelOverlap) stay in the SVG with opacity 0: not drawn, not checked.
  const svgTexts = svg => [...svg.querySelectorAll('text')].filter(el => el.textContent.trim()
      && getComputedStyle(el).opacity !== '0' && el.getAttribute('opacity') !== '0').map(el => {
    const b = el.getBBox(), m = el.getScreenCTM(), pt = (u, v) => [m.a * u + m.c * v + m.e, m.b * u + m.d * v + m.f];
    return {text: el.textContent, px: parseFloat(getComputedStyle(el).fontSize) * Math.hypot(m.a, m.b),
      box: [pt(b.x, b.y), pt(b.x + b.width, b.y), pt(b.x + b.width, b.y + b.height), pt(b.x, b.y + b.height)]}; });
  document.querySelectorAll('.vega-embed canvas, .vega-embed svg.marks').forEach(c => {
    if (!shown(c)) return;
    const texts = (c.tagName === 'CANVAS' ? drawn(c) : svgTexts(c)).filter(x => x.text.trim());
    // A legend entry or label drawn past the chart's edge is cut there without a "…" ("● ra"): on the screen, every
    // text must lie inside both the chart's canvas and the frame that shows it.
    const r = c.getBoundingClientRect(), frame = c.closest('.vega-embed').getBoundingClientRect();
    const screen = c.tagName === 'CANVAS' ? ([x, y]) => [r.left + x * r.width / c.width, r.top + y * r.height / c.height]
      : p => p;
    const inside = {left: Math.max(r.left, frame.left) - 4, right: Math.min(r.right, frame.right) + 4,
      top: Math.max(r.top, frame.top) - 4, bottom: Math.min(r.bottom, frame.bottom) + 4};
    texts.forEach(x => {
      const xs = x.box.map(screen).map(p => p[0]), ys = x.box.map(screen).map(p => p[1]);
      if (x.text.includes('…')) bad.push('chart text cut: ' + x.text);
      else if (Math.min(...xs) < inside.left || Math.max(...xs) > inside.right || Math.min(...ys) < inside.top
          || Math.max(...ys) > inside.bottom) bad.push('chart text cut: ' + x.text + ' (past the edge)');
      if (x.px < 11.5) bad.push('chart text under 12 px: ' + x.text + ' (' + x.px.toFixed(1) + ' px)'); });
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++)
      if (overlap(texts[i].box, texts[j].box)) bad.push('chart texts overlap: ' + texts[i].text + ' / ' + texts[j].text);
  });
  // A wide table may scroll sideways, but the columns that matter come first: its first two column headers, as the
  // grid draws them on its canvas, must be whole inside the visible frame.
  document.querySelectorAll('[data-testid=stDataFrame]').forEach(el => {
    const s = el.querySelector('.dvn-scroller'), canvases = [...el.querySelectorAll('canvas')];
    if (!shown(el) || !s || !canvases.length || s.scrollWidth <= s.clientWidth + 1) return;
    const right = Math.min(s.clientWidth, ...canvases.map(c => c.getBoundingClientRect().width));
    const seen = new Map();  // the header is drawn on a canvas of its own, again on each repaint
    canvases.flatMap(drawn).filter(x => Math.max(...x.box.map(p => p[1])) < 40)
      .forEach(x => seen.set(x.text + '@' + Math.round(x.box[0][0]), x));
    const heads = [...seen.values()].sort((a, b) => a.box[0][0] - b.box[0][0]).slice(0, 2);
    const cut = heads.filter(x => Math.max(...x.box.map(p => p[0])) > right + 1);
    if (heads.length < 2 || cut.length) bad.push('table column out of view: ' + heads.map(x => x.text).join(' | ')); });
  document.querySelectorAll('[data-testid=stMarkdownContainer] table, [data-testid=stTable] table').forEach(el => {
    const box = el.closest('[data-testid=stMarkdownContainer], [data-testid=stTable]');
    if (shown(el) && (el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > box.getBoundingClientRect().right + 2))
      bad.push('table column out of view: ' + el.innerText.slice(0, 30)); });
  return bad;
}"""


# Smallest first: a page is then widened, never narrowed, as its dataframes measure their column only when
# drawn, and what fits a column keeps fitting as the column grows.
SIZES = ((1024, 768), (1280, 720), (1440, 900))


def _after_resize(page, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    # Charts re-fit their container in a ResizeObserver callback: two frames, then they must be drawn again.
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    _settle(page)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_page_by_deep_link_reads_on_a_projector(server, browser, lang):
    """Every page opened by its deep link draws without an exception; then at each projector size with the
    sidebar open: no cut metric, code, selectbox value, legend entry or axis label, every chart has room, no chart
    labels overlap, no table column out of view, nothing overlaps; and no request leaves the app's server."""
    faults = {}
    # Every page is requested first, so the server draws them while the browser checks the ones before.
    pages = {}
    for page_id in PAGES:
        pages[page_id] = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
        pages[page_id].add_init_script(CANVAS_SPY)
        pages[page_id].on("request", lambda r, p=page_id: _offline_fault(r.url, p))
        # Eleven pages load at once on a shared machine: wait for the response, then for the title (below).
        pages[page_id].goto(f"{server}/{'' if page_id == catalog.HOME else page_id}?lang={lang}", wait_until="commit")
    for page_id, page in pages.items():
        expect(page.get_by_test_id("stMainBlockContainer").locator("h1").first).to_be_visible(timeout=60_000)
        _settle(page)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        if lang == "zh":
            expect(page.get_by_test_id("stSidebar")).to_contain_text("课程")
        for width, height in SIZES:
            _after_resize(page, width, height)
            expect(page.get_by_test_id("stSidebar")).to_be_visible()
            found = page.evaluate(_LAYOUT_FAULTS) + page.evaluate(_PROJECTOR_FAULTS)
            if found:
                faults[f"{page_id} at {width}x{height}"] = sorted(set(found))
            if WANT_SHOTS:
                page.screenshot(path=str(SHOTS / f"{page_id}.{width}.{lang}.png"))
        _shoot(page, SHOTS / f"{page_id}.{lang}.png")
        page.close()
    print("PROJECTOR FAULTS " + lang + " " + json.dumps(faults, ensure_ascii=False), flush=True)
    assert not faults, faults
    assert not OUTSIDE, f"requests that fail offline: {OUTSIDE}"


# Each fault the projector check must find, drawn the way the app's charts, pickers and lesson tables draw it: (what
# the page holds, the fault it must report). The page is built in the browser, so no server is needed.
_CHART = (
    "<div class='vega-embed' style='width:300px'><canvas width='300' height='100' style='width:300px;height:100px'>"
)
_FAULTY_PAGES = {
    "a legend entry past the chart's edge": (
        _CHART + "</canvas></div>",
        "ctx.font = '12px sans-serif'; ctx.fillText('● rank 0', 280, 50);",
        "chart text cut: ● rank 0",
    ),
    "a legend entry past an SVG chart's edge": (
        "<div class='vega-embed' style='width:300px'><svg class='marks' width='300' height='100'>"
        + "<text x='275' y='50' font-size='12'>● rank 0</text></svg></div>",
        "",
        "chart text cut: ● rank 0",
    ),
    "a label Vega cut": (
        _CHART + "</canvas></div>",
        "ctx.font = '12px sans-serif'; ctx.fillText('Check…', 10, 50);",
        "chart text cut: Check…",
    ),
    "two axis labels on each other": (
        _CHART + "</canvas></div>",
        "ctx.font = '12px sans-serif'; ctx.fillText('0', 100, 80); ctx.fillText('1,000', 102, 80);",
        "chart texts overlap: 0 / 1,000",
    ),
    "a small label": (
        _CHART + "</canvas></div>",
        "ctx.font = '9px sans-serif'; ctx.fillText('step', 100, 50);",
        "chart text under 12 px: step",
    ),
    "a long selectbox value": (
        "<div data-testid='stSelectbox'><input style='width:80px' value='Gradient accumulation (4 micro-batches)'></div>",
        "",
        "selectbox value cut: Gradient accumulation (4 micro-batches)",
    ),
    "a long multiselect chip": (
        "<div data-testid='stMultiSelect'><span data-tag><span title='append_loss_after_backward' style='width:80px;"
        + "display:inline-block;overflow:hidden;white-space:nowrap;text-overflow:ellipsis'>append_loss_after_backward"
        + "</span></span></div>",
        "",
        "chip cut: append_loss_after_backward",
    ),
    "a lesson table wider than the text": (
        "<div data-testid='stMarkdownContainer' style='width:200px'><table style='display:block;overflow:auto'><tr>"
        + "<td style='white-space:nowrap'>strategy ZeRO paper (mixed) this sandbox (fp32)</td></tr></table></div>",
        "",
        "table column out of view: strategy ZeRO paper (mixed)",
    ),
}


@pytest.mark.parametrize("case", list(_FAULTY_PAGES))
def test_the_projector_check_finds_each_fault(browser, case):
    """The check fails a page on each fault it names (a check that finds nothing proves nothing), and finds nothing
    on the same elements drawn to fit."""
    html, draw, fault = _FAULTY_PAGES[case]
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.set_content("<body style='margin:20px'>" + html + "</body>")
    page.evaluate(CANVAS_SPY)
    fitting = "ctx.font = '12px sans-serif'; ctx.fillText('rank 0', 10, 50); ctx.fillText('1,000', 10, 80);"
    script = "() => { const c = document.querySelector('canvas'); if (!c) return;"
    script += " const ctx = c.getContext('2d'); ctx.clearRect(0, 0, 300, 100); "
    page.evaluate(script + draw + "}")
    found = page.evaluate(_PROJECTOR_FAULTS)
    assert any(f.startswith(fault) for f in found), found
    # The same body in a collapsed expander (Streamlit keeps it laid out there, inert) is not on the screen.
    page.evaluate("() => document.body.firstElementChild.setAttribute('inert', '')")
    assert page.evaluate(_PROJECTOR_FAULTS) == []
    page.evaluate("() => document.body.firstElementChild.removeAttribute('inert')")
    if "canvas" in html:
        # What a resize blanked is no longer on the screen: a canvas drawn at another size reports nothing.
        page.evaluate("() => { document.querySelector('canvas').width = 301; }")
        assert page.evaluate(_PROJECTOR_FAULTS) == []
        page.evaluate("() => { document.querySelector('canvas').width = 300; }")
        page.evaluate(script + fitting + "}")
        assert page.evaluate(_PROJECTOR_FAULTS) == []
    page.close()


OUTSIDE: list[str] = []


def _offline_fault(url: str, page_id: str) -> None:
    """A classroom may be offline: every request goes to the app's own server."""
    if not url.startswith(("http://127.0.0.1", "data:", "blob:", "about:")):
        OUTSIDE.append(f"{page_id}: {url}")
