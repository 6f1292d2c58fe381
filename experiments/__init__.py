"""GPU Memory Lab's experiment engine: runs sandbox configurations for real and measures them.

Importable without Streamlit; `python -m experiments --help` is its command line.
"""

import logging
import os
import warnings

# Models are built from configs, never downloaded. Libraries still try the Hugging Face Hub on their own: bitsandbytes'
# CPU backend asks it for an optional 4-bit matmul kernel at import (seconds on a machine without network), then warns
# that it fell back to its own, which is the one every CPU run and test of this project uses. The `kernels` package
# (transformers' dependency) is only reached through that attempt.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
logging.getLogger("kernels").setLevel(logging.ERROR)
logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(
    lambda record: not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward")
)

# peft reads transformers' deprecated `is_gradient_checkpointing` on every LoRA model it wraps; the warning is for peft's
# authors, and a search printed it once per replay.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)

from .core.config import ConfigError, ExperimentConfig  # noqa: E402 - after the environment it reads

__all__ = ["ConfigError", "ExperimentConfig"]
