"""What a peer search of the benchmark (peer_aimet.py, peer_modelopt.py) hands back, the
genes it is asked about, and how it scores a model (the workload's metric)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

# (layer name, role, lowest bits, highest bits); role is 'input' or 'weight'
Gene = tuple[str, str, int, int]


@dataclass
class PeerResult:
    """What a peer proposed and what it cost.

    Attributes:
        genomes: the configurations proposed, each a list of bit widths in gene order.
        forwards: the sample-forwards the peer spent on its own (its calibration, sensitivity
            phase and evaluations; how each peer counts them is in its `notes`).
        seconds: the wall-clock time of the whole proposal.
        notes: how the peer's choices were mapped onto the genes where that is not one to one,
            and how `forwards` was counted.
        own: per genome, in the same order, its score with the peer's own quantizer (its
            calibration, encodings and rounding, as its search saw it) on the evaluation data
            and on the held-out data (None where none was given), in the metric's own
            direction; empty where the peer was not asked. Not counted in `forwards`.
    """

    genomes: list[list[int]]
    forwards: int
    seconds: float
    notes: str
    own: list[tuple[float, float | None]] = field(default_factory=list)


class Scoring:
    """How a peer scores a model against the benchmark's targets: with the workload's metric,
    so that a peer optimises what the benchmark measures, labelled (top1) or label-free
    (cosine, kl, agreement: the targets are the float model's outputs).

    `score(model, batches)` is the metric over (inputs, targets) batches, negated for a metric
    where lower is better (kl), so that higher is better as AIMET's evaluation callbacks
    assume. `loss(output, targets)` is the differentiable loss a gradient-based peer
    (AutoQuantize) scores with: cross entropy against the labels for a labelled metric; for a
    label-free one the metric's own per-sample value where it has a gradient (cosine: 1 minus
    it; kl: itself), else (agreement, an argmax) the KL divergence to the float outputs.
    """

    def __init__(self, metric: Any = "top1") -> None:
        from model_explorer.metrics.functions import create_metric

        self.metric = metric
        self.name = metric if isinstance(metric, str) else metric.type
        self._kind = create_metric(metric)  # its flags and per_sample (stateless), never updated
        self.sign = 1.0 if self._kind.higher_is_better else -1.0
        self.label_free = self._kind.needs_reference
        self.ignore_index = getattr(self._kind, "ignore_index", None)

    def score(self, model: torch.nn.Module, batches: Iterable[tuple[Any, Any]]) -> float:
        """The metric over every batch, signed so that higher is better."""
        return self.sign * self.value(model, batches)

    def value(self, model: torch.nn.Module, batches: Iterable[tuple[Any, Any]]) -> float:
        """The metric over every batch, in its own direction (as the benchmark's tables)."""
        from model_explorer.metrics.functions import create_metric

        metric = create_metric(self.metric)
        with torch.no_grad():
            for inputs, targets in batches:
                output = model(inputs)
                metric.update(output, targets.to(output.device))
        return metric.compute()

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """A differentiable loss of `output` against the batch's targets (lower is better)."""
        targets = targets.to(output.device)
        if not self.label_free:
            ignore = -100 if self.ignore_index is None else self.ignore_index
            return F.cross_entropy(output, targets, ignore_index=ignore)
        from model_explorer.metrics.classes import KLDivergence

        values = self._kind.per_sample(output.float(), targets.float())
        if values.requires_grad or not output.requires_grad:
            return (self._kind.best - values).mean() if self.sign > 0 else values.mean()
        return KLDivergence().per_sample(output.float(), targets.float()).mean()
