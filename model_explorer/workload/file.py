"""The workload file: one YAML file describes model, data, problem and search for every command.

The layout is the original tool's (root key `workload:`, `problem.problem_function`,
`exploration.nsga.*`, dataset specs with `type`, `batch_size`, `sample_limit`, `randomize`,
`path`) plus what this project adds (`seed`, `device`, `metric`, per-type dataset options),
with the problem's settings beside `problem_function` (the original kept them in
`exploration:` and `exploration.extra_args`); the original's spellings are translated first
(original_layout.py). Each section's settings live beside the code that uses them; this module
assembles them, reads the file and validates it once, reporting every problem at once:
everything downstream trusts it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from model_explorer.cost.energy.spec import EnergyEvaluationSpec
from model_explorer.datasets.spec import DatasetSpec
from model_explorer.errors import WorkloadError
from model_explorer.exploration.algorithms import ONE_OBJECTIVE, needs_several_objectives
from model_explorer.exploration.spec import ExplorationSpec
from model_explorer.metrics.spec import MetricSpec
from model_explorer.models.spec import ModelSpec
from model_explorer.problems.spec import ProblemSpec
from model_explorer.quantization.spec import CALIBRATORS, CalibrationSpec, QuantizationSpec
from model_explorer.schema.paths import workload_root
from model_explorer.schema.roles import DATASET_ROLES
from model_explorer.schema.specs import NonNegativeInt, Spec, validation_problems
from model_explorer.schema.yamlfile import apply_overrides, read_yaml
from model_explorer.sparsity.spec import SparsitySpec
from model_explorer.training.spec import RetrainingSpec
from model_explorer.workload.original_layout import Translation, translate

log = logging.getLogger(__name__)


class ReevaluationDatasets(Spec):
    reevaluate: DatasetSpec
    """What `evaluate-individual` scores a search's individuals on, and `retrain` its models
    before and after training (a dataset spec)."""


class ReevaluationSpec(Spec):
    datasets: ReevaluationDatasets
    """The data individuals are re-evaluated on."""
    score_front: bool = True
    """Score the feasible front members on this data when a search ends, beside the float
    model: the search's output and report show them in a `held_out` column (false: leave it
    to `evaluate-individual --front`)."""


def _set_here(key: str, overrides: Sequence[str]) -> str:
    """` (set by --set)` for a problem at or under a key an override set."""
    rest = key.partition(".")[2]
    for override in overrides:
        name = override.partition("=")[0].strip()
        if rest == name or rest.startswith(name + "."):
            return " (set by --set)"
    return ""


class Workload(Spec):
    """A validated workload. `Workload.load(path)` reads and validates a YAML file."""

    name: str | None = None
    """The name given to what the workload writes (`<name>_dram_accesses.csv`,
    `<name>_diagnosis`) and to its retraining records; null: the file's name without its
    extension."""
    root: str | None = None
    """The folder relative paths start from, itself relative to the workload file; null: the
    file's folder, or that folder's parent when it is named `workloads`."""
    seed: NonNegativeInt = 0
    """Drives data subsets, shuffling, initialisation and the search, so that a run repeats."""
    device: str = "auto"
    """Where the model runs: `auto` (CUDA when present, else the CPU), `cpu`, `cuda`, `cuda:N`
    or `mps`."""
    metric: MetricSpec = Field(default_factory=lambda: MetricSpec(type="top1"))
    """The accuracy function: a name (`top1`, `top5`, `agreement`, `kl`, ...), one with options
    (`{type: topk, k: 3}`) or a class of yours, `package.module:Class`
    (`model-explorer list metrics`)."""
    problem: ProblemSpec = Field(default_factory=ProblemSpec)
    """What is searched: the problem and its own settings."""
    model: ModelSpec
    """The model and its weights."""
    quantization: QuantizationSpec = Field(default_factory=QuantizationSpec)
    """Which layers are fake-quantized and how their quantizers start out."""
    sparsity: SparsitySpec = Field(default_factory=SparsitySpec)
    """Which layers sparsify their input blocks, and the blocks' size (read by the sparsity
    problems and `blocks`)."""
    calibration: CalibrationSpec | None = None
    """How input quantizers are calibrated, on what data, and where the result is kept."""
    energy_evaluation: EnergyEvaluationSpec | None = None
    """Where the per-layer DRAM accesses of the `energy` objective come from; left out: counted
    by the `analytic` backend with its defaults when a search starts."""
    exploration: ExplorationSpec | None = None
    """How the search runs: its population, algorithm, data and runner."""
    retraining: RetrainingSpec | None = None
    """How `retrain` trains the float baseline or fine-tunes a search's individuals."""
    reevaluation: ReevaluationSpec | None = None
    """The held-out data found individuals are scored on again."""
    _source: Path | None = PrivateAttr(default=None)
    _translation: Translation | None = PrivateAttr(default=None)
    _overrides: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
            raise PydanticCustomError("device", "must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'")
        return value

    @model_validator(mode="after")
    def _calibrator_takes_the_axis(self) -> Workload:
        axis, calibration = self.quantization.input.axis, self.calibration
        if axis is None or calibration is None:
            return self
        if not CALIBRATORS.get(calibration.method).info.per_channel:
            per_channel = [e.name for e in CALIBRATORS.entries() if e.info.per_channel]
            raise PydanticCustomError(
                "calibrator_axis",
                "per-channel input quantizers (axis {axis}) need calibration.method: {methods}; "
                "the {method} calibrator works per tensor: set axis: null or method: {first}",
                {
                    "key": "quantization.input.axis",
                    "axis": axis,
                    "method": calibration.method,
                    "methods": " or ".join(per_channel),
                    "first": per_channel[0],
                },
            )
        return self

    @model_validator(mode="after")
    def _algorithm_takes_the_objectives(self) -> Workload:
        """A single objective (`objectives: [weighted_bits]`) with an algorithm that ranks among
        several is refused here; a problem's default objectives are always several."""
        exploration, options = self.exploration, self.problem.options
        if exploration is None or options is None:
            return self
        name = exploration.algorithm.type
        if len(options.chosen_objectives) == 1 and needs_several_objectives(name):
            raise PydanticCustomError(
                "one_objective", ONE_OBJECTIVE, {"key": "exploration.algorithm", "name": name}
            )
        return self

    @field_validator("root")
    @classmethod
    def _root_is_a_folder(cls, value: str | None, info: ValidationInfo) -> str | None:
        root = (info.context or {}).get("root")
        if value is not None and root is not None and (info.context or {}).get("check_paths"):
            if not Path(root).is_dir():
                raise PydanticCustomError(
                    "root_missing",
                    "folder '{root}' does not exist; give the folder that relative paths "
                    "start from, relative to the workload file",
                    {"root": str(root)},
                )
        return value

    @property
    def source(self) -> Path | None:
        """The file this workload was read from, if any."""
        return self._source

    @property
    def overrides(self) -> tuple[str, ...]:
        """The `KEY=VALUE` settings put over the file's when it was read (`--set`)."""
        return self._overrides

    @property
    def results_folder(self) -> Path:
        """Where outputs go that the workload does not name: `results/` under its root."""
        return self.resolve("results")

    def key(self, path: str) -> str:
        """`workload.<path>` as the file spells it: settings the original layout wrote elsewhere
        (`exploration.extra_args.num_bits_lower_limit` for `problem.num_bits_lower_limit`) are
        named where they were written, so that messages point at the user's key."""
        key = f"workload.{path}"
        return self._translation.written(key) if self._translation is not None else key

    def __eq__(self, other: object) -> bool:
        # The same settings spelt the original way or this project's way are the same workload.
        return isinstance(other, Workload) and (
            self.to_dict(defaults=True) == other.to_dict(defaults=True)
        )

    __hash__ = None  # type: ignore[assignment]

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

    def to_dict(self, defaults: bool = False) -> dict[str, Any]:
        """Plain data in the file's layout (root key `workload:`), for result files; with
        `defaults`, the options of typed keys (datasets, metric, runner, energy backend) with
        their defaults filled in too."""
        body = self.model_dump(mode="json", exclude_none=True, context={"defaults": defaults})
        return {"workload": body}

    @classmethod
    def from_dict(
        cls,
        data: Any,
        source: str | os.PathLike[str] | None = None,
        check_paths: bool = True,
        file_problems: list[str] | None = None,
        overrides: Sequence[str] = (),
        root: str | os.PathLike[str] | None = None,
    ) -> Workload:
        """Validate a parsed workload file; every problem of it is one line of the raised
        WorkloadError, all at once.

        Args:
            data: the parsed file, a mapping with the root key `workload:` (this project's
                layout or the original tool's, translated first).
            source: the file it came from, named in messages and giving the workload its
                name when the file has none.
            check_paths: whether data paths must exist (false for a file read elsewhere).
            file_problems: lines already found in the file (keys written twice), reported
                with the others.
            overrides: `KEY=VALUE` settings put over the file's before it is validated
                (`exploration.nsga.pop_size=4`: the key in this project's layout under
                `workload:`, the value read as YAML), validated with the rest.
            root: the folder relative paths start from, where no `source` gives it (a
                worker's copy of a workload read elsewhere); else the working directory.
        """
        where = str(source) if source is not None else "workload"
        early = list(file_problems or [])
        body = _body(data, where, early)
        if isinstance(body, dict) and body.get("name") is None and source is not None:
            body = {**body, "name": Path(source).stem}
        translation = translate(body)
        problems = list(translation.problems)
        early += apply_overrides(translation.body, overrides)
        if source is not None:
            written = translation.body.get("root") if isinstance(translation.body, dict) else None
            root = workload_root(source, written if isinstance(written, str) else None)
        context = {"check_paths": check_paths, "root": None if root is None else Path(root)}
        try:
            workload = cls.model_validate(translation.body, context=context)
        except ValidationError as error:
            problems += validation_problems(error, translation.body)
        if problems or early:
            prefix = "" if source is None else f"{where}: "
            lines = early + [
                f"{prefix}{translation.written(key)}: {text}{_set_here(key, overrides)}"
                for key, text in problems
            ]
            raise WorkloadError("\n".join(lines))
        _log_ignored(where, translation, workload.problem.problem_function)
        workload._source = Path(source) if source is not None else None
        workload._translation = translation
        workload._overrides = tuple(overrides)
        if workload.problem.options is not None:
            workload.problem.options.written_at(
                {name: workload.key(f"problem.{name}") for name in translation.written_problem()}
            )
        return workload

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], check_paths: bool = True, overrides: Sequence[str] = ()
    ) -> Workload:
        """Read and validate a workload YAML file.

        Args:
            path: the YAML file.
            check_paths: whether data paths (datasets, checkpoints) must exist now.
            overrides: `KEY=VALUE` settings put over the file's (see `from_dict`).
        """
        path = Path(path)
        if not path.is_file():
            raise WorkloadError(
                f"{path}: workload file does not exist; pass the path of a YAML file such as "
                "workloads/digits_cnn.yaml"
            )
        duplicates: list[str] = []
        data = read_yaml(path, duplicates)
        return cls.from_dict(data, path, check_paths, duplicates, overrides)


load_workload = Workload.load


def _body(data: Any, where: str, early: list[str]) -> Any:
    """What the file holds under its one root key `workload:`, or the error saying it holds
    something else (after the lines already found in the file)."""
    if not isinstance(data, dict) or "workload" not in data:
        raise WorkloadError(
            "\n".join(
                [
                    *early,
                    f"{where}: the file must start with the key 'workload:' holding the "
                    "sections model, problem, exploration, ...; see workloads/digits_cnn.yaml",
                ]
            )
        )
    extra_roots = [key for key in data if key != "workload"]
    if extra_roots:
        raise WorkloadError(
            "\n".join(
                [
                    *early,
                    f"{where}: unknown top-level key '{extra_roots[0]}'; every section belongs "
                    "under 'workload:'",
                ]
            )
        )
    return data["workload"]


def _log_ignored(where: str, translation: Translation, problem: str) -> None:
    """One INFO line naming every key set aside: those the original tool never read, and the
    settings written for problems other than the chosen one."""
    parts = []
    if translation.ignored:
        parts.append(f"{', '.join(translation.ignored)} (no effect in the original tool)")
    if translation.unused:
        parts.append(f"{', '.join(translation.unused)} ({problem} does not use them)")
    if parts:
        log.info("%s: ignored: %s", where, "; ".join(parts))


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
