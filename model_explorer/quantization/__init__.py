"""Fake quantization with NVIDIA TensorQuantizer semantics on torch's ATen kernels."""

from __future__ import annotations

from model_explorer.quantization.calibrators import (
    CALIBRATORS,
    HistogramCalibrator,
    MaxCalibrator,
    make_calibrator,
)
from model_explorer.quantization.model import QuantizedModel
from model_explorer.quantization.quantizer import (
    TensorQuantizer,
    WeightQuantizer,
    fake_quantize,
    integer_bounds,
)

__all__ = [
    "CALIBRATORS",
    "HistogramCalibrator",
    "MaxCalibrator",
    "QuantizedModel",
    "TensorQuantizer",
    "WeightQuantizer",
    "fake_quantize",
    "integer_bounds",
    "make_calibrator",
]
