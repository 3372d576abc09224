"""Fake quantization with NVIDIA TensorQuantizer semantics on torch's ATen kernels. The settings
and the calibration methods' registry are in spec.py (no torch); the public names below load
their modules on first use (SPEC 1)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "spec": ["CALIBRATORS"],
        "calibrators": ["MaxCalibrator", "make_calibrator"],
        "histogram_calibrators": ["HistogramCalibrator"],
        "model": ["QuantizedModel"],
        "quantizer": ["TensorQuantizer", "WeightQuantizer", "fake_quantize", "integer_bounds"],
    },
)
