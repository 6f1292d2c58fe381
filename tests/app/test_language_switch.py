"""Switching the language keeps the experiment: every choice widget keeps its value and its URL parameter, and is
drawn with the new language's labels (a keyed widget keeps its identity across a label change, so without a
fresh value the browser would keep showing, and sending back, the old language's label)."""

from __future__ import annotations

from app.i18n import STRINGS
from tests.app.pages import open_page

NS = "multigpu"


def _switch(at, lang: str):
    at.radio(key="lang_choice").set_value(lang).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _label(key: str, lang: str) -> str:
    en, zh = STRINGS[key]
    return zh if lang == "zh" else en


def _shown(widget) -> str:
    """The label the browser draws: the value the server last sent, else the option at the default index."""
    proto = widget.proto
    return proto.raw_value if proto.set_value else proto.options[proto.default]


def test_lesson_6_keeps_strategy_batch_mode_and_the_model_across_both_switches():
    at = open_page(NS, "en")
    at.selectbox(key=f"{NS}_strategy").set_value("fsdp2_zero3").run()
    at.radio(key=f"{NS}_batch_mode").set_value("global").run()
    at.selectbox(key=f"{NS}_model").set_value("cnn").run()
    before = dict(at.query_params)
    assert before[f"{NS}_strategy"] == "fsdp2_zero3" and before[f"{NS}_batch_mode"] == "global"
    for lang in ("zh", "en"):
        _switch(at, lang)
        assert at.selectbox(key=f"{NS}_strategy").value == "fsdp2_zero3"
        assert at.radio(key=f"{NS}_batch_mode").value == "global"
        assert at.selectbox(key=f"{NS}_model").value == "cnn"
        after = {k: v for k, v in at.query_params.items() if k != "lang"}
        assert after == {k: v for k, v in before.items() if k != "lang"}
        # drawn with this language's labels, never the previous one's
        assert _shown(at.selectbox(key=f"{NS}_strategy")) == _label("multigpu.opt.fsdp2_zero3", lang)
        assert _shown(at.selectbox(key=f"{NS}_model")) == _label("opt.model.cnn", lang)


def test_the_language_is_a_plain_key_that_only_the_radio_s_callback_changes():
    """Streamlit may drop a widget's state (a page change under load, a stale-widget cleanup), and a radio recreated
    without it shows its first option, Chinese: the language lives in a plain session key, which no cleanup drops,
    and the radio's own state is set from it on every run."""
    at = open_page("monitoring", "en")
    state = at.session_state._state._state  # AppTest exposes no public way to ask which keys belong to widgets
    assert state._key_id_mapper.get_id_from_key("lang") is None
    assert state._key_id_mapper.get_id_from_key("lang_choice") is not None
    english = [m.value for m in at.markdown]
    at.session_state["lang_choice"] = "zh"  # a stale or default value that no click sent: ignored
    at.run()
    assert at.session_state["lang"] == "en" and at.radio(key="lang_choice").value == "en"
    assert [m.value for m in at.markdown] == english
    _switch(at, "zh")
    assert at.session_state["lang"] == "zh" and at.query_params["lang"] in ("zh", ["zh"])
    assert [m.value for m in at.markdown] != english


def test_your_model_keeps_model_size_levers_and_card_across_both_switches():
    ns = "ym"
    at = open_page("yourmodel", "en")
    at.radio(key=f"{ns}_size").set_value("tiny").run()
    at.number_input(key=f"{ns}_batch").set_value(3).run()
    at.selectbox(key=f"{ns}_optimizer_impl").set_value("foreach").run()
    at.selectbox(key=f"{ns}_card").set_value("t4-16gb").run()
    before = {k: v for k, v in at.query_params.items() if k != "lang"}
    assert before[f"{ns}_size"] == "tiny" and before[f"{ns}_batch"] == "3" and before[f"{ns}_card"] == "t4-16gb"
    for lang in ("zh", "en"):
        _switch(at, lang)
        assert at.radio(key=f"{ns}_source").value == "preset" and at.radio(key=f"{ns}_size").value == "tiny"
        assert at.number_input(key=f"{ns}_batch").value == 3
        assert at.selectbox(key=f"{ns}_optimizer_impl").value == "foreach"
        assert at.selectbox(key=f"{ns}_card").value == "t4-16gb"
        assert {k: v for k, v in at.query_params.items() if k != "lang"} == before
        assert _shown(at.radio(key=f"{ns}_size")) == _label("ym.size.tiny", lang)


def test_exercise_1_keeps_the_graded_model_and_the_predicted_phase_across_both_switches():
    ns = "ex1g"
    at = open_page("exercise1", "en")
    at.selectbox(key=f"{ns}_optimizer").set_value("sgd").run()
    at.selectbox(key=f"{ns}_p_phase").set_value("backward").run()
    for lang in ("zh", "en"):
        _switch(at, lang)
        assert at.selectbox(key=f"{ns}_optimizer").value == "sgd"
        assert at.selectbox(key=f"{ns}_p_phase").value == "backward"
        assert _shown(at.selectbox(key=f"{ns}_optimizer")) == _label("opt.optimizer.sgd", lang)


def test_the_default_language_is_english_and_a_link_or_the_radio_changes_it():
    """No ?lang= and a browser that names no Chinese locale: English, in the session, the radio, the URL and the
    navigation; ?lang=zh opens in Chinese; the plain helper outside a session answers in English."""
    from app.i18n import lang, t

    at = open_page("home", lang=None)
    assert at.session_state["lang"] == "en" and at.radio(key="lang_choice").value == "en"
    assert at.query_params["lang"] == "en"
    zh = open_page("home", lang=None, query={"lang": "zh"})
    assert zh.session_state["lang"] == "zh" and zh.radio(key="lang_choice").value == "zh"
    assert lang() == "en" and t("nav.lessons") == "Lessons"


def test_a_links_unusable_language_is_said_not_silently_replaced():
    at = open_page("home", lang=None, query={"lang": "fr"})
    assert at.session_state["lang"] == "en" and at.query_params["lang"] == "en"
    assert any("“fr”" in w.value and "lang" in w.value and "zh, en" in w.value for w in at.warning), at.warning
    assert not [w for w in open_page("home", lang=None, query={"lang": "zh"}).warning if "lang" in w.value]
