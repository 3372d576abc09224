"""Surrogate pre-screening: which of the offspring NSGA-II proposes are worth evaluating.

A Gaussian process per measured quantity (accuracy, and any objective the problem cannot
compute without the model) over the genes scaled to [0, 1], refitted every generation from the
recorded evaluations; costs the problem knows without the model (`Problem.known_values`) are
used as they are.

What keeps a long search cheap (a GP's fit grows with the cube of its records, and optimising
its kernel's hyperparameters takes dozens of fits): it learns from at most `WINDOW` records,
those of the best non-domination ranks in the objectives (where the proposals come from, the
population's neighbourhood), the most recent first among equals; and its hyperparameters are
optimised again only when the record has grown by `REOPTIMISE` since they last were, starting
from those, and kept as they are in between (`Fits`). Both depend only on the records, so a
resumed search, which replays its generations, fits the same surrogates.

A candidate's promise is the hypervolume its outcomes, predicted at quantiles of its predictive
distribution widened by `optimism`, are expected to add to the front of the recorded, fully
scored individuals, in the objectives a front is judged in: for a problem ranked by the
divergence from the float model (problems/ranking.py), the accuracy against cost of the front
the divergence chose, so that evaluations go where they can raise what the user judges, not to
divergences too small to move the accuracy (measured on the default workload, 20 seeds:
held-out hypervolume 0.372 against 0.361 when acquired in the divergence, paired p = 0.047;
docs/performance-search.md). Candidates are picked one at a time, each pick joining the front at its
predicted mean. Predictions only choose what to evaluate: nothing predicted is ever recorded.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from model_explorer.problems.base import FINITE, Problem
from model_explorer.results.front import non_dominated

MINIMUM_RECORDS = 4
# The most records a surrogate learns from, and the growth of the record after which its
# kernel's hyperparameters are optimised again (docs/performance-search.md, "A long search").
WINDOW = 256
REOPTIMISE = 1.25
# Two objectives' gains in closed form (`hypervolume_gains`); off: pymoo's indicator for each
# point, as before (benchmarks/bench_search_overhead.py measures both)
CLOSED_FORM = True


class Fits:
    """What one search's surrogates keep between generations: per quantity, the kernel whose
    hyperparameters were last optimised and the number of records they were optimised at."""

    def __init__(self) -> None:
        self.kernels: dict[str, Any] = {}
        self.optimised_at: dict[str, int] = {}

    def due(self, name: str, records: int) -> bool:
        """Whether the hyperparameters of `name` are to be optimised at `records` records."""
        return name not in self.kernels or records >= REOPTIMISE * self.optimised_at[name]


def window(problem: Problem, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most WINDOW of `records`: the best non-domination ranks in the problem's objectives
    first (constraints aside, so that the cheap side of the feasibility limit stays in view),
    the most recent first within a rank."""
    if len(records) <= WINDOW:
        return records
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    objectives = np.array([problem.objective_vector(r["values"]) for r in records])
    rank = np.empty(len(records), dtype=int)
    for level, members in enumerate(NonDominatedSorting().do(objectives)):
        rank[members] = level
    order = sorted(range(len(records)), key=lambda i: (rank[i], -i))[:WINDOW]
    return [records[i] for i in sorted(order)]


def _unknown_quantities(problem: Problem, known: dict[str, float]) -> list[str]:
    judged = getattr(problem, "judged_objectives", [])
    names = [o.name for o in [*problem.objectives, *judged]]
    names += [c.name for c in problem.all_constraints]
    return [n for n in dict.fromkeys(names) if n not in known and n != FINITE]


def _direction(problem: Problem, name: str) -> float:
    """+1 for quantities where more is better (maximised, or bounded below), else -1."""
    for objective in problem.objectives:
        if objective.name == name:
            return 1.0 if objective.maximize else -1.0
    for constraint in problem.all_constraints:
        if constraint.name == name and constraint.minimum is not None:
            return 1.0
    return -1.0


class Surrogate:
    """Regressions of the quantities a problem measures with its model, from genomes."""

    def __init__(self, problem: Problem, seed: int) -> None:
        self.problem = problem
        self.seed = seed
        self.lower = np.array([v.lower for v in problem.variables], dtype=float)
        span = np.array([v.upper for v in problem.variables], dtype=float) - self.lower
        self.span = np.where(span > 0, span, 1.0)
        self.models: dict[str, Any] = {}

    def _scaled(self, genomes: Sequence[Sequence[float]]) -> np.ndarray:
        return (np.asarray(genomes, dtype=float) - self.lower) / self.span

    def fit(
        self, records: list[dict[str, Any]], names: list[str], fits: Fits | None = None
    ) -> bool:
        """Fit one regression per name on the finite records (at most WINDOW of them); False
        when too few. `fits`: the search's kernels so far, whose hyperparameters are taken as
        they are until the record has grown enough to optimise them again."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        fits = fits if fits is not None else Fits()
        usable = [r for r in records if r["extra"].get("finite", True)]
        if len(usable) < MINIMUM_RECORDS:
            return False
        count = len(usable)
        usable = window(self.problem, usable)
        inputs = self._scaled([r["genome"] for r in usable])
        for name in names:
            optimise = fits.due(name, count)
            kernel = fits.kernels.get(name) or ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
                np.ones(inputs.shape[1]), (1e-2, 1e3), nu=2.5
            ) + WhiteKernel(1e-2, (1e-3, 1.0))
            model = GaussianProcessRegressor(
                kernel,
                normalize_y=True,
                random_state=self.seed,
                optimizer="fmin_l_bfgs_b" if optimise else None,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(inputs, np.array([r["values"][name] for r in usable], dtype=float))
            if optimise:
                fits.kernels[name], fits.optimised_at[name] = model.kernel_, count
            self.models[name] = model
        return True

    def predict(
        self, genomes: Sequence[Sequence[float]]
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        inputs = self._scaled(genomes)
        return {name: model.predict(inputs, return_std=True) for name, model in self.models.items()}


def front_matrix(problem: Problem, records: list[dict[str, Any]], vector: Any) -> np.ndarray:
    """The front of the feasible, fully scored records, chosen by the problem's objectives,
    each as `vector` gives it (pymoo's minimisation form)."""
    feasible = [r for r in records if r["feasible"]]
    if feasible:
        ranked = np.array([problem.objective_vector(r["values"]) for r in feasible])
        feasible = [r for r, kept in zip(feasible, non_dominated(ranked), strict=True) if kept]
    rows = [vector(r["values"]) for r in feasible]
    return np.array(rows, dtype=float).reshape(len(rows), len(problem.objectives))


def select(
    problem: Problem,
    records: list[dict[str, Any]],
    genomes: np.ndarray,
    configurations: list[list[Any]],
    count: int,
    seed: int,
    optimism: float = 1.0,
    fits: Fits | None = None,
) -> list[int]:
    """Positions of the `count` most promising genomes (in the order they were picked);
    `configurations`: theirs, as the Explorer decoded them; `fits`: what the search's
    surrogates kept from earlier generations (none: every fit optimised afresh)."""
    if len(genomes) <= count:
        return list(range(len(genomes)))
    known = [problem.known_values(configuration) for configuration in configurations]
    names = _unknown_quantities(problem, known[0])
    surrogate = Surrogate(problem, seed)
    if not surrogate.fit(records, names, fits):
        return list(range(count))
    predicted = surrogate.predict(genomes)
    # Each candidate at QUANTILES of its predictive distribution (all unknown quantities at the
    # same quantile, `optimism` widening it), and at its mean.
    levels = optimism * QUANTILES
    outcomes, believed = [], []
    for index, values in enumerate(known):
        base = {FINITE: 1.0, **values}
        mean = {n: float(predicted[n][0][index]) for n in names}
        spread = {n: float(predicted[n][1][index]) * _direction(problem, n) for n in names}
        outcomes.append([{**base, **{n: mean[n] + q * spread[n] for n in names}} for q in levels])
        believed.append({**base, **mean})
    vector = judged_vector(problem)
    front = front_matrix(problem, records, vector)
    return _greedy(problem, front, outcomes, believed, count, vector)


def judged_vector(problem: Problem) -> Any:
    """A values dict as the objectives a front is judged in (pymoo's minimisation form): the
    accuracy in the place of the divergence that ranks a problem ranked by it
    (problems/ranking.py), else the problem's own objectives."""
    objectives = getattr(problem, "judged_objectives", problem.objectives)
    return lambda values: problem.objective_vector(values, objectives)


# Standard normal quantiles at (k + 0.5) / 8: the expected gain is their mean gain.
QUANTILES = np.array([-1.534, -0.887, -0.489, -0.157, 0.157, 0.489, 0.887, 1.534])


def _greedy(
    problem: Problem,
    front: np.ndarray,
    outcomes: list[list[dict[str, float]]],
    believed: list[dict[str, float]],
    count: int,
    vector: Any,
) -> list[int]:
    """Pick candidates one at a time by the hypervolume they are expected to add to the front
    (those expected to add none: by how far their most optimistic outcome is from adding any);
    each pick joins the front at its predicted mean; `vector` turns values into the objectives
    the gains are counted in."""
    points = np.array([[vector(v) for v in row] for row in outcomes])
    feasible = np.array([[problem.feasible(v) for v in row] for row in outcomes])
    flat = points.reshape(-1, points.shape[-1])
    both = np.vstack([front, flat]) if len(front) else flat
    low, high = both.min(axis=0), both.max(axis=0)
    scale = np.where(high > low, high - low, 1.0)
    reference = (high - low) / scale + 0.1  # just beyond the worst point, in scaled units
    front = (front - low) / scale
    points = (points - low) / scale
    chosen: list[int] = []
    while len(chosen) < count:
        front = front[non_dominated(front)] if len(front) else front
        gains = hypervolume_gains(front, points.reshape(-1, points.shape[-1]), reference)
        gains = np.where(feasible, gains.reshape(feasible.shape), 0.0)
        scores = [
            -np.inf if index in chosen else _promise(front, gains[index], points[index], ok)
            for index, ok in enumerate(feasible)
        ]
        best = int(np.argmax(scores))
        chosen.append(best)
        if problem.feasible(believed[best]):
            mean = (vector(believed[best]) - low) / scale
            front = np.vstack([front, mean[None]]) if len(front) else mean[None]
    return chosen


def hypervolume_gains(front: np.ndarray, points: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The hypervolume each point (a row, all objectives minimised) adds to the non-dominated
    `front` against `reference`. Two objectives in closed form for every point at once: the
    front's staircase S(x) (the lowest second objective of the members at most x along the
    first), and a point's gain the integral of max(0, S(x) - y) from its x to the reference;
    more objectives through pymoo's indicator, a point at a time."""
    if points.shape[1] != 2 or not CLOSED_FORM:
        from pymoo.indicators.hv import HV

        indicator = HV(ref_point=reference)
        base = indicator(front) if len(front) else 0.0
        return np.array([indicator(np.vstack([front, p[None]])) - base for p in points])
    inside = np.all(points < reference, axis=1)
    x, y = np.minimum(points[:, 0], reference[0]), np.minimum(points[:, 1], reference[1])
    members = front[np.all(front < reference, axis=1)] if len(front) else front
    members = members[np.argsort(members[:, 0], kind="stable")] if len(members) else members
    # segments [start, end) of the first objective, each with the staircase's height
    starts = np.concatenate([[-np.inf], members[:, 0]])
    ends = np.concatenate([members[:, 0], [reference[0]]])
    heights = np.minimum.accumulate(np.concatenate([[reference[1]], members[:, 1]]))
    width = np.clip(ends[None, :] - np.maximum(starts[None, :], x[:, None]), 0.0, None)
    depth = np.clip(heights[None, :] - y[:, None], 0.0, None)
    return np.where(inside, np.sum(width * depth, axis=1), 0.0)


def _promise(
    front: np.ndarray, gains: np.ndarray, points: np.ndarray, feasible: np.ndarray
) -> float:
    """Mean hypervolume gain of a candidate's outcomes (`gains`, each outcome's, none for an
    infeasible one); when none gains, minus how far its most optimistic feasible outcome is
    from joining the front (and far below that when none of its outcomes is feasible)."""
    if not feasible.any():
        return -1e6
    if not len(front):
        return float(feasible.mean())
    expected = float(np.mean(gains))
    if expected > 1e-12:
        return expected
    return -min(_distance(front, point) for point, ok in zip(points, feasible, strict=True) if ok)


def _distance(front: np.ndarray, point: np.ndarray) -> float:
    """How far a dominated point must move (in every objective at once) to be dominated no
    more: the additive epsilon indicator against the front."""
    return float(np.min(np.max(point[None, :] - front, axis=1)))
