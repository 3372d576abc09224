"""The workload's `quantization:` and `calibration:` settings, and the registry of calibration
methods with each built-in method's options (its Calibrator class, in calibrators.py and
histogram_calibrators.py, imported when it first calibrates): nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.datasets.spec import DatasetSpec
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import (
    Bits,
    NonNegativeInt,
    Percentage,
    PositiveFloat,
    PositiveInt,
    Spec,
    TypedSpec,
)

# Layer types (names as in torch.nn) that have a fake-quantized counterpart (swap.py's SWAPPABLE,
# the same names: tests/quantization/test_layers.py holds one against the other).
QUANTIZABLE_LAYERS = (
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Linear",
    "MultiheadAttention",
    "RNN",
    "GRU",
    "LSTM",
)

RECALIBRATE = "`model-explorer calibrate WORKLOAD --force`"


@dataclass(frozen=True)
class CalibratorInfo:
    """What the workload checks of a calibration method before any calibrator exists: whether
    it works per channel (along an axis)."""

    per_channel: bool = False


# method -> its Calibrator class (calibrators.py)
CALIBRATORS: Registry[Any] = Registry("calibrator")


class PercentileOptions(Spec):
    """`percentile`: the share of |x| (in %) that lies below amax, one for every bit width or
    one per width (`{8: 99.99, 4: 99.9, 2: 99.0}`: a width takes the entry of the largest
    width up to it, else the smallest entry's); `num_bins`: the histogram's bins to start
    with."""

    percentile: Percentage | dict[Bits, Percentage] = 99.99
    """The share (in %) of the inputs' magnitudes that lies below amax: one for every bit width,
    or one per width (`{8: 99.99, 4: 99.9, 2: 99.0}`), a width taking the entry of the largest
    width up to it, else the smallest width's."""
    num_bins: PositiveInt = 2048
    """The histogram's bins to start with; values beyond its top add bins, and past four times
    this many, neighbouring bins are merged."""

    def at(self, num_bits: int) -> float:
        """The percentile of bit width `num_bits`."""
        if not isinstance(self.percentile, dict):
            return self.percentile
        widths = sorted(self.percentile)
        below = [w for w in widths if w <= num_bits]
        return self.percentile[below[-1] if below else widths[0]]


class SearchOptions(Spec):
    """The options of a search for amax among the histogram's bin edges: `num_bins` to start
    with, the candidates from bin `start_bin` on."""

    num_bins: PositiveInt = 2048
    """The histogram's bins to start with; values beyond its top add bins, and past four times
    this many, neighbouring bins are merged."""
    start_bin: NonNegativeInt = 128
    """The bin edge (counted from 0) where the candidates for amax start: every edge from it
    to the histogram's top is tried, at most about 2048 of them."""


for _method, _path, _options, _per_channel in (
    ("max", "calibrators:MaxCalibrator", None, True),
    ("percentile", "histogram_calibrators:PercentileCalibrator", PercentileOptions, False),
    ("mse", "histogram_calibrators:MseCalibrator", SearchOptions, False),
    ("entropy", "histogram_calibrators:EntropyCalibrator", SearchOptions, False),
):
    CALIBRATORS.declare(
        _method,
        f"model_explorer.quantization.{_path}",
        options=_options,
        info=CalibratorInfo(per_channel=_per_channel),
    )


class QuantizerSpec(Spec):
    """One quantizer's settings: `axis` null is per tensor; `unsigned: auto` makes a quantizer
    unsigned when calibration saw no negative value (e.g. after a ReLU); `asymmetric` gives an
    input quantizer a zero point (2**bits levels over the calibrated [low, high], per tensor)."""

    num_bits: Bits = 8
    """Bits before the search sets them (2 to 16): what calibration and `evaluate` use."""
    axis: int | None = None
    """The axis with one scale per slice (0: per output channel for weights); null: one per
    tensor."""
    unsigned: bool | Literal["auto"] = False
    """Levels from 0 only; `auto`: so where calibration saw no negative value."""
    narrow_range: bool = False
    """Leave out the most negative level, so that the grid is symmetric."""
    asymmetric: bool = False
    """A zero point: `2**bits` levels over the calibrated [low, high], per tensor (inputs
    only)."""

    @model_validator(mode="after")
    def _one_grid(self) -> QuantizerSpec:
        if not self.asymmetric:
            return self
        for key, bad, why in (
            ("unsigned", self.unsigned is True, "a range without negatives gets zero point 0"),
            ("narrow_range", self.narrow_range, "its grid is not symmetric"),
            ("axis", self.axis is not None, "its range is per tensor; set axis null"),
        ):
            if bad:
                raise PydanticCustomError(
                    "asymmetric_conflict",
                    f"does not go with asymmetric: true ({why})",
                    {"key": key},
                )
        return self


class QuantizationSpec(Spec):
    """Which layers are swapped for fake-quantized ones and how their quantizers start out."""

    layer_types: list[Literal[QUANTIZABLE_LAYERS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(QUANTIZABLE_LAYERS)
    )
    """The torch.nn layer types swapped for fake-quantized ones."""
    include: list[str] = Field(default_factory=lambda: ["*"])
    """Shell-style patterns of the module names to quantize."""
    exclude: list[str] = Field(default_factory=list)
    """Patterns of module names left in float (they win over `include`)."""
    # Input quantizers are `unsigned: auto` unless the workload says otherwise (measured:
    # benchmarks/bench_calibration.py); weights are signed.
    input: QuantizerSpec = Field(default_factory=lambda: QuantizerSpec(unsigned="auto"))
    """Every layer's input quantizer."""
    weight: QuantizerSpec = Field(default_factory=lambda: QuantizerSpec(axis=0))
    """Every layer's weight quantizer (symmetric, from the max of |w|)."""
    weight_cache: NonNegativeInt | None = None
    """Quantized weights each layer keeps, one per bit width (none: every width seen)."""
    attention_matmuls: bool = False
    """Also quantize both operands of products of two activations (attention's Q·Kᵀ and A·V)."""
    operand_quantizers: bool = False
    """Also quantize both operands of residual additions and average poolings whose output
    reaches a quantized layer (calibrated, no genes), so that runtimes can run the products
    before them on integers. Off by default: it would change what the shipped searches
    measure."""
    coverage_warning: float = Field(0.01, ge=0, le=1)
    """The share of the model's weight MACs above which a layer left in float, that no
    setting excluded, is warned about by name."""

    @field_validator("input", mode="before")
    @classmethod
    def _input_unsigned_auto(cls, value: Any) -> Any:
        # A partial `input:` keeps the inputs' default signedness (auto) unless it sets one.
        if isinstance(value, dict) and "unsigned" not in value:
            return {**value, "unsigned": "auto"}
        return value

    @model_validator(mode="after")
    def _symmetric_weights(self) -> QuantizationSpec:
        if self.weight.asymmetric:
            raise PydanticCustomError(
                "asymmetric_weights",
                "is for input quantizers: weights are quantized symmetric, from the max of |w| "
                "(as AIMET and ONNX runtimes expect); leave it out of quantization.weight",
                {"key": "weight.asymmetric"},
            )
        return self


class CalibrationDatasets(Spec):
    calibrate: DatasetSpec
    """What `calibrate` runs the model on to set the input quantizers' ranges (a dataset
    spec)."""


class CalibrationSpec(TypedSpec):
    """How input quantizers get their amax; weights always use the max of |w| (per channel).

    `method` names a calibrator (`model-explorer list calibrators`) whose own options sit
    beside it, e.g. `{method: percentile, percentile: 99.9, num_bins: 1024}`; `file` and
    `datasets` are every method's."""

    registry: ClassVar[Registry[Any]] = CALIBRATORS
    type_key: ClassVar[str] = "method"

    file: str | None = None
    """The calibration file `calibrate` writes and every command running the quantized model
    reads. It records what it was made from (the weights, the quantizer settings, the method
    and its options, the calibration data's spec, and the seed where it draws a subset): a file
    made from other calibration settings is refused where it is read, naming the setting, other
    weights are a warning, and `calibrate --if-missing` redoes a file that does not match."""
    # mse: chosen by measurement over the shipped workloads (benchmarks/bench_calibration.py,
    # docs/quantization.md "Which quantizer setting").
    method: str = "mse"
    """How input quantizers get their amax: `max`, `percentile`, `mse` or `entropy`
    (`model-explorer list calibrators`); the keys beside it are that method's own options, and
    one of another method is an error. Weights always take amax from their largest magnitude."""
    datasets: CalibrationDatasets | None = None
    """The calibration data."""
    amax: dict[str, PositiveFloat] | None = None
    """Input quantizers' amax set by hand, by quantizer name pattern
    (`{"layer1.*.input_quantizer": 2.5}`, later patterns winning), at every bit width: what
    `diagnose` recommends where a few outliers stretch a range. Applied after calibration and
    after loading the file, never stored in it, so changing it needs no recalibration; a pattern
    that names no input quantizer is an error."""
