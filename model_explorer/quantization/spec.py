"""The workload's `quantization:` and `calibration:` settings."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.datasets.base import DatasetSpec
from model_explorer.quantization.calibrators import CALIBRATORS
from model_explorer.quantization.swap import SWAPPABLE
from model_explorer.registry import Registry
from model_explorer.schema import Bits, NonNegativeInt, PositiveFloat, Spec, TypedSpec

# Layer types (names as in torch.nn) that have a fake-quantized counterpart.
QUANTIZABLE_LAYERS = SWAPPABLE


class QuantizerSpec(Spec):
    """One quantizer's settings: `axis` null is per tensor; `unsigned: auto` makes a quantizer
    unsigned when calibration saw no negative value (e.g. after a ReLU); `asymmetric` gives an
    input quantizer a zero point (2**bits levels over the calibrated [low, high], per tensor)."""

    num_bits: Bits = 8
    axis: int | None = None
    unsigned: bool | Literal["auto"] = False
    narrow_range: bool = False
    asymmetric: bool = False

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
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    # Input quantizers are `unsigned: auto` unless the workload says otherwise (measured:
    # benchmarks/bench_calibration.py); weights are signed.
    input: QuantizerSpec = Field(default_factory=lambda: QuantizerSpec(unsigned="auto"))
    weight: QuantizerSpec = Field(default_factory=lambda: QuantizerSpec(axis=0))
    weight_cache: NonNegativeInt | None = None
    # Quantizers on both operands of products of two activations (attention's Q·Kᵀ and A·V).
    attention_matmuls: bool = False
    # Quantizers (input settings, calibrated, no genes) on both operands of residual additions
    # and on average poolings' inputs whose output reaches a quantized layer, so that the
    # products before them have quantized outputs, which runtimes run as integer kernels
    # (quantization/operands.py). Off by default: digits_cnn's average pooling feeds a
    # quantized layer, so turning it on would change what the shipped searches measure.
    operand_quantizers: bool = False
    # A layer holding weights whose products stay float (quantization/coverage.py) and that
    # `include`/`exclude`/`layer_types` did not leave out is warned about, by name, above this
    # share of the model's weight MACs.
    coverage_warning: float = Field(0.01, ge=0, le=1)

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


class CalibrationSpec(TypedSpec):
    """How input quantizers get their amax; weights always use the max of |w| (per channel).

    `method` names a calibrator (`model-explorer list calibrators`) whose own options sit
    beside it, e.g. `{method: percentile, percentile: 99.9, num_bins: 1024}`; `file` and
    `datasets` are every method's."""

    registry: ClassVar[Registry[Any]] = CALIBRATORS
    type_key: ClassVar[str] = "method"

    file: str | None = None
    # mse: chosen by measurement over the shipped workloads (benchmarks/bench_calibration.py,
    # docs/quantization.md "Which quantizer setting").
    method: str = "mse"
    datasets: CalibrationDatasets | None = None
    # Input quantizers' amax set by hand (quantizer name pattern -> amax), at every bit width:
    # what `diagnose` recommends for a layer whose range a few outliers stretch.
    amax: dict[str, PositiveFloat] | None = None
