"""How sure each front member's figures are: intervals and paired comparisons from the
per-sample outcomes a search keeps with its front (`extra["outcomes"]`, results/statistics.py).

Per member, on the data it was selected on: its accuracy with a Wilson interval (a metric
counting hits) or a t interval (a mean of per-sample values), the mean divergence from the float
model where it ranked the front, and its paired comparison with the float model (whose outcomes
on the same samples the search keeps in `stats["baseline_outcomes"]`). Between members next to
each other along the front: whether the dearer one is distinguishably better, on the metric and
on the ranking divergence, and how many samples would tell them apart where these cannot. The
same on the held-out data where the front was scored there (`extra["held_out_outcomes"]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from model_explorer.results.statistics import (
    Estimate,
    Paired,
    mcnemar,
    mean_interval,
    paired_means,
    unpack_hits,
    unpack_values,
    wilson,
)


@dataclass(frozen=True)
class Outcomes:
    """One candidate's per-sample outcomes on one set of samples: `hits` (one bit each) or
    `values` (one number each) of the metric, and `kl`, the divergence from the float model."""

    hits: np.ndarray | None = None
    values: np.ndarray | None = None
    kl: np.ndarray | None = None

    @classmethod
    def of(cls, packed: dict[str, str] | None) -> Outcomes | None:
        if not packed:
            return None
        return cls(
            unpack_hits(packed["hits"]) if "hits" in packed else None,
            unpack_values(packed["values"]) if "values" in packed else None,
            unpack_values(packed["kl"]) if "kl" in packed else None,
        )

    def accuracy(self) -> Estimate | None:
        if self.hits is not None:
            return wilson(self.hits)
        return mean_interval(self.values) if self.values is not None else None

    def against(self, other: Outcomes | None) -> Paired | None:
        """This candidate's metric against another's on the same samples."""
        if other is None:
            return None
        if self.hits is not None and other.hits is not None and len(self.hits) == len(other.hits):
            return mcnemar(self.hits, other.hits)
        if (
            self.values is not None
            and other.values is not None
            and len(self.values) == len(other.values)
        ):
            return paired_means(self.values, other.values)
        return None

    def divergence_against(self, other: Outcomes | None) -> Paired | None:
        if other is None or self.kl is None or other.kl is None or len(self.kl) != len(other.kl):
            return None
        return paired_means(self.kl, other.kl)


@dataclass(frozen=True)
class MemberConfidence:
    """One front member's figures with their uncertainty (None where not recorded).
    `against_cheaper` and `divergence_against_cheaper` compare it with the member before it
    along the front (first minus cheaper: a positive accuracy difference, a negative
    divergence one, is the dearer member doing better)."""

    id: int
    accuracy: Estimate | None
    divergence: Estimate | None
    against_float: Paired | None
    against_cheaper: Paired | None
    divergence_against_cheaper: Paired | None
    held_out: Estimate | None
    held_out_against_float: Paired | None


def front_confidence(result: Any, front: list[Any]) -> list[MemberConfidence]:
    """The figures of each member of `front` (ordered along it, cheapest first) with their
    intervals and paired comparisons."""
    stats = result.stats or {}
    baseline = Outcomes.of(stats.get("baseline_outcomes"))
    held_baseline = Outcomes.of((stats.get("held_out") or {}).get("outcomes"))
    found = []
    cheaper: Outcomes | None = None
    for member in front:
        outcomes = Outcomes.of(member.extra.get("outcomes"))
        held = Outcomes.of(member.extra.get("held_out_outcomes"))
        found.append(
            MemberConfidence(
                member.id,
                outcomes.accuracy() if outcomes else None,
                mean_interval(outcomes.kl) if outcomes and outcomes.kl is not None else None,
                outcomes.against(baseline) if outcomes else None,
                outcomes.against(cheaper) if outcomes else None,
                outcomes.divergence_against(cheaper) if outcomes else None,
                held.accuracy() if held else None,
                held.against(held_baseline) if held else None,
            )
        )
        cheaper = outcomes
    return found


def indistinct_pairs(
    front: list[Any],
    confidence: list[MemberConfidence],
    metric: str = "accuracy",
    cost: str | None = None,
) -> list[str]:
    """A sentence for each run of members along the front that its samples cannot tell apart
    on the metric (no member distinctly better than the cheaper one beside it), with the
    sample count that would separate the most different neighbours and how many of the steps
    the ranking divergence separates."""
    runs: list[list[int]] = []
    for index in range(1, min(len(front), len(confidence))):
        paired = confidence[index].against_cheaper
        if paired is None or paired.distinct:
            continue
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index - 1, index])
    return [_run_sentence(front, confidence, run, metric, cost) for run in runs]


def _run_sentence(
    front: list[Any],
    confidence: list[MemberConfidence],
    run: list[int],
    metric: str,
    cost: str | None,
) -> str:
    steps = [confidence[i].against_cheaper for i in run[1:]]
    ids = ", ".join(str(front[i].id) for i in run)
    span = ""
    if cost is not None:
        low, high = front[run[0]].values.get(cost), front[run[-1]].values.get(cost)
        span = f" ({low:g} to {high:g} {cost})" if low != high else f" ({low:g} {cost})"
    samples = steps[0].samples if steps[0] is not None else 0
    needed = [s.needed for s in steps if s is not None and s.needed is not None]
    if needed:
        separating = f"about {min(needed):,} samples would separate the most different neighbours"
    else:
        separating = "they differ on no sample"
    ends = None
    if len(run) > 2 and confidence[run[0]].accuracy is not None:
        ends = _ends(front[run[0]], front[run[-1]])
    if ends is not None and ends.distinct:
        separating += (
            f", though {front[run[-1]].id} is distinctly "
            f"{'better' if ends.difference > 0 else 'worse'} than {front[run[0]].id} "
            f"(p = {ends.p_value:.2g})"
        )
    divergences = [confidence[i].divergence_against_cheaper for i in run[1:]]
    known = [d for d in divergences if d is not None]
    ranked = ""
    if known:
        apart = sum(d.distinct and d.difference < 0 for d in known)
        ranked = (
            f"; the divergence from the float model separates {apart} of its {len(known)} steps"
        )
    return (
        f"{ids}{span}: none is distinctly better on {metric} than the cheaper one beside it "
        f"with {samples} samples (smallest p = {min(s.p_value for s in steps if s):.2g}); "
        f"{separating}{ranked}"
    )


def _ends(cheapest: Any, dearest: Any) -> Paired | None:
    """The dearest member of a run against its cheapest, where both kept their outcomes."""
    first = Outcomes.of(dearest.extra.get("outcomes"))
    return first.against(Outcomes.of(cheapest.extra.get("outcomes"))) if first else None
