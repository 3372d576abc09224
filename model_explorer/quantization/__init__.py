"""Fake quantization with NVIDIA TensorQuantizer semantics on torch's ATen kernels. (Importing
histogram_calibrators here registers the histogram methods in CALIBRATORS.)"""

from __future__ import annotations

from model_explorer.quantization.calibrators import CALIBRATORS, MaxCalibrator, make_calibrator
from model_explorer.quantization.histogram_calibrators import HistogramCalibrator
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
