"""A quantized model in the form LiteRT's converter (litert-torch) reads a quantized graph: every
quantizer as a pair of PyTorch's `quantized_decomposed` quantize/dequantize operators (what
PyTorch's PT2E quantization leaves in a graph, and what litert-torch lowers to LiteRT's QUANTIZE
and DEQUANTIZE), with the scales and integers of the QDQ ONNX export (encodings.py): a format
has this form where its family declares the integer storage (formats/forms.py), per tensor or
per channel; any other is refused in one sentence.

Three things make the file compute what the fake quantizer does:
- the encodings are computed once, eagerly, before the converter traces (it cannot run numpy);
- weights enter as their dequantized values, registered as buffers (litert-torch reads
  per-channel scales only from the program's constants and refuses a dequantize of a raw
  integer tensor), so quantizing them again gives back the same integers;
- an activation narrower than its storage type (3-7 bits in INT8) is clamped to the
  quantizer's range first: litert-torch (0.10) drops `quant_min`/`quant_max` narrower than the
  storage type, which moved digits_cnn logits by up to 0.47 before the clamp.
- an unsigned or asymmetric activation (UINT8 in the ONNX export) is written as INT8 with its
  zero point and range moved down by 128 (the same levels and values): litert-torch fails on
  uint8 quantize operators ("Invalid TFLite MLIR module"), and LiteRT's own activations are
  INT8 with a zero point.
The products stay in float32: the converter keeps QUANTIZE/DEQUANTIZE around float
convolutions rather than fusing them into int8 kernels."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.deployment.encodings import Encoding, encode
from model_explorer.deployment.export import quantizers_of
from model_explorer.errors import UserError
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer


@contextlib.contextmanager
def litert_quantizers(model: nn.Module, example: Tensor) -> Iterator[None]:
    """Within the block, each enabled quantizer of `model` (a QuantizedModel) computes with
    quantize/dequantize operators LiteRT's converter reads; `example` runs once to find the
    encodings."""
    quantizers = quantizers_of(model)
    encodings: dict[int, Encoding] = {}
    for name, quantizer in quantizers:
        quantizer.forward = _encoder(quantizer, name, encodings)  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            model(example)
        for _, quantizer in quantizers:
            quantizer.forward = _operators(quantizer, encodings[id(quantizer)])  # type: ignore[method-assign]
        yield
    finally:
        for _, quantizer in quantizers:
            del quantizer.forward
            for buffer in ("litert_weight", "litert_scale", "litert_zero_point"):
                quantizer._buffers.pop(buffer, None)


def _encoder(quantizer: TensorQuantizer, name: str, found: dict[int, Encoding]):  # noqa: ANN202
    def forward(x: Tensor) -> Tensor:
        where = f"quantizer '{name}'"
        weight = isinstance(quantizer, WeightQuantizer)
        encoding = encode(quantizer, x.detach() if weight else None, where, pack=False)
        if not encoding.integer or encoding.block_size is not None:
            raise UserError(
                f"{where}: format {quantizer.format.spelling} has no LiteRT form here; LiteRT "
                "takes integer formats per tensor or per channel"
            )
        found[id(quantizer)] = encoding
        return x

    return forward


def _operators(quantizer: TensorQuantizer, encoding: Encoding):  # noqa: ANN202
    operators = torch.ops.quantized_decomposed
    dtype = torch.uint8 if encoding.dtype == np.uint8 else torch.int8
    low, high = encoding.low, encoding.high
    scale = torch.from_numpy(encoding.scale.astype(np.float32).reshape(-1))
    if isinstance(quantizer, WeightQuantizer):
        assert encoding.values is not None
        values = torch.from_numpy(encoding.values.astype(np.int32)).float()
        shape = [1] * values.dim()
        if encoding.axis is not None:
            shape[encoding.axis] = -1
        quantizer.register_buffer("litert_weight", values * scale.reshape(shape))
    if encoding.axis is not None:
        quantizer.register_buffer("litert_scale", scale)
        quantizer.register_buffer("litert_zero_point", torch.zeros(len(scale), dtype=torch.int64))

        def per_channel(x: Tensor) -> Tensor:
            arguments = (quantizer.litert_scale, quantizer.litert_zero_point, encoding.axis)
            levels = operators.quantize_per_channel(
                quantizer.litert_weight, *arguments, low, high, dtype
            )
            return operators.dequantize_per_channel(levels, *arguments, low, high, dtype)

        return per_channel
    step, zero = float(scale[0]), encoding.zero
    if dtype == torch.uint8 and not isinstance(quantizer, WeightQuantizer):
        # The same grid in INT8: every stored level, the zero point and the range 128 lower.
        dtype, zero, low, high = torch.int8, zero - 128, low - 128, high - 128

    def per_tensor(x: Tensor) -> Tensor:
        if isinstance(quantizer, WeightQuantizer):
            x = quantizer.litert_weight
        elif encoding.clipped:
            x = x.clamp((low - zero) * step, (high - zero) * step)
        levels = operators.quantize_per_tensor(x, step, zero, low, high, dtype)
        return operators.dequantize_per_tensor(levels, step, zero, low, high, dtype)

    return per_tensor
