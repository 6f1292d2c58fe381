"""Where a QLoRA base's memory goes on a GPU right after loading, as its tutorials load it: random Llama-3-8B weights
saved, `from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, nf4, double quant))`, then
peft's `prepare_model_for_kbit_training`. Prints the allocated memory after each and the parameters' bytes by class
and dtype, to set beside the engine's QLoRA build (experiments/training/quantized.py): the H200 run of
benchmarks/finetune_methods.py measured 17.5 GiB more than the estimate for llama3-8b-qlora (docs/benchmarks/
finetune-methods-h200.md), while on the CPU the two agree to the byte.

    python3 benchmarks/qlora_load_memory.py        # on a GPU, with bitsandbytes installed
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig

    from experiments.core.model_sources import preset_config, presets

    config, _levers = preset_config("llama3-8b", False)
    hf = AutoConfig.for_model(presets()["llama3-8b"]["source"]["model_type"], **config)
    gib = 2**30
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    with tempfile.TemporaryDirectory() as folder:
        AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=quant, dtype=torch.bfloat16, device_map={"": 0}
        )
    print(f"after from_pretrained: {torch.cuda.memory_allocated() / gib:.3f} GiB allocated")
    by: dict[str, int] = {}
    for p in model.parameters():
        key = f"{type(p).__name__} {p.dtype}"
        by[key] = by.get(key, 0) + p.numel() * p.element_size()
    print({k: f"{v / gib:.3f} GiB" for k, v in by.items()})
    print("linear layers:", sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__}))
    prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    print(f"after prepare_model_for_kbit_training: {torch.cuda.memory_allocated() / gib:.3f} GiB allocated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
