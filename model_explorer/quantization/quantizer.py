"""TensorQuantizer: the module that fake-quantizes the tensors passing through a layer in one
format of the format registry (model_explorer/formats/); the integer format with NVIDIA's
semantics (formats/integer.py) unless a plan chooses another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.formats import Placement, QuantFormat, integer_format, parse_format
from model_explorer.formats.integer import (  # noqa: F401 - re-exported: the integer format's numerics
    MAX_BITS,
    MIN_BITS,
    ZERO_AMAX,
    QuantParams,
    apply_quantization,
    asymmetric_params,
    check_bits,
    fake_quantize,
    integer_bounds,
    quant_params,
)
from model_explorer.quantization.calibrators import Calibrator, MaxCalibrator
from model_explorer.tracing import Opaque


class TensorQuantizer(Opaque, nn.Module):
    """Fake-quantizes the tensors passing through it.

    `num_bits` can change at any time, and so can `format` (any format of the registry, e.g.
    `mxfp4`; setting `num_bits` goes back to the integer format); a calibrator whose amax
    depends on the bit width (mse, entropy) supplies the amax for the new width from its kept
    histogram, computed once per width. In calibration mode the quantizer feeds its calibrator
    and passes tensors through unchanged. `block_axis` is the axis along which block formats
    form their blocks: the layer that owns the quantizer sets it to its input-channel axis.

    Args:
        num_bits: the bit width (2 to 16).
        axis: None for one amax per tensor, else the axis with one amax per index (per channel).
        unsigned: quantize to [0, 2**bits - 1] instead of a signed range.
        narrow_range: a symmetric signed range (the negative side clipped to -bound).
        asymmetric: a zero point: 2**num_bits levels over the calibrated range [low, high]
            (per tensor; the calibrator chooses the range for each width, `unsigned` is moot).
        enabled: false passes tensors through untouched.

    `bounds` (floor, ceiling), None unless set: the tensors are clamped to it first, inside the
    quantization's own pass where the format's kernel takes it (the activation before the layer,
    skipped while a search scores a candidate: elision.py).
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
        asymmetric: bool = False,
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
        # An asymmetric quantizer's range minimum (<= 0); its maximum is amax.
        self._amin: float | None = None
        self._asymmetric = False
        self.asymmetric = asymmetric
        # Another format than the integer one at `_num_bits` (None: the integer format).
        self._format: QuantFormat | None = None
        self.block_axis = -1
        self.bounds: tuple[float, float] | None = None
        # True while nothing reads the tensors it is handed after it (an activation before it
        # skipped, its input read by that activation alone: elision.py; an attention product's
        # own copy of its operand: attention.py): the integer format's kernel writes its
        # result over them.
        self.overwrites = False
        # Parameters per (bits, signedness, range, axis), valid until amax is set anew: with a
        # calibrator the amax of each width is fixed, so switching widths back and forth during
        # a search costs nothing after the first time.
        self._params: dict[tuple, QuantParams] = {}

    # -- settings -------------------------------------------------------------------------
    @property
    def num_bits(self) -> int:
        """The integer format's bit width, or the element bits of another format."""
        return self._num_bits if self._format is None else self._format.element_bits

    @num_bits.setter
    def num_bits(self, value: int) -> None:
        value = check_bits(value)
        if self._format is not None:
            self._format = None
        elif value == self._num_bits:
            return
        self._num_bits = value
        if self._from_calibrator and self.calibrator.depends_on_bits:
            self._take_calibrated(keep_params=True)

    @property
    def format(self) -> QuantFormat:
        """The format in effect (the integer format at `num_bits` unless another was set)."""
        return self._format if self._format is not None else integer_format(self._num_bits)

    @format.setter
    def format(self, value: QuantFormat | str | dict[str, Any]) -> None:
        chosen = parse_format(value)
        if chosen.classic:
            self.num_bits = chosen.options.num_bits
        elif chosen is not self._format:  # a search sets the same format thousands of times
            self._format = chosen

    @property
    def asymmetric(self) -> bool:
        """True: a zero point, the levels over the calibrated [low, high]."""
        return self._asymmetric

    @asymmetric.setter
    def asymmetric(self, value: bool) -> None:
        if value and self.axis is not None:
            raise ValueError("an asymmetric quantizer works per tensor (axis None)")
        self._asymmetric = bool(value)
        self._params = {}
        if self._from_calibrator:
            self._take_calibrated()
        elif not value:
            self._amin = None

    @property
    def placement(self) -> Placement:
        """Where the quantizer's scales sit: its axis, block axis, sign and range."""
        return Placement(self.axis, self.block_axis, self.unsigned, self.narrow_range)

    @property
    def amax(self) -> Tensor | None:
        """The calibrated range (a tensor per axis entry), None before calibration; settable."""
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

    def fix_amax(self, value: float) -> None:
        """An amax set by hand (every channel's, for a per-channel quantizer): kept at every
        bit width (a calibrator's is not consulted). An asymmetric quantizer's range becomes
        [-value, value] cut to what calibration saw."""
        known = self._amax
        self.amax = torch.full_like(known, value) if known is not None and known.dim() else value
        self._from_calibrator = False
        if self.asymmetric:
            seen = self.calibrator.min_value
            self._amin = -value if seen is None else max(min(seen, 0.0), -value)

    def _take_calibrated(self, keep_params: bool = False) -> None:
        """amax (and an asymmetric quantizer's range minimum) from the calibrator, for the
        current bit width."""
        if self.asymmetric:
            low, high = self.calibrator.compute_range(self._num_bits)
            self._amin = low
            self._store_amax(torch.tensor(high), keep_params)
            return
        # A search switches widths back and forth: each width's amax is checked and stored once.
        key = ("stored", self._num_bits, self.unsigned)
        if keep_params and key in self._params:
            self._buffers["_amax"] = self._params[key]  # type: ignore[assignment]
            return
        amax = self.calibrator.compute_amax(self._num_bits, self.unsigned)
        if amax is None:
            raise RuntimeError("calibration saw no data for this quantizer")
        self._store_amax(amax, keep_params)
        self._params[key] = self._amax  # type: ignore[assignment]

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
        self._take_calibrated()
        self._from_calibrator = True

    def restore_calibrator(self, calibrator: Calibrator) -> None:
        """Adopt a calibrator loaded from a file as if this quantizer had collected it."""
        self.calibrator = calibrator
        self.finish_calibration()

    # -- quantization ---------------------------------------------------------------------
    def _require_amax(self) -> Tensor:
        if self._amax is None:
            raise RuntimeError(
                "this quantizer has no amax yet: calibrate the model or load a calibration file"
            )
        return self._amax

    def params(self) -> QuantParams:
        """Parameters for the current amax and settings, computed once per change."""
        key = (self._num_bits, self.unsigned, self.narrow_range, self.axis, self._amin)
        params = self._params.get(key)
        if params is None:
            amax = self._require_amax()
            if self.asymmetric:
                low = -float(amax) if self._amin is None else self._amin
                params = asymmetric_params(low, float(amax), self._num_bits, amax.device)
            else:
                params = quant_params(
                    amax, self._num_bits, self.unsigned, self.narrow_range, self.axis
                )
            self._params[key] = params
        return params

    def forward(self, x: Tensor) -> Tensor:
        """Fake-quantize `x` (see `quantize`)."""
        return self.quantize(x)

    def quantize(self, x: Tensor) -> Tensor:
        """Fake-quantize `x` (or, in calibration mode, feed the calibrator and pass it on)."""
        if self.calibrating:
            x = x if self.bounds is None else x.clamp(*self.bounds)
            self.calibrator.collect(x)
            return x
        if not self.enabled:
            return x if self.bounds is None else x.clamp(*self.bounds)
        if self._format is None:
            return apply_quantization(x, self.params(), self.bounds, self.overwrites)
        return self._format_quantize(x, self._format)

    def _format_quantize(self, x: Tensor, chosen: QuantFormat) -> Tensor:
        """`chosen`'s quantization of `x`, with this quantizer's amax, placement and bounds."""
        return chosen.quantize(x, self.format_amax(), self.placement, self.bounds)

    def format_amax(self) -> Tensor | None:
        """The amax another format reads (None for formats with dynamic scales only): a
        calibrator's for the format's calibration bits where its amax depends on the width."""
        chosen = self._format
        if chosen is None or not chosen.calibrated:
            return None
        amax = self._require_amax()
        if self.asymmetric:  # other formats are symmetric: the range's larger side
            return torch.clamp(amax, min=-(self._amin or 0.0))
        if not (self._from_calibrator and self.calibrator.depends_on_bits):
            return amax
        key = ("amax", chosen.calibration_bits, self.unsigned)
        if key not in self._params:
            width = self.calibrator.compute_amax(chosen.calibration_bits, self.unsigned)
            self._params[key] = width.to(amax.device)  # type: ignore[assignment, union-attr]
        return self._params[key]  # type: ignore[return-value]

    def extra_repr(self) -> str:
        """The quantizer in one line: format or width, axis, sign and state."""
        kind = "per-tensor" if self.axis is None else f"axis={self.axis}"
        sign = "asymmetric" if self.asymmetric else "unsigned" if self.unsigned else "signed"
        state = "calibrating" if self.calibrating else ("enabled" if self.enabled else "disabled")
        narrow = ", narrow" if self.narrow_range else ""
        what = f"{self._num_bits} bit" if self._format is None else self._format.spelling
        return f"{what}, {kind}, {sign}{narrow}, {state}"

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - nn.Module's signature
        self._params = {}  # device or dtype changes: rebuild the scale tensors lazily
        return super()._apply(fn, recurse)


class WeightQuantizer(TensorQuantizer):
    """A quantizer for a layer's weight: amax comes from the weight itself (max of |w|, per
    output channel by default) and follows it when the weight changes; quantized weights are
    cached per bit width, so evaluating a new bit configuration re-quantizes only the layers
    whose weight bits changed. To the tracer its output is the weight of the layer calling it.

    Args:
        *args: TensorQuantizer's positional arguments.
        **kwargs: TensorQuantizer's keyword arguments.
        cache_size: how many quantized weights to keep, one per bit width (None: every width
            seen, 0: none).
    """

    traced_output = "weight"

    def __init__(self, *args: Any, cache_size: int | None = None, **kwargs: Any) -> None:
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
        """The fake-quantized weight, cached per setting while no gradient is taken."""
        if not self.enabled:
            return weight
        self._sync(weight)
        if torch.is_grad_enabled() and weight.requires_grad:
            return self.quantize(weight)  # training: differentiable, never cached
        if self.cache_size == 0:
            return self.quantize(weight)
        key = (self._num_bits, self._format, self.unsigned, self.narrow_range, self.axis)
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
