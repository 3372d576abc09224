"""Activation block sparsity in the im2col domain: BlockSparsifier (sparsifier.py, kernel.py)
and SparseModel (model.py); the settings in spec.py (no torch). The public names below load
their modules on first use (SPEC 1)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SPARSIFIABLE_LAYERS": "spec",
    "discretize_threshold": "discretize",
    "threshold_steps": "discretize",
    "SparseModel": "model",
    "BlockSparsifier": "sparsifier",
    "im2col": "sparsifier",
    "layer_geometry": "sparsifier",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
