"""GPU Memory Lab's experiment engine: runs sandbox configurations for real and measures them.

Importable without Streamlit; `python -m experiments --help` is its command line.
"""

from .core.config import ConfigError, ExperimentConfig

__all__ = ["ConfigError", "ExperimentConfig"]
