"""The three built-in model families' shapes, torch-free: what the CNN's pooling does to an image, and the
parameter tensors of each family (experiments/training/models.py builds exactly these; a test holds them equal).
The lessons' figures in parameter units read these without importing torch (experiments/core/metrics.py)."""

from __future__ import annotations

import math

CNN_CLASSES = 10  # the CNN's classifier outputs; its targets are class indices


def cnn_pools(image_size: int, index: int) -> bool:
    """Halve the resolution after every second conv while the image is at least 16 px."""
    size = image_size // (2 ** sum(1 for j in range(index) if j % 2 == 1))
    return index % 2 == 1 and size >= 16


def cnn_spatial_sizes(cfg) -> list[tuple[int, int]]:
    """(input size of conv i, size after its pooling) for each conv layer of cfg."""
    sizes, s = [], cfg.image_size
    for i in range(cfg.layers):
        out = s // 2 if cnn_pools(cfg.image_size, i) else s
        sizes.append((s, out))
        s = out
    return sizes


def parameter_shapes(cfg) -> tuple[list[list[tuple[int, ...]]], list[tuple[int, ...]]]:
    """(the parameter shapes of each block, of the head), in the modules' order."""
    w = cfg.width
    if cfg.model == "mlp":
        return [[(w, w), (w,)] for _ in range(cfg.layers)], []
    if cfg.model == "cnn":
        blocks = [[(w, 3 if i == 0 else w, 3, 3), (w,)] for i in range(cfg.layers)]
        return blocks, [(CNN_CLASSES, w), (CNN_CLASSES,)]
    block = [(w,), (w,), (3 * w, w), (3 * w,), (w, w), (w,), (w,), (w,), (4 * w, w), (4 * w,), (w, 4 * w), (w,)]
    return [list(block) for _ in range(cfg.layers)], [(w,), (w,)]


def parameter_bytes(cfg) -> int:
    """The model's parameter bytes as its tensors hold them (no allocator rounding)."""
    blocks, head = parameter_shapes(cfg)
    count = sum(math.prod(s) for shapes in blocks + [head] for s in shapes)
    return count * (2 if cfg.precision == "bf16" else 4)
