"""The workload YAML schema: one file describes model, data, problem and search for every command.

The layout is the original tool's (root key `workload:`, `problem.problem_function`,
`exploration.nsga.*`, `exploration.extra_args`, dataset specs with `type`, `batch_size`,
`sample_limit`, `randomize`, `path`) plus what this project adds (`seed`, `device`, `metric`,
per-type dataset options). Validation happens once, here; everything downstream trusts the result.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from model_explorer.errors import WorkloadError, did_you_mean


def _positive(value: float) -> float:
    if value <= 0:
        kind = "integer" if isinstance(value, int) else "number"
        raise PydanticCustomError("not_positive", f"must be a positive {kind}")
    return value


def _non_negative(value: float) -> float:
    if value < 0:
        raise PydanticCustomError("negative", "must not be negative")
    return value


def _fraction(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise PydanticCustomError("not_fraction", "must be a fraction between 0 and 1")
    return value


def _bits(value: int) -> int:
    if not 2 <= value <= 16:
        raise PydanticCustomError("bits_range", "must be between 2 and 16 bits")
    return value


def _percentile(value: float) -> float:
    if not 0 < value <= 100:
        raise PydanticCustomError("percentile", "must be a percentage above 0 and at most 100")
    return value


Bits = Annotated[int, AfterValidator(_bits)]
PositiveInt = Annotated[int, AfterValidator(_positive)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
NonNegativeInt = Annotated[int, AfterValidator(_non_negative)]
NonNegativeFloat = Annotated[float, AfterValidator(_non_negative)]
Fraction = Annotated[float, AfterValidator(_fraction)]


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """Expand `~` and `$VARS`; relative paths stay relative to the working directory."""
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def check_existing_path(value: str, info: ValidationInfo, what: str, key: str | None = None) -> str:
    """Reject a path that does not exist, unless validation runs with `check_paths=False`."""
    if not (info.context or {}).get("check_paths", True):
        return value
    resolved = resolve_path(value)
    if not resolved.exists():
        unset = [var for var in _env_vars(value) if var not in os.environ]
        hint = f" (environment variable {', '.join(unset)} is not set)" if unset else ""
        context = {"what": what, "path": str(resolved), "hint": hint}
        if key is not None:
            context["key"] = key
        raise PydanticCustomError(
            "path_missing",
            "{what} '{path}' does not exist{hint}; point it at the local copy",
            context,
        )
    return value


def _env_vars(text: str) -> list[str]:
    return [a or b for a, b in re.findall(r"\$\{(\w+)\}|\$(\w+)", text)]


class Spec(BaseModel):
    """A strict section of the workload: unknown keys are an error with a suggestion."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_config.get("extra") != "allow":
            _check_keys(data, set(cls.model_fields))
        return data


def _check_keys(data: dict[str, Any], known: set[str]) -> None:
    for key in data:
        if key not in known:
            raise PydanticCustomError(
                "unknown_key",
                "unknown key",
                {"key": str(key), "hint": did_you_mean(str(key), known), "known": sorted(known)},
            )


class TypedSpec(Spec):
    """A spec whose `type` picks a registered builder; the builder's own options sit beside `type`.

    `registry` is "module:attribute" of the Registry to look `type` up in; the entry's `options`
    model validates the remaining keys: each kind declares its own keys, with no dispatcher here.
    """

    model_config = ConfigDict(extra="allow")
    registry: ClassVar[str]
    type: str
    _options: Any = PrivateAttr(default=None)

    @classmethod
    def _registry(cls) -> Any:
        module, _, attribute = cls.registry.partition(":")
        return getattr(importlib.import_module(module), attribute)

    @model_validator(mode="before")
    @classmethod
    def _shorthand_and_keys(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"type": data}
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            registry = cls._registry()
            name = data["type"]
            if name not in registry:
                raise PydanticCustomError(
                    "unknown_type",
                    "unknown {kind} type '{name}'{hint}; known: {known}",
                    {
                        "key": "type",
                        "kind": registry.kind,
                        "name": name,
                        "hint": did_you_mean(name, registry.names()),
                        "known": ", ".join(registry.names()),
                    },
                )
            options = registry.get(name).options
            option_keys = set(options.model_fields) if options is not None else set()
            _check_keys(data, set(cls.model_fields) | option_keys)
        return data

    @model_validator(mode="after")
    def _validate_options(self, info: ValidationInfo) -> TypedSpec:
        options = self._registry().get(self.type).options
        extra = dict(self.model_extra or {})
        self._options = options.model_validate(extra, context=info.context) if options else None
        return self

    @property
    def options(self) -> Any:
        """The validated, type-specific options (a pydantic model), or None."""
        return self._options


class DatasetSpec(TypedSpec):
    """Where one set of samples comes from and how it is batched."""

    registry: ClassVar[str] = "model_explorer.datasets:DATASETS"
    batch_size: PositiveInt = 64
    sample_limit: PositiveInt | None = None
    randomize: bool = False
    path: str | None = None
    workers: NonNegativeInt = 0

    @model_validator(mode="after")
    def _check_path(self, info: ValidationInfo) -> DatasetSpec:
        entry = self._registry().get(self.type)
        needs_path = getattr(entry.options, "requires_path", False)
        if needs_path and self.path is None:
            raise PydanticCustomError(
                "path_required",
                "dataset type '{name}' needs a 'path' to its local files",
                {"name": self.type},
            )
        if self.path is not None:
            check_existing_path(self.path, info, "dataset path", key="path")
        return self


class MetricSpec(TypedSpec):
    """The accuracy function, by name (`top1`) or with options (`{type: topk, k: 5}`)."""

    registry: ClassVar[str] = "model_explorer.metrics:METRICS"


class ProblemSpec(Spec):
    problem_function: str = "quantization_problem"
    gpu_id: NonNegativeInt | None = None
    log_file: str | None = None
    clear_log_file: bool = False
    results_file: str | None = None

    @field_validator("problem_function")
    @classmethod
    def _known_problem(cls, value: str) -> str:
        from model_explorer.problems import PROBLEMS

        if value not in PROBLEMS:
            raise PydanticCustomError(
                "unknown_problem",
                "unknown problem function '{name}'{hint}; known: {known}",
                {
                    "name": value,
                    "hint": did_you_mean(value, PROBLEMS.names()),
                    "known": ", ".join(PROBLEMS.names()),
                },
            )
        return value


class ModelSpec(Spec):
    """`type` is a registered name, `torchvision:<name>`, or `package.module:factory`."""

    type: str
    weights: str | None = None
    num_classes: PositiveInt | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    # Fold batch norms into the convolutions before them once the weights are loaded.
    fold_batchnorm: bool = False

    @field_validator("type")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from model_explorer.models import MODELS

        if value in MODELS or ":" in value:
            return value
        names = MODELS.names()
        raise PydanticCustomError(
            "unknown_model",
            "unknown model '{name}'{hint}; use one of {known}, 'torchvision:<name>' or "
            "'package.module:factory'",
            {"name": value, "hint": did_you_mean(value, names), "known": ", ".join(names)},
        )


class SparsitySpec(Spec):
    """Which layers sparsify their input blocks (the block size is `extra_args.block_size`)."""

    layer_types: list[Literal["Conv1d", "Conv2d", "Linear"]] = Field(
        default_factory=lambda: ["Conv1d", "Conv2d", "Linear"]
    )
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    chunk_mib: PositiveInt = 64


class CalibrationDatasets(Spec):
    calibrate: DatasetSpec


class CalibrationSpec(Spec):
    """How input quantizers get their amax; weights always use the max of |w| (per channel)."""

    file: str | None = None
    method: Literal["max", "percentile", "mse", "entropy"] = "percentile"
    percentile: Annotated[float, AfterValidator(_percentile)] = 99.99
    num_bins: PositiveInt = 2048
    datasets: CalibrationDatasets | None = None


class QuantizerSpec(Spec):
    """One quantizer's settings: `axis` null is per tensor; `unsigned: auto` makes a quantizer
    unsigned when calibration saw no negative value (e.g. after a ReLU)."""

    num_bits: Bits = 8
    axis: int | None = None
    unsigned: bool | Literal["auto"] = False
    narrow_range: bool = False


QUANTIZABLE_LAYERS = (
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Linear",
)


class QuantizationSpec(Spec):
    """Which layers are swapped for fake-quantized ones and how their quantizers start out."""

    layer_types: list[Literal[QUANTIZABLE_LAYERS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(QUANTIZABLE_LAYERS)
    )
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    input: QuantizerSpec = Field(default_factory=QuantizerSpec)
    weight: QuantizerSpec = Field(default_factory=lambda: QuantizerSpec(axis=0))
    weight_cache: NonNegativeInt | None = None


class NSGASpec(Spec):
    pop_size: PositiveInt = 15
    offsprings: PositiveInt | None = None
    generations: PositiveInt = 30
    mutation_eta: PositiveFloat = 10.0
    mutation_prob: Fraction = 1.0
    crossover_eta: PositiveFloat = 5.0
    crossover_prob: Fraction = 1.0


class ExtraArgs(Spec):
    num_bits_lower_limit: Bits = 4
    num_bits_upper_limit: Bits = 14
    bit_weighting_function: Literal["bits_weighted_linear", "bits_weighted_per_layer"] = (
        "bits_weighted_linear"
    )
    discrete_threshold_steps: PositiveInt = 20
    discrete_threshold_method: Literal["linear", "log"] = "linear"
    threshold_limit: PositiveFloat = 1.0
    block_size: tuple[PositiveInt, PositiveInt] = (8, 8)

    @model_validator(mode="after")
    def _ordered_limits(self) -> ExtraArgs:
        if self.num_bits_lower_limit > self.num_bits_upper_limit:
            raise PydanticCustomError(
                "limits_order",
                "num_bits_lower_limit ({low}) is above num_bits_upper_limit ({high})",
                {"low": self.num_bits_lower_limit, "high": self.num_bits_upper_limit},
            )
        return self


class EnergyEvaluationSpec(Spec):
    """Per-layer DRAM accesses: read from `dram_analysis_file` (written by `energy-analysis`),
    else computed by `backend` when a problem needs them."""

    dram_analysis_file: str | None = None
    input_shape: list[PositiveInt] | None = None
    backend: Literal["analytic", "zigzag"] = "analytic"
    hardware: str = "eyeriss_like"  # zigzag: a hardware description shipped with ZigZag
    global_buffer_kib: PositiveFloat = 108.0  # analytic: the accelerator's global buffer
    word_bits: PositiveInt = 16  # analytic: bits per DRAM word
    dram_pj_per_word: PositiveFloat = 200.0  # analytic: energy of one DRAM word access


class RunnerSpec(Spec):
    """Where candidates are evaluated: `serial` in this process, `processes` in `workers` local
    processes, `dask` on the Dask scheduler at `address` (or a local cluster of `workers`)."""

    type: Literal["serial", "processes", "dask"] = "serial"
    workers: PositiveInt = 2
    address: str | None = None
    threads_per_worker: PositiveInt | None = None  # torch threads; None: cores // workers

    @model_validator(mode="after")
    def _address_needs_dask(self) -> RunnerSpec:
        if self.address is not None and self.type != "dask":
            raise PydanticCustomError(
                "address_without_dask",
                "only the dask runner connects to a scheduler; set 'type: dask' or remove "
                "'address'",
                {"key": "address"},
            )
        return self


class ExplorationDatasets(Spec):
    exploration: DatasetSpec
    baseline: DatasetSpec | None = None


class ExplorationSpec(Spec):
    nsga: NSGASpec = Field(default_factory=NSGASpec)
    objectives: list[str] | None = None  # None: the problem's default
    early_reject: bool = True
    # sensitivity: half the first population comes from the one-at-a-time sensitivity of each
    # quantizer (quantization problems); random: all of it is random.
    initialization: Literal["random", "sensitivity"] = "random"
    layer_bounds: dict[str, tuple[Bits, Bits]] = Field(default_factory=dict)
    minimum_accuracy: Fraction | list[Fraction] | None = None
    allowable_accuracy_drop: Fraction | None = None
    predefined_parameters: list[NonNegativeFloat] = Field(default_factory=list)
    datasets: ExplorationDatasets
    energy_evaluation: EnergyEvaluationSpec | None = None
    extra_args: ExtraArgs = Field(default_factory=ExtraArgs)
    runner: RunnerSpec = Field(default_factory=RunnerSpec)


class RetrainingDatasets(Spec):
    train: DatasetSpec
    validation: DatasetSpec | None = None


class RetrainingSpec(Spec):
    epochs: PositiveInt = 10
    optimizer: Literal["sgd", "adam", "adamw"] = "adam"
    learning_rate: PositiveFloat = 1e-3
    momentum: Fraction = 0.9
    weight_decay: NonNegativeFloat = 0.0
    scheduler: Literal["none", "cosine"] = "cosine"
    gradient_clip: PositiveFloat | None = None  # maximal gradient norm
    recalibrate_batchnorm: bool = False  # re-estimate batch-norm statistics before training
    batchnorm_batches: PositiveInt = 20
    datasets: RetrainingDatasets


class ReevaluationDatasets(Spec):
    reevaluate: DatasetSpec


class ReevaluationSpec(Spec):
    datasets: ReevaluationDatasets


class Workload(Spec):
    """A validated workload. `Workload.load(path)` reads and validates a YAML file."""

    name: str | None = None
    seed: NonNegativeInt = 0
    device: str = "auto"
    metric: MetricSpec = Field(default_factory=lambda: MetricSpec(type="top1"))
    problem: ProblemSpec = Field(default_factory=ProblemSpec)
    model: ModelSpec
    quantization: QuantizationSpec = Field(default_factory=QuantizationSpec)
    sparsity: SparsitySpec = Field(default_factory=SparsitySpec)
    calibration: CalibrationSpec | None = None
    exploration: ExplorationSpec | None = None
    retraining: RetrainingSpec | None = None
    reevaluation: ReevaluationSpec | None = None
    _source: Path | None = PrivateAttr(default=None)

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
            raise PydanticCustomError("device", "must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'")
        return value

    @property
    def source(self) -> Path | None:
        """The file this workload was read from, if any."""
        return self._source

    def require(self, section: str) -> Any:
        """The named section, or a UserError saying the command needs it."""
        value = getattr(self, section)
        if value is None:
            where = f" in {self._source}" if self._source else ""
            raise WorkloadError(
                f"workload.{section}: this command needs a '{section}:' section{where}; "
                "see workloads/digits_cnn.yaml for an example"
            )
        return value

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the file's layout (root key `workload:`), for result files."""
        return {"workload": self.model_dump(mode="json", exclude_none=True)}

    @classmethod
    def from_dict(
        cls, data: Any, source: str | os.PathLike[str] | None = None, check_paths: bool = True
    ) -> Workload:
        """Validate a parsed workload file (with its root `workload:` key)."""
        where = str(source) if source is not None else "workload"
        if not isinstance(data, dict) or "workload" not in data:
            raise WorkloadError(
                f"{where}: the file must start with the key 'workload:' holding the sections "
                "model, problem, exploration, ...; see workloads/digits_cnn.yaml"
            )
        extra_roots = [key for key in data if key != "workload"]
        if extra_roots:
            raise WorkloadError(
                f"{where}: unknown top-level key '{extra_roots[0]}'; every section belongs "
                "under 'workload:'"
            )
        body = data["workload"]
        if isinstance(body, dict) and body.get("name") is None and source is not None:
            body = {**body, "name": Path(source).stem}
        try:
            workload = cls.model_validate(body, context={"check_paths": check_paths})
        except ValidationError as error:
            raise WorkloadError(format_validation_error(error, body, where)) from None
        workload._source = Path(source) if source is not None else None
        return workload

    @classmethod
    def load(cls, path: str | os.PathLike[str], check_paths: bool = True) -> Workload:
        """Read and validate a workload YAML file."""
        path = Path(path)
        if not path.is_file():
            raise WorkloadError(
                f"{path}: workload file does not exist; pass the path of a YAML file such as "
                "workloads/digits_cnn.yaml"
            )
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise WorkloadError(f"{path}{line}: not valid YAML ({problem})") from None
        return cls.from_dict(data, source=path, check_paths=check_paths)


load_workload = Workload.load


_MESSAGES = {
    "missing": "is required",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping of keys to values",
    "model_type": "must be a mapping of keys to values",
    "model_attributes_type": "must be a mapping of keys to values",
    "literal_error": "must be one of {expected}",
    "too_short": "needs {min_length} values",
    "too_long": "needs {max_length} values",
}


def format_validation_error(error: ValidationError, data: Any, where: str = "workload") -> str:
    """One line naming the first invalid key path as it is written in the file and what is wrong,
    with the number of further problems."""
    problems: dict[str, str] = {}
    for item in _fitting_errors(error, data):
        path, _ = _key_path(item["loc"], data)
        ctx = item.get("ctx") or {}
        value = item["input"]
        if "key" in ctx:
            path = path + [ctx["key"]]
        if item["type"] == "unknown_key":
            text = f"unknown key{ctx['hint']}; known keys: {', '.join(ctx['known'])}"
        elif item["type"] == "missing" and path and isinstance(path[-1], int):
            path = path[:-1]  # a fixed-length list with too few entries
            text = f"has too few values, got {value!r}"
        else:
            template = _MESSAGES.get(item["type"])
            text = template.format(**ctx) if template else item["msg"]
            if text.startswith("Value error, "):
                text = text[len("Value error, ") :]
            # Messages that quote the value themselves carry it in their context.
            quoted = "name" in ctx or "path" in ctx
            if item["type"] != "missing" and not quoted and not isinstance(value, dict):
                text += f", got {value!r}"
        problems.setdefault(".".join(["workload", *map(str, path)]), text)
    prefix = "" if where == "workload" else f"{where}: "
    (dotted, text), *rest = problems.items()
    more = (
        f" (and {len(rest)} more problem{'s' if len(rest) > 1 else ''} after this one)"
        if rest
        else ""
    )
    return f"{prefix}{dotted}: {text}{more}"


def _fitting_errors(error: ValidationError, data: Any) -> list[Any]:
    """Of the members of a union (a number or a list of numbers), keep the errors of the member
    whose kind matches what the file holds; pydantic reports every member."""
    items = error.errors(include_url=False)
    fitting = []
    for item in items:
        _, union = _key_path(item["loc"], data)
        if union is None:
            fitting.append(item)
            continue
        tag, node = union
        if ("list[" in tag) == isinstance(node, list):
            fitting.append(item)
    return fitting or items


def _key_path(loc: tuple[Any, ...], data: Any) -> tuple[list[Any], tuple[str, Any] | None]:
    """Split pydantic's loc into the keys present in the file and the first union-member tag
    (with the file's value at that point)."""
    path: list[Any] = []
    union: tuple[str, Any] | None = None
    node = data
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, (list, tuple)) and isinstance(part, int):
            path.append(part)
            node = node[part] if part < len(node) else None
        elif isinstance(node, dict) and position == len(loc) - 1:
            path.append(part)  # a required key that the file leaves out
            node = None
        elif union is None:
            union = (str(part), node)  # the member of a union that pydantic tried
    return path, union


# Where each dataset role of the commands lives in the file.
DATASET_ROLES = {
    "calibrate": ("calibration", "calibrate"),
    "exploration": ("exploration", "exploration"),
    "baseline": ("exploration", "baseline"),
    "train": ("retraining", "train"),
    "validation": ("retraining", "validation"),
    "reevaluate": ("reevaluation", "reevaluate"),
}


def dataset_spec(workload: Workload, role: str) -> tuple[DatasetSpec, str] | None:
    """The dataset spec of a role and its key path, or None when the file does not give one.

    `baseline` falls back to the exploration data, as in the original tool."""
    section_name, key = DATASET_ROLES[role]
    section = getattr(workload, section_name)
    datasets = getattr(section, "datasets", None) if section is not None else None
    spec = getattr(datasets, key, None) if datasets is not None else None
    if spec is None and role == "baseline":
        return dataset_spec(workload, "exploration")
    if spec is None:
        return None
    return spec, f"workload.{section_name}.datasets.{key}"
