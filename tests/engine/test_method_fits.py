"""Which fine-tuning method runs on a card: each row's peak is the estimate of that method's configuration, the
answer is the first row that runs in the order of least compromise, a card with room for everything answers full
training without checkpointing, and one with none answers nothing; LLM.int8's data-dependent outliers are named."""

from __future__ import annotations

from experiments.core.units import MIB
from experiments.distributed.method_fits import CHECKPOINTS, METHODS, method_config, methods_on_card
from experiments.estimate.estimator import estimate
from tests.engine.test_source_models import tiny


def test_each_method_is_estimated_and_the_first_that_runs_is_the_least_compromise():
    cfg = tiny("gpt2", batch=2)
    roomy = methods_on_card(cfg, 2**34, 0)
    assert [(r["finetune"], r["checkpoint"]) for r in roomy["methods"]] == [
        (m, c) for m in METHODS for c in CHECKPOINTS
    ]
    for row in roomy["methods"]:
        if row["finetune"] == "int8":  # on CUDA: LLM.int8's outlier columns depend on the activations' values
            assert row["runs"] is None and "int8_vectorwise_quant" in row["cannot_predict"]
            continue
        expected = estimate(method_config(cfg, row["finetune"], row["checkpoint"]), device_type="cuda")
        assert row["peak_bytes"] == expected["peak_bytes"] and row["runs"] is True
        assert row["trainable_parameters"] == expected["trainable_parameters"]
    assert (roomy["first_that_runs"]["finetune"], roomy["first_that_runs"]["checkpoint"]) == ("full", "none")
    full = roomy["methods"][0]["peak_bytes"]
    lora = min(r["peak_bytes"] for r in roomy["methods"] if r["finetune"] == "lora")
    assert lora < full  # the frozen base has no gradients and no optimizer state
    # What the process holds outside the allocator comes off the card: a roomy card whose overhead leaves 3 MiB
    # takes no full training (2.4 MB of tensors, more reserved) but LoRA, and one that leaves 1 KiB takes nothing.
    between = methods_on_card(cfg, 2**34, 2**34 - 3 * MIB)
    assert [r["runs"] for r in between["methods"]] == [False, False, True, True, True, True, None, None]
    assert (between["first_that_runs"]["finetune"], between["first_that_runs"]["checkpoint"]) == ("lora", "none")
    none = methods_on_card(cfg, 2**34, 2**34 - 1024)
    assert none["first_that_runs"] is None and not any(r["runs"] for r in none["methods"])
    assert [r["peak_bytes"] for r in none["methods"]] == [r["peak_bytes"] for r in roomy["methods"]]


def test_each_predicted_method_gets_its_own_largest_batch_on_the_card(capsys, monkeypatch):
    """--methods --largest: each predicted method's largest batch is the search of "What fits" (model_fits.
    largest_that_runs, held to real boundaries by tests/engine/test_fits_boundary.py) for that method's configuration
    on the card; a method that cannot be predicted has none; the table shows it as a column."""
    from experiments.cli_print import print_methods
    from experiments.distributed import method_fits

    asked = []

    def search(cfg, card_bytes, overhead_bytes):
        asked.append((cfg.finetune, cfg.checkpoint, card_bytes, overhead_bytes))
        return {"largest_batch": 10 * len(asked), "replays": 1}

    monkeypatch.setattr(method_fits, "largest_that_runs", search)
    cfg = tiny("gpt2", batch=2)
    r = methods_on_card(cfg, 2**34, 2**30, largest=True)
    predicted = [(row["finetune"], row["checkpoint"]) for row in r["methods"] if row["runs"] is not None]
    assert [a[:2] for a in asked] == predicted and {a[2:] for a in asked} == {(2**34, 2**30)}
    assert [row.get("largest_batch") for row in r["methods"]] == [10, 20, 30, 40, 50, 60, None, None]
    print_methods(r)
    table = capsys.readouterr().out.splitlines()
    assert "largest batch" in table[1] and next(x for x in table if x.startswith("lora     none")).endswith(" 30  yes")
    assert "largest_batch" not in methods_on_card(cfg, 2**34, 2**30)["methods"][0]  # only when asked: a search each
