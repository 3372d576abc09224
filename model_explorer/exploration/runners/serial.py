"""The `serial` runner: every configuration evaluated in the exploring process, one after the
other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from model_explorer.exploration.runners.base import Done, Front, Runner, register_runner
from model_explorer.problems.base import Problem


class SerialRunner(Runner):
    def evaluate(
        self, problem: Problem, configurations: Sequence[list[Any]], done: Done, front: Front = ()
    ) -> None:
        for position, configuration in enumerate(configurations):
            done(position, configuration, problem.evaluate_configuration(configuration, front))


@register_runner("serial")
def serial_runner(options: Any = None) -> SerialRunner:
    return SerialRunner()
