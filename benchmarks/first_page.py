"""How soon a learner sees the first page after the server starts (CPU machine, docs/cpu-speed.md).

    python benchmarks/first_page.py --runs 3

Starts `streamlit run app/main.py` fresh each time, opens a lesson page in headless Chromium as soon as the server
is healthy, and reports: seconds from the server's start to /_stcore/health answering, from the request to the lesson's
title drawn, whether the sidebar said the worker was still starting, and from the request to the device line.
"""

from __future__ import annotations

import argparse
import statistics
import time

import app_server
from playwright.sync_api import sync_playwright


def once(browser) -> dict:
    t0 = time.monotonic()
    with app_server.running() as (base, _server):
        listening = time.monotonic() - t0
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        t1 = time.monotonic()
        page.goto(f"{base}/monitoring?lang=en")
        page.get_by_test_id("stMainBlockContainer").locator("h1").first.wait_for(timeout=60_000)
        title = time.monotonic() - t1
        starting = page.get_by_test_id("stSidebar").get_by_text("Starting").count() > 0
        page.get_by_test_id("stSidebar").get_by_text("CPU mode").wait_for(timeout=120_000)
        device = time.monotonic() - t1
        page.close()
    return {
        "listening_s": round(listening, 2),
        "title_s": round(title, 2),
        "said_starting": starting,
        "device_line_s": round(device, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        rows = [once(browser) for _ in range(max(1, min(args.runs, 10)))]
        browser.close()
    for row in rows:
        print(row)
    print({k: statistics.median(r[k] for r in rows) for k in ("listening_s", "title_s", "device_line_s")})


if __name__ == "__main__":
    main()
