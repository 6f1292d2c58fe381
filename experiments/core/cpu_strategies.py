"""Which data-parallel strategies a CPU run (gloo) can take: a rule on names alone, so that the web server checks a
configuration without importing torch (experiments/distributed/launch.py applies the same rule before it runs)."""

from __future__ import annotations

from .config import CUDA_ONLY, STRATEGIES, ConfigError


def check_cpu(strategy: str) -> None:
    """ConfigError naming `strategy` when it needs an accelerator."""
    if strategy in CUDA_ONLY:
        allowed = ", ".join(s for s in STRATEGIES if s not in CUDA_ONLY)
        raise ConfigError(
            "strategy",
            f"{strategy} is not available on a CPU run (FSDP2's CPUOffloadPolicy "
            f"needs an accelerator to offload from); allowed on CPU: {allowed}",
            "cuda_only",
            strategy=strategy,
            allowed=allowed,
        )
