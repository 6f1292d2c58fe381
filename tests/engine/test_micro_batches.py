"""A replay of many micro-batches from four (experiments/estimate/micro_batches.py) equals the replay of all of them:
every phase row, the allocator's figures, the categories, the step's work; where the last two replayed micro-batches
disagree, the whole replay runs."""

import pytest

from experiments.core.config import ExperimentConfig
from experiments.estimate import micro_batches
from experiments.estimate.replay import replay


def _comparable(r: dict) -> dict:
    r = dict(r)
    r.pop("events", None)
    r["phases"] = [{k: v for k, v in p.items() if k != "ms"} for p in r["phases"]]  # the replay's own wall time
    return r


@pytest.mark.parametrize(
    "cfg",
    [
        ExperimentConfig(layers=2, width=64, batch=14, accum=7, device="cpu"),
        ExperimentConfig(
            model="transformer",
            layers=3,
            width=64,
            batch=12,
            accum=6,
            precision="amp_bf16",
            checkpoint="per_layer",
            device="cpu",
        ),
        ExperimentConfig(model="transformer", layers=4, width=128, batch=32, accum=16, device="cpu"),
        ExperimentConfig(model="cnn", layers=2, width=16, batch=12, accum=6, optimizer="sgd_momentum", device="cpu"),
    ],
    ids=["mlp", "transformer-amp-ckpt", "transformer-16", "cnn"],
)
@pytest.mark.parametrize("block", [1, 512])
def test_repeated_micro_batches_equal_the_replay_of_all_of_them(cfg, block):
    whole = _comparable(replay(cfg, block=block, keep_events=True))  # the trace is wanted: every micro-batch replayed
    drawn = _comparable(replay(cfg, block=block))
    assert len(drawn["phases"]) == len(whole["phases"]) == 2 * (2 + 2 * cfg.accum) + 3
    assert drawn == whole


def test_micro_batches_that_disagree_are_not_copied():
    row = {"phase": "forward", "step": 1, "allocated_bytes": 10, "peak_bytes": 12}
    mark = {"reserved_bytes": 2048, "allocated_bytes": 10, "peak_allocated_bytes": 12}
    rows = [dict(row, micro=m) for m in range(micro_batches.REPLAYED)]
    marks = [dict(mark) for _ in rows]
    result = {"phases": rows, "allocator": {"marks": marks}, "step": {"flops": 4}, "micro_work": {"flops": 1}}
    extended = micro_batches.extend(result, 10)
    assert [p["micro"] for p in extended["phases"]] == list(range(10)) and extended["step"] == {"flops": 10}
    marks[-1] = dict(mark, reserved_bytes=4096)  # the allocator still grew in the last replayed micro-batch
    assert micro_batches.extend(result, 10) is None
    rows[-1] = dict(row, micro=micro_batches.REPLAYED - 1, peak_bytes=13)
    marks[-1] = dict(mark)
    assert micro_batches.extend(result, 10) is None
