"""Layer norm's backward on CUDA takes scratch memory a fake-tensor replay does not see (experiments/estimate/
norm_scratch.py): against the allocator history of a real run on an NVIDIA H100, its threshold, and a batch line
drawn across that threshold."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from experiments.core.config import ExperimentConfig
from experiments.estimate.batch_line import event_shape, line, trace_at
from experiments.estimate.estimator import cuda_config, preset_defaults
from experiments.estimate.fast_replay import with_layers
from experiments.estimate.norm_scratch import layer_norm_scratch
from experiments.estimate.replay import replay

H100 = ((132, 2048),)
HISTORY = Path(__file__).resolve().parents[2] / "docs/benchmarks/trial-history-h100/vit-b16-t4-802.json.gz"


def test_a_vit_step_on_the_h100_held_what_the_rule_computes_in_each_layer_norms_backward():
    # ViT-B/16 at batch 802, AMP bf16: 802 x 197 = 157,994 rows of 768 features, fp32 norm weights; 25 layer norms,
    # two steps. Each backward: the weight's and the bias's partial sums, then a sum(0) of each (partial sums and
    # semaphores of its own, freed before the next).
    events = json.loads(gzip.decompress(HISTORY.read_bytes()))["events"]
    part, summed, semaphores = layer_norm_scratch((802 * 197, 768), (768, 1), 4, True, True, on=H100)[1:]
    assert (part, summed, semaphores) == (4_193_280, 8_650_752, 24)
    allocs = [size for action, size, _addr, _frames in events if action == "alloc"]
    assert allocs.count(part) == 2 * 50 and allocs.count(summed) == 2 * 50
    after = [allocs[i + 1] for i, size in enumerate(allocs) if size == summed]
    assert after == [semaphores] * 100


def test_the_one_pass_path_takes_none():
    assert layer_norm_scratch((65536, 768), (768, 1), 4, True, True, on=H100) == (0, 0, 0, 0)  # M must pass 64 Ki
    assert layer_norm_scratch((65537, 4096), (4096, 1), 2, True, True, on=H100) == (0, 0, 0, 0)  # 128 >= 132 // 2
    assert layer_norm_scratch((65537, 2080), (2080, 1), 2, True, False, on=H100)[:2] == (2 * 504 * 2080, 0)
    assert layer_norm_scratch((65537, 768), (768, 1), 4, False, False, on=H100) == (0, 0, 0, 0)


def test_a_batch_line_draws_the_scratch_where_it_appears():
    # GPT-2 at sequence 1024: from batch 65 (66,560 rows) each layer norm's backward takes its buffers. Drawn from
    # batches 2-4, where none has them, the trace at 64 and 65 is each replay's own.
    source = "preset:gpt2"
    full = ExperimentConfig.from_dict({"model_source": source, **preset_defaults(source), "device": "cuda"})
    cfg = with_layers(cuda_config(full), 1)
    samples = [replay(cfg.replace(batch=b), block=512, keep_events=True)["events"] for b in (2, 3, 4)]
    fit = line((2, 3, 4), samples)
    assert fit is not None
    for batch, held in ((64, False), (65, True)):
        want = replay(cfg.replace(batch=batch), block=512, keep_events=True)["events"]
        drawn = trace_at(fit, batch)
        assert event_shape(drawn) == event_shape(want)
        assert [int(n) for k, _, n in drawn if k == "alloc"] == [int(n) for k, _, n in want if k == "alloc"]
        assert (4_193_280 in [int(n) for k, _, n in want if k == "alloc"]) is held
