"""The front judged when a search ends: on the held-out reevaluation data, beside the float model,
and (with a latency table) timed whole in its runtime (latency.check_front)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from model_explorer.errors import UserError
from model_explorer.operations.latency import check_front
from model_explorer.operations.verdicts import scored_packed

if TYPE_CHECKING:
    from model_explorer.workload.context import WorkloadContext

log = logging.getLogger(__name__)


def judge_front(context: WorkloadContext, problem: Any, result: Any) -> bool:
    """Score the front on the held-out data and time it where the problem has a latency
    table; True where either added to the result (which then needs saving)."""
    timed = check_front(context, problem, result) is not None
    held = score_front_held_out(context, problem, result) is not None
    return timed or held


def keeps_outcomes(metric: Any) -> bool:
    """Whether the metric scores sample by sample (not the caller's function of the whole
    model, which gives one figure and is not called again for outcomes it cannot give)."""
    from model_explorer.metrics.functions import create_metric

    return not hasattr(create_metric(metric), "of_model")


def baseline_outcomes(context: WorkloadContext, problem: Any) -> dict[str, Any]:
    """The float model's per-sample outcomes on the exploration data, which the front's are
    paired with (`stats["baseline_outcomes"]`); none for a metric that keeps none."""
    if not keeps_outcomes(context.workload.metric):
        return {}
    _, outcomes = scored(context, context.build_model(), problem, "exploration")
    return {"baseline_outcomes": outcomes} if outcomes else {}


def scored(
    context: WorkloadContext, model: Any, problem: Any, role: str = "reevaluate"
) -> tuple[float, dict[str, str]]:
    """A model's accuracy on a role's data and its per-sample outcomes (with the divergence
    from the float model where the problem ranks by it), as results keep them."""
    ranked = getattr(problem, "selection", "accuracy") != "accuracy"
    return scored_packed(context, model, role, divergence=ranked)


def score_front_held_out(
    context: WorkloadContext, problem: Any, result: Any
) -> dict[str, Any] | None:
    """Each feasible front member's accuracy on `reevaluation.datasets.reevaluate` (data the
    search did not select on) in its `extra["held_out"]`, and the float model's there with
    what the data is in `stats["held_out"]`; None where the workload has no such data, turns
    it off (`reevaluation.score_front: false`), or the front has no feasible member, and
    where the data cannot be read (said as a warning: the search's result stands)."""
    reevaluation = context.workload.reevaluation
    if reevaluation is None or not reevaluation.score_front:
        return None
    members = [m for m in result.pareto_front() if m.plan is not None and m.feasible]
    if not members:
        return None
    try:
        context.batches("reevaluate")
    except UserError as error:  # the search's result stands; only this judgement is missing
        log.warning("the front was not scored on the held-out data: %s", error)
        return None
    for member in members:
        problem.apply_plan(member.plan)
        member.extra["held_out"], outcomes = scored(context, problem.model, problem)
        if outcomes:
            member.extra["held_out_outcomes"] = outcomes
    described = context.describe("reevaluate")
    baseline, outcomes = scored(context, context.build_model(), problem)
    held_out = {
        "baseline": baseline,
        "data": f"{described['type']} ({described['where']})",
        "samples": described["samples"],
        "members": len(members),
    }
    if outcomes:
        held_out["outcomes"] = outcomes
    result.stats["held_out"] = held_out
    return held_out
