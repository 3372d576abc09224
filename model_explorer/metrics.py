"""Accuracy functions by name (top-1, top-k, segmentation pixel accuracy, mean IoU), label-free
fidelity to the float model (agreement, agreement_top5, cosine, kl), and `evaluate`.

Metrics accumulate over batches (`update`) and report once (`compute`), so an accuracy over a
subset does not depend on how it is batched. A model with several outputs (a tuple of tensors)
gets one metric per output and `evaluate` returns a list. A fidelity metric (`needs_reference`)
compares outputs with the float model's outputs on the same samples instead of labels: its
"targets" are those outputs, computed once per dataset (`reference_batches`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from pydantic import ConfigDict
from torch import Tensor, nn

from model_explorer.errors import UserError
from model_explorer.modules import run_on, to_device
from model_explorer.registry import Registry, call_user_code
from model_explorer.schema import NonNegativeInt, PositiveInt, Spec, TypedSpec


class Metric:
    """Accumulates one accuracy figure over batches. `higher_is_better` is False for a
    divergence (kl), whose bound is a maximum; `needs_reference` for a metric scored against the
    float model's outputs."""

    higher_is_better: ClassVar[bool] = True
    needs_reference: ClassVar[bool] = False

    def reset(self) -> None:
        raise NotImplementedError

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

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, output: Tensor, target: Tensor) -> None:
        values = self.per_sample(output.float(), target.float())
        self.total += float(values.double().sum())
        self.count += int(values.numel())

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        raise NotImplementedError

    def compute(self) -> float:
        return self.total / self.count if self.count else 0.0

    def upper_bound(self, remaining: int) -> float:
        return (self.total + remaining * self.best) / (self.count + remaining)


class ImportedMetricOptions(Spec):
    """A `package.module:Class` metric takes any key beside `type`: its constructor's arguments."""

    model_config = ConfigDict(extra="allow")


MetricBuilder = Callable[[Any], Metric]
METRICS: Registry[MetricBuilder] = Registry(
    "metric", "metric class", "package.module:Class", ImportedMetricOptions
)


class UserMetric(Metric):
    """A metric of the user's code: any object with `update(output, target)` and `compute()`,
    optionally `upper_bound(remaining)` (for early rejection), `higher_is_better` and
    `needs_reference`, which default as for `Metric`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.higher_is_better = bool(getattr(inner, "higher_is_better", True))  # type: ignore[misc]
        self.needs_reference = bool(getattr(inner, "needs_reference", False))  # type: ignore[misc]

    def update(self, output: Tensor, target: Tensor) -> None:
        self.inner.update(output, target)

    def compute(self) -> float:
        return float(self.inner.compute())

    def upper_bound(self, remaining: int) -> float | None:
        bound = getattr(self.inner, "upper_bound", None)
        return None if bound is None else bound(remaining)


@METRICS.adapt_imports
def _user_metric(cls: Callable[..., Any]) -> MetricBuilder:
    def build(options: Any) -> Metric:
        name = f"{cls.__module__}:{getattr(cls, '__qualname__', cls)}"
        keys = (options.model_extra or {}) if options is not None else {}
        where, fix = "workload.metric", "fix the class or the keys beside 'type'"
        inner = call_user_code(cls, keys, f"metric '{name}'", where, where, fix)
        missing = [m for m in ("update", "compute") if not callable(getattr(inner, m, None))]
        if missing:
            raise UserError(f"workload.metric: metric '{name}' has no {' or '.join(missing)}()")
        return UserMetric(inner)

    return build


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


class Agreement(MeanOverSamples):
    """Share of samples (and positions, for dense outputs) with the float model's top-1."""

    needs_reference = True

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        same = (output.argmax(dim=1) == reference.argmax(dim=1)).float()
        return same.reshape(same.shape[0], -1).mean(dim=1)


class TopKAgreement(MeanOverSamples):
    """Share of samples whose float top-1 class is among the quantized model's top k."""

    needs_reference = True

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


class KLDivergence(MeanOverSamples):
    """Mean KL divergence KL(float || quantized) of the softmax outputs over dim 1, in nats:
    lower is better, 0 when the outputs agree."""

    needs_reference = True
    higher_is_better = False
    best = 0.0

    def per_sample(self, output: Tensor, reference: Tensor) -> Tensor:
        log_p, log_q = reference.log_softmax(dim=1), output.log_softmax(dim=1)
        divergence = (log_p.exp() * (log_p - log_q)).sum(dim=1)
        return divergence.reshape(divergence.shape[0], -1).mean(dim=1)


METRICS.register("agreement")(lambda options: Agreement())
METRICS.register("agreement_top5")(lambda options: TopKAgreement(5))
METRICS.register("cosine")(lambda options: Cosine())
METRICS.register("kl")(lambda options: KLDivergence())
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
    """A fresh metric for a spec or a name such as 'top1' (a module from the workload's root)."""
    if isinstance(spec, str):
        spec = MetricSpec(type=spec)
    return METRICS.resolve(spec.type, "workload.metric.type", [spec.resolve(".")])(spec.options)


def needs_reference(spec: MetricSpec | str) -> bool:
    """Whether the metric scores outputs against the float model's instead of labels."""
    return create_metric(spec).needs_reference


def higher_is_better(spec: MetricSpec | str) -> bool:
    return create_metric(spec).higher_is_better


@torch.inference_mode()
def reference_outputs(model: nn.Module, batches: Iterable[tuple[Any, Any]]) -> list[Tensor]:
    """The float model's outputs for every batch, one tensor per model output (on the device
    of the inputs): the targets of fidelity metrics, computed once per dataset."""
    model.eval()
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    parts: list[list[Tensor]] = []
    for inputs, _ in batches:
        inputs = to_device(inputs, device)
        outputs = output_list(run_on(model, inputs))
        parts.append([o.detach() for o in outputs])
    return [torch.cat([batch[i] for batch in parts]) for i in range(len(parts[0]))]


def output_list(output: Any) -> list[Tensor]:
    """A model's output as a list of score tensors, one per head."""
    if isinstance(output, Tensor):
        return [output]
    if isinstance(output, dict) and "out" in output:  # torchvision segmentation models
        return [output["out"]]
    if isinstance(output, (list, tuple)):
        return list(output)
    raise TypeError(f"cannot score model output of type {type(output).__name__}")


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

    With `minimum` (one limit per output: a minimum, or a maximum for a divergence) and batches
    that know their `num_samples` (a TensorCache), scoring stops as soon as an accuracy's exact
    best case no longer meets its limit.
    With `check_finite`, a non-finite output stops scoring with accuracy 0.
    """
    model.eval()
    first = create_metric(metric)  # the first output's; each further output gets its own
    if hasattr(first, "of_model"):  # a caller's function of the whole model (library/)
        return first.of_model(model, batches)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    total = getattr(batches, "num_samples", None) if minimum is not None else None
    metrics: list[Metric] = []
    seen = 0
    for inputs, targets in batches:
        inputs = to_device(inputs, device)
        targets = to_device(targets, device)
        outputs = output_list(run_on(model, inputs))
        if not metrics:
            metrics = [first] + [create_metric(metric) for _ in outputs[1:]]
        if check_finite and not all(bool(torch.isfinite(o).all()) for o in outputs):
            return Outcome([0.0] * len(outputs), complete=False, finite=False, samples=seen)
        paired = targets if isinstance(targets, (list, tuple)) else [targets] * len(outputs)
        for metric_state, output, target in zip(metrics, outputs, paired, strict=True):
            metric_state.update(output, target)
        seen += len(paired[0])
        if total is not None and seen < total and _out_of_reach(metrics, minimum, total - seen):
            bounds = [m.upper_bound(total - seen) for m in metrics]
            return Outcome([float(b) for b in bounds], complete=False, samples=seen)
    return Outcome([m.compute() for m in metrics], samples=seen)


def _out_of_reach(metrics: list[Metric], limits: list[float], remaining: int) -> bool:
    """Whether some metric can no longer meet its limit (a minimum; a divergence's maximum)."""
    for metric, limit in zip(metrics, limits, strict=True):
        best = metric.upper_bound(remaining)
        if best is not None and (best < limit if metric.higher_is_better else best > limit):
            return True
    return False


def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    metric: MetricSpec | str = "top1",
    device: torch.device | str | None = None,
) -> float | list[float]:
    """Accuracy of `model` (put in eval mode) over `batches` of (inputs, targets).

    One float per model output; a single-output model gives a float. A single target tensor is
    scored against every output (e.g. early-exit heads); a tuple of targets pairs up with outputs.

    Args:
        model: the model to score (a float model, a QuantizedModel, a SparseModel).
        batches: (inputs, targets) pairs, e.g. a TensorCache or a DataLoader.
        metric: a MetricSpec or a metric's name (`top1`, `cosine`, ...).
        device: where inputs are moved before the forward pass; as they come when None.
    """
    accuracies = score(model, batches, metric, device).accuracies
    return accuracies[0] if len(accuracies) == 1 else accuracies
