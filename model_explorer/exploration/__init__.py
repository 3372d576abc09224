"""The search: NSGA-II over a Problem, every evaluation recorded, resumable.

Importing the package does no work (the workload schema imports its settings from here, and
pymoo is imported only when a search is made): the names below load their modules on first use.
`explore()`, which runs a workload's search, is operations/explore.py.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Explorer": "model_explorer.exploration.explorer",
    "make_algorithm": "model_explorer.exploration.explorer",
    "Runner": "model_explorer.exploration.runners",
    "SerialRunner": "model_explorer.exploration.runners",
    "ProcessRunner": "model_explorer.exploration.runners",
    "build_runner": "model_explorer.exploration.runners",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'model_explorer.exploration' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)
