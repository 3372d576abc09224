"""Shared helpers of the tests: a cheap synthetic Problem, small models, a user inspector."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from torch import nn

from model_explorer.analysis.diagnose import BaseInspector
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


# -- small models for the diagnostics tests (loaded by `tests_support:<name>` model types) -----


class ChannelScale(nn.Module):
    """Multiplies each channel by a stored factor (ones: the identity)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale.view(1, -1, *([1] * (x.dim() - 2)))


def plain_cnn(num_classes: int = 10) -> nn.Module:
    """Two convolutions without batch norm and a linear layer, for 8x8 digits. The
    ChannelScale after the second convolution lets a test scale one of its channels up in the
    weights and back down afterwards without changing the function."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        ChannelScale(16),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 16, num_classes),
    )


class TwoBranches(nn.Module):
    """Two convolutions of the input concatenated along channels, then a linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(8 * 64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.a(x), self.b(x)], dim=1).flatten(1))


def two_branches(num_classes: int = 10) -> nn.Module:
    return TwoBranches(num_classes)


class AlwaysWarns(BaseInspector):
    """A user inspector loaded by import path."""

    name = "AlwaysWarns"

    def run(self, context):
        return [self.finding("warning", "planted", layer="everywhere")]


class Explodes(BaseInspector):
    """A user inspector that fails."""

    name = "Explodes"

    def run(self, context):
        raise RuntimeError("planted failure")
