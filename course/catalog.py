"""Which pages the course has, in which order. Neither torch nor Streamlit, so the router
(app/main.py), the lesson readers (course/content.py) and the recording scripts can read
it. LESSON_IDS: the lessons whose runs lessons/<id>/meta.json describes and
benchmarks/record_results.py records; PAGES: every page the router registers, with its icon."""

from __future__ import annotations

LESSON_IDS = (
    "home",
    "monitoring",
    "analysis",
    "optimization",
    "leaks",
    "compare",
    "exercise1",
    "exercise2",
    "exercise3",
)


PAGES = (
    ("home", ":material/home:"),
    ("monitoring", ":material/monitoring:"),
    ("analysis", ":material/query_stats:"),
    ("optimization", ":material/speed:"),
    ("leaks", ":material/water_drop:"),
    ("compare", ":material/compare_arrows:"),
    ("multigpu", ":material/device_hub:"),
    ("exercise1", ":material/edit_note:"),
    ("exercise2", ":material/edit_note:"),
    ("exercise3", ":material/edit_note:"),
)
