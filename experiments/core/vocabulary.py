"""Names and sizes shared by the engine and the app. Torch-free, so the app reads them without importing torch.

The engine measures and estimates in these terms; the app translates each name (`cat.<name>`, `phase.<name>`).
"""

from __future__ import annotations

# What a tensor is for, as the storage tracker tags it.
TENSOR_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "autocast_copies",
                     "data")
# On CUDA the allocator's peak also holds what is not a tensor (whole blocks, kernels' scratch memory).
CATEGORIES = TENSOR_CATEGORIES + ("other",)
PHASES = ("model", "optimizer", "data", "zero_grad", "forward", "backward", "optimizer_step")

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
