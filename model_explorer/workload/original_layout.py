"""Keys of the original tool's workload files that this project spells otherwise or that had no
effect there: mapped to ours, or set aside (and named in one INFO line), before the schema checks
the file. A key given in both spellings is a problem naming both.

The original (and this project before the problem owned its settings) kept the problem's settings
in `exploration:` and `exploration.extra_args`; they move to `problem:` (the block size to
`sparsity:`, the energy evaluation to the top level), and `Translation.moves` remembers where each
was written so that errors name the key as the file spells it. A moved setting the chosen problem
does not take (the original's `extra_args` held every problem's) is set aside, as it had no
effect there.

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

from pydantic import ValidationError

from model_explorer.datasets.spec import DATASETS
from model_explorer.errors import did_you_mean
from model_explorer.metrics.spec import METRICS
from model_explorer.problems.registry import PROBLEMS
from model_explorer.schema.specs import validation_problems

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
# Settings of the problem (and of sparsity and energy) written in `exploration:`: where each
# was, and where it belongs.
_EXTRA_ARGS = ("exploration", "extra_args")
MOVES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    *(
        (("exploration", key), ("problem", key))
        for key in (
            "objectives",
            "minimum_accuracy",
            "allowable_accuracy_drop",
            "maximum_divergence",
            "early_reject",
            "layer_bounds",
            "predefined_parameters",
        )
    ),
    *(
        ((*_EXTRA_ARGS, key), ("problem", key))
        for key in (
            "num_bits_lower_limit",
            "num_bits_upper_limit",
            "bit_weighting_function",
            "discrete_threshold_steps",
            "discrete_threshold_method",
            "threshold_limit",
        )
    ),
    ((*_EXTRA_ARGS, "block_size"), ("sparsity", "block_size")),
    (("exploration", "energy_evaluation"), ("energy_evaluation",)),
)


@dataclass
class Translation:
    """The file's body in this project's spelling, the problems found on the way (key path,
    what is wrong) and the key paths set aside."""

    body: Any
    problems: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    # Settings of the original layout the chosen problem does not take: key path as written
    # -> (the setting's name, its value).
    unused: dict[str, tuple[str, Any]] = field(default_factory=dict)
    # Key path as this project spells it -> as the file wrote it (dotted, below `workload`).
    moves: dict[str, str] = field(default_factory=dict)

    def written_problem(self) -> list[str]:
        """The problem's settings the file wrote in the original layout."""
        return [new.partition(".")[2] for new in self.moves if new.startswith("problem.")]

    def written(self, key: str) -> str:
        """A dotted key path (`workload.problem.layer_bounds.x`) as the file spells it."""
        prefix, _, rest = key.partition(".")
        for new, old in self.moves.items():
            if rest == new or rest.startswith(new + "."):
                return ".".join((prefix, old + rest[len(new) :]))
        return key


def translate(body: Any) -> Translation:
    """This project's spelling of a workload body (the mapping under `workload:`)."""
    if not isinstance(body, dict):
        return Translation(body)
    translation = Translation(_copy(body))
    _accuracy_function(translation)
    for path in IGNORED:
        _set_aside(translation, path)
    _move_settings(translation)
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


def _move_settings(translation: Translation) -> None:
    """The problem's, sparsity's and energy's settings out of `exploration:` (see MOVES)."""
    body = translation.body
    for old, new in MOVES:
        parent = _node(body, old[:-1])
        if not isinstance(parent, dict) or old[-1] not in parent:
            continue
        target = body
        for key in new[:-1]:
            if not isinstance(target.get(key, {}), dict):
                break  # a section that is no mapping: the schema names it
            target = target.setdefault(key, {})
        else:
            if new[-1] in target:
                del parent[old[-1]]  # named once, as the spelling to drop
                translation.problems.append(
                    (
                        _dotted(old),
                        f"is the original spelling of {_dotted(new)}, which the file gives too; "
                        "keep one",
                    )
                )
                continue
            target[new[-1]] = parent.pop(old[-1])
            translation.moves[".".join(new)] = ".".join(old)
    _unused_settings(translation)
    _left_in_extra_args(translation)


def _unused_settings(translation: Translation) -> None:
    """Moved settings the chosen problem does not take had no effect there: set aside."""
    problem = translation.body.get("problem")
    if not isinstance(problem, dict):
        return
    name = problem.get("problem_function", "quantization_problem")
    entry = PROBLEMS.lookup(name) if isinstance(name, str) else None
    if entry is None or entry.options is None:
        return  # the schema names an unknown problem
    for new, old in list(translation.moves.items()):
        section, _, key = new.partition(".")
        if section == "problem" and key not in entry.options.model_fields:
            translation.unused[f"workload.{old}"] = (key, problem.pop(key))
            del translation.moves[new]
    translation.problems.extend(_unused_problems(translation, problem))


def _unused_problems(translation: Translation, problem: dict[str, Any]) -> list[tuple[str, str]]:
    """Settings set aside are still values no run could use when they are wrong (an infinite
    threshold limit): checked by the options of a problem that takes them all, together with
    the settings the chosen problem took, and reported where they were written."""
    unused = {key: value for key, value in translation.unused.values()}
    if not unused:
        return []
    takers = [
        e.options
        for e in PROBLEMS.entries()
        if e.options is not None and set(unused) <= set(e.options.model_fields)
    ]
    if not takers:
        return []
    options = takers[0]
    given = {k: v for k, v in {**problem, **unused}.items() if k in options.model_fields}
    try:
        options.model_validate(given)
    except ValidationError as error:
        written = {key: path for path, (key, _) in translation.unused.items()}
        found = []
        for path, text in validation_problems(error, given):
            key, _, rest = path.removeprefix("workload.").partition(".")
            if key in written:
                found.append((written[key] + (f".{rest}" if rest else ""), text))
        return found
    return []


def _left_in_extra_args(translation: Translation) -> None:
    """`extra_args` is gone once its settings moved; a key left in it is unknown."""
    exploration = translation.body.get("exploration")
    if not isinstance(exploration, dict) or "extra_args" not in exploration:
        return
    left = exploration["extra_args"]
    if isinstance(left, dict) and not left:
        del exploration["extra_args"]
        return
    if not isinstance(left, dict):
        translation.problems.append((_dotted(_EXTRA_ARGS), "must be a mapping of keys to values"))
    known = sorted(old[-1] for old, _ in MOVES if old[:-1] == _EXTRA_ARGS)
    for key in left if isinstance(left, dict) else ():
        translation.problems.append(
            (
                _dotted((*_EXTRA_ARGS, str(key))),
                f"unknown key{did_you_mean(str(key), known)}; known keys: {', '.join(known)}",
            )
        )
    del exploration["extra_args"]
