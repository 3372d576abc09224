"""ExplorationResult: every evaluated individual of a search, as plain data.

A result file is a pickle of builtin types only (dicts, lists, strings, numbers): it loads
without torch, the model or this project's classes, in a notebook years later, and loading it
refuses anything else, so a result file never runs code. Its size grows with the number of
individuals and genes, never with the model's weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.errors import UserError, first_line
from model_explorer.plan import Plan, plan_of
from model_explorer.results.front import (
    by_generation,
    by_samples,
    ideal_box,
    indicator,
    non_dominated,
)
from model_explorer.results.plain import FORMAT, VERSION, check_layout, load_plain, save_plain


def samples_of(record: dict[str, Any]) -> int:
    """The samples a recorded evaluation forwarded through the model (0 when not recorded)."""
    return int((record.get("extra") or {}).get("samples", 0))


@dataclass
class Individual:
    """One evaluated configuration: its `id` in the result, the `generation` that made it and its
    `index` there; `genome` as the search chose it and `configuration`, what ran (e.g.
    discretized thresholds), aligned with the result's variable names; `values` holds
    objectives, accuracies and costs, `accuracies` one per model output; `feasible` whether it
    keeps the accuracy floor and every budget; `complete` False where early rejection stopped
    it (its accuracy then a bound); `seconds` its evaluation's time; `extra` what was measured
    beside (intervals, held-out scores, a repair's parent); `plan` the per-layer settings."""

    id: int
    generation: int
    index: int
    genome: list[float]
    configuration: list[Any]
    values: dict[str, float]
    accuracies: list[float]
    feasible: bool
    complete: bool = True
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # The per-layer plan of `configuration` (plan.py); None in files that predate it and for
    # problems whose variables are not settings of layers.
    plan: Plan | None = None


class ExplorationResult:
    """Plain data of a search: the workload, the problem's description, the baseline, every
    individual in evaluation order, and per-generation records. `ExplorationResult.load(path)`
    reads a result file (without torch).

    Args:
        workload: the workload as the search stored it (root `workload:`).
        problem: the problem's description (`Problem.describe()`: name, variables,
            objectives, constraints, metric).
        baseline: the float model's accuracies, one per output, or None.
        individuals: every evaluated individual's record (id, generation, genome,
            configuration, plan, values, feasibility, ...), in evaluation order.
        generations: per generation, the ids of the surviving population.
        stats: the totals (evaluations, cache hits, early rejections, sample-forwards,
            seconds).
        complete: whether the search ran to its end.
        seed: the search's seed.
        partial: records of a generation still being evaluated (a checkpoint taken mid-way).
        owner: the host and process writing it while it runs.
    """

    def __init__(
        self,
        workload: dict[str, Any],
        problem: dict[str, Any],
        baseline: list[float] | None = None,
        individuals: list[dict[str, Any]] | None = None,
        generations: list[dict[str, Any]] | None = None,
        stats: dict[str, Any] | None = None,
        complete: bool = False,
        seed: int = 0,
        partial: list[dict[str, Any]] | None = None,
        owner: dict[str, Any] | None = None,
    ) -> None:
        self.workload = workload
        self.problem = problem
        self.baseline = baseline
        self.records = individuals or []
        self.generations = generations or []
        self.stats = stats or {
            "evaluations": 0,
            "cache_hits": 0,
            "early_rejected": 0,
            "sample_forwards": 0,
            "seconds": 0.0,
        }
        self.complete = complete
        self.seed = seed
        # Evaluations of an interrupted generation, kept so that resuming need not redo them.
        self.partial = partial or []
        # The process writing an unfinished result ({host, pid}), so that another run can tell
        # a result being written from one whose run has stopped.
        self.owner = owner

    # -- access ---------------------------------------------------------------------------
    @property
    def variable_names(self) -> list[str]:
        """The genes' names: one per quantizer or sparsified layer."""
        return [v["name"] for v in self.problem["variables"]]

    @property
    def objectives(self) -> list[tuple[str, bool]]:
        """(name, maximize) of each objective, in the problem's order: what the search
        optimised and the front is chosen by (`kl` in accuracy's place where the problem's
        `selection` ranked candidates by divergence)."""
        return [(o["name"], o["maximize"]) for o in self.problem["objectives"]]

    @property
    def selection(self) -> str:
        """What ranked candidates in the accuracy objective's place: `accuracy` (the metric)
        or `kl` (the divergence from the float model); older files ranked by the metric."""
        return str(self.problem.get("selection", "accuracy"))

    @property
    def judged(self) -> list[tuple[str, bool]]:
        """The objectives as a front is judged: `accuracy` in the place of the divergence
        that ranked it (its direction the metric's)."""
        if self.selection == "accuracy":
            return self.objectives
        higher = next(
            (
                c.get("minimum") is not None
                for c in self.problem.get("constraints", [])
                if c["name"] == "accuracy"
            ),
            True,
        )
        return [("accuracy", higher) if n == self.selection else (n, m) for n, m in self.objectives]

    def ranking(self, names: list[str]) -> list[str]:
        """The quantities a front judged in `names` is chosen by: the ranking divergence in
        the accuracy's place, every other name as it is."""
        if self.selection == "accuracy":
            return list(names)
        return [self.selection if name == "accuracy" else name for name in names]

    @property
    def individuals(self) -> list[Individual]:
        """Every evaluated individual, in evaluation order."""
        return [Individual(**record) for record in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def individual(self, identifier: int, where: str = "RESULTS") -> Individual:
        """The individual with id `identifier`."""
        if not 0 <= identifier < len(self.records):
            raise UserError(
                f"{where}: the result has no individual {identifier} (ids 0-{len(self) - 1})"
            )
        return Individual(**self.records[identifier])

    def plan_of(self, individual: Individual) -> Plan:
        """The individual's per-layer plan: the one stored with it, else decoded from its
        configuration by the variables' names."""
        if individual.plan is not None:
            return individual.plan
        return plan_of(self.variable_names, individual.configuration)

    def feasible(self) -> list[Individual]:
        """The individuals that met the problem's constraint."""
        return [i for i in self.individuals if i.feasible]

    def _senses(self, objectives: list[str] | None) -> list[tuple[str, bool]]:
        known = {**dict(self.judged), **dict(self.objectives)}
        names = objectives or [name for name, _ in self.objectives]
        senses = []
        for name in names:
            if name in known:
                senses.append((name, known[name]))
            elif self.records and name in self.records[0]["values"]:
                senses.append((name, name.startswith("accuracy")))
            else:
                raise UserError(
                    f"result has no objective or value named '{name}'; it has {list(known)}"
                )
        return senses

    def objective_matrix(
        self, individuals: list[Individual], objectives: list[str] | None = None
    ) -> np.ndarray:
        """Objective values in minimisation form (maximised ones negated), one row each."""
        senses = self._senses(objectives)
        return np.array(
            [
                [-i.values[n] if maximize else i.values[n] for n, maximize in senses]
                for i in individuals
            ],
            dtype=float,
        ).reshape(len(individuals), len(senses))

    def pareto_front(
        self, objectives: list[str] | None = None, feasible_only: bool = True
    ) -> list[Individual]:
        """The non-dominated individuals for the chosen objectives (default: the problem's),
        among the feasible ones (when there are any and `feasible_only`)."""
        candidates = self.feasible() if feasible_only else self.individuals
        if feasible_only and not candidates:
            candidates = self.individuals
        if not candidates:
            return []
        matrix = self.objective_matrix(candidates, objectives)
        keep = non_dominated(matrix)
        return [candidate for candidate, kept in zip(candidates, keep, strict=True) if kept]

    def hypervolume(
        self, reference: dict[str, float] | list[float], objectives: list[str] | None = None
    ) -> float:
        """Hypervolume of the feasible front against a reference point in natural units
        (e.g. {'accuracy': 0.9, 'weighted_bits': 100}); uses pymoo's HV indicator. The front
        is the one these quantities' ranking chose (`ranking`: by the divergence where it
        ranked the accuracy), measured at their values."""
        if objectives is None and not isinstance(reference, dict):
            objectives = [name for name, _ in self.judged]
        senses = self._senses(objectives or list(reference))  # type: ignore[arg-type]
        names = [n for n, _ in senses]
        front = self.pareto_front(self.ranking(names))
        if not front or not any(i.feasible for i in front):
            return 0.0
        return float(indicator(senses, reference)(self.objective_matrix(front, names)))

    def default_reference(self, objectives: list[str] | None = None) -> dict[str, float]:
        """The reference point of hypervolumes: the problem's own (`hypervolume_reference` in
        its description: the minimum accuracy, each cost at every gene's upper bound) where the
        search recorded one for these objectives (by default the judged ones: accuracy and
        costs); else per objective the worst feasible value (for accuracy the constraint's
        minimum when there is one), 10% beyond it for costs."""
        senses = self._senses(objectives or [name for name, _ in self.judged])
        recorded = self.problem.get("hypervolume_reference") or {}
        if all(name in recorded for name, _ in senses):
            return {name: float(recorded[name]) for name, _ in senses}
        pool = self.feasible() or self.individuals
        minimum = {c["name"]: c["minimum"] for c in self.problem.get("constraints", [])}
        reference = {}
        for name, maximize in senses:
            values = [i.values[name] for i in pool]
            if maximize:
                reference[name] = (
                    minimum.get(name) if minimum.get(name) is not None else min(values)
                )
            else:
                worst = max(values)
                reference[name] = worst * 1.1 if worst > 0 else worst + 1.0
        return reference

    def hypervolume_box(self, reference: dict[str, float]) -> float:
        """The volume between `reference` and the ideal point (1 for what is maximised, an
        accuracy; 0 for what is minimised, a cost): what normalised hypervolumes divide by."""
        return ideal_box(self._senses(list(reference)), reference)

    def normalised_hypervolume(
        self, reference: dict[str, float] | None = None, objectives: list[str] | None = None
    ) -> float:
        """The project's one hypervolume figure: the feasible front's hypervolume against
        `reference` (default: `default_reference`) divided by the box between the reference
        and the ideal point, so 1 is a front at accuracy 1 for no cost. The report, the plots,
        `explore`'s summary and the benchmarks give this one."""
        reference = reference or self.default_reference(objectives)
        box = self.hypervolume_box(reference)
        return self.hypervolume(reference) / box if box else 0.0

    def hypervolume_by_generation(
        self,
        reference: dict[str, float] | None = None,
        objectives: list[str] | None = None,
        normalised: bool = False,
    ) -> list[tuple[int, float]]:
        """(generation, hypervolume of every feasible individual evaluated up to it): how the
        search converged (`normalised`: divided by `hypervolume_box`)."""
        return by_generation(self, reference or self.default_reference(objectives), normalised)

    def sample_forwards(self) -> int:
        """Samples forwarded through the model by every recorded evaluation: what the search
        cost (files that predate the count in `stats` sum it from the individuals)."""
        return sum(samples_of(record) for record in self.records)

    def hypervolume_by_samples(
        self,
        reference: dict[str, float] | None = None,
        objectives: list[str] | None = None,
        normalised: bool = False,
    ) -> list[tuple[int, float]]:
        """(sample-forwards spent, hypervolume of the feasible front found with them) after
        every evaluation, in the order they were recorded: what the search bought for its cost
        (`normalised`: divided by `hypervolume_box`)."""
        reference = reference or self.default_reference(objectives)
        return by_samples(self, reference, normalised, Individual, samples_of)

    def layer_statistics(self, individuals: list[Individual] | None = None):  # noqa: ANN201
        """Per variable (quantizer or layer threshold) over `individuals` (default: the Pareto
        front): mean, min and max of the configuration that ran (results/tables.py)."""
        from model_explorer.results.tables import layer_statistics

        return layer_statistics(self, individuals)

    def to_dataframe(self):  # noqa: ANN201 - pandas is imported there, not at module import
        """One row per individual: id, generation, feasibility, every value (objectives,
        accuracies, costs) and one column per variable with the configuration that ran."""
        from model_explorer.results.tables import individuals_table

        return individuals_table(self)

    # -- files ----------------------------------------------------------------------------
    def to_data(self) -> dict[str, Any]:
        """The result as plain data (what the file holds)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "workload": self.workload,
            "problem": self.problem,
            "baseline": self.baseline,
            "individuals": self.records,
            "generations": self.generations,
            "stats": self.stats,
            "complete": self.complete,
            "seed": self.seed,
            "partial": self.partial,
            "owner": self.owner,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically: a reader sees the previous file or the new one, never half."""
        try:
            return save_plain(self.to_data(), path)
        except OSError as error:  # a full disk, a folder gone or made read-only meanwhile
            reason = error.strerror or type(error).__name__
            raise UserError(
                f"{path}: cannot write the result file ({reason}); the file keeps what it "
                "held before"
            ) from error

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ExplorationResult:
        """Read a result file (a clear error for a missing or foreign file)."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: result file does not exist")
        try:
            data = load_plain(path)
        except Exception as error:  # refused classes, truncation, garbage: all "not a result"
            from model_explorer.filekinds import RESULT, kind_of

            kind = kind_of(path)
            if kind is not None and kind != RESULT:
                raise UserError(
                    f"{path}: this is {kind}, not a result file; this command takes the .pkl "
                    "that explore writes (results/expl_...pkl)"
                ) from None
            text = first_line(error)
            raise UserError(f"{path}: not a model_explorer result file ({text})") from None
        check_layout(data, path)
        return cls(
            data["workload"],
            data["problem"],
            data["baseline"],
            data["individuals"],
            data["generations"],
            data["stats"],
            data["complete"],
            data["seed"],
            data.get("partial"),
            data.get("owner"),
        )


def load_individual(reference: str, where: str) -> tuple[ExplorationResult, Individual]:
    """The result and individual named by `RESULTS#ID` (a result file and an individual's id)."""
    path, _, identifier = reference.rpartition("#")
    if not path or not identifier.isdigit():
        raise UserError(f"{where}: '{reference}' is not RESULTS#ID, e.g. results/x.pkl#12")
    result = ExplorationResult.load(path)
    return result, result.individual(int(identifier), f"{where}: {path}")
