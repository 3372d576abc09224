"""Cost of layers and models: multiply-accumulates, parameters, memory traffic, bit costs of a
plan, energy. Its public names load their modules on first use (scientific Python's lazy
loading, SPEC 1), so that the settings in cost/energy/spec.py import no torch."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CONVENTIONS": "analyze",
    "CostReport": "analyze",
    "CostRow": "analyze",
    "analyze_cost": "analyze",
    "BitCostModel": "bits",
    "weighted_bits": "bits",
    "LayerCost": "layers",
    "layer_macs": "layers",
    "measure_layers": "layers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
