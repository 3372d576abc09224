"""Whether two accuracies of the same samples differ: the one rule of every check that
compares a model with another on the same data (the deployment check of `export --check` and
`evaluate-individual --backend`); and a model scored with its per-sample outcomes, which those
checks, the held-out judgement of a front and the float model's baseline all pair (the repair
of `debug --target` decides on the lower end of the same paired interval,
analysis/debug/individual.py).

Both are scored on the same samples, so they are compared sample by sample
(results/statistics.py): McNemar's exact test for a metric counting hits, the paired t-test for
a mean of per-sample values; they differ where the test says so at its level (p < ALPHA). A
handful of near-tie samples flipping one way is no difference (3 of 96, all one way: p = 0.25);
a real one still is. Where no per-sample outcomes exist (a metric that is no mean over samples,
a model of several outputs), a difference over `TOLERANCE` decides, as every check did before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from model_explorer.results.confidence import Outcomes
from model_explorer.results.statistics import Paired

if TYPE_CHECKING:
    from torch import nn

    from model_explorer.workload.context import WorkloadContext

# How far (in accuracy, 0.005 = half a point) two accuracies may be apart where no per-sample
# outcomes pair them, and how far the fake-quantized model may score from what the search
# recorded (the same computation: rounding only).
TOLERANCE = 0.005


def scored_packed(
    context: WorkloadContext, model: nn.Module, role: str = "exploration", divergence: bool = False
) -> tuple[float, dict[str, str]]:
    """A model's accuracy on a role's data (by default the data the search scored) and each
    sample's outcome as results keep them (none for a metric that keeps none, or a model of
    several outputs); with `divergence`, the KL divergence from the float model's outputs too."""
    from model_explorer.metrics.functions import score
    from model_explorer.operations.reevaluate import one_accuracy
    from model_explorer.results.statistics import pack_outcome

    reference = context.float_outputs(role) if divergence else None
    batches, metric = context.batches(role), context.workload.metric
    outcome = score(model, batches, metric, reference=reference, keep_outcomes=True)
    return one_accuracy(outcome.accuracies), pack_outcome(outcome)


def scored(
    context: WorkloadContext, model: nn.Module, role: str = "exploration"
) -> tuple[float, Outcomes | None]:
    """`scored_packed`'s accuracy and outcomes, these ready to pair."""
    accuracy, packed = scored_packed(context, model, role)
    return accuracy, Outcomes.of(packed)


def differs(first: float, second: float, test: Paired | None) -> bool:
    """Whether two accuracies of the same samples differ: distinctly in a paired test where
    their per-sample outcomes give one, else by more than TOLERANCE."""
    if test is not None:
        return test.distinct
    return abs(first - second) > TOLERANCE


def paired_text(
    test: Paired | None, second: str = "the fake-quantized model", first: str = "the runtime"
) -> str:
    """The paired test in words, for a verdict's sentence."""
    if test is None:
        return f"more than {TOLERANCE} apart, with no per-sample outcomes to pair"
    if test.only_first or test.only_second:
        return (
            f"{test.only_first} samples only {first} gets right against "
            f"{test.only_second} only {second} does, p = {test.p_value:.2g}"
        )
    return f"paired over {test.samples} samples, p = {test.p_value:.2g}"


def paired(first: Outcomes | None, second: Outcomes | None) -> Paired | None:
    """The paired test of two models' outcomes on the same samples (None: either has none)."""
    return first.against(second) if first is not None else None
