"""How soon a learner sees the first page after the server starts (CPU machine, docs/cpu-speed.md).

    python benchmarks/first_page.py --runs 3

Starts `streamlit run app/main.py` fresh each time, opens a lesson page in headless Chromium as soon as the port
answers, and reports: seconds from the server's start to the port answering, from the request to the lesson's
title drawn, whether the sidebar said the worker was still starting, and from the request to the device line.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def once(browser) -> dict:
    port = _port()
    t0 = time.monotonic()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "streamlit"),
            "run",
            "app/main.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.05)
        listening = time.monotonic() - t0
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        t1 = time.monotonic()
        page.goto(f"http://127.0.0.1:{port}/monitoring?lang=en")
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
    finally:
        server.terminate()
        server.wait(timeout=20)


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
