"""The workload's `metric:` section and the registry of metrics, each built-in metric declared
here with its options (its builder in functions.py, imported when a metric is first made), so
that reading a workload imports no torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import ConfigDict

from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import NonNegativeInt, PositiveInt, Spec, TypedSpec


class ImportedMetricOptions(Spec):
    """A `package.module:Class` metric takes any key beside `type`: its constructor's arguments."""

    model_config = ConfigDict(extra="allow")


MetricBuilder = Callable[[Any], Any]  # options -> a Metric (classes.py)
METRICS: Registry[MetricBuilder] = Registry(
    "metric", "metric class", "package.module:Class", ImportedMetricOptions
)


class MetricSpec(TypedSpec):
    """The accuracy function, by name (`top1`) or with options (`{type: topk, k: 5}`)."""

    registry: ClassVar[Registry[Any]] = METRICS
    type: str
    """The metric's name (`model-explorer list metrics`) or your own `package.module:Class`."""


class TopKOptions(Spec):
    k: PositiveInt = 5
    """A sample counts as right when its label is among the model's `k` highest scores."""


class SegmentationOptions(Spec):
    num_classes: PositiveInt | None = None
    """Classes of the confusion matrix (the model's output channels when not given)."""
    ignore_index: NonNegativeInt | None = 255
    """A label value whose pixels are left out (`null`: every pixel counts)."""


METRICS.declare_import_adapter("model_explorer.metrics.functions:user_metric")
for _name, _options in (
    ("agreement", None),
    ("agreement_top5", None),
    ("cosine", None),
    ("kl", None),
    ("top1", None),
    ("top5", None),
    ("topk", TopKOptions),
    ("pixel_accuracy", SegmentationOptions),
    ("mean_iou", SegmentationOptions),
):
    METRICS.declare(_name, f"model_explorer.metrics.functions:build_{_name}", options=_options)
