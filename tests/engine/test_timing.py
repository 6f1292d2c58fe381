"""Interleaved timing rounds, compared round by round: the paired ratio, its spread and its verdict."""

from __future__ import annotations

import statistics

import pytest

from course import expectations, facts
from experiments.core import metrics, named_metrics
from experiments.core.config import ConfigError
from experiments.core.recorded import load_recorded
from experiments.measure.timing import time_rounds


def rounds_result(**round_ms) -> dict:
    return {
        "kind": "timing_rounds",
        "strategies": [
            {"id": sid, "round_ms": ms, "median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms)}
            for sid, ms in round_ms.items()
        ],
    }


def test_paired_ratio_is_taken_round_by_round():
    # Round 2 is slow for both (drift); the unpaired ranges overlap, yet b is slower in every round.
    r = rounds_result(a=[2.0, 3.0, 2.2, 2.4, 2.1], b=[2.2, 3.3, 2.3, 2.7, 2.2])
    p = metrics.paired(r, "b", "a")
    by_hand = [2.2 / 2.0, 3.3 / 3.0, 2.3 / 2.2, 2.7 / 2.4, 2.2 / 2.1]
    assert p["ratios"] == pytest.approx(by_hand)
    assert p["median"] == pytest.approx(sorted(by_hand)[2])
    assert (p["lo"], p["hi"]) == pytest.approx((min(by_hand), max(by_hand)))
    assert (p["rounds"], p["slower"], p["faster"], p["verdict"]) == (5, 5, 0, "slower")
    assert named_metrics.scalar("round_separation_pct", r, strategy="b", versus="a") < 0  # the ranges overlap
    # The other way round: the reciprocal ratios, faster in every round.
    q = metrics.paired(r, "a", "b")
    assert q["median"] == pytest.approx(1 / p["median"]) and q["verdict"] == "faster"


def test_verdict_needs_every_round_on_one_side_and_five_rounds():
    mixed = rounds_result(a=[1, 1, 1, 1, 1], b=[1.1, 0.9, 1.2, 1.3, 1.1])
    assert metrics.paired(mixed, "b", "a")["verdict"] == "unclear"
    assert (metrics.paired(mixed, "b", "a")["slower"], metrics.paired(mixed, "b", "a")["faster"]) == (4, 1)
    tie = rounds_result(a=[1, 1, 1, 1, 1], b=[1.1, 1.0, 1.2, 1.3, 1.1])
    assert metrics.paired(tie, "b", "a")["verdict"] == "unclear"  # a tied round is no evidence either way
    three = rounds_result(a=[1, 1, 1], b=[2, 2, 2])
    assert metrics.paired(three, "b", "a")["verdict"] == "too_few"
    assert metrics.VERDICT_MIN_ROUNDS == 5  # 2 / 2**5: one chance in 16 that equal strategies pass
    assert metrics.paired(rounds_result(a=[1, 1], b=[1, 1, 1]), "b", "a") is None
    assert metrics.paired(three, "b", "missing") is None


def test_recorded_compare_rounds_pair_amp_and_fused_adam_with_the_baseline():
    """The issue's case: over the recorded rounds' ranges AMP and fused Adam overlap the baseline, but AMP was
    slower and fused Adam faster in every one of the five rounds."""
    r = load_recorded("compare-rounds")
    amp, fused = metrics.paired(r, "amp_bf16", "baseline"), metrics.paired(r, "adam_fused", "baseline")
    assert (amp["verdict"], amp["slower"], amp["rounds"]) == ("slower", 5, 5)
    assert (fused["verdict"], fused["faster"], fused["rounds"]) == ("faster", 5, 5)
    rows = {s["id"]: s["round_ms"] for s in r["strategies"]}
    assert amp["ratios"] == pytest.approx([a / b for a, b in zip(rows["amp_bf16"], rows["baseline"], strict=True)])
    assert named_metrics.scalar("round_separation_pct", r, strategy="baseline", versus="adam_fused") < 0


def test_paired_verdict_check_and_its_errors():
    r = rounds_result(a=[1, 1, 1, 1, 1], b=[1.1, 1.2, 1.1, 1.3, 1.05])
    ok = expectations.evaluate_one(
        {"check": "paired_verdict", "run": "rounds", "strategy": "b", "versus": "a", "is": ["slower"]}, {"rounds": r}
    )
    assert ok["holds"] is True and ok["actual"] == "slower" and ok["paired"]["rounds"] == 5
    wrong = expectations.evaluate_one(
        {"check": "paired_verdict", "run": "rounds", "strategy": "a", "versus": "b", "is": ["slower"]}, {"rounds": r}
    )
    assert wrong["holds"] is False and wrong["actual"] == "faster"
    with pytest.raises(expectations.ExpectationError, match="verdicts"):
        expectations.validate({"check": "paired_verdict", "strategy": "b", "versus": "a", "is": ["quicker"]})
    with pytest.raises(expectations.ExpectationError, match="strategy"):
        expectations.validate({"check": "paired_verdict", "strategy": "b", "is": ["slower"]})
    with pytest.raises(expectations.ExpectationError, match="versus"):
        expectations.validate({"check": "value", "metric": "paired_ratio", "strategy": "b", "min": 1})


def test_a_paired_fact_quotes_its_spread_and_holds_only_if_every_round_does():
    r = rounds_result(a=[2.0, 2.0, 2.0, 2.0, 2.0], b=[2.4, 2.2, 3.0, 2.6, 1.9])
    spec = {"metric": "paired_ratio", "run": "r", "strategy": "b", "versus": "a", "format": ".2f", "min": 1.0}
    values = facts.resolve({"t": spec}, {"r": r}.get)
    assert values == {"t": "1.20", "t.lo": "0.95", "t.hi": "1.50", "t.rounds": "5"}
    assert facts.names({"t": spec}) == {"t", "t.lo", "t.hi", "t.rounds"}
    # The median says "slower", one round does not: the fact does not hold.
    summary = facts.paired_summary(spec, {"r": r}.get)
    assert not facts.holds(spec, facts.value(spec, {"r": r}.get), summary)
    assert facts.holds(dict(spec, min=0.9), summary["median"], summary)
    assert facts.resolve({"t": spec}, {}.get) == {"t": "—", "t.lo": "—", "t.hi": "—", "t.rounds": "—"}


def test_cpu_rounds_carry_the_paired_ratio_of_each_strategy_against_the_first():
    tiny = {"model": "mlp", "layers": 2, "width": 32, "batch": 8, "device": "cpu"}
    r = time_rounds(
        [{"id": "adam", "config": tiny}, {"id": "sgd", "config": dict(tiny, optimizer="sgd")}],
        rounds=5,
        steps=2,
        warmup=1,
    )
    adam, sgd = (s["round_ms"] for s in r["strategies"])
    assert [s["id"] for s in r["strategies"]] == ["adam", "sgd"] and len(adam) == len(sgd) == 5
    (pair,) = r["paired"]
    ratios = [b / a for a, b in zip(adam, sgd, strict=True)]  # each round: sgd's median step over adam's
    assert (pair["strategy"], pair["versus"], pair["rounds"]) == ("sgd", "adam", 5)
    assert pair["ratios"] == pytest.approx(ratios) and pair["median"] == pytest.approx(statistics.median(ratios))
    verdict = "slower" if min(ratios) > 1 else "faster" if max(ratios) < 1 else "unclear"
    assert pair["verdict"] == verdict


@pytest.mark.parametrize(("field", "value"), [("rounds", 1), ("rounds", 11), ("steps", 0), ("warmup", True)])
def test_bad_rounds_arguments_name_the_field_and_range(field, value):
    tiny = {"model": "mlp", "layers": 2, "width": 32, "batch": 8, "device": "cpu"}
    with pytest.raises(ConfigError, match=rf"{field}.*allowed range"):
        time_rounds([{"id": "a", "config": tiny}], **{field: value})
