"""Each problem's settings: the keys beside `problem_function` in the workload's `problem:`
section, one options model per problem, registered with it (problems/registry.py).

- every problem: its objectives and its accuracy constraint (`minimum_accuracy`,
  `allowable_accuracy_drop` or, for a divergence, `maximum_divergence`), `early_reject`;
- problems with bit widths in their genome: the bit limits, or the formats a gene chooses among
  (`choices`), per-quantizer `layer_bounds` narrowing either, and the weighting of
  `weighted_bits`;
- problems with block thresholds: their limit, discretisation and `predefined_parameters`.

The original tool kept most of these in `exploration:` and `exploration.extra_args`;
workload/original_layout.py moves them here before validation, and `key(name)` says where a
setting was written, so that an error names the key the user wrote.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.errors import UserError, did_you_mean
from model_explorer.formats import parse_format
from model_explorer.problems.objectives import (
    OBJECTIVES,
    objective_entry,
    objective_info,
    usable_objectives,
)
from model_explorer.schema.specs import (
    Bits,
    Fraction,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Spec,
)

BIT_WEIGHTINGS = ("bits_weighted_linear", "bits_weighted_per_layer")


class ProblemOptions(Spec):
    """What every problem takes. A subclass says what its genome `provides` to objectives
    (problems/objectives.py) and which objectives it explores when `objectives` is left out."""

    provides: ClassVar[frozenset[str]] = frozenset({"model"})
    default_objectives: ClassVar[tuple[str, ...]] = ("accuracy",)

    objectives: list[str] | None = None
    """What the search trades (`model-explorer list objectives`); the problem's default when
    left out (quantization: `[accuracy, weighted_bits]`)."""
    minimum_accuracy: Fraction | list[Fraction] | None = None
    """The accuracy a feasible candidate keeps, in [0, 1], or one per model output."""
    allowable_accuracy_drop: Fraction | None = None
    """The share of the measured baseline accuracy a candidate may lose; wins over
    `minimum_accuracy`."""
    maximum_divergence: NonNegativeFloat | None = None
    """The bound of a metric where lower is better (`kl`): the largest value a candidate may
    have."""
    early_reject: bool = True
    """Stop scoring a candidate once it cannot reach the minimum accuracy (an exact bound)."""
    selection: Literal["auto", "accuracy", "kl"] = "auto"
    """What ranks candidates in the accuracy objective's place, for the search and for the
    front it reports: `kl`, the mean KL divergence of a candidate's softmax from the float
    model's on the same samples (every sample counts, by how far it moved, with no labels: far
    less noise than a count of top-1 hits on a few hundred samples, so the front holds better
    on data the search never saw); `accuracy`, the metric itself. The metric is measured,
    constrained and reported either way. `auto`: `kl` where the metric counts labels (top1,
    top5, topk, pixel_accuracy, mean_iou) of a model with one output, else `accuracy` (a
    metric that compares with the float model already, or your own)."""
    _written: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("objectives")
    @classmethod
    def _known_objectives(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise PydanticCustomError(
                "no_objectives",
                "names no objective; name at least one (e.g. [accuracy, weighted_bits]) or "
                "leave the key out for the problem's default",
            )
        _refuse_repeated(value, "repeated_objectives", "; name each objective once")
        usable = usable_objectives(cls.provides)
        unknown = [
            name
            for name in value
            if name not in usable and not (_imported(name) and _needs(name) <= cls.provides)
        ]
        if unknown:
            strange = [name for name in unknown if name not in OBJECTIVES]
            raise PydanticCustomError(
                "unusable_objectives",
                "{unknown} cannot be used with this problem{hint}; choose from {usable}",
                {
                    "unknown": unknown,
                    "hint": did_you_mean(strange[0], usable) if strange else "",
                    "usable": ", ".join(usable),
                },
            )
        return value

    @property
    def chosen_objectives(self) -> list[str]:
        """The objectives to explore: those the workload names, else the problem's default."""
        return list(self.objectives or self.default_objectives)

    @property
    def chosen_needs(self) -> frozenset[str]:
        """What the chosen objectives need of the problem (problems/objectives.py NEEDS)."""
        return frozenset().union(*(objective_info(n).needs for n in self.chosen_objectives))

    def key(self, name: str) -> str:
        """Where the setting `name` is written in the workload file (for messages)."""
        return self._written.get(name, f"workload.problem.{name}")

    def written_at(self, paths: dict[str, str]) -> None:
        """Record where settings were written when the file spelt them the original way."""
        self._written = dict(paths)

    def __eq__(self, other: object) -> bool:
        # Where a file wrote a setting is not part of what it means.
        return type(other) is type(self) and self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]


class LatencySettings(Spec):
    """How the `latency` objective measures (`model-explorer latency` writes the table): the
    runtime (`NAME` or `NAME:SETTING`), its threads, the batch timed, and the table's file
    (default: results/<workload>_latency_<runtime>.json beside the workload's results)."""

    runtime: str = "onnxruntime"
    """The runtime that times the layers, `NAME` or `NAME:SETTING`; one that opens ONNX files."""
    threads: PositiveInt = 1
    """Its threads: one by default, the most repeatable table on a machine other work shares."""
    batch: PositiveInt = 1
    """Samples per timed batch."""
    table: str | None = None
    """The table's file (default: `results/<workload>_latency_<runtime>.json`)."""
    repeats: PositiveInt = 15
    """Timed rounds; the median is kept."""

    @field_validator("runtime")
    @classmethod
    def _known_runtime(cls, value: str) -> str:
        from model_explorer.deployment.runtimes import runtime_setting

        try:
            runtime_setting(value, "runtime")
        except UserError as error:
            text = str(error).partition(": ")[2] or str(error)
            raise PydanticCustomError("unknown_runtime", "{text}", {"text": text}) from None
        return value


class BitOptions(ProblemOptions):
    """The settings of a genome with one gene per quantizer: a bit width between the limits, or,
    with `choices`, one of those formats (short names such as `int8`, `int4_g128`, `fp8_e4m3`,
    `mxfp4`, `nvfp4`, or mappings; see model_explorer/formats). `layer_bounds` narrows the genes
    of the quantizers a pattern matches: `[low, high]` bits, or a list of some of the choices."""

    provides: ClassVar[frozenset[str]] = frozenset({"model", "bits", "energy", "latency"})

    num_bits_lower_limit: Bits = 4
    """The lowest bit width a gene takes (2 to 16)."""
    num_bits_upper_limit: Bits = 14
    """The highest bit width a gene takes (2 to 16)."""
    bit_weighting_function: Literal[BIT_WEIGHTINGS] = "bits_weighted_linear"  # type: ignore[valid-type]
    """How `weighted_bits` sums the bits: `bits_weighted_per_layer` weighs inputs 5.0 and
    weights 0.5."""
    choices: list[str | dict[str, Any]] | None = None
    """Formats each gene chooses among instead of a bit width (`[int8, int4_g128, fp8_e4m3,
    mxfp4, nvfp4]`); the bit limits then do not apply."""
    layer_bounds: dict[str, tuple[Bits, Bits] | list[str]] = Field(default_factory=dict)
    """Per-quantizer limits by name pattern (`{"conv1.*": [8, 8]}`, later patterns win); with
    `choices`, a list of some of them."""
    latency: LatencySettings | None = None
    """How the `latency` objective's table is measured (its defaults when that objective is
    chosen)."""
    budget: dict[str, PositiveFloat] = Field(default_factory=dict)
    """Upper limits on costs known without the model (`{weighted_bits: 120}`), kept by
    feasible candidates as the accuracy limit is."""

    @property
    def latency_settings(self) -> LatencySettings | None:
        """How latency is measured, where an objective needs it or the workload says how."""
        if self.latency is None and "latency" in self.chosen_needs:
            return LatencySettings()
        return self.latency

    @property
    def bits(self) -> tuple[int, int]:
        """The explored bit widths, (lowest, highest)."""
        return self.num_bits_lower_limit, self.num_bits_upper_limit

    @property
    def format_choices(self) -> list[str] | None:
        """The formats a gene chooses among, by short name, cheapest first (so that genes next
        to each other cost about the same), or None for a genome of bit widths."""
        return None if self.choices is None else list(self.choices)

    @field_validator("choices")
    @classmethod
    def _known_formats(cls, value: list[Any] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise PydanticCustomError(
                "no_choices", "names no format; name at least two or leave the key out"
            )
        formats = [_format(item, "choices") for item in value]
        spelt = [f.spelling for f in formats]
        _refuse_repeated(spelt, "repeated_choices")
        order = sorted(range(len(formats)), key=lambda i: formats[i].bits)
        return [spelt[i] for i in order]

    @field_validator("layer_bounds")
    @classmethod
    def _ordered_bounds(cls, value: dict[str, Any]) -> dict[str, Any]:
        for pattern, bounds in value.items():
            if isinstance(bounds, list):
                value[pattern] = [_format(item, pattern).spelling for item in bounds]
            elif bounds[0] > bounds[1]:
                raise PydanticCustomError(
                    "bounds_order",
                    "the lower bound {low} of '{pattern}' is above its upper bound {high}",
                    {"key": pattern, "low": bounds[0], "high": bounds[1], "pattern": pattern},
                )
        return value

    @model_validator(mode="after")
    def _bits_within_limits(self) -> Any:
        if self.choices is not None:
            return self._bounds_within_choices()
        low, high = self.bits
        if low > high:
            raise PydanticCustomError(
                "limits_order",
                "num_bits_lower_limit ({low}) is above num_bits_upper_limit ({high})",
                {"key": "num_bits_lower_limit", "low": low, "high": high},
            )
        for pattern, bounds in self.layer_bounds.items():
            if isinstance(bounds, list):
                raise PydanticCustomError(
                    "formats_without_choices",
                    "'{pattern}' names formats, but the genes are bit widths; give [low, high] "
                    "bits, or list the formats to choose among in `choices`",
                    {"key": "layer_bounds", "pattern": pattern},
                )
            if bounds[0] < low or bounds[1] > high:
                raise PydanticCustomError(
                    "bounds_range",
                    "{bounds} of '{pattern}' reach outside the explored range {low}-{high} "
                    "(num_bits_lower_limit and num_bits_upper_limit); keep the bounds within it "
                    "or widen the limits",
                    {
                        "key": "layer_bounds",
                        "bounds": list(bounds),
                        "pattern": pattern,
                        "low": low,
                        "high": high,
                    },
                )
        return self

    def _bounds_within_choices(self) -> Any:
        written = {"num_bits_lower_limit", "num_bits_upper_limit"} & self.model_fields_set
        if written:
            raise PydanticCustomError(
                "limits_with_choices",
                "the genes choose among `choices`, so {key} has no effect; leave it out (give "
                "int bit widths as formats: int4, int8)",
                {"key": sorted(written)[0]},
            )
        for pattern, bounds in self.layer_bounds.items():
            if not isinstance(bounds, list):
                raise PydanticCustomError(
                    "bits_with_choices",
                    "'{pattern}' gives bit widths, but the genes choose among `choices`; list "
                    "the formats it may take instead (some of {choices})",
                    {"key": "layer_bounds", "pattern": pattern, "choices": self.choices},
                )
            outside = [name for name in bounds if name not in self.choices]  # type: ignore[operator]
            if outside:
                raise PydanticCustomError(
                    "bounds_outside_choices",
                    "'{pattern}' names {outside}, which `choices` does not list; narrow the "
                    "choices, never widen them",
                    {"key": "layer_bounds", "pattern": pattern, "outside": outside},
                )
        return self


def _refuse_repeated(names: list[str], kind: str, advice: str = "") -> None:
    """A pydantic error naming the names the list holds more than once."""
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PydanticCustomError(
            kind, "names {names} more than once" + advice, {"names": ", ".join(repeated)}
        )


def _format(value: Any, where: str) -> Any:
    """A QuantFormat from a choice, or a pydantic error in the sentence parse_format wrote."""
    try:
        return parse_format(value, where)
    except UserError as error:
        text = str(error).partition(": ")[2] or str(error)
        raise PydanticCustomError("unknown_format", "{text}", {"text": text}) from None


def _imported(name: str) -> bool:
    """Whether `name` is the user's objective, `package.module:function`."""
    return ":" in name and name not in OBJECTIVES


def _needs(name: str) -> frozenset[str]:
    """What the user's objective `name` needs of the problem, or a pydantic error in the
    sentence that says why it cannot be imported."""
    try:
        return objective_entry(name).info.needs
    except UserError as error:
        text = str(error).partition(": ")[2] or str(error)
        raise PydanticCustomError("unknown_objective", "{text}", {"text": text}) from None


def explored_bits(options: ProblemOptions | None) -> tuple[int, int] | None:
    """The bit widths a problem's genome explores, or None for a problem without bit widths."""
    return options.bits if isinstance(options, BitOptions) else None


class ThresholdOptions(ProblemOptions):
    """The settings of a genome of block thresholds, one per sparsified layer."""

    provides: ClassVar[frozenset[str]] = frozenset({"model", "thresholds"})

    threshold_limit: PositiveFloat = 1.0
    """The largest block threshold a gene takes."""
    discrete_threshold_steps: PositiveInt = 20
    """How many thresholds between 0 and the limit a gene chooses among."""
    discrete_threshold_method: Literal["linear", "log"] = "linear"
    """How those steps are spaced."""
    predefined_parameters: list[NonNegativeFloat] = Field(default_factory=list)
    """Each value seeds one individual with every threshold equal to it."""

    @model_validator(mode="after")
    def _predefined_within_limit(self) -> Any:
        above = [p for p in self.predefined_parameters if p > self.threshold_limit]
        if above:
            raise PydanticCustomError(
                "above_limit",
                "{values} lie above threshold_limit ({limit}); no threshold can exceed it: "
                "lower them or raise the limit",
                {"key": "predefined_parameters", "values": above, "limit": self.threshold_limit},
            )
        return self


class QuantizationOptions(BitOptions):
    """`quantization_problem`: accuracy against weighted bits by default."""

    default_objectives: ClassVar[tuple[str, ...]] = ("accuracy", "weighted_bits")


class EnergyAwareOptions(BitOptions):
    """`energy_aware_quant_problem` (the original's): accuracy against DRAM energy by default."""

    default_objectives: ClassVar[tuple[str, ...]] = ("accuracy", "energy")


class SparsityOptions(ThresholdOptions):
    """`sparsity_problem`: accuracy against created sparse blocks by default."""

    default_objectives: ClassVar[tuple[str, ...]] = ("accuracy", "created_blocks")


class JointOptions(BitOptions, ThresholdOptions):
    """`quantization_sparsity_problem`: bit widths and thresholds, accuracy against effective
    BOPs by default."""

    provides: ClassVar[frozenset[str]] = BitOptions.provides | ThresholdOptions.provides
    default_objectives: ClassVar[tuple[str, ...]] = ("accuracy", "effective_bops")
