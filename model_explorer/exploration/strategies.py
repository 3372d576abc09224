"""Search strategies (`exploration.strategy`): how the search algorithm (NSGA-II by default)
spends its sample-forwards.

A strategy changes which candidates are evaluated and how far, never what a recorded value
means: every member of a result's front was scored on the full exploration subset.

- `nsga2`: plain NSGA-II, every new offspring scored on the full subset (before strategies
  existed, the only search; the golden files pin it).
- `spread`: NSGA-II whose first population is spread along the cost axis, from every gene at
  its upper bound to every gene at its lower bound, instead of random genomes that all sit near
  the middle of the cost range.
- `multifidelity`: NSGA-II whose candidates stop being scored once even their best reachable
  accuracy (every remaining sample right) could not join the front of the fully scored
  individuals at their cost, known before scoring; early rejection for the accuracy
  constraint stays as it is. Such a candidate is recorded as not complete and not feasible.
- `surrogate`: the default. NSGA-II proposes `candidates` offspring per generation, a
  regression over the genes (a Gaussian process refitted every generation from the recorded
  evaluations) predicts their accuracy, and only the `evaluations` most promising (largest
  optimistic gain in hypervolume) are evaluated; the first population is spread and scoring
  stops as in `multifidelity` unless switched off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import PositiveInt, Spec, TypedSpec

DEFAULT = "surrogate"


@dataclass(frozen=True)
class Strategy:
    """What a strategy changes in the NSGA-II loop (see the module's docstring)."""

    name: str = "nsga2"
    spread_start: bool = False
    reject_dominated: bool = False
    candidates: int = 0  # offspring proposed per generation and screened; 0: no surrogate
    evaluations: int = 0  # of those, the number evaluated
    optimism: float = 1.0  # predicted standard deviations added to the predicted accuracy

    @property
    def screens(self) -> bool:
        return self.candidates > 0


STRATEGIES: Registry[Callable[[Any], Strategy]] = Registry("strategy")


class StrategySpec(TypedSpec):
    """How the search spends its evaluations (`exploration.strategy`): a registered strategy
    and its options, e.g. `{type: surrogate, evaluations: 4}`."""

    registry: ClassVar[Registry[Any]] = STRATEGIES
    type: str = DEFAULT
    """The strategy: `nsga2` (every offspring scored in full), `spread` (a first population
    spread along the cost axis), `multifidelity` (scoring stops once a candidate cannot join the
    front) or `surrogate` (a Gaussian process picks which offspring are evaluated). Its options
    sit beside `type`."""


def build_strategy(spec: StrategySpec) -> Strategy:
    return STRATEGIES.get(spec.type, "exploration.strategy.type").builder(spec.options)


class MultifidelityOptions(Spec):
    spread_start: bool = False
    """Fill the first population, after the genomes `exploration.initialization` gives, with
    genomes spread along the cost axis from every gene at its upper bound to every gene at its
    lower bound, instead of random ones."""


class SurrogateOptions(Spec):
    candidates: PositiveInt = 64
    """Offspring the algorithm proposes per generation for the surrogate to choose from, in
    place of `exploration.nsga.offsprings` (raised to `evaluations` when smaller); the first
    population is evaluated whole."""
    evaluations: PositiveInt = 4
    """How many of the proposed `candidates` are evaluated in each generation after the first:
    those whose predicted outcomes add the most hypervolume to the front. Proposals evaluated
    before are reused besides, at no cost."""
    optimism: float = 1.0
    """How far, in predicted standard deviations, a candidate's predicted accuracy is spread
    when its hypervolume gain is estimated: larger favours candidates the surrogate is unsure
    of, `0` ranks them by the predicted mean alone."""
    spread_start: bool = True
    """Fill the first population, after the genomes `exploration.initialization` gives, with
    genomes spread along the cost axis from every gene at its upper bound to every gene at its
    lower bound, instead of random ones."""
    reject_dominated: bool = True
    """Stop scoring a candidate once even its best reachable accuracy cannot join the front of
    the fully scored individuals at its cost, recording it as not complete and not feasible;
    it applies to quantization problems with an accuracy constraint and `early_reject` on."""


@STRATEGIES.register("nsga2")
def _nsga2(options: Any = None) -> Strategy:
    return Strategy("nsga2")


@STRATEGIES.register("spread")
def _spread(options: Any = None) -> Strategy:
    return Strategy("spread", spread_start=True)


@STRATEGIES.register("multifidelity", options=MultifidelityOptions)
def _multifidelity(options: MultifidelityOptions) -> Strategy:
    return Strategy("multifidelity", spread_start=options.spread_start, reject_dominated=True)


@STRATEGIES.register("surrogate", options=SurrogateOptions)
def _surrogate(options: SurrogateOptions) -> Strategy:
    return Strategy(
        "surrogate",
        spread_start=options.spread_start,
        reject_dominated=options.reject_dominated,
        candidates=max(options.candidates, options.evaluations),
        evaluations=options.evaluations,
        optimism=options.optimism,
    )


def spread_genomes(
    lower: np.ndarray, upper: np.ndarray, integer: np.ndarray, count: int, seed: int
) -> list[list[float]]:
    """`count` genomes from every gene at its upper bound to every gene at its lower bound,
    each gene moved by up to one step (integers) or one level's distance (floats) at random,
    so that the first population covers the cost axis (seeded: the same genomes every run)."""
    if count <= 0:
        return []
    rng = np.random.default_rng(seed)
    span = upper - lower
    jitter = np.where(integer, 1.0, span / max(count, 1))
    genomes = []
    for level in np.linspace(1.0, 0.0, count):
        genome = lower + level * span + rng.uniform(-1.0, 1.0, len(lower)) * jitter
        genome = np.clip(np.where(integer, np.round(genome), genome), lower, upper)
        genomes.append([float(g) for g in genome])
    return genomes
