"""Fake quantization with NVIDIA TensorQuantizer semantics on torch's ATen kernels. The settings
and the calibration methods' registry are in spec.py (no torch); the public names below load
their modules on first use (SPEC 1)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CALIBRATORS": "spec",
    "MaxCalibrator": "calibrators",
    "make_calibrator": "calibrators",
    "HistogramCalibrator": "histogram_calibrators",
    "QuantizedModel": "model",
    "TensorQuantizer": "quantizer",
    "WeightQuantizer": "quantizer",
    "fake_quantize": "quantizer",
    "integer_bounds": "quantizer",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
