"""The page tests' setup: jobs run in the worker's inline mode (a thread, no spawned process) to keep tests fast, and
every chart is checked against Vega-Lite's schema. Their helpers: tests/app/pages.py."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("GPU_MEMORY_LAB_INLINE", "1")

from app.ui import layout  # noqa: E402

layout.VALIDATE = True  # every chart a test draws is checked against Vega-Lite's schema, as the app skips it


@pytest.fixture(autouse=True)
def _worker_idle_after_each_test():
    """A test may end while its job still runs in the inline worker's thread; the next test in this process (an
    engine test, say) would share the process with that model: wait until the worker is idle."""
    yield
    from experiments.jobs import worker

    client, deadline = worker._shared, time.time() + 60
    while client is not None and client.queue_length() and time.time() < deadline:
        time.sleep(0.1)
