"""Fine-tuning as people do it (peft's LoRA, bitsandbytes' optimizers, every n-th layer checkpointed): the replay on
fake tensors equals a real CPU run to the byte in every phase and category; the bytes of adapters, their gradients and
their optimizer state equal a hand count from the model's own linear layers and peft's own count; the quirks the
replay needs fail their run without them; bad levers are one line naming the field."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from experiments.core.config import ConfigError, DistributedConfig, ExperimentConfig
from experiments.estimate import bnb_quirks, quirks
from experiments.estimate.estimator import estimate
from experiments.estimate.replay import replay
from experiments.estimate.unpredictable import CannotPredict
from experiments.training.finetune import attention_targets
from experiments.training.models import build_model, spec_for
from tests.engine.cli_output import said
from tests.engine.test_source_models import same, tiny

LORA = {"finetune": "lora"}


@pytest.mark.parametrize(
    "preset,levers",
    [
        ("llama3-8b", LORA),
        ("llama3-8b", {**LORA, "lora_targets": "all_linear", "precision": "amp_bf16", "optimizer_impl": "foreach"}),
        ("llama3-8b", {**LORA, "adapter_dtype": "model", "lora_rank": 4, "lora_alpha": 8}),
        ("gpt2", {**LORA, "checkpoint": "per_layer", "checkpoint_every": 2}),
        ("bert-base", {**LORA, "lora_targets": "all_linear"}),
        ("vit-b16", LORA),
        ("mixtral-8x7b", {**LORA, "lora_targets": "all_linear"}),
        ("llama3-8b", {"optimizer": "adamw8bit", "optimizer_impl": "default"}),
        ("gpt2", {**LORA, "optimizer": "paged_adamw8bit", "optimizer_impl": "default"}),
        ("llama3-8b", {"optimizer": "paged_adamw", "optimizer_impl": "default", "checkpoint": "per_layer"}),
    ],
)
def test_replay_equals_a_real_cpu_run(preset, levers):
    same(tiny(preset, **levers))


def _linears(model: torch.nn.Module, names: list[str]) -> list[tuple[int, int]]:
    """(in, out) of each named layer: nn.Linear's in/out features, GPT-2 Conv1D's transposed weight."""
    mods = dict(model.named_modules())
    return [tuple(mods[n].weight.shape[::-1]) for n in names]


@pytest.mark.parametrize("preset", ["llama3-8b", "gpt2"])
@pytest.mark.parametrize("adapter_dtype", ["fp32", "model"])
def test_adapters_their_gradients_and_adam_state_equal_a_hand_count(preset, adapter_dtype):
    """r x (in + out) per targeted layer; fp32 adapters (peft's default) on a bf16 model hold 4 bytes per element in
    weights and gradients, AdamW 8 more (plus fused AdamW's 4-byte step per tensor); nothing for the frozen base."""
    rank = 8
    cfg = tiny(preset, **LORA, lora_rank=rank, adapter_dtype=adapter_dtype, precision="bf16", optimizer_impl="fused")
    plain = build_model(cfg.replace(finetune="full"), torch.device("cpu"))
    targets = attention_targets(plain)
    assert targets, preset
    count = sum(rank * (i + o) for i, o in _linears(plain, targets))
    lora_model = build_model(cfg, torch.device("cpu"))
    assert lora_model.get_nb_trainable_parameters()[0] == count  # peft's own count
    size = 4 if adapter_dtype == "fp32" else 2
    fake, real = same(cfg)
    assert real["breakdown_steady"]["gradients"] == size * count
    assert real["breakdown_steady"]["optimizer_state"] == 2 * size * count + 4 * 2 * len(targets)
    est = estimate(cfg, device_type="cpu")
    assert est["trainable_parameters"] == count
    assert est["parameters"] == sum(p.numel() for p in plain.parameters()) + count


def test_eight_bit_adamw_state_equals_bitsandbytes_rule():
    """bitsandbytes keeps 8-bit moments (1 byte each, an fp32 absmax per 256-element block) for tensors of at least
    4096 elements and fp32 moments below that, plus its two 256-entry quantization maps."""
    cfg = tiny("llama3-8b", optimizer="adamw8bit", optimizer_impl="default", precision="fp32")
    model = build_model(cfg, torch.device("cpu"))
    hand = sum(
        2 * p.numel() + 2 * 4 * math.ceil(p.numel() / 256) if p.numel() >= 4096 else 8 * p.numel()
        for p in model.parameters()
    )
    fake, real = same(cfg)
    assert real["breakdown_steady"]["optimizer_state"] == hand + 2 * 256 * 4
    torch_adamw = replay(cfg.replace(optimizer="adamw", optimizer_impl="foreach"))
    assert fake["steady"]["optimizer_state"] < torch_adamw["steady"]["optimizer_state"] / 3


def test_checkpointing_every_other_layer_lies_between_none_and_every_layer():
    peaks = [
        replay(tiny("llama3-8b", **LORA, **levers))["peak_bytes"]
        for levers in ({}, {"checkpoint": "per_layer", "checkpoint_every": 2}, {"checkpoint": "per_layer"})
    ]
    assert peaks[0] > peaks[1] > peaks[2]


def test_a_cuda_estimate_keeps_paged_state_off_the_allocators_books():
    """On CUDA, bitsandbytes pages the state of parameters of at least 1e5 elements (CUDA managed memory, outside the
    caching allocator); smaller ones (LoRA's adapters at small ranks) stay ordinary device tensors, in 512-byte
    blocks. Its 32-bit AdamW keeps two fp32 moments per element."""
    cfg = tiny("llama3-8b", optimizer="paged_adamw", optimizer_impl="default", precision="fp32")
    cfg = cfg.replace(model_overrides="hidden=512,intermediate=1024,layers=2,heads=4,kv_heads=2,vocab=256")
    paged = estimate(cfg, device_type="cuda", fast=False)
    sizes = [p.numel() for p in build_model(cfg, torch.device("cpu")).parameters()]
    assert any(n >= bnb_quirks.PAGED_MIN_NUMEL for n in sizes) and any(n < bnb_quirks.PAGED_MIN_NUMEL for n in sizes)

    def blocks(n: int) -> int:
        return -(-4 * n // 512) * 512

    assert paged["paged_bytes"] == sum(2 * blocks(n) for n in sizes if n >= bnb_quirks.PAGED_MIN_NUMEL)
    assert paged["steady"]["optimizer_state"] == sum(2 * blocks(n) for n in sizes if n < bnb_quirks.PAGED_MIN_NUMEL)
    assert estimate(cfg, device_type="cpu", fast=False)["paged_bytes"] == 0  # a CPU does not page


@pytest.fixture
def disabled():
    yield quirks.DISABLED.add
    quirks.DISABLED.clear()


def test_quirk_module_conversion_of_fake_parameters():
    """peft moves each adapter to its base layer's dtype with module.to(): fake parameters cannot be swapped. In a
    fresh process (the first conversion of a process is the one that fails; later ones find torch's caches warm)."""
    code = (
        "from experiments.estimate import quirks; from experiments.estimate.replay import replay; "
        "from tests.engine.test_source_models import tiny; quirks.DISABLED.update(sys.argv[1:]); "
        "replay(tiny('llama3-8b', finetune='lora')); print('replayed')"
    )
    runs = [
        subprocess.run([sys.executable, "-c", "import sys; " + code, *off], capture_output=True, text=True, timeout=300)
        for off in ([], ["module_to"])
    ]
    assert runs[0].returncode == 0 and "replayed" in runs[0].stdout, runs[0].stderr[-2000:]
    assert runs[1].returncode != 0 and "Couldn't swap" in runs[1].stderr


def test_quirk_bitsandbytes_maps_read_values(disabled):
    cfg = tiny("gpt2", optimizer="adamw8bit", optimizer_impl="default")
    same(cfg)
    disabled("bnb_maps")
    with pytest.raises(CannotPredict) as e:
        replay(cfg)
    assert e.value.info["phase"] == "optimizer"


@pytest.mark.parametrize(
    "levers,field",
    [
        ({"finetune": "lora"}, "finetune"),  # a built-in family
        ({"model_source": "preset:gpt2:tiny", "optimizer": "adamw8bit", "optimizer_impl": "fused"}, "optimizer_impl"),
        ({"model_source": "preset:gpt2:tiny", "checkpoint_every": 2}, "checkpoint_every"),
        ({"model_source": "preset:gpt2:tiny", "finetune": "lora", "lora_rank": 0}, "lora_rank"),
        ({"model_source": "preset:gpt2:tiny", "finetune": "lora", "lora_targets": "mlp"}, "lora_targets"),
        ({"model_source": "preset:gpt2:tiny", "finetune": "dora"}, "finetune"),
        ({"model_source": "preset:gpt2:tiny", "finetune": "qlora", "quant_type": "int4"}, "quant_type"),
    ],
)
def test_bad_fine_tuning_levers_are_one_line_naming_the_field(levers, field):
    with pytest.raises(ConfigError) as e:
        ExperimentConfig.from_dict({"device": "cpu", **levers})
    assert e.value.field == field and "\n" not in str(e.value)


def test_a_data_parallel_run_refuses_lora_naming_the_field():
    cfg = tiny("gpt2", **LORA)
    with pytest.raises(ConfigError) as e:
        DistributedConfig(cfg, "ddp", 2)
    assert e.value.field == "finetune"


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length() if n else 0


def test_offloaded_activations_are_host_memory_in_pinned_blocks_counted_on_a_plain_forward():
    """save_on_cpu copies every tensor autograd saves (activations, and the weights a linear layer saves) into pinned
    host memory, which CUDA's host allocator holds in power-of-two blocks: at the end of a forward all of them are
    alive. Counted here on a plain forward with torch's own saved-tensor hooks."""
    cfg = ExperimentConfig(model="mlp", layers=3, width=96, batch=6, device="cpu", offload_activations=True)
    plain = cfg.replace(offload_activations=False)
    model = build_model(plain, torch.device("cpu"))
    spec = spec_for(plain)
    inputs, targets = spec.batch(plain, torch.device("cpu"), 1)
    packed = []

    def pack(t):
        packed.append(t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        spec.loss(plain, model, inputs, targets)
    est = estimate(cfg, device_type="cuda", fast=False)
    assert est["host_peak_bytes"] == sum(_pow2(n) for n in packed) > 0
    without = estimate(plain, device_type="cuda", fast=False)
    assert without["host_peak_bytes"] == 0
    forward = [p["peak_bytes"] for p in est["phases"] if p["phase"] == "forward"]
    assert max(forward) < max(p["peak_bytes"] for p in without["phases"] if p["phase"] == "forward")


def test_offloading_on_a_cpu_is_refused_naming_the_field():
    cfg = ExperimentConfig(model="mlp", layers=2, width=32, batch=2, device="cpu", offload_activations=True)
    with pytest.raises(ConfigError) as e:
        estimate(cfg, device_type="cpu")
    assert e.value.field == "offload_activations" and e.value.code == "offload_on_cpu"


def test_a_lever_whose_library_is_missing_is_one_refusal_in_the_estimate_and_the_run(monkeypatch):
    """Without bitsandbytes an estimate of a paged optimizer raised ModuleNotFoundError from inside the replay (seen on
    a GPU machine without the package): now the estimate and the run refuse it in one line naming the field."""
    import importlib.util

    from experiments.core import finetune as core_finetune
    from experiments.training.step import build_state

    real = importlib.util.find_spec
    monkeypatch.setattr(
        core_finetune.importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    paged = ExperimentConfig(model="mlp", layers=2, width=32, batch=2, device="cpu", optimizer="paged_adamw8bit")
    for attempt in (lambda: estimate(paged, device_type="cuda"), lambda: build_state(paged, torch.device("cpu"))):
        with pytest.raises(ConfigError) as e:
            attempt()
        assert (e.value.field, e.value.code) == ("optimizer", "needs_package") and "bitsandbytes" in str(e.value)
    # Another optimizer does not need it.
    estimate(paged.replace(optimizer="adam"), device_type="cpu")


def _cli(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "experiments", *args], capture_output=True, text=True, timeout=300)
    out.stderr = said(out.stderr)
    return out


def test_the_command_line_takes_the_levers_and_refuses_a_lora_flag_without_lora():
    help_text = _cli("estimate", "--help").stdout
    for flag in (
        "--finetune",
        "--lora-rank",
        "--lora-alpha",
        "--lora-targets",
        "--adapter-dtype",
        "--checkpoint-every",
    ):
        assert flag in help_text
    assert "an integer in [1, 1024]; default 16" in " ".join(help_text.split())  # --lora-rank's range and default
    bad = _cli("estimate", "--model-preset", "gpt2", "--tiny", "--lora-rank", "4")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--finetune lora" in bad.stderr
    ok = _cli(
        "estimate", "--model-preset", "gpt2", "--tiny", "--finetune", "lora", "--lora-rank", "4",
        "--optimizer", "adamw8bit", "--device", "cuda", "--json",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-2000:]
    r = json.loads(ok.stdout)
    assert r["config"]["optimizer_impl"] == "default"  # the preset's fused yields to bitsandbytes' one implementation
    assert 0 < r["trainable_parameters"] < r["parameters"]


QLORA_CASES = [
    ("llama3-8b", {}),
    (
        "llama3-8b",
        {"quant_type": "fp4", "double_quant": False, "lora_targets": "all_linear", "checkpoint": "per_layer"},
    ),
    ("gpt2", {"precision": "amp_bf16", "optimizer": "paged_adamw8bit", "optimizer_impl": "default"}),
    ("bert-base", {"lora_targets": "all_linear"}),
    ("vit-b16", {}),
]


@pytest.mark.parametrize("preset,levers", QLORA_CASES)
def test_qlora_replay_equals_a_real_cpu_run(preset, levers):
    """A 4-bit base built as from_pretrained loads one (layer by layer), peft's prepare_model_for_kbit_training, LoRA:
    bitsandbytes' own quantization and 4-bit matmul on both sides (GPT-2's Conv1D layers too)."""
    same(tiny(preset, finetune="qlora", **levers))


@pytest.mark.parametrize("double_quant", [True, False])
def test_the_4bit_base_equals_a_hand_count(double_quant):
    """Per linear layer but the head: its weight in 4 bits (half a byte per element), the NF4 code (16 fp32), the
    scales of its 64-element blocks: fp32 each, or with double quantization one byte each plus an fp32 scale per 256
    of them, an fp32 offset and the 256-value map of that second quantization. Every other parameter upcast to fp32
    by prepare_model_for_kbit_training; the buffers as built; the adapters in fp32."""
    rank = 8
    cfg = tiny("llama3-8b", finetune="qlora", double_quant=double_quant, lora_rank=rank)
    plain = build_model(cfg.replace(finetune="full"), torch.device("cpu"))
    head = plain.get_output_embeddings()
    linears = [m for m in plain.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    hand = 0
    for m in linears:
        n = m.weight.numel()
        blocks = math.ceil(n / 64)
        scales = blocks + 4 * math.ceil(blocks / 256) + 4 + 256 * 4 if double_quant else 4 * blocks
        hand += math.ceil(n / 2) + 16 * 4 + scales
    hand += 4 * (sum(p.numel() for p in plain.parameters()) - sum(m.weight.numel() for m in linears))
    hand += sum(b.untyped_storage().nbytes() for b in plain.buffers())
    targets = set(attention_targets(plain))
    hand += 4 * sum(rank * (m.in_features + m.out_features) for n, m in plain.named_modules() if n in targets)
    fake, real = same(cfg)
    assert real["breakdown_steady"]["parameters"] == hand


def test_qlora_at_full_size_holds_the_base_in_4_bits_and_the_embeddings_in_fp32():
    """Llama-3-8B on CUDA (the replay on fake tensors): the 4-bit base is about a quarter of LoRA's bf16 base, but
    prepare_model_for_kbit_training upcasts the embeddings and the head (128256 x 4096 each) to fp32, so the frozen
    weights hold more than a quarter. Mixtral's fused experts, upcast to fp32 too, replay as a real CPU step runs them
    (grouped_mm in fp32: experiments/estimate/cpu_kernels.py)."""
    base = {"model_source": "preset:llama3-8b", "batch": 1, "seq_len": 256}
    lora = estimate(tiny("llama3-8b", **LORA).replace(**base), device_type="cuda")
    qlora = estimate(tiny("llama3-8b", finetune="qlora").replace(**base), device_type="cuda")
    embeddings = 2 * 128256 * 4096
    assert lora["steady"]["parameters"] > 2 * (lora["parameters"] - lora["trainable_parameters"])  # bf16, 2 B each
    assert qlora["steady"]["parameters"] > 4 * embeddings  # the fp32 embeddings and head alone
    assert qlora["steady"]["parameters"] < 0.55 * lora["steady"]["parameters"]
    same(tiny("mixtral-8x7b", finetune="qlora"))  # the CPU estimate answers grouped_mm in fp32 as the CPU kernel does


@pytest.mark.parametrize("preset,levers", [("llama3-8b", {}), ("gpt2", {"lora_targets": "all_linear"})])
def test_lora_on_an_8bit_base_replays_like_a_real_cpu_run(preset, levers):
    """LLM.int8's base (Linear8bitLt, int8 rows with an fp32 scale each): on a CPU bitsandbytes trains through the
    dequantized weights (MatMul8bitFp), which the replay follows to the byte."""
    same(tiny(preset, finetune="int8", **levers))


def test_the_8bit_base_equals_a_hand_count_and_its_cuda_estimate_names_the_outliers():
    """One byte per weight and an fp32 scale per output row for each linear layer but the head. On CUDA, training
    takes LLM.int8's decomposition, whose outlier columns come from the activations' values: not predicted, named."""
    rank = 8
    cfg = tiny("llama3-8b", finetune="int8", lora_rank=rank)
    plain = build_model(cfg.replace(finetune="full"), torch.device("cpu"))
    head = plain.get_output_embeddings()
    linears = [m for m in plain.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    hand = sum(m.weight.numel() + 4 * m.out_features for m in linears)
    hand += 4 * (sum(p.numel() for p in plain.parameters()) - sum(m.weight.numel() for m in linears))
    hand += sum(b.untyped_storage().nbytes() for b in plain.buffers())
    targets = set(attention_targets(plain))
    hand += 4 * sum(rank * (m.in_features + m.out_features) for n, m in plain.named_modules() if n in targets)
    _fake, real = same(cfg)
    assert real["breakdown_steady"]["parameters"] == hand
    with pytest.raises(CannotPredict, match="int8_vectorwise_quant"):
        estimate(cfg, device_type="cuda")
