"""Ranking a model problem's candidates by their divergence from the float model
(`problem.selection: kl`, problems/options.py) instead of by its metric.

Ranked so, a problem's accuracy objective is replaced by `kl`, the mean KL divergence of a
candidate's outputs from the float model's on the same samples: what the search optimises, its
surrogate predicts, early stopping at the front bounds (per-sample divergence is never
negative, so the mean's lowest reachable value is exact), the sensitivity start's tables
measure (`sensitivity_scoring`: every quantizer's damage resolved, where a count of top-1 hits
on a few hundred samples leaves many at zero) and the front is chosen by. The metric
is still measured, constrained and recorded as `accuracy`, and a front is judged in it
(`judged_objectives`; results hold the same as `ExplorationResult.judged`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# The value a problem ranked by divergence records and optimises.
DIVERGENCE = "kl"


class DivergenceRanking:
    """What ranking by divergence adds to a model problem (problems/base.py ModelProblem)."""

    objectives: list[Any]
    front: Sequence[dict[str, float]]
    metric: Any
    batches: Any
    # "accuracy": the metric ranks candidates; "kl": the divergence from `reference` does.
    selection: str = "accuracy"
    _reference: Any = None

    def rank_by_divergence(self, reference: Callable[[], Any]) -> None:
        """Rank candidates by their mean KL divergence from the float model's outputs, which
        `reference()` gives (one tensor over every sample of `self.batches`, in order; asked
        for once, when the first candidate is scored)."""
        self.selection = "kl"
        self._reference = reference
        # an objective of the objectives' own kind (problems/base.py Objective)
        self.objectives = [
            type(o)(DIVERGENCE, False) if o.name == "accuracy" else o for o in self.objectives
        ]

    @property
    def reference(self) -> Any:
        """The float model's outputs the divergence is measured from (None: not ranked so)."""
        if callable(self._reference):
            self._reference = self._reference()
        return self._reference

    @property
    def judged_objectives(self) -> list[Any]:
        """The objectives as the user judges a front: `accuracy` in the place of the
        divergence that ranked it."""
        if self.selection == "accuracy":
            return list(self.objectives)
        from model_explorer.metrics.functions import higher_is_better

        maximize = higher_is_better(self.metric)
        return [
            type(o)("accuracy", maximize) if o.name == DIVERGENCE else o for o in self.objectives
        ]

    def entry_limits(
        self, minimum: list[float], known: dict[str, float]
    ) -> tuple[list[float], float | None]:
        """What a candidate must reach to join `self.front`, given its other objectives
        (`known`): the metric's limit (the best accuracy of a front member at least as good in
        all of them, where the accuracy ranks; for a divergence metric, where lower is better,
        the lowest: `minimum` is then a maximum), and, where the divergence ranks, the
        divergence's ceiling (the lowest of such a member). Only for a single ranked objective,
        with every other objective known."""
        ranked = "accuracy" if self.selection == "accuracy" else DIVERGENCE
        others = [o for o in self.objectives if o.name != ranked]
        objective = [o for o in self.objectives if o.name == ranked]
        if len(minimum) != 1 or len(objective) != 1:
            return minimum, None
        if any(o.name not in known for o in others):
            return minimum, None
        rivals = [
            member[ranked]
            for member in self.front
            if all(
                member[o.name] >= known[o.name] if o.maximize else member[o.name] <= known[o.name]
                for o in others
            )
        ]
        if ranked == DIVERGENCE:
            return minimum, min(rivals) if rivals else None
        best = max if objective[0].maximize else min
        return [best([minimum[0], *rivals])], None

    def sensitivity_scoring(self, wider: bool = False) -> tuple[Any, Any]:
        """The data and metric the sensitivity tables measure damage with: for a problem ranked
        by divergence the KL divergence from the float model, which resolves every damage, the
        wider table (a rate per bit) on the first third of the samples."""
        if self.selection == "accuracy":
            return self.batches, self.metric
        from model_explorer.datasets.cache import TensorCache

        count = -(-self.batches.num_samples // 3) if wider else self.batches.num_samples
        inputs = self.batches.inputs
        inputs = (
            [x[:count] for x in inputs] if isinstance(inputs, (list, tuple)) else inputs[:count]
        )
        return TensorCache(inputs, self.reference[:count], self.batches.batch_size), "kl"
