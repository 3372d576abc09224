"""Shared helpers of the tests: a cheap synthetic Problem."""

from __future__ import annotations

from collections import Counter

import numpy as np

from model_explorer.problems import Constraint, Evaluation, Objective, Problem, Variable


class Synthetic(Problem):
    """Bits per gene; 'accuracy' falls with fewer bits, faster for early genes."""

    name = "synthetic"

    def __init__(self, genes: int = 6, minimum: float = 0.6, fail_after: int | None = None) -> None:
        self.variables = [Variable(f"g{i}", 2, 8) for i in range(genes)]
        self.objectives = [Objective("accuracy", maximize=True), Objective("bits")]
        self.constraints = [Constraint("accuracy", minimum=minimum)]
        self.calls: Counter[tuple] = Counter()
        self.fail_after = fail_after

    def apply(self, configuration):
        pass

    def measure(self, configuration):
        if self.fail_after is not None and sum(self.calls.values()) >= self.fail_after:
            raise KeyboardInterrupt
        self.calls[tuple(configuration)] += 1
        weights = np.linspace(2.0, 0.5, len(configuration))
        loss = float(np.sum(weights * (8 - np.array(configuration)) ** 2)) / 200.0
        finite = configuration[0] > 3  # a planted "NaN model" at the lowest widths
        return Evaluation(
            {"accuracy": max(0.0, 1.0 - loss), "bits": float(sum(configuration))},
            [1.0 - loss],
            finite=finite,
        )
