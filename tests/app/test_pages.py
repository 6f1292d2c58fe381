"""Every page opens in both languages without an exception, and shows translated text."""

from __future__ import annotations

import pytest
from conftest import PAGES, open_page


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("page", PAGES)
def test_page_opens(page, lang):
    at = open_page(page, lang)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title, "every page has a title"
    texts = [m.value for m in at.markdown] + [b.label for b in at.button] + [t.value for t in at.title]
    leaked = [text for text in texts if text.startswith(("page.", "field.", "opt.", "sandbox.", "jobs.", "term.", "expect.",
                                                          "frag.", "rounds.", "estimate.", "metric_name."))]
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
    at = open_page("monitoring", query={"monitoring_batch": "banana", "monitoring_model": "resnet"})
    assert not at.exception
    assert at.selectbox(key="monitoring_model").value in ("mlp", "cnn", "transformer")


def test_reset_restores_the_preset():
    at = open_page("monitoring")
    preset = at.select_slider(key="monitoring_width").value
    at.select_slider(key="monitoring_width").set_value(64).run()
    assert at.select_slider(key="monitoring_width").value == 64
    at.button(key="monitoring.reset").click().run()
    assert at.select_slider(key="monitoring_width").value == preset
