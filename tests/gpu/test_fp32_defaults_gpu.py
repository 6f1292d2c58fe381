"""The engine's fp32 CNN is a learner's plain fp32 CNN: PyTorch's defaults, cuDNN convolutions in TF32 (CUDA only).

The plain loop runs in a fresh interpreter, so it has exactly the defaults a learner's script starts with; the
strict case adds the one line a learner would write, `torch.backends.cudnn.allow_tf32 = False`. The engine runs in
a fresh interpreter too: after the other GPU tests, the same CNN in this process measured 0.75 MiB less cuDNN
workspace (fp32 and amp_bf16; cuDNN keeps per-process state that earlier convolutions leave), which is the process's
history, not the engine."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gpu.gpu_lock import one_gpu_user  # noqa: F401 - the fixture the marks use

pytestmark = [
    pytest.mark.usefixtures("one_gpu_user"),
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

ROOT = Path(__file__).resolve().parents[2]
# The CNN of lesson 3's strict-fp32 technique (lessons/optimization/meta.json, "strict_fp32_cnn").
CNN = dict(layers=4, width=256, batch=32, image_size=32)

PLAIN_LOOP = """
import json, sys
import torch
import torch.nn.functional as F
from torch import nn
from experiments.measure.device import warm_up_cuda

layers, width, batch, size, precision, steps = {layers}, {width}, {batch}, {image_size}, {precision!r}, {steps}
{setup}
dev = torch.device("cuda")
warm_up_cuda(dev)  # the cuBLAS workspaces, as the engine allocates them before its baseline
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
torch.manual_seed(0)
mods, c_in, s = [], 3, size
for i in range(layers):
    mods += [nn.Conv2d(c_in, width, 3, padding=1, device=dev), nn.ReLU()]
    if i % 2 == 1 and s >= 16:  # halve the resolution after every second conv while it is at least 16 px
        mods.append(nn.MaxPool2d(2))
        s //= 2
    c_in = width
model = nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10, device=dev))
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(batch, 3, size, size, device=dev)
y = torch.randint(0, 10, (batch,), device=dev)
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    with torch.amp.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "amp_bf16"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    del loss  # as the engine does: a kept loss from the last step would sit in the next step's forward peak
torch.cuda.synchronize()
print(json.dumps({{"peak": torch.cuda.max_memory_allocated() - base, "conv_tf32": torch.backends.cudnn.allow_tf32}}))
"""
STRICT = "torch.backends.cudnn.allow_tf32 = False  # the learner's one line"


ENGINE = """
import json
from experiments.core.config import ExperimentConfig
from experiments.measure.run import run_experiment

r = run_experiment(ExperimentConfig(model="cnn", device="cuda", precision={precision!r}, optimizer="adam", steps=2,
                                    timing_steps=0, layers={layers}, width={width}, batch={batch},
                                    image_size={image_size}))
print(json.dumps({{"peak": r["peak_bytes"] - r["baseline_bytes"], "other": r["breakdown"].get("other", 0),
                  "estimate": r["estimate"]["peak_bytes"]}}))
"""


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def engine_peak(precision: str) -> dict:
    return _fresh(ENGINE.format(**CNN, precision=precision))


def plain_loop_peak(precision: str, steps: int = 2) -> dict:
    code = PLAIN_LOOP.format(
        **CNN, precision=precision, steps=steps, setup=STRICT if precision == "fp32_strict" else ""
    )
    return _fresh(code)


@pytest.mark.parametrize("precision", ["fp32", "fp32_strict", "amp_bf16"])
def test_engine_cnn_peak_equals_a_plain_loop_in_a_fresh_process_to_the_byte(precision):
    r = engine_peak(precision)
    engine = r["peak"]
    plain = plain_loop_peak(precision)
    print(
        f"cnn {CNN} {precision}: engine {engine / 2**20:.2f} MiB, plain loop {plain['peak'] / 2**20:.2f} MiB "
        f"(cudnn.allow_tf32={plain['conv_tf32']}), other {r['other'] / 2**20:.2f} MiB, "
        f"estimate {r['estimate'] / 2**20:.2f} MiB"
    )
    assert plain["conv_tf32"] is (precision != "fp32_strict")
    assert engine == plain["peak"]
