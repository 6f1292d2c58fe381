"""'What fits a budget' on the compare page: the largest batch per strategy by the estimate, and a real run."""

from course.units import MIB
from experiments.core.config import ExperimentConfig
from experiments.estimate.estimator import estimate
from tests.app.pages import open_page, run_until


def test_largest_batch_per_strategy_is_the_last_that_fits_and_a_run_confirms_it():
    at = open_page("compare")
    at.number_input(key="compare.fit.budget").set_value(8).run()
    at.button(key="compare.fit.search").click().run(timeout=600)
    found = at.session_state["compare.fit.found"]
    assert found["budget"] == 8 * MIB and found["rows"]
    checked = 0
    for row in found["rows"]:
        if not row["batch"]:
            continue
        checked += 1
        assert row["peak"] <= found["budget"]
    assert checked
    # confirm the first fitting strategy with a real (CPU) run: its measured net peak is within the budget
    at.button(key="compare.fit.confirm").click().run()
    run_until(at, lambda a: "compare.fit.done" in a.session_state)
    done = at.session_state["compare.fit.done"]
    result = done["statuses"][0]["result"]
    cfg = ExperimentConfig.from_dict(result["config"])
    assert cfg.batch == done["tag"]["batch"]
    assert result["peak_bytes"] - result["baseline_bytes"] <= 8 * MIB
    # the next larger batch would not fit, by the same estimate
    bigger = estimate(cfg.replace(batch=cfg.batch + cfg.accum), device_type="cpu")
    assert bigger["peak_bytes"] > 8 * MIB
    assert [s.value for s in at.success], "the page says the run fits"
