"""The objectives a search can weigh, by name (`problem.objectives`; `model-explorer list
objectives`): each one's direction, what it needs and how it is computed.

An objective is a function of the per-layer plan (plan.py), of the cost models the problem holds
(`PlanCosts`) and, for quantities only a forward pass can tell, of what scoring measured
(`Measured`). Those that need no forward pass (`needs` without "model") are known before a
candidate is scored, which is what lets a search stop scoring a candidate that cannot join the
front. Every problem records every objective it can compute, chosen or not.

What an objective needs: "bits" (the plan's bit widths), "thresholds" (its block thresholds),
"energy" (per-layer DRAM energies), "latency" (a latency table measured in a runtime,
latency/) and "model" (a forward pass). A problem provides some of
them; the objectives it can use are those whose needs it provides. Anything else an objective
needs is an input of its own: a function of the problem (its model, data and cost models),
named among its needs and computed once per problem (`PlanCosts.inputs`).

A workload names a registered objective, or a function of the user's code marked with
`@objective` as `package.module:function`: an objective with a new input is then one module of
the user's, the function that computes the input beside the objective that reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model_explorer.errors import UserError
from model_explorer.plan import Plan
from model_explorer.schema.registry import Entry, Registry

NEEDS = ("bits", "thresholds", "energy", "latency", "model")

# An objective's own input: computed once from the problem (a ModelProblem: its model, batches,
# options, plan_costs), read by the objective as `costs.inputs[<the function's name>]`.
InputFunction = Callable[[Any], Any]


@dataclass(frozen=True)
class ObjectiveInfo:
    """An objective's direction (`maximize`, for the accuracy: the metric's own), what it
    needs (of NEEDS), what it measures, in the user's words, and its own inputs (name ->
    function of the problem)."""

    maximize: bool
    needs: frozenset[str]
    description: str
    inputs: tuple[tuple[str, InputFunction], ...] = ()

    @property
    def analytic(self) -> bool:
        """Known without a forward pass."""
        return "model" not in self.needs


@dataclass
class PlanCosts:
    """The cost models an objective may read: the layers' sizes (cost/bits.BitCostModel), the
    bit weighting function of `weighted_bits`, the DRAM energy model and the latency table
    (latency/table.py; each None where the problem holds none)."""

    bits: Any = None
    weighting: str = "bits_weighted_linear"
    energy: Any = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    latency: Any = None


@dataclass
class Measured:
    """What scoring a candidate measured: its accuracy, and the block counts of a sparse model
    (`blocks`: created_blocks, present_blocks, total_blocks, block_sparsity per sample; `kept`:
    the share of each sparsified layer's input blocks that are not zero)."""

    accuracy: float = 0.0
    blocks: Mapping[str, float] = field(default_factory=dict)
    kept: Mapping[str, float] = field(default_factory=dict)


ObjectiveFunction = Callable[[Plan, PlanCosts, Measured], float]
OBJECTIVES: Registry[ObjectiveFunction] = Registry(
    "objective", imports="objective function", import_form="package.module:function"
)
WHERE = "workload.problem.objectives"


def objective(
    *, maximize: bool, needs: Iterable[str | InputFunction], description: str
) -> Callable[[ObjectiveFunction], ObjectiveFunction]:
    """Decorator marking `function(plan, costs, measured) -> float` as an objective, which a
    workload names as `package.module:function`.

    Args:
        maximize: whether more is better.
        needs: what it reads: of NEEDS, "bits", "thresholds", "energy", "model" (a forward
            pass), which a problem provides or not; and functions of the problem, its own
            inputs, computed once per problem and read as `costs.inputs[function.__name__]`.
        description: what it measures, in the user's words.
    """

    def decorator(function: ObjectiveFunction) -> ObjectiveFunction:
        function.objective = _info(function.__name__, maximize, needs, description)  # type: ignore[attr-defined]
        return function

    return decorator


def register_objective(
    name: str, *, maximize: bool, needs: Iterable[str | InputFunction], description: str
) -> Callable[[ObjectiveFunction], ObjectiveFunction]:
    """Decorator registering `function(plan, costs, measured) -> float` as an objective.

    Args:
        name: the name `problem.objectives` gives it.
        maximize: whether more is better.
        needs: what it reads (see `objective`): of NEEDS, and functions of the problem.
        description: what it measures, in the user's words.
    """
    return OBJECTIVES.register(name, info=_info(name, maximize, needs, description))


def _info(
    name: str, maximize: bool, needs: Iterable[str | InputFunction], description: str
) -> ObjectiveInfo:
    needs = list(needs)
    unknown = [need for need in needs if isinstance(need, str) and need not in NEEDS]
    if unknown:
        raise ValueError(
            f"objective '{name}' needs {sorted(unknown)}, which no problem provides; name the "
            "function that computes such an input among its needs instead"
        )
    inputs = tuple((need.__name__, need) for need in needs if not isinstance(need, str))
    provided = frozenset(need for need in needs if isinstance(need, str))
    return ObjectiveInfo(maximize, provided, description, inputs)


def objective_entry(name: str, where: str = WHERE) -> Entry[ObjectiveFunction]:
    """The objective a workload names: registered, or `package.module:function` of the
    user's code marked with `@objective`."""
    if name in OBJECTIVES or ":" not in name:
        return OBJECTIVES.get(name, where)
    function = OBJECTIVES.resolve(name, where)
    info = getattr(function, "objective", None)
    if not isinstance(info, ObjectiveInfo):
        raise UserError(
            f"{where}: '{name}' is not marked as an objective; decorate it with "
            "@objective(maximize=..., needs=..., description=...) from "
            "model_explorer.problems.objectives"
        )
    return Entry(name, function, info=info)


def objective_info(name: str) -> ObjectiveInfo:
    return objective_entry(name).info


def usable_objectives(provides: set[str] | frozenset[str]) -> list[str]:
    """The registered objectives a problem providing `provides` can compute, in registry
    order."""
    return [e.name for e in OBJECTIVES.entries() if e.info.needs <= set(provides)]


def computed_objectives(
    provides: set[str] | frozenset[str], chosen: Iterable[str]
) -> list[Entry[ObjectiveFunction]]:
    """What a problem records: every registered objective it can compute, chosen or not,
    then the user's own that the workload chose (the options model checked that it can)."""
    registered = [OBJECTIVES.get(name) for name in usable_objectives(provides)]
    return registered + [objective_entry(name) for name in chosen if name not in OBJECTIVES]


@register_objective(
    "accuracy",
    maximize=True,
    needs={"model"},
    description="the workload's metric on the exploration data (maximised unless the metric is "
    "a divergence)",
)
def _accuracy(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return measured.accuracy


@register_objective(
    "weighted_bits",
    maximize=False,
    needs={"bits"},
    description="the quantizers' bit widths summed, weighted by bit_weighting_function",
)
def _weighted_bits(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    from model_explorer.cost.bits import weighted_bits

    return weighted_bits(plan, costs.weighting)


@register_objective(
    "model_size",
    maximize=False,
    needs={"bits"},
    description="weight bits x weight elements of the quantized layers, in bits",
)
def _model_size(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return costs.bits.model_size(plan)


@register_objective(
    "bops",
    maximize=False,
    needs={"bits"},
    description="MACs x input bits x weight bits per sample",
)
def _bops(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return costs.bits.bops(plan)


@register_objective(
    "energy",
    maximize=False,
    needs={"bits", "energy"},
    description="DRAM energy per sample in uJ, from per-layer accesses scaled by bit width",
)
def _energy(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return costs.energy.energy_uj(plan)


@register_objective(
    "latency",
    maximize=False,
    needs={"bits", "latency"},
    description="predicted time per batch in ms in the runtime of problem.latency, from the "
    "layer times model-explorer latency measured there",
)
def _latency(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return costs.latency.predict(plan)


@register_objective(
    "created_blocks",
    maximize=True,
    needs={"thresholds", "model"},
    description="input blocks zeroed by the thresholds, per sample",
)
def _created_blocks(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return measured.blocks["created_blocks"]


@register_objective(
    "block_sparsity",
    maximize=True,
    needs={"thresholds", "model"},
    description="share of the sparsified layers' input blocks that are zero",
)
def _block_sparsity(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return measured.blocks["block_sparsity"]


@register_objective(
    "effective_bops",
    maximize=False,
    needs={"bits", "thresholds", "model"},
    description="BOPs with each layer's scaled by the share of its input blocks that are not zero",
)
def _effective_bops(plan: Plan, costs: PlanCosts, measured: Measured) -> float:
    return costs.bits.effective_bops(plan, measured.kept)
