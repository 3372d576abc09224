"""Keys of the original tool's workload files that this project spells otherwise or that had no
effect there: mapped to ours, or set aside (and named in one INFO line), before the schema checks
the file. A key given in both spellings is a problem naming both.

What each key meant comes from the original's code: the accuracy function was the model
module's (classification: share of argmax == label; segmentation: the overall pixel accuracy of
a confusion matrix); `model.extra_args`, `calibration.samples`,
`reevaluation.bit_weighting_function` and `exploration.extra_args.collect_sparsity_details` were
never read; a dataset's `kind` chose between an image folder and WebDataset shards for ImageNet
only, and `total_samples` was the length of a WebDataset stream only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from model_explorer.datasets.base import DATASETS
from model_explorer.metrics import METRICS

ACCURACY_FUNCTIONS = {
    "classification_accuracy": "top1",
    "segmentation_accuracy": "pixel_accuracy",
    "pixelwise_segmentation_accuracy": "pixel_accuracy",
}
# Accuracy functions of the original that have no metric here.
WITHOUT_COUNTERPART = {
    "detection_accuracy": "COCO mAP@0.5:0.95 of YOLOv5 detections",
    "yolop_combined_accuracy": "YOLOP's lane accuracy, drivable-area mIoU and detection mAP@0.5",
}
# Keys the original accepted and never read, by their path under `workload:`.
IGNORED = (
    ("model", "extra_args"),
    ("calibration", "samples"),
    ("reevaluation", "bit_weighting_function"),
    ("exploration", "extra_args", "collect_sparsity_details"),
)
# Dataset keys of the original that only some types take; with any other type they are ignored.
DATASET_KEYS = ("kind", "total_samples")
DATASET_SECTIONS = ("calibration", "exploration", "retraining", "reevaluation")


@dataclass
class Translation:
    """The file's body in this project's spelling, the problems found on the way (key path,
    what is wrong) and the key paths set aside."""

    body: Any
    problems: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def translate(body: Any) -> Translation:
    """This project's spelling of a workload body (the mapping under `workload:`)."""
    if not isinstance(body, dict):
        return Translation(body)
    translation = Translation(_copy(body))
    _accuracy_function(translation)
    for path in IGNORED:
        _set_aside(translation, path)
    for section in DATASET_SECTIONS:
        datasets = _node(translation.body, (section, "datasets"))
        for role, spec in (datasets or {}).items():
            if isinstance(spec, dict):
                _dataset_keys(translation, (section, "datasets", role), spec)
    return translation


def _copy(node: Any) -> Any:
    """A copy of the nested mappings (other values shared), so the caller's data stays as read."""
    return {key: _copy(value) for key, value in node.items()} if isinstance(node, dict) else node


def _node(body: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(body, dict):
            return None
        body = body.get(key)  # type: ignore[assignment]
    return body


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(("workload", *path))


def _set_aside(translation: Translation, path: tuple[str, ...]) -> None:
    parent = _node(translation.body, path[:-1])
    if isinstance(parent, dict) and path[-1] in parent:
        del parent[path[-1]]
        translation.ignored.append(_dotted(path))


def _accuracy_function(translation: Translation) -> None:
    model = translation.body.get("model")
    if not isinstance(model, dict) or "accuracy_function" not in model:
        return
    name = model.pop("accuracy_function")
    where = _dotted(("model", "accuracy_function"))
    if "metric" in translation.body:
        translation.problems.append(
            (
                where,
                "is the original spelling of workload.metric, which the file gives too; keep one",
            )
        )
    elif name in ACCURACY_FUNCTIONS:
        translation.body["metric"] = ACCURACY_FUNCTIONS[name]
    elif name in WITHOUT_COUNTERPART:
        translation.problems.append(
            (
                where,
                f"'{name}' ({WITHOUT_COUNTERPART[name]}) has no counterpart here; remove it and "
                f"set workload.metric to one of {', '.join(METRICS.names())} or to a metric "
                "class of yours, 'package.module:Class'",
            )
        )
    else:
        known = ", ".join([*ACCURACY_FUNCTIONS, *WITHOUT_COUNTERPART])
        translation.problems.append(
            (where, f"unknown accuracy function {name!r} of the original tool; it had {known}")
        )


def _dataset_keys(translation: Translation, path: tuple[str, ...], spec: dict[str, Any]) -> None:
    kind = spec.get("type")
    entry = DATASETS.lookup(kind) if isinstance(kind, str) else None
    if entry is None:
        return  # the schema names the type; its keys cannot be judged without one
    options = entry.options
    taken = set(options.model_fields) if options is not None else set()
    for key in DATASET_KEYS:
        if key not in taken:
            _set_aside(translation, (*path, key))
