"""Names the installed libraries surely lack, found without importing them: transformers and torchvision import torch
(seconds), and a mistyped --model-type or a missing torchvision is an argument error that should answer at once.

Each check only says "surely not": transformers writes every model type it knows as a quoted name beside its
configuration class in the files of models/auto/ (configuration_auto.py, auto_mappings.py since 5.x), and keeps most
of them in a folder of models/ of the same name; a name absent from both is unknown. Anything else, files where
they were not expected included, goes on to the library's own answer (experiments/training/hf_models.py).
Torch-free."""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import importlib.util
import re
from pathlib import Path

from .errors import ConfigError

_ENTRY = re.compile(r'"([\w.-]+)"\s*[:,]\s*"\w*Config"')


@functools.lru_cache(maxsize=1)
def _transformers_types() -> tuple[str, frozenset[str], frozenset[str]] | None:
    """(transformers' version, the model types its auto tables name, its model folders), or None where they cannot be
    read."""
    try:
        spec = importlib.util.find_spec("transformers")
        version = importlib.metadata.version("transformers")
        models = Path(spec.origin).parent / "models"
        names = {n for f in (models / "auto").glob("*.py") for n in _ENTRY.findall(f.read_text(encoding="utf-8"))}
        folders = {d.name for d in models.iterdir() if d.is_dir()}
    except (ImportError, ValueError, AttributeError, TypeError, OSError, importlib.metadata.PackageNotFoundError):
        return None
    return (version, frozenset(names), frozenset(folders)) if names else None


def check_model_type(model_type: str) -> None:
    """Refuse a model type that transformers surely does not know, in one line with the closest names."""
    known = _transformers_types()
    if known is None or model_type in known[1] or model_type.replace("-", "_") in known[2]:
        return
    version, names, _folders = known
    close = difflib.get_close_matches(model_type, sorted(names), n=5)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise ConfigError(
        "model_source",
        f"{model_type!r} is not a model type of the installed transformers {version}{hint} "
        "(python -m experiments models lists the ones trained here)",
        "unknown",
        value=model_type,
        known=f"{len(names)} model types of transformers {version}{hint}",
    )


def check_torchvision() -> None:
    """Refuse a torchvision model where torchvision is not installed at all (one that is installed but built for
    another torch is found by importing it, in a child process: experiments/training/source_models.py)."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    try:
        torch = f"torch {importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        torch = "torch"
    why = (
        f"torchvision is not installed; install the torchvision release built for {torch} from the same index as torch"
    )
    raise ConfigError("model_source", why, "model_spec", detail=why)
