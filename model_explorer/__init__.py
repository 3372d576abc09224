"""model_explorer: how far can a trained PyTorch network be compressed, layer by layer?

Importing the package does no work: the names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "UserError": "model_explorer.errors",
    "Workload": "model_explorer.workload.file",
    "load_workload": "model_explorer.workload.file",
    "WorkloadContext": "model_explorer.workload.context",
    "build_model": "model_explorer.models",
    "create_model": "model_explorer.models",
    "register_model": "model_explorer.models",
    "build_dataset": "model_explorer.datasets",
    "build_loader": "model_explorer.datasets",
    "register_dataset": "model_explorer.datasets",
    "TensorCache": "model_explorer.datasets",
    "evaluate": "model_explorer.metrics.functions",
    "create_metric": "model_explorer.metrics.functions",
    "train": "model_explorer.training.loop",
    "search": "model_explorer.api.search",
    "load": "model_explorer.api.search",
    "quantize": "model_explorer.api.quantize",
    "calibrate": "model_explorer.api.quantize",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'model_explorer' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)
