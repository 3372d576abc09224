"""Accuracy functions by name (top-1, top-k, segmentation pixel accuracy, mean IoU), label-free
fidelity to the float model (agreement, agreement_top5, cosine, kl), and `evaluate`.

The metric classes live in classes.py; here they are registered, built from a workload's
`metric:` (or the user's own class), and run over batches. A model with several outputs (a
tuple of tensors) gets one metric per output and `evaluate` returns a list. A fidelity metric
(`needs_reference`) compares outputs with the float model's outputs on the same samples instead
of labels: its "targets" are those outputs, computed once per dataset (`reference_batches`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError
from model_explorer.metrics.classes import (
    Agreement,
    Cosine,
    KLDivergence,
    MeanIoU,
    Metric,
    PixelAccuracy,
    TopKAccuracy,
    TopKAgreement,
)
from model_explorer.metrics.spec import METRICS, MetricSpec
from model_explorer.modules import run_on, to_device
from model_explorer.schema.registry import call_user_code


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


def user_metric(cls: Callable[..., Any]) -> Callable[[Any], Metric]:
    """The registry's builder around a `package.module:Class` metric of the user's code."""

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


# The built-in metrics' builders, declared by name in spec.py.
def build_agreement(options: Any) -> Metric:
    return Agreement()


def build_agreement_top5(options: Any) -> Metric:
    return TopKAgreement(5)


def build_cosine(options: Any) -> Metric:
    return Cosine()


def build_kl(options: Any) -> Metric:
    return KLDivergence()


def build_top1(options: Any) -> Metric:
    return TopKAccuracy(1)


def build_top5(options: Any) -> Metric:
    return TopKAccuracy(5)


def build_topk(options: Any) -> Metric:
    return TopKAccuracy(options.k)


def build_pixel_accuracy(options: Any) -> Metric:
    return PixelAccuracy(options.num_classes, options.ignore_index)


def build_mean_iou(options: Any) -> Metric:
    return MeanIoU(options.num_classes, options.ignore_index)


def create_metric(spec: MetricSpec | str) -> Metric:
    """A fresh metric for a spec or a name such as 'top1' (a module from the workload's root)."""
    if isinstance(spec, str):
        spec = MetricSpec(type=spec)
    # only a `package.module:Class` is looked for in the workload's root (a path resolved on
    # the file system, which a search would otherwise do at every candidate)
    folders = [spec.resolve(".")] if ":" in spec.type else []
    return METRICS.resolve(spec.type, "workload.metric.type", folders)(spec.options)


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
    because some accuracy could no longer reach its minimum (or the divergence its ceiling);
    then `accuracies` holds the upper bounds reached. `finite` is False when an output held NaN
    or infinity. Where asked for (`keep_outcomes`) and scored in full: `outcomes`, each
    output's per-sample outcomes (hits, or the values a mean is taken of; None for a metric
    that is no mean over samples). Where a `reference` was given: `divergence`, the mean KL
    divergence from it (the lowest still reachable where scoring stopped early), and its
    per-sample values in `divergences`."""

    accuracies: list[float]
    complete: bool = True
    finite: bool = True
    samples: int = 0
    outcomes: list[Tensor | None] | None = None
    divergence: float | None = None
    divergences: Tensor | None = None

    def __eq__(self, other: object) -> bool:
        """Equal where every figure is, and every per-sample outcome to the bit."""
        if not isinstance(other, Outcome):
            return NotImplemented
        plain = ("accuracies", "complete", "finite", "samples", "divergence")
        if any(getattr(self, name) != getattr(other, name) for name in plain):
            return False
        mine = [*(self.outcomes or []), self.divergences]
        theirs = [*(other.outcomes or []), other.divergences]
        return len(mine) == len(theirs) and all(
            (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
            for a, b in zip(mine, theirs, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]


def all_finite(output: Any) -> bool:
    """Whether every value of a tensor is finite: a floating tensor's smallest and largest
    values are (a NaN makes both NaN), in one pass, where `torch.isfinite(...).all()` takes
    several (55 us against 16 us on a batch of 120 x 10 logits inside a search, on one core)."""
    if not isinstance(output, Tensor):
        return True
    if not output.is_floating_point() or output.numel() == 0:
        return bool(torch.isfinite(output).all())
    low, high = torch.aminmax(output)
    return math.isfinite(low) and math.isfinite(high)


@torch.inference_mode()
def score(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    metric: MetricSpec | str = "top1",
    device: torch.device | str | None = None,
    minimum: list[float] | None = None,
    check_finite: bool = False,
    reference: Tensor | None = None,
    ceiling: float | None = None,
    keep_outcomes: bool = False,
) -> Outcome:
    """Accuracy of `model` over `batches`, one value per model output.

    With `minimum` (one limit per output: a minimum, or a maximum for a divergence) and batches
    that know their `num_samples` (a TensorCache), scoring stops as soon as an accuracy's exact
    best case no longer meets its limit.
    With `check_finite`, a non-finite output stops scoring with accuracy 0.
    With `reference` (the float model's first output on every sample of `batches`, in order),
    the KL divergence from it is measured beside the metric, and with `ceiling` scoring also
    stops once its lowest reachable mean is above the ceiling.
    With `keep_outcomes`, each sample's outcome is kept (Outcome.outcomes, .divergences).
    """
    if any(module.training for module in model.modules()):  # a search scores thousands of times
        model.eval()
    first = create_metric(metric)  # the first output's; each further output gets its own
    if hasattr(first, "of_model"):  # a caller's function of the whole model (api/)
        return first.of_model(model, batches)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = torch.device(device)
    bounded = minimum is not None or ceiling is not None
    total = getattr(batches, "num_samples", None) if bounded else None
    tally = _Tally(metric, first, reference, keep_outcomes)
    for inputs, targets in batches:
        inputs = to_device(inputs, device)
        targets = to_device(targets, device)
        outputs = output_list(run_on(model, inputs))
        if check_finite and not all(all_finite(o) for o in outputs):
            return Outcome([0.0] * len(outputs), complete=False, finite=False, samples=tally.seen)
        tally.update(outputs, targets)
        remaining = total - tally.seen if total is not None else 0
        if remaining > 0 and tally.stops(minimum, ceiling, remaining):
            return tally.bounds(remaining)
    return tally.outcome()


class _Tally:
    """The metric of each output and the divergence from `reference`, over the batches seen."""

    def __init__(
        self, metric: MetricSpec | str, first: Metric, reference: Tensor | None, keep: bool
    ) -> None:
        self.metric, self.first, self.keep = metric, first, keep
        self.metrics: list[Metric] = []
        self.reference = reference
        self.divergence: Metric | None = None
        if reference is not None:
            self.divergence = KLDivergence()
            self.divergence.keep_outcomes = keep
        self.seen = 0

    def update(self, outputs: list[Tensor], targets: Any) -> None:
        if not self.metrics:
            self.metrics = [self.first] + [create_metric(self.metric) for _ in outputs[1:]]
            for state in self.metrics:
                state.keep_outcomes = self.keep
        paired = targets if isinstance(targets, (list, tuple)) else [targets] * len(outputs)
        for state, output, target in zip(self.metrics, outputs, paired, strict=True):
            state.update(output, target)
        count = len(paired[0])
        if self.divergence is not None:
            assert self.reference is not None
            self.divergence.update(outputs[0], self.reference[self.seen : self.seen + count])
        self.seen += count

    def stops(self, minimum: list[float] | None, ceiling: float | None, remaining: int) -> bool:
        """Whether the candidate can no longer meet its limits: a metric its limit, or the
        divergence's lowest reachable mean its ceiling."""
        if minimum is not None and _out_of_reach(self.metrics, minimum, remaining):
            return True
        if self.divergence is None or ceiling is None:
            return False
        return _out_of_reach([self.divergence], [ceiling], remaining)

    def bounds(self, remaining: int) -> Outcome:
        """A candidate stopped early: the best values it could still reach."""
        accuracies = [float(m.upper_bound(remaining)) for m in self.metrics]  # type: ignore[arg-type]
        lowest = self.divergence.upper_bound(remaining) if self.divergence is not None else None
        return Outcome(accuracies, complete=False, samples=self.seen, divergence=lowest)

    def outcome(self) -> Outcome:
        divergence = self.divergence
        return Outcome(
            [m.compute() for m in self.metrics],
            samples=self.seen,
            outcomes=[m.outcomes() for m in self.metrics] if self.keep else None,
            divergence=divergence.compute() if divergence is not None else None,
            divergences=divergence.outcomes() if divergence is not None else None,
        )


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
