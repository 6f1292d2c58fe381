"""Every page opens in both languages without an exception, and shows translated text."""

from __future__ import annotations

import pytest

from app import backend, i18n
from app.features import recorded_view
from course import catalog, content
from experiments.core.recorded import list_recorded, load_recorded
from tests.app.pages import PAGES, open_expanders, open_page


def _errors_by_design(page: str, lang: str) -> list[str]:
    """What a page shows as an error on opening because its lesson is about it: a recorded allocator pattern that
    ran out of memory, in the allocator's words. A page opens on its allocator panel's first pattern and on the
    first of its recorded results in the browser below (in its order: lesson 1's preset first)."""
    patterns = content.meta(page).get("fragmentation") or []
    shown = [catalog.fragmentation_id(page, patterns[0]["id"])] if patterns else []
    mine = sorted((e for e in list_recorded() if e.get("lesson") == page), key=recorded_view.order)
    shown += [e["id"] for e in mine if recorded_view.group(e) == recorded_view.GROUPS[0][0]][:1]
    out = []
    for rid in shown:
        result = load_recorded(rid) or {}
        if result.get("kind") != "fragmentation" and "runs" not in result:
            continue
        out += [
            i18n.STRINGS["frag.oom"][lang == "zh"].format(allocator=i18n.STRINGS["frag.allocator." + a][lang == "zh"])
            for a, run in (result.get("runs") or {}).items()
            if run.get("oom")
        ]
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", PAGES)
def test_page_opens(page, lang):
    at = open_page(page, lang)
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == _errors_by_design(page, lang)
    assert at.title, "every page has a title"
    # the page's title is its name in the sidebar
    assert at.title[0].value == i18n.STRINGS["page." + page][lang == "zh"]
    texts = [m.value for m in at.markdown] + [b.label for b in at.button] + [t.value for t in at.title]
    leaked = [
        text
        for text in texts
        if text.startswith(
            (
                "page.",
                "field.",
                "opt.",
                "sandbox.",
                "jobs.",
                "term.",
                "expect.",
                "frag.",
                "rounds.",
                "estimate.",
                "metric_name.",
            )
        )
    ]
    assert not leaked, f"untranslated keys on {page}: {leaked}"


def test_language_from_url():
    at = open_page("monitoring", lang=None, query={"lang": "zh"})
    assert at.session_state["lang"] == "zh"
    assert any(b.label == "运行实验" for b in at.button)


def test_config_from_url():
    at = open_page("monitoring", query={"monitoring_batch": "256", "monitoring_precision": "amp_bf16"})
    assert at.select_slider(key="monitoring_batch").value == 256
    assert at.selectbox(key="monitoring_precision").value == "amp_bf16"


def test_bad_url_value_is_ignored():
    """A value the engine refuses falls back to the page's own (the lesson's preset, at this page's size)."""
    at = open_page("monitoring", query={"monitoring_batch": "banana", "monitoring_model": "resnet"})
    assert not at.exception and not at.error
    meta = content.meta("monitoring")
    preset = content.over_preset(meta, None, 1 if backend.gpu_worker() else content.cpu_scale(meta))
    assert at.selectbox(key="monitoring_model").value == preset["model"]
    assert at.select_slider(key="monitoring_batch").value == preset["batch"]


def test_reset_restores_the_preset():
    at = open_page("monitoring")
    preset = at.select_slider(key="monitoring_width").value
    at.select_slider(key="monitoring_width").set_value(64).run()
    assert at.select_slider(key="monitoring_width").value == 64
    at.button(key="monitoring.reset").click().run()
    assert at.select_slider(key="monitoring_width").value == preset


def test_home_page_shows_the_lesson_map_once_and_groups_the_recordings():
    """One map of the lessons (its links); GPU, CPU and data-parallel recordings each under their own heading, the
    distributed ones drawn per rank, never under "Recorded GPU runs"."""
    at = open_page(catalog.HOME, "en")
    assert not at.exception
    assert not [e.label for e in at.expander if e.label != "Recorded GPU runs" and len(e.selectbox)], (
        "closed: not computed"
    )
    opened_at_first = {e.label: e.proto.expanded for e in at.expander}
    at = open_expanders(at, ".open")
    links = [e for e in at.get("page_link")]
    assert len(links) == len(PAGES) - 1
    map_titles = [m.value for m in at.markdown if "Monitoring" in m.value and "Memory leaks" in m.value]
    assert not map_titles, "the lesson text repeats the map"
    entries = list_recorded()
    by_title = {e.label: e for e in at.expander}
    gpu, dist = by_title["Recorded GPU runs"], by_title[i18n.STRINGS["recorded.title_distributed"][0]]
    single_gpu = [
        e for e in entries if e.get("kind") != "distributed" and (e.get("device") or {}).get("type") == "cuda"
    ]
    distributed = [e for e in entries if e.get("kind") == "distributed"]
    assert single_gpu and distributed
    assert len(gpu.selectbox[0].options) == len(single_gpu)
    assert len(dist.selectbox[0].options) == len(distributed)
    assert opened_at_first[gpu.label] and not opened_at_first[dist.label]
    # drawn per rank (lesson 6's view), never as a single-device run
    assert any(m.label == "Peak of rank 0" for m in dist.metric), [m.label for m in dist.metric]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_home_page_names_the_control_group_whose_limit_decides_free_memory(monkeypatch, language):
    """A server in a 4 GiB systemd slice: Free now is the slice's, and the page says so; without one, no such line."""
    info = {"type": "cpu", "name": "CPU", "torch_version": "x", "total_bytes": 64 * 2**30, "free_bytes": 3 * 2**30}
    limited = dict(info, memory_limit={"group": "/system.slice/gml.service", "limit_bytes": 4 * 2**30})
    for shown, expected in ((limited, True), (info, False)):
        monkeypatch.setattr(backend, "safe_device_info", lambda shown=shown: (shown, None))
        monkeypatch.setattr(backend, "device_info_nowait", lambda shown=shown: shown)
        at = open_page(catalog.HOME, language)
        captions = [c.value for c in at.caption if "/system.slice/gml.service" in c.value]
        assert bool(captions) == expected
        if expected:
            assert "4.00 GiB" in captions[0]
