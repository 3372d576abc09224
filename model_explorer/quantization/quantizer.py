"""TensorQuantizer: symmetric, amax-based integer fake quantization with NVIDIA's semantics.

For `num_bits` b, `bound = 2**(b - 1 + unsigned) - 1`, `scale = bound / amax`, and
`q = clamp(round(x * scale), min_bound, bound) / scale` with `min_bound` 0 (unsigned), `-bound`
(narrow range) or `-bound - 1`. The work is one call of torch's fused ATen kernels
`fake_quantize_per_tensor_affine` / `fake_quantize_per_channel_affine` (CPU and CUDA,
straight-through gradients inside the range), which compute the same values as
`x / (amax / bound)` (one float ulp from the formula at most), or, on the CPU without autograd,
by four vectorised in-place steps that are four times faster there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from model_explorer.quantization.calibrators import Calibrator, MaxCalibrator
from model_explorer.tracing import Opaque

# Below this an amax counts as zero: everything quantizes to 0 (as in NVIDIA's implementation).
ZERO_AMAX = 1.0 / (1 << 24)
# A scale so large that every finite input rounds to level 0.
_ZERO_SCALE = 1e30

MIN_BITS, MAX_BITS = 2, 16


def integer_bounds(
    num_bits: int, unsigned: bool = False, narrow_range: bool = False
) -> tuple[int, int]:
    """(min_bound, max_bound) of the integer levels."""
    bound = 2 ** (num_bits - 1 + int(unsigned)) - 1
    if unsigned:
        return 0, bound
    return (-bound if narrow_range else -bound - 1), bound


def check_bits(num_bits: int) -> int:
    if (
        isinstance(num_bits, bool)
        or int(num_bits) != num_bits
        or not MIN_BITS <= num_bits <= MAX_BITS
    ):
        raise ValueError(
            f"num_bits must be an integer from {MIN_BITS} to {MAX_BITS}, got {num_bits!r}"
        )
    return int(num_bits)


@dataclass(frozen=True)
class QuantParams:
    """Everything one quantization needs, computed once per change of amax or settings."""

    low: int
    high: int
    axis: int | None
    scale: Tensor  # ATen's scale, amax / bound (huge where amax is zero: all levels 0)
    zero_point: Tensor  # ATen's zero point, 0
    multiplier: Tensor  # bound / amax (0 where amax is zero)
    divisor: Tensor  # bound / amax (1 where amax is zero, as in NVIDIA's implementation)


def quant_params(
    amax: Tensor,
    num_bits: int,
    unsigned: bool = False,
    narrow_range: bool = False,
    axis: int | None = None,
) -> QuantParams:
    low, high = integer_bounds(num_bits, unsigned, narrow_range)
    amax = amax.detach().float().reshape(-1)
    zero = amax <= ZERO_AMAX
    multiplier = torch.where(zero, torch.zeros_like(amax), high / amax)
    return QuantParams(
        low=low,
        high=high,
        axis=axis,
        scale=torch.where(zero, torch.full_like(amax, _ZERO_SCALE), amax / high),
        zero_point=torch.zeros(amax.numel(), dtype=torch.int32, device=amax.device),
        multiplier=multiplier,
        divisor=torch.where(zero, torch.ones_like(amax), multiplier),
    )


def _channel_view(values: Tensor, axis: int, dims: int) -> Tensor:
    shape = [1] * dims
    shape[axis] = -1
    return values.view(shape)


def apply_quantization(x: Tensor, params: QuantParams) -> Tensor:
    """Fake-quantize `x` with precomputed parameters.

    On CUDA, and whenever a gradient is needed, this is one fused ATen kernel. On the CPU
    without autograd it is four vectorised in-place steps (multiply, round, clamp, divide):
    ATen's CPU fake-quantize kernel also computes a gradient mask and runs about four times
    slower (measured: 9.3 ms vs 2.2 ms for 3.2 M values on 2 cores). Both give the formula's
    values up to float rounding.
    """
    dtype = x.dtype
    if dtype != torch.float32:
        x = x.float()
    axis = None if params.axis is None else params.axis % x.dim()
    if x.device.type == "cpu" and not (torch.is_grad_enabled() and x.requires_grad):
        multiplier, divisor = params.multiplier, params.divisor
        if axis is not None:
            multiplier = _channel_view(multiplier, axis, x.dim())
            divisor = _channel_view(divisor, axis, x.dim())
        out = (x * multiplier).round_().clamp_(params.low, params.high).div_(divisor)
    elif axis is None:
        out = torch.fake_quantize_per_tensor_affine(
            x, params.scale, params.zero_point, params.low, params.high
        )
    else:
        out = torch.fake_quantize_per_channel_affine(
            x, params.scale, params.zero_point, axis, params.low, params.high
        )
    return out if dtype == torch.float32 else out.to(dtype)


def fake_quantize(
    x: Tensor,
    amax: Tensor,
    num_bits: int = 8,
    unsigned: bool = False,
    narrow_range: bool = False,
    axis: int | None = None,
) -> Tensor:
    """Fake-quantize `x` with per-tensor (`axis=None`, amax of shape ()) or per-channel amax."""
    return apply_quantization(x, quant_params(amax, num_bits, unsigned, narrow_range, axis))


class TensorQuantizer(Opaque, nn.Module):
    """Fake-quantizes the tensors passing through it.

    `num_bits` can change at any time; a calibrator whose amax depends on the bit width (mse,
    entropy) supplies the amax for the new width from its kept histogram, computed once per width.
    In calibration mode the quantizer feeds its calibrator and passes tensors through unchanged.

    Args:
        num_bits: the bit width (2 to 16).
        axis: None for one amax per tensor, else the axis with one amax per index (per channel).
        unsigned: quantize to [0, 2**bits - 1] instead of a signed range.
        narrow_range: a symmetric signed range (the negative side clipped to -bound).
        enabled: false passes tensors through untouched.
        calibrator: what collects amax in calibration mode; the max of |x| along `axis` when
            None.
    """

    def __init__(
        self,
        num_bits: int = 8,
        axis: int | None = None,
        unsigned: bool = False,
        narrow_range: bool = False,
        enabled: bool = True,
        calibrator: Calibrator | None = None,
    ) -> None:
        super().__init__()
        self._num_bits = check_bits(num_bits)
        self.axis = axis
        self.unsigned = unsigned
        self.narrow_range = narrow_range
        self.enabled = enabled
        self.calibrating = False
        self.calibrator: Calibrator = calibrator if calibrator is not None else MaxCalibrator(axis)
        self.register_buffer("_amax", None, persistent=False)
        self._from_calibrator = False
        # Parameters per (bits, signedness, range, axis), valid until amax is set anew: with a
        # calibrator the amax of each width is fixed, so switching widths back and forth during
        # a search costs nothing after the first time.
        self._params: dict[tuple, QuantParams] = {}

    # -- settings -------------------------------------------------------------------------
    @property
    def num_bits(self) -> int:
        return self._num_bits

    @num_bits.setter
    def num_bits(self, value: int) -> None:
        value = check_bits(value)
        if value == self._num_bits:
            return
        self._num_bits = value
        if self._from_calibrator and self.calibrator.depends_on_bits:
            self._store_amax(self.calibrator.compute_amax(value, self.unsigned), keep_params=True)

    @property
    def amax(self) -> Tensor | None:
        return self._amax

    @amax.setter
    def amax(self, value: Tensor | float | Sequence[float]) -> None:
        self._store_amax(torch.as_tensor(value, dtype=torch.float32))
        self._from_calibrator = False

    def _store_amax(self, value: Tensor, keep_params: bool = False) -> None:
        value = value.detach().float()
        if value.dim() > 1 or (self.axis is None and value.numel() != 1):
            raise ValueError(
                f"amax must have shape () for a per-tensor quantizer or (channels,) for axis "
                f"{self.axis}, got {tuple(value.shape)}"
            )
        if (value < 0).any():
            raise ValueError("amax must not be negative")
        device = self._amax.device if self._amax is not None else value.device
        self._amax = (value.reshape(()) if self.axis is None else value.reshape(-1)).to(device)
        if not keep_params:
            self._params = {}

    # -- calibration ----------------------------------------------------------------------
    def start_calibration(self, calibrator: Calibrator | None = None) -> None:
        """Collect statistics of the tensors passing through, instead of quantizing them."""
        if calibrator is not None:
            self.calibrator = calibrator
        self.calibrator.reset()
        self.calibrating = True

    def finish_calibration(self) -> None:
        """Leave calibration mode and take amax from the calibrator for the current bit width."""
        self.calibrating = False
        amax = self.calibrator.compute_amax(self._num_bits, self.unsigned)
        if amax is None:
            raise RuntimeError("calibration saw no data for this quantizer")
        self._store_amax(amax)
        self._from_calibrator = True

    def restore_calibrator(self, calibrator: Calibrator) -> None:
        """Adopt a calibrator loaded from a file as if this quantizer had collected it."""
        self.calibrator = calibrator
        self.finish_calibration()

    # -- quantization ---------------------------------------------------------------------
    def params(self) -> QuantParams:
        """Parameters for the current amax and settings, computed once per change."""
        if self._amax is None:
            raise RuntimeError(
                "this quantizer has no amax yet: calibrate the model or load a calibration file"
            )
        key = (self._num_bits, self.unsigned, self.narrow_range, self.axis)
        params = self._params.get(key)
        if params is None:
            params = quant_params(
                self._amax, self._num_bits, self.unsigned, self.narrow_range, self.axis
            )
            self._params[key] = params
        return params

    def forward(self, x: Tensor) -> Tensor:
        return self.quantize(x)

    def quantize(self, x: Tensor) -> Tensor:
        """Fake-quantize `x` (or, in calibration mode, feed the calibrator and pass it on)."""
        if self.calibrating:
            self.calibrator.collect(x)
            return x
        if not self.enabled:
            return x
        return apply_quantization(x, self.params())

    def extra_repr(self) -> str:
        kind = "per-tensor" if self.axis is None else f"axis={self.axis}"
        sign = "unsigned" if self.unsigned else "signed"
        state = "calibrating" if self.calibrating else ("enabled" if self.enabled else "disabled")
        narrow = ", narrow" if self.narrow_range else ""
        return f"{self._num_bits} bit, {kind}, {sign}{narrow}, {state}"

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - nn.Module's signature
        self._params = {}  # device or dtype changes: rebuild the scale tensors lazily
        return super()._apply(fn, recurse)


class WeightQuantizer(TensorQuantizer):
    """A quantizer for a layer's weight: amax comes from the weight itself (max of |w|, per
    output channel by default) and follows it when the weight changes; quantized weights are
    cached per bit width, so evaluating a new bit configuration re-quantizes only the layers
    whose weight bits changed. To the tracer its output is the weight of the layer calling it.

    Args:
        *args, **kwargs: TensorQuantizer's.
        cache_size: how many quantized weights to keep, one per bit width (None: every width
            seen, 0: none).
    """

    traced_output = "weight"

    def __init__(self, *args, cache_size: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cache_size = cache_size
        self._cache: dict[tuple, Tensor] = {}
        self._source: tuple[int, int, int] | None = None

    def _sync(self, weight: Tensor) -> None:
        """Recompute amax when the weight is replaced or changed in place (a training step)."""
        source = (weight.data_ptr(), weight._version, weight.device.index or 0)
        if source != self._source or self._amax is None:
            calibrator = MaxCalibrator(self.axis)
            calibrator.collect(weight.detach())
            self._store_amax(calibrator.compute_amax(self._num_bits, self.unsigned))
            self._cache.clear()
            self._source = source

    def forward(self, weight: Tensor) -> Tensor:
        # Called as a module (`layer.weight_quantizer(layer.weight)`), so that every operation
        # of weight quantization runs inside this module: hooks and profilers see it as one.
        return self.quantize_weight(weight)

    def quantize_weight(self, weight: Tensor) -> Tensor:
        if not self.enabled:
            return weight
        self._sync(weight)
        if torch.is_grad_enabled() and weight.requires_grad:
            return self.quantize(weight)  # training: differentiable, never cached
        if self.cache_size == 0:
            return self.quantize(weight)
        key = (self._num_bits, self.unsigned, self.narrow_range, self.axis)
        cached = self._cache.get(key)
        if cached is None:
            if self.cache_size is not None and len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            cached = self._cache[key] = self.quantize(weight.detach())
        return cached

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202
        self._cache.clear()
        self._source = None
        return super()._apply(fn, recurse)
