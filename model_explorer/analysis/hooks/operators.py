"""The quantization parameters of a quantized layer's tensors, as analysis hooks see them. (How
ATen operators are sorted and presented, opcodes and argument names, is the tracer's:
model_explorer.tracing.operators.)"""

from __future__ import annotations

from typing import Any

import numpy as np

from model_explorer.quantization.quantizer import TensorQuantizer, integer_bounds


def quantparam(quantizer: Any) -> dict[str, Any] | None:
    """TFLite-style quantization parameters of a calibrated, enabled quantizer (None for
    anything else: a disabled one, or the pass-through of a layer that is not quantized)."""
    if not isinstance(quantizer, TensorQuantizer) or not quantizer.enabled:
        return None
    if quantizer.amax is None:
        return None
    if quantizer.asymmetric:  # ONE's asymmetric form: a zero point
        params = quantizer.params()
        scale = params.scale.detach().cpu().reshape(-1).tolist()
        return {"scale": scale, "zero_point": [params.zero], "quantized_dimension": 0}
    _, bound = integer_bounds(quantizer.num_bits, quantizer.unsigned, quantizer.narrow_range)
    scale = (quantizer.amax.detach().cpu().reshape(-1) / bound).tolist()
    return {
        "scale": scale,
        "zero_point": [0] * len(scale),
        "quantized_dimension": quantizer.axis if quantizer.axis is not None else 0,
    }


def integer_type(quantizer: Any) -> type:
    """The numpy type a Circle model stores a quantizer's integers in, among those dalgona
    reads (uint8, int16, int32): uint8 for unsigned or asymmetric ones of up to 8 bits, as
    ONE's asymmetric uint8; int16 for the others up to 16 bits, as its symmetric int16."""
    bits, unsigned = quantizer.num_bits, quantizer.unsigned
    if quantizer.asymmetric:
        return np.uint8 if bits <= 8 else np.int32
    if unsigned and bits <= 8:
        return np.uint8
    return np.int16 if bits <= 16 - int(unsigned) else np.int32
