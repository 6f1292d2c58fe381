"""A link value a page cannot use is said on the page (naming the parameter, the value and why), never clamped or
replaced without a word: a technique that does not exist, a world size the sandbox does not offer, a batch of 10^9
for Your model, a card's memory of -5 or "nan". Each page keeps the link's good values."""

from __future__ import annotations

import pytest

from tests.app.pages import open_page

CASES = [
    ("optimization", {"optimization_technique": "turbo"}, "optimization_technique"),
    ("multigpu", {"multigpu_world_size": "64"}, "multigpu_world_size"),
    ("multigpu", {"multigpu_strategy": "zero9"}, "multigpu_strategy"),
    ("yourmodel", {"ym_batch": "1000000000"}, "ym_batch"),
    ("yourmodel", {"ym_batch": "2.5"}, "ym_batch"),
    ("yourmodel", {"ym_card": "other", "ym_capacity": "-5"}, "ym_capacity"),
    ("yourmodel", {"ym_card": "other", "ym_capacity": "nan"}, "ym_capacity"),
    ("yourmodel", {"ym_card": "rtx-9090"}, "ym_card"),
    ("leaks", {"leaks_leak_steps": "500"}, "leaks_leak_steps"),
    ("leaks", {"leaks_leak_batch": "100"}, "leaks_leak_batch"),
    ("exercise1", {"ex1g_p_phase": "lunch"}, "ex1g_p_phase"),
    ("exercise3", {"ex3g_zero_grad": "yes"}, "ex3g_zero_grad"),
    ("yourmodel", {"ym_offload_activations": "maybe"}, "ym_offload_activations"),
]


@pytest.mark.parametrize("page,query,field", CASES, ids=[f"{p}-{f}-{list(q.values())[-1]}" for p, q, f in CASES])
def test_an_unusable_link_value_is_said_not_replaced_silently(page, query, field):
    at = open_page(page, query=query)
    assert not at.exception, at.exception
    said = [w.value for w in at.warning if field in w.value]
    assert len(said) == 1 and query[field] in said[0], [w.value for w in at.warning]


def test_a_good_value_of_the_same_link_is_kept():
    at = open_page("yourmodel", query={"ym_card": "other", "ym_capacity": "24"})
    assert not [w.value for w in at.warning if "ym_capacity" in w.value]
    assert at.number_input(key="ym_capacity").value == 24.0
    at = open_page("multigpu", query={"multigpu_world_size": "4", "multigpu_strategy": "zero9"})
    assert at.select_slider(key="multigpu_world_size").value == 4
    # A switch's value as sync writes it ("True") opens switched on, on both pages that keep switches in links.
    at = open_page("exercise3", query={"ex3g_zero_grad": "True"})
    assert not [w.value for w in at.warning if "ex3g_zero_grad" in w.value]
    assert at.checkbox(key="ex3g_zero_grad").value is True
    at = open_page("yourmodel", query={"ym_offload_activations": "True"})
    assert not [w.value for w in at.warning if "ym_offload_activations" in w.value]
    assert at.toggle(key="ym_offload_activations").value is True


def test_the_reason_is_said_in_the_pages_language():
    at = open_page("optimization", lang="zh", query={"optimization_technique": "turbo"})
    said = [w.value for w in at.warning if "optimization_technique" in w.value]
    assert len(said) == 1 and "不在可选值" in said[0] and "not one of" not in said[0], said
    at = open_page("yourmodel", lang="zh", query={"ym_batch": "0"})
    said = [w.value for w in at.warning if "ym_batch" in w.value]
    assert len(said) == 1 and "之间的整数" in said[0], said
