"""Runners evaluate a generation's new genomes: here one after the other in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from model_explorer.problems.base import Evaluation, Problem

# Called as each genome finishes: (position in the list, configuration, evaluation).
Done = Callable[[int, list[Any], Evaluation], None]


class Runner:
    """Evaluates genomes of a Problem and reports each as it finishes."""

    def evaluate(self, problem: Problem, genomes: Sequence[np.ndarray], done: Done) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers, if any."""


class SerialRunner(Runner):
    def evaluate(self, problem: Problem, genomes: Sequence[np.ndarray], done: Done) -> None:
        for position, genome in enumerate(genomes):
            configuration, evaluation = problem.evaluate(genome)
            done(position, configuration, evaluation)
