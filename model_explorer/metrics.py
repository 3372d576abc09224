"""Accuracy functions by name (top-1, top-k, segmentation pixel accuracy, mean IoU) and `evaluate`.

Metrics accumulate over batches (`update`) and report once (`compute`), so an accuracy over a
subset does not depend on how it is batched. A model with several outputs (a tuple of tensors)
gets one metric per output and `evaluate` returns a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from model_explorer.registry import Registry
from model_explorer.schema import NonNegativeInt, PositiveInt, Spec, TypedSpec


class Metric:
    """Accumulates one accuracy figure over batches."""

    def reset(self) -> None:
        raise NotImplementedError

    def update(self, output: Tensor, target: Tensor) -> None:
        raise NotImplementedError

    def compute(self) -> float:
        raise NotImplementedError

    def upper_bound(self, remaining: int) -> float | None:
        """The best final value still reachable with `remaining` samples to come, when the
        metric allows an exact bound (None otherwise)."""
        return None


MetricBuilder = Callable[[Any], Metric]
METRICS: Registry[MetricBuilder] = Registry("metric")


class MetricSpec(TypedSpec):
    """The accuracy function, by name (`top1`) or with options (`{type: topk, k: 5}`)."""

    registry: ClassVar[Registry[Any]] = METRICS
    type: str


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

    def update(self, output: Tensor, target: Tensor) -> None:
        self.correct += int(topk_correct(output, target, self.k).sum())
        self.total += int(target.shape[0])

    def compute(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def upper_bound(self, remaining: int) -> float:
        # Every remaining sample right: the exact best case.
        return (self.correct + remaining) / (self.total + remaining)


class TopKOptions(Spec):
    k: PositiveInt = 5


class SegmentationOptions(Spec):
    num_classes: PositiveInt | None = None
    ignore_index: NonNegativeInt | None = 255


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


METRICS.register("top1")(lambda options: TopKAccuracy(1))
METRICS.register("top5")(lambda options: TopKAccuracy(5))
METRICS.register("topk", options=TopKOptions)(lambda options: TopKAccuracy(options.k))
METRICS.register("pixel_accuracy", options=SegmentationOptions)(
    lambda options: PixelAccuracy(options.num_classes, options.ignore_index)
)
METRICS.register("mean_iou", options=SegmentationOptions)(
    lambda options: MeanIoU(options.num_classes, options.ignore_index)
)


def create_metric(spec: MetricSpec | str) -> Metric:
    """A fresh metric for a spec or a name such as 'top1'."""
    if isinstance(spec, str):
        spec = MetricSpec(type=spec)
    return METRICS.get(spec.type, "workload.metric.type").builder(spec.options)


def output_list(output: Any) -> list[Tensor]:
    """A model's output as a list of score tensors, one per head."""
    if isinstance(output, Tensor):
        return [output]
    if isinstance(output, dict) and "out" in output:  # torchvision segmentation models
        return [output["out"]]
    if isinstance(output, (list, tuple)):
        return list(output)
    raise TypeError(f"cannot score model output of type {type(output).__name__}")


def to_device(value: Any, device: torch.device) -> Any:
    """Move a tensor, or a tuple/list of tensors, to `device`."""
    if isinstance(value, Tensor):
        return value.to(device, non_blocking=True)
    return type(value)(to_device(item, device) for item in value)


@dataclass
class Outcome:
    """What scoring a model over a subset found. `complete` is False when scoring stopped early
    because some accuracy could no longer reach its minimum; then `accuracies` holds the upper
    bounds reached. `finite` is False when an output held NaN or infinity."""

    accuracies: list[float]
    complete: bool = True
    finite: bool = True
    samples: int = 0


@torch.inference_mode()
def score(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    metric: MetricSpec | str = "top1",
    device: torch.device | str | None = None,
    minimum: list[float] | None = None,
    check_finite: bool = False,
) -> Outcome:
    """Accuracy of `model` over `batches`, one value per model output.

    With `minimum` (one per output) and batches that know their `num_samples` (a TensorCache),
    scoring stops as soon as an accuracy's exact upper bound falls below its minimum.
    With `check_finite`, a non-finite output stops scoring with accuracy 0.
    """
    model.eval()
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    total = getattr(batches, "num_samples", None) if minimum is not None else None
    metrics: list[Metric] = []
    seen = 0
    for inputs, targets in batches:
        inputs = to_device(inputs, device)
        targets = to_device(targets, device)
        outputs = output_list(
            model(*inputs) if isinstance(inputs, (list, tuple)) else model(inputs)
        )
        if not metrics:
            metrics = [create_metric(metric) for _ in outputs]
        if check_finite and not all(bool(torch.isfinite(o).all()) for o in outputs):
            return Outcome([0.0] * len(outputs), complete=False, finite=False, samples=seen)
        paired = targets if isinstance(targets, (list, tuple)) else [targets] * len(outputs)
        for metric_state, output, target in zip(metrics, outputs, paired, strict=True):
            metric_state.update(output, target)
        seen += len(paired[0])
        if total is not None and seen < total:
            bounds = [m.upper_bound(total - seen) for m in metrics]
            if any(b is not None and b < low for b, low in zip(bounds, minimum, strict=True)):
                return Outcome([float(b) for b in bounds], complete=False, samples=seen)
    return Outcome([m.compute() for m in metrics], samples=seen)


def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    metric: MetricSpec | str = "top1",
    device: torch.device | str | None = None,
) -> float | list[float]:
    """Accuracy of `model` (put in eval mode) over `batches` of (inputs, targets).

    One float per model output; a single-output model gives a float. A single target tensor is
    scored against every output (e.g. early-exit heads); a tuple of targets pairs up with outputs.
    """
    accuracies = score(model, batches, metric, device).accuracies
    return accuracies[0] if len(accuracies) == 1 else accuracies
