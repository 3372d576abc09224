"""The Problem contract: genome -> decoded configuration (and its per-layer plan) -> Evaluation.

A problem author writes natural quantities (accuracy to maximise, bits to minimise, accuracy at
least some minimum); this base class turns them into pymoo's form (every objective minimised,
every constraint G <= 0). A Problem knows nothing about generations, files or processes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from model_explorer.plan import PlanLayout
from model_explorer.problems.objectives import (
    Measured,
    PlanCosts,
    computed_objectives,
)
from model_explorer.problems.ranking import DIVERGENCE, DivergenceRanking

FINITE = "outputs_finite"


@dataclass(frozen=True)
class Variable:
    """One gene: an integer (bits) or a float (a threshold) between bounds, both included."""

    name: str
    lower: float
    upper: float
    integer: bool = True


@dataclass(frozen=True)
class Objective:
    name: str
    maximize: bool = False


@dataclass(frozen=True)
class Constraint:
    """`name` is a measured quantity that must stay within [minimum, maximum]."""

    name: str
    minimum: float | None = None
    maximum: float | None = None

    def violation(self, value: float) -> float:
        """pymoo's G: positive when violated, <= 0 when met."""
        parts = []
        if self.minimum is not None:
            parts.append(self.minimum - value)
        if self.maximum is not None:
            parts.append(value - self.maximum)
        return max(parts) if parts else 0.0


@dataclass
class Evaluation:
    """What one configuration measured: `values` holds every quantity by name (objectives,
    constrained quantities and anything else worth keeping, e.g. bops and model size); `plan`,
    the per-layer plan the problem applied (None for a problem without one), so that whoever
    records the evaluation does not derive it again."""

    values: dict[str, float]
    accuracies: list[float]
    complete: bool = True
    finite: bool = True
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, dict[str, Any]] | None = None


class Problem(ABC):
    """Subclasses set `name`, `variables`, `objectives` and `constraints`, and implement
    `decode` (genome -> configuration, a list aligned with `variables`) and `measure`."""

    name: str = "problem"
    model: Any = None
    variables: list[Variable]
    objectives: list[Objective]
    constraints: list[Constraint]
    # Values of fully evaluated front members, set while `evaluate` runs: a problem that knows
    # a candidate's costs before scoring may stop once the candidate cannot join this front.
    front: Sequence[dict[str, float]] = ()

    @property
    def all_constraints(self) -> list[Constraint]:
        """The problem's constraints plus one every problem has: outputs must be finite."""
        return [*self.constraints, Constraint(FINITE, minimum=1.0)]

    def decode(self, genome: Sequence[float]) -> list[Any]:
        """The configuration that actually runs for a genome (default: the genome itself,
        integers rounded)."""
        return [
            int(round(value)) if variable.integer else float(value)
            for variable, value in zip(self.variables, genome, strict=True)
        ]

    def plan(self, configuration: list[Any]) -> dict[str, dict[str, Any]] | None:
        """The per-layer plan of a configuration (see plan.py), or None for a problem whose
        variables are not settings of layers."""
        return None

    def apply_plan(self, plan: dict[str, dict[str, Any]]) -> None:
        """Put a plan into effect on the problem's model (`self.model`)."""
        raise NotImplementedError(f"{type(self).__name__} has no per-layer plan")

    def apply(self, configuration: list[Any]) -> None:
        """Put a configuration into effect on the problem's model (`self.model`)."""
        plan = self.plan(configuration)
        if plan is None:
            raise NotImplementedError(f"{type(self).__name__} cannot apply a configuration")
        self.apply_plan(plan)

    @abstractmethod
    def measure(self, configuration: list[Any]) -> Evaluation:
        """Apply a configuration and measure it."""

    @cached_property
    def _decoded(self) -> dict[bytes, list[Any]]:
        return {}

    def configuration(self, genome: Sequence[float]) -> list[Any]:
        """The configuration a genome runs, decoded once per problem: the search asks for it
        (its cache, the screen, the survivors) and `evaluate` runs it, both through here."""
        raw = np.asarray(genome, dtype=float).tobytes()
        if raw not in self._decoded:
            self._decoded[raw] = self.decode(genome)
        return self._decoded[raw]

    def evaluate(
        self, genome: Sequence[float], front: Sequence[dict[str, float]] = ()
    ) -> tuple[list[Any], Evaluation]:
        """The configuration of a genome and its Evaluation. With `front` (the values of the
        search's fully evaluated front), scoring may stop once the candidate cannot join it."""
        configuration = self.configuration(genome)
        started = time.perf_counter()
        self.front = front
        try:
            evaluation = self.measure(configuration)
        finally:
            self.front = ()
        evaluation.seconds = time.perf_counter() - started
        evaluation.values[FINITE] = 1.0 if evaluation.finite else 0.0
        return configuration, evaluation

    def known_values(self, configuration: list[Any]) -> dict[str, float]:
        """The values of a configuration known without running the model (analytic costs);
        none by default."""
        return {}

    def initial_genomes(self) -> list[list[float]]:
        """Genomes to place in the first generation before random ones (none by default)."""
        return []

    # -- pymoo's view ---------------------------------------------------------------------
    def objective_vector(
        self, values: dict[str, float], objectives: Sequence[Objective] | None = None
    ) -> np.ndarray:
        """`values` in pymoo's minimisation form, of the problem's objectives (or others)."""
        chosen = self.objectives if objectives is None else objectives
        return np.array(
            [-values[o.name] if o.maximize else values[o.name] for o in chosen], dtype=float
        )

    def constraint_vector(self, values: dict[str, float]) -> np.ndarray:
        return np.array([c.violation(values[c.name]) for c in self.all_constraints], dtype=float)

    def feasible(self, values: dict[str, float]) -> bool:
        return bool(np.all(self.constraint_vector(values) <= 0))

    def describe(self) -> dict[str, Any]:
        """Plain data describing the problem, stored with its results."""
        return {
            "name": self.name,
            "variables": [asdict(v) for v in self.variables],
            "objectives": [asdict(o) for o in self.objectives],
            "constraints": [asdict(c) for c in self.all_constraints],
        }


class ModelProblem(DivergenceRanking, Problem):
    """A problem that scores `self.model` on `self.batches` with `self.metric`, stopping early
    (when `self.early_reject`) once `self.minimum_accuracy` is out of reach. Its variables are
    settings of layers, named as plan.py says, so every configuration has a plan.

    Ranked by divergence (`rank_by_divergence`, the workload's `problem.selection: kl`), its
    accuracy objective is replaced by `kl`, the mean KL divergence of the candidate's outputs
    from the float model's on the same samples: what the search optimises, surrogates predict
    and fronts are chosen by. The metric is still measured, constrained and recorded as
    `accuracy`, and judged (hypervolumes, reports) on the front the divergence chose."""

    batches: Any
    metric: Any
    minimum_accuracy: list[float] | None = None
    early_reject: bool = True
    _layout: PlanLayout | None = None

    def plan(self, configuration: list[Any]) -> dict[str, dict[str, Any]]:
        names = [v.name for v in self.variables]
        if self._layout is None or self._layout.names != names:
            self._layout = PlanLayout(names)
        return self._layout.plan(configuration)

    # Set by subclasses: their settings (problems/options.py).
    options: Any = None
    # Set by the builders of quantization problems: quantization/coverage.py's to_dict().
    coverage: dict[str, Any] | None = None
    # The DRAM energy model (cost/energy) and the latency table (latency/), where it holds them.
    energy: Any = None
    latency: Any = None

    @property
    def plan_costs(self) -> PlanCosts:
        """The cost models objectives read (none by default) and their own inputs."""
        return PlanCosts(inputs=self.objective_inputs)

    @cached_property
    def recorded_objectives(self) -> list[Any]:
        """The objectives this problem computes (problems/objectives.py `computed_objectives`):
        every registered one its options provide for, and the workload's own."""
        return computed_objectives(self.provides, self.options.chosen_objectives)

    @cached_property
    def objective_inputs(self) -> dict[str, Any]:
        """The objectives' own inputs (`needs` that are functions of the problem), computed
        once, on first use."""
        functions = dict(i for e in self.recorded_objectives for i in e.info.inputs)
        return {name: function(self) for name, function in functions.items()}

    @property
    def provides(self) -> set[str]:
        """What this problem gives objectives (problems/objectives.py NEEDS): its options'
        kinds, DRAM energies and latency only when it holds their models."""
        provides = set(self.options.provides)
        if self.energy is None:
            provides.discard("energy")
        if self.latency is None:
            provides.discard("latency")
        return provides

    def measured_values(
        self, plan: dict[str, dict[str, Any]], measured: Measured
    ) -> dict[str, float]:
        """Every objective only a forward pass tells (problems/objectives.py) that this problem
        can compute, but the accuracy (recorded by `evaluation`), from what scoring measured."""
        costs = self.plan_costs
        return {
            entry.name: entry.builder(plan, costs, measured)
            for entry in self.recorded_objectives
            if entry.name != "accuracy" and not entry.info.analytic
        }

    def describe(self) -> dict[str, Any]:
        """Plain data describing the problem; `metric` names what 'accuracy' measures."""
        metric = self.metric if isinstance(self.metric, str) else self.metric.type
        layers = getattr(self.model, "layers", None) or {}
        types = {
            name: getattr(layer, "float_type", type(layer)).__name__
            for name, layer in layers.items()
        }
        description = {**super().describe(), "metric": metric, "layer_types": types}
        description["selection"] = self.selection
        if self.coverage is not None:
            description["coverage"] = self.coverage
        reference = self.hypervolume_reference()
        if reference is not None:
            description["hypervolume_reference"] = reference
        return description

    def hypervolume_reference(self) -> dict[str, float] | None:
        """The reference point of this problem's hypervolumes, from the problem alone: the
        minimum accuracy a feasible individual keeps, and each cost at every gene's upper bound
        (the most expensive configuration); None where either is not known in advance (no
        accuracy constraint, a cost measured by running the model)."""
        if not self.minimum_accuracy:
            return None
        try:
            upper = self.decode([variable.upper for variable in self.variables])
            known = self.known_values(upper)
        except Exception:  # noqa: BLE001 - a problem whose genes do not decode so: no reference
            return None
        reference: dict[str, float] = {}
        for objective in self.judged_objectives:
            if objective.maximize:
                reference[objective.name] = float(min(self.minimum_accuracy))
            elif objective.name in known:
                reference[objective.name] = float(known[objective.name])
            else:
                return None
        return reference

    def score(self, known: dict[str, float] | None = None) -> Any:
        """The metric's Outcome for the configuration currently applied, each sample's outcome
        kept. `known`: the values measured without the model (costs), with which scoring also
        stops once the candidate cannot join `self.front`."""
        from model_explorer.metrics.functions import score

        minimum = self.minimum_accuracy if self.early_reject else None
        ceiling = None
        if minimum is not None and known is not None:
            minimum, ceiling = self.entry_limits(minimum, known)
        return score(
            self.model,
            self.batches,
            self.metric,
            minimum=minimum,
            check_finite=True,
            reference=self.reference,
            ceiling=ceiling,
            keep_outcomes=True,
        )

    @staticmethod
    def evaluation(
        outcome: Any, values: dict[str, float], plan: dict[str, dict[str, Any]], **extra: Any
    ) -> Evaluation:
        """An Evaluation of an Outcome for the applied `plan`, its accuracies under 'accuracy'
        (and 'accuracy_<i>' for several outputs) beside `values`."""
        accuracies = outcome.accuracies
        named = {"accuracy": sum(accuracies) / len(accuracies)}
        if len(accuracies) > 1:
            named.update({f"accuracy_{i}": a for i, a in enumerate(accuracies)})
        divergence = getattr(outcome, "divergence", None)
        if divergence is not None:
            named[DIVERGENCE] = float(divergence)
        from model_explorer.results.statistics import pack_outcome

        kept = pack_outcome(outcome)
        if kept:
            extra = {**extra, "outcomes": kept}
        return Evaluation(
            {**named, **values},
            accuracies,
            complete=outcome.complete,
            finite=outcome.finite,
            extra={"samples": outcome.samples, **extra},
            plan=plan,
        )
