"""Runners evaluate a generation's new genomes: the contract, the registry and `runner:` settings.

A runner reports each genome as it finishes, through `done(position, configuration,
evaluation)`, in any completion order: the Explorer records in the order pymoo asked, so
parallelism cannot change a result. A parallel runner evaluates in other processes, which build
the problem themselves from the ProblemRecipe the runner is given (`attach`); tasks then carry
only genomes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from model_explorer.exploration.runners.recipe import ProblemRecipe
from model_explorer.problems.base import Evaluation, Problem
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import TypedSpec

# Called as each genome finishes: (position in the list, configuration, evaluation).
Done = Callable[[int, list[Any], Evaluation], None]
# The values of the search's fully evaluated front, plain data sent along with the genomes.
Front = Sequence[dict[str, float]]


class Runner:
    """Evaluates genomes of a Problem and reports each as it finishes."""

    recipe: ProblemRecipe | None = None

    def attach(self, recipe: ProblemRecipe) -> None:
        """The plain data from which other processes rebuild the problem being explored."""
        self.recipe = recipe

    def evaluate(
        self, problem: Problem, genomes: Sequence[np.ndarray], done: Done, front: Front = ()
    ) -> None:
        """Evaluate every genome (`problem.evaluate(genome, front)` wherever it runs)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release workers, if any."""

    def attached_recipe(self) -> ProblemRecipe:
        """The recipe a parallel runner ships to its workers."""
        if self.recipe is None:
            raise ValueError(
                "parallel runners evaluate problems built from a workload (`explore` attaches "
                "their recipe); use SerialRunner for this problem"
            )
        return self.recipe


# A builder takes the runner's validated options (a pydantic model, or None) and returns a Runner.
RUNNERS: Registry[Callable[[Any], Runner]] = Registry("runner")


def register_runner(name: str, options: Any = None) -> Callable[[Any], Any]:
    """Register `builder(options) -> Runner` with the pydantic model of its options."""
    return RUNNERS.register(name, options=options)


class RunnerSpec(TypedSpec):
    """Where candidates are evaluated (`exploration.runner`): a registered runner and its
    options, e.g. `{type: processes, workers: 2}`."""

    registry: ClassVar[Registry[Any]] = RUNNERS
    type: str = "serial"
    """The runner: `serial` (in the exploring process), `processes` (local worker processes) or
    `dask` (a Dask cluster, the `dask` extra); its options sit beside `type`. It changes where
    candidates are evaluated, never the result."""


def build_runner(spec: RunnerSpec) -> Runner:
    """The runner `exploration.runner` asks for."""
    return RUNNERS.get(spec.type, "exploration.runner.type").builder(spec.options)
