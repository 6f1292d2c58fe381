"""One "same experiment" rule (course/experiment.py): the recorded result the sandbox shows for a configuration,
the run a prompt predicted, and what a side-by-side view lists as different all follow it, and it is the rule the
engine's find_recorded applies to the shipped recordings."""

from __future__ import annotations

import pytest

from app.ui.side_by_side import differences
from course import catalog, experiment
from experiments.core.config import ExperimentConfig
from experiments.core.recorded import find_recorded, load_recorded

RECORDED = [catalog.preset_id("monitoring"), catalog.technique_id("optimization", "amp_bf16", "config")]
# A value of each field that differs from every recording's (all of them are fp32/AMP MLPs and CNNs of seed 0).
OTHER = {
    "device": "cpu",
    "force": True,
    "timing_steps": 0,
    "steps": 7,
    "seed": 12345,
    "budget_mb": 123.0,
    "batch": 3,
    "inplace": True,
}
# What course/experiment.py's docstring says is not the experiment: where it runs, whether a refusal was overridden,
# how many steps are instrumented or timed. Written out here: the rule's own tuple cannot be its own expectation.
IGNORED = {"device", "force", "timing_steps", "steps"}


@pytest.mark.parametrize("rid", RECORDED)
@pytest.mark.parametrize("field", sorted(OTHER))
def test_find_recorded_ignores_exactly_the_fields_that_are_not_the_experiment(rid, field):
    config = load_recorded(rid)["config"]
    changed = ExperimentConfig.from_dict(dict(config, **{field: OTHER[field]})).to_dict()
    found = find_recorded(changed)
    same = field in IGNORED
    assert experiment.same_experiment(config, changed) is same
    if same:
        assert found is load_recorded(rid), f"changing {field} lost the recording"
    else:
        assert found is not load_recorded(rid), f"changing {field} still finds the recording of another experiment"
        assert found is None or experiment.experiment_key(found["config"]) == experiment.experiment_key(changed)


def test_the_rule_names_fields_of_the_configuration():
    assert set(experiment.NOT_THE_EXPERIMENT) == IGNORED < set(ExperimentConfig().to_dict())


def test_side_by_side_lists_the_experiments_differences_in_field_order():
    a = {"config": {"batch": 8, "width": 64, "device": "cpu", "timing_steps": 2, "steps": 2, "seed": 0}}
    b = {"config": {"batch": 16, "width": 64, "device": "cuda", "timing_steps": 50, "steps": 5, "seed": 1}}
    assert differences(a, b) == [("batch", 8, 16), ("seed", 0, 1)]
    assert differences(a, {"config": dict(a["config"], force=True, steps=9)}) == []
