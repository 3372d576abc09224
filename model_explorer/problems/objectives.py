"""The objectives a search can weigh, by name (`problem.objectives`; `model-explorer list
objectives`): each one's direction, what it needs and how it is computed.

An objective is a function of the per-layer plan (plan.py), of the cost models the problem holds
(`PlanCosts`) and, for quantities only a forward pass can tell, of what scoring measured
(`Measured`). Those that need no forward pass (`needs` without "model") are known before a
candidate is scored, which is what lets a search stop scoring a candidate that cannot join the
front. Every problem records every objective it can compute, chosen or not.

What an objective needs: "bits" (the plan's bit widths), "thresholds" (its block thresholds),
"energy" (per-layer DRAM energies) and "model" (a forward pass). A problem provides some of
them; the objectives it can use are those whose needs it provides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model_explorer.plan import Plan
from model_explorer.registry import Registry

NEEDS = ("bits", "thresholds", "energy", "model")


@dataclass(frozen=True)
class ObjectiveInfo:
    """An objective's direction (`maximize`, for the accuracy: the metric's own), what it
    needs (of NEEDS) and what it measures, in the user's words."""

    maximize: bool
    needs: frozenset[str]
    description: str

    @property
    def analytic(self) -> bool:
        """Known without a forward pass."""
        return "model" not in self.needs


@dataclass
class PlanCosts:
    """The cost models an objective may read: the layers' sizes (cost/bits.BitCostModel), the
    bit weighting function of `weighted_bits` and the DRAM energy model (or None)."""

    bits: Any = None
    weighting: str = "bits_weighted_linear"
    energy: Any = None


@dataclass
class Measured:
    """What scoring a candidate measured: its accuracy, and the block counts of a sparse model
    (`blocks`: created_blocks, present_blocks, total_blocks, block_sparsity per sample; `kept`:
    the share of each sparsified layer's input blocks that are not zero)."""

    accuracy: float = 0.0
    blocks: Mapping[str, float] = field(default_factory=dict)
    kept: Mapping[str, float] = field(default_factory=dict)


ObjectiveFunction = Callable[[Plan, PlanCosts, Measured], float]
OBJECTIVES: Registry[ObjectiveFunction] = Registry("objective")


def register_objective(
    name: str, *, maximize: bool, needs: set[str], description: str
) -> Callable[[ObjectiveFunction], ObjectiveFunction]:
    """Decorator registering `function(plan, costs, measured) -> float` as an objective.

    Args:
        name: the name `problem.objectives` gives it.
        maximize: whether more is better.
        needs: what it reads, of NEEDS: "bits", "thresholds", "energy", "model" (a forward
            pass); a problem that provides them all can compute it.
        description: what it measures, in the user's words.
    """
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"objective '{name}' needs {sorted(unknown)}, which no problem provides")
    return OBJECTIVES.register(name, info=ObjectiveInfo(maximize, frozenset(needs), description))


def objective_info(name: str) -> ObjectiveInfo:
    return OBJECTIVES.get(name).info


def usable_objectives(provides: set[str] | frozenset[str]) -> list[str]:
    """The objectives a problem providing `provides` can compute, in registry order."""
    return [e.name for e in OBJECTIVES.entries() if e.info.needs <= set(provides)]


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
