"""How each quantizer is written in ONNX's QDQ form: the integer or FP8 type its values are
stored in, its scales (per tensor, per channel with `axis`, or per block with `block_size`, as
DequantizeLinear of opset 21 takes them), the integer range it uses and, for a weight, the
stored values themselves, computed with the quantizer's own numerics. Which storage a format
has is its family's word (`FormatFamily.qdq_form`, formats/forms.py: integer, group-wise integer
weights, FP8, or none with the reason); this module writes each storage and names no format.

Storage types: a weight of up to 4 bits is INT4/UINT4 (two values a byte), up to 8 bits
INT8/UINT8, wider INT16/UINT16; activations are INT8/UINT8 up to 8 bits (the types integer
kernels read; a narrower range is a Clip of the integers, so the levels stay the quantizer's),
INT16/UINT16 above. FP8 is FLOAT8E4M3FN or FLOAT8E5M2 with the quantizer's per-tensor or
per-channel scale and no zero point: QuantizeLinear names the type by `output_dtype` (opset 21).
With a float8 zero point, onnxruntime's default graph optimisations (up to 1.32: its
ReluQuantRewrite, which treats every zero point other than INT8's and UINT8's as the bottom of
its range) delete a Relu before the QuantizeLinear, and the file scores chance where its basic
level scores what the search recorded (docs/upstream/onnxruntime-relu-fp8.md). Formats whose
scales ONNX cannot hold (MX's shared E8M0 exponents, NVFP4's two-level scales, group-wise
integer scales of an activation, computed at run time) declare no storage and are refused.
An asymmetric activation is UINT8 (UINT16 above 8 bits) with its zero point: the levels 0 to
2**bits - 1 that QuantizeLinear's saturate(round(x / scale) + zero_point) gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch
from onnx import TensorProto
from torch import Tensor

from model_explorer.errors import UserError
from model_explorer.formats import FORMATS
from model_explorer.formats.elements import ELEMENTS, cast_element_
from model_explorer.formats.forms import QDQForm, Storage
from model_explorer.formats.integer import ZERO_AMAX, channel_view, integer_bounds
from model_explorer.formats.layout import block_amax, merge_blocks, split_blocks

# Where an activation's amax is zero every value quantizes to level 0: a scale this large does.
ZERO_SCALE = 1e30

_INTEGER_TYPES = {
    (4, False): (TensorProto.INT4, ml_dtypes.int4),
    (4, True): (TensorProto.UINT4, ml_dtypes.uint4),
    (8, False): (TensorProto.INT8, np.int8),
    (8, True): (TensorProto.UINT8, np.uint8),
    (16, False): (TensorProto.INT16, np.int16),
    (16, True): (TensorProto.UINT16, np.uint16),
}
_FLOAT8_TYPES = {
    "e4m3": (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    "e5m2": (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
}


@dataclass
class Encoding:
    """One quantizer in QDQ form; `values` (a weight's stored values) is None for an activation,
    `low`/`high` None for FP8."""

    onnx_type: int
    dtype: type
    scale: np.ndarray
    axis: int | None = None
    block_size: int | None = None
    low: int | None = None
    high: int | None = None
    values: np.ndarray | None = None
    zero: int = 0  # an asymmetric activation's zero point (low and high are stored levels)

    @property
    def zero_point(self) -> np.ndarray | None:
        """The zero point in the storage type, shaped like the scale (0 where symmetric); None
        for FP8, whose QuantizeLinear names its type by `output_dtype` instead (see
        `floating`)."""
        if not self.integer:
            return None
        return np.full(self.scale.shape, self.zero, dtype=self.dtype)

    @property
    def clipped(self) -> bool:
        """True where the quantizer's levels are fewer than the storage type's (a 3-bit
        activation stored as INT8): the integers must be clipped to [low, high]."""
        if self.low is None:
            return False
        info = ml_dtypes.iinfo(self.dtype)
        return (self.low, self.high) != (int(info.min), int(info.max))

    @property
    def integer(self) -> bool:
        return self.low is not None


def storage_bits(num_bits: int, weight: bool, pack: bool = True) -> int:
    """The width of the ONNX integer type holding `num_bits` levels (see the module's text)."""
    if num_bits <= 4 and weight and pack:
        return 4
    return 8 if num_bits <= 8 else 16


def encode(quantizer, weight: Tensor | None, where: str, pack: bool = True) -> Encoding:  # noqa: ANN001
    """The QDQ form of `quantizer` (a TensorQuantizer): of a weight when `weight` is given (the
    float weight it quantizes), else of the activation it quantizes. The storage is what the
    format's family declares (`FormatFamily.qdq_form`); this module only writes it."""
    chosen = quantizer.format
    form = chosen.qdq_form(weight is not None)
    if form.storage is None:
        raise UserError(
            f"{where}: format {chosen.spelling} has no ONNX QDQ form ({form.reason}); ONNX "
            f"export takes {exportable()}"
        )
    return _WRITERS[form.storage](quantizer, weight, form, pack)


def exportable() -> str:
    """The formats ONNX's QDQ form takes, as their families say (`qdq_takes`)."""
    return ", ".join(
        entry.name + (f" ({entry.builder.qdq_takes})" if entry.builder.qdq_takes else "")
        for entry in FORMATS.entries()
        if entry.builder.qdq_takes is not None
    )


def _storage(num_bits: int, unsigned: bool, weight: bool, pack: bool) -> tuple[int, type]:
    return _INTEGER_TYPES[(storage_bits(num_bits, weight, pack), unsigned)]


def _integer(quantizer, weight: Tensor | None, form: QDQForm, pack: bool) -> Encoding:  # noqa: ANN001
    if weight is not None:
        quantizer.quantize_weight(weight.detach())  # amax follows the weight
    params = quantizer.params()
    if quantizer.asymmetric and weight is None:
        onnx_type, dtype = _storage(quantizer.num_bits, True, False, pack)
        scale = np.asarray(float(params.scale.reshape(-1)[0]), dtype=np.float32)
        low, high = params.low + params.zero, params.high + params.zero
        return Encoding(onnx_type, dtype, scale, None, low=low, high=high, zero=params.zero)
    scale, axis = _scales(quantizer, quantizer.amax, params.high, weight)
    onnx_type, dtype = _storage(quantizer.num_bits, quantizer.unsigned, weight is not None, pack)
    encoding = Encoding(
        onnx_type, dtype, _plain(scale, axis), axis, low=params.low, high=params.high
    )
    if weight is not None:
        multiplier = channel_view(params.multiplier.cpu(), weight.dim(), encoding.axis)
        levels = (weight.detach().float().cpu() * multiplier).round_()
        encoding.values = _stored(levels.clamp_(params.low, params.high), dtype)
    return encoding


def _grouped(quantizer, weight: Tensor, form: QDQForm, pack: bool) -> Encoding:  # noqa: ANN001
    """Group-wise integers of a weight: one FP16-rounded scale per group of `group_size` values
    along the layer's input channels (the groups as the format forms them, formats/layout.py),
    the scales held by DequantizeLinear's blocked form."""
    assert form.bits is not None and form.group_size is not None
    low, high = integer_bounds(form.bits, quantizer.unsigned, quantizer.narrow_range)
    axis = quantizer.block_axis % weight.dim()
    values = weight.detach().float().cpu()
    blocks, dim = split_blocks(values, form.group_size, axis)
    amax = block_amax(blocks, dim)
    scale = (amax / high).clamp_(max=torch.finfo(torch.float16).max).half().float()
    zero = (amax <= ZERO_AMAX) | (scale == 0)
    scale = torch.where(zero, 1.0, scale)
    levels = (blocks / scale).round_().clamp_(low, high).masked_fill_(zero, 0)
    onnx_type, dtype = _storage(form.bits, quantizer.unsigned, True, pack)
    return Encoding(
        onnx_type,
        dtype,
        scale.squeeze(dim).contiguous().numpy(),
        axis=axis,
        block_size=blocks.shape[dim],
        low=low,
        high=high,
        values=_stored(merge_blocks(levels, values.shape, axis), dtype),
    )


def _float8(quantizer, weight: Tensor | None, form: QDQForm, pack: bool) -> Encoding:  # noqa: ANN001
    """Scaled FP8: values / (amax / max_normal) cast to the element (saturating), as
    QuantizeLinear with a float8 zero point computes them."""
    assert form.element is not None
    element_name = form.element
    element = ELEMENTS[element_name]
    if weight is not None:
        quantizer.quantize_weight(weight.detach())
    scale, axis = _scales(quantizer, quantizer.format_amax(), element.max_normal, weight)
    onnx_type, dtype = _FLOAT8_TYPES[element_name]
    encoding = Encoding(onnx_type, dtype, _plain(scale, axis), axis)
    if weight is not None:
        divisor = channel_view(scale, weight.dim(), encoding.axis)
        values = cast_element_(weight.detach().float().cpu() / divisor, element)
        encoding.values = values.numpy().astype(dtype)
    return encoding


def _scales(quantizer, amax: Tensor, bound: float, weight: Tensor | None):  # noqa: ANN001, ANN202
    """amax / bound per tensor or channel (where amax is zero: 1 for a weight, whose levels are
    then all 0, ZERO_SCALE for an activation, so that everything rounds to 0), and the
    quantizer's axis (a weight's counted from the front)."""
    amax = amax.detach().float().cpu().reshape(-1)
    zero = amax <= ZERO_AMAX
    scale = torch.where(zero, 1.0 if weight is not None else ZERO_SCALE, amax / bound)
    axis = quantizer.axis
    if axis is not None and weight is not None:
        axis %= weight.dim()
    return scale, axis


def _plain(scale: Tensor, axis: int | None) -> np.ndarray:
    """A scale as DequantizeLinear takes it: a scalar per tensor, a vector along `axis`."""
    scale = scale.float()
    return scale.reshape(()).numpy() if axis is None else scale.reshape(-1).numpy()


def _stored(levels: Tensor, dtype: type) -> np.ndarray:
    return levels.to(torch.int32).numpy().astype(dtype)


# The writer of each storage a family may declare (formats/forms.py).
_WRITERS: dict[Storage, Callable[..., Encoding]] = {
    "integer": _integer,
    "integer_groups": _grouped,
    "float8": _float8,
}


def scale_channels(encoding: Encoding, factor: np.ndarray) -> None:
    """Multiply a weight's output channels (axis 0) by `factor`: into the scales, per channel;
    a negative factor negates the channel's stored values where the type can hold the
    negation, else its scale turns negative."""
    channels = factor.shape[0]
    if encoding.axis is None:
        encoding.scale = np.full(channels, encoding.scale, dtype=np.float32)
        encoding.axis = 0
    view = (-1,) + (1,) * (encoding.scale.ndim - 1)
    negative = factor < 0
    values = encoding.values
    if encoding.integer:
        flat = values.astype(np.int32).reshape(channels, -1)
        info = (encoding.low, encoding.high)
        negatable = negative & (-flat.min(axis=1) <= info[1]) & (-flat.max(axis=1) >= info[0])
        flat[negatable] = -flat[negatable]
        encoding.values = flat.reshape(values.shape).astype(encoding.dtype)
    else:  # FP8 is sign-magnitude: negation is exact
        negatable = negative
        flat = values.astype(np.float32).reshape(channels, -1)
        flat[negatable] = -flat[negatable]
        encoding.values = flat.reshape(values.shape).astype(encoding.dtype)
    magnitude = np.where(negatable, -factor, factor).astype(np.float32)
    encoding.scale = (encoding.scale * magnitude.reshape(view)).astype(np.float32)
