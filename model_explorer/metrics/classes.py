"""The metric classes: one accuracy figure accumulated over batches (`update`) and reported
once (`compute`), so that a figure over a subset does not depend on how it is batched. Top-k
accuracy, segmentation pixel accuracy and mean IoU against labels; agreement, top-k agreement,
cosine and KL divergence against the float model's outputs (`needs_reference`). `metrics`
registers them by name."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor


class Metric:
    """Accumulates one accuracy figure over batches. `higher_is_better` is False for a
    divergence (kl), whose bound is a maximum; `needs_reference` for a metric scored against the
    float model's outputs."""

    higher_is_better: ClassVar[bool] = True
    needs_reference: ClassVar[bool] = False
    # Set to keep each sample's outcome (`outcomes`): a metric that is a mean over samples
    # keeps what it averages, so that intervals and paired tests can be computed from them.
    keep_outcomes: bool = False

    def reset(self) -> None:
        raise NotImplementedError

    def outcomes(self) -> Tensor | None:
        """Each sample's outcome since the last reset (a hit, or the value averaged), where
        `keep_outcomes` was set and the metric is a mean over samples; None otherwise."""
        kept = getattr(self, "_kept", None)
        return torch.cat(kept) if kept else None

    def _keep(self, values: Tensor) -> None:
        if self.keep_outcomes:
            self.__dict__.setdefault("_kept", []).append(values.detach().reshape(-1).cpu())

    def update(self, output: Tensor, target: Tensor) -> None:
        raise NotImplementedError

    def compute(self) -> float:
        raise NotImplementedError

    def upper_bound(self, remaining: int) -> float | None:
        """The best final value still reachable with `remaining` samples to come (the lowest
        for a divergence), when the metric allows an exact bound (None otherwise)."""
        return None


class MeanOverSamples(Metric):
    """A per-sample value averaged over samples; the best case of a sample is `best`."""

    best: ClassVar[float] = 1.0
    # Whether a sample's value is a hit (0 or 1) where the output holds one score vector per
    # sample: kept as hits then, which are paired by McNemar's exact test
    counts_hits: ClassVar[bool] = False

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0.0
        self.count = 0
        self._kept: list[Tensor] = []

    def update(self, output: Tensor, target: Tensor) -> None:
        values = self.per_sample(output.float(), target.float())
        self._keep(values.bool() if self.counts_hits and output.dim() == 2 else values)
        self.total += float(values.double().sum())
        self.count += int(values.numel())

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        raise NotImplementedError

    def compute(self) -> float:
        return self.total / self.count if self.count else 0.0

    def upper_bound(self, remaining: int) -> float:
        return (self.total + remaining * self.best) / (self.count + remaining)


def topk_correct(output: Tensor, target: Tensor, k: int) -> Tensor:
    """Per sample: is the target among the k highest scores?"""
    k = min(k, output.shape[1])
    top = output.topk(k, dim=1).indices
    return (top == target.unsqueeze(1)).any(dim=1)


class TopKAccuracy(Metric):
    """Share of samples whose label is among the k highest-scoring classes."""

    def __init__(self, k: int = 1) -> None:
        self.k = k
        self.reset()

    def reset(self) -> None:
        self.correct = 0
        self.total = 0
        self._kept: list[Tensor] = []

    def update(self, output: Tensor, target: Tensor) -> None:
        hits = topk_correct(output, target, self.k)
        self._keep(hits)
        self.correct += int(hits.sum())
        self.total += int(target.shape[0])

    def compute(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def upper_bound(self, remaining: int) -> float:
        # Every remaining sample right: the exact best case.
        return (self.correct + remaining) / (self.total + remaining)


class ConfusionMatrix(Metric):
    """Pixel-wise confusion matrix of (N, C, H, W) scores against (N, H, W) class maps."""

    def __init__(self, num_classes: int | None = None, ignore_index: int | None = 255) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.reset()

    def reset(self) -> None:
        self.matrix: Tensor | None = None

    def update(self, output: Tensor, target: Tensor) -> None:
        classes = self.num_classes or output.shape[1]
        prediction = output.argmax(dim=1).flatten()
        target = target.flatten().long()
        keep = target != self.ignore_index if self.ignore_index is not None else slice(None)
        pairs = target[keep] * classes + prediction[keep]
        counts = torch.bincount(pairs, minlength=classes * classes).reshape(classes, classes).cpu()
        self.matrix = counts if self.matrix is None else self.matrix + counts


class PixelAccuracy(ConfusionMatrix):
    """Share of labelled pixels whose predicted class is right."""

    def compute(self) -> float:
        if self.matrix is None or self.matrix.sum() == 0:
            return 0.0
        return float(self.matrix.diag().sum() / self.matrix.sum())


class MeanIoU(ConfusionMatrix):
    """Intersection over union per class, averaged over classes present in labels or predictions."""

    def compute(self) -> float:
        if self.matrix is None:
            return 0.0
        matrix = self.matrix.double()
        intersection = matrix.diag()
        union = matrix.sum(0) + matrix.sum(1) - intersection
        present = union > 0
        return float((intersection[present] / union[present]).mean()) if present.any() else 0.0


class Agreement(MeanOverSamples):
    """Share of samples (and positions, for dense outputs) with the float model's top-1."""

    needs_reference = True
    counts_hits = True

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        same = (output.argmax(dim=1) == reference.argmax(dim=1)).float()
        return same.reshape(same.shape[0], -1).mean(dim=1)


class TopKAgreement(MeanOverSamples):
    """Share of samples whose float top-1 class is among the quantized model's top k."""

    needs_reference = True
    counts_hits = True

    def __init__(self, k: int = 5) -> None:
        self.k = k
        super().__init__()

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        return topk_correct(output, reference.argmax(dim=1), self.k).float()


class Cosine(MeanOverSamples):
    """Mean cosine similarity of each sample's output (flattened) to the float model's."""

    needs_reference = True

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        flat, expected = output.reshape(output.shape[0], -1), reference.reshape(output.shape[0], -1)
        return torch.nn.functional.cosine_similarity(flat, expected, dim=1, eps=1e-12)


def kl_per_sample(output: Tensor, reference: Tensor) -> Tensor:
    """KL(float || quantized) of the softmax over dim 1 of each sample (averaged over the
    positions of a dense output), in nats; at least 0 (rounding left below it is cut off)."""
    log_p, log_q = reference.float().log_softmax(dim=1), output.float().log_softmax(dim=1)
    divergence = (log_p.exp() * (log_p - log_q)).sum(dim=1)
    return divergence.reshape(divergence.shape[0], -1).mean(dim=1).clamp_min(0.0)


class KLDivergence(MeanOverSamples):
    """Mean KL divergence KL(float || quantized) of the softmax outputs over dim 1, in nats:
    lower is better, 0 when the outputs agree."""

    needs_reference = True
    higher_is_better = False
    best = 0.0

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        return kl_per_sample(output, reference)
