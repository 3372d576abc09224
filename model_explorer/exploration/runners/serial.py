"""The `serial` runner: every genome evaluated in the exploring process, one after the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from model_explorer.exploration.runners.base import Done, Front, Runner, register_runner
from model_explorer.problems.base import Problem


class SerialRunner(Runner):
    def evaluate(
        self, problem: Problem, genomes: Sequence[np.ndarray], done: Done, front: Front = ()
    ) -> None:
        for position, genome in enumerate(genomes):
            configuration, evaluation = problem.evaluate(genome, front)
            done(position, configuration, evaluation)


@register_runner("serial")
def serial_runner(options: Any = None) -> SerialRunner:
    return SerialRunner()
