"""The caller's own score functions as metrics of the METRICS registry, `python:<name>`:
a function of the model (`fn(model) -> float`, run once per candidate on data of the caller's
choosing) or of a batch's outputs and targets (`fn(outputs, targets) -> float`, averaged over
the samples like the built-in metrics). The workload stores the name, so results stay plain
data; the functions live in this process only."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from model_explorer.errors import UserError
from model_explorer.metrics.classes import Metric
from model_explorer.metrics.functions import METRICS, Outcome

# name -> (function, higher is better)
FUNCTIONS: dict[str, tuple[Callable[..., Any], bool]] = {}
PREFIX = "python"


def _number(value: Any, function: Callable[..., Any]) -> float:
    name = getattr(function, "__qualname__", "the score function")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(
            f"score: {name} returned {type(value).__name__}, not a number; return a float "
            "(or a one-element tensor)"
        ) from None
    if not math.isfinite(number):
        raise UserError(f"score: {name} returned {number}; return a finite number")
    return number


def _called(function: Callable[..., Any], *args: Any) -> float:
    try:
        return _number(function(*args), function)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - the caller's code, said in one line
        name = getattr(function, "__qualname__", "the score function")
        raise UserError(
            f"score: {name} raised {type(error).__name__}: {error}; what the search "
            "evaluated before is kept"
        ) from None


class ModelScore(Metric):
    """`fn(model)`: the whole score of a candidate at once (no early rejection)."""

    def __init__(self, function: Callable[..., Any], higher: bool) -> None:
        self.function, self.higher_is_better = function, higher  # type: ignore[misc]

    def of_model(self, model: Any, batches: Any) -> Outcome:
        value = _called(self.function, model)
        return Outcome([value], samples=int(getattr(batches, "num_samples", 0)))


class BatchScore(Metric):
    """`fn(outputs, targets)`: a batch's mean, averaged over the samples."""

    def __init__(self, function: Callable[..., Any], higher: bool) -> None:
        self.function, self.higher_is_better = function, higher  # type: ignore[misc]
        self.reset()

    def reset(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, output: Any, target: Any) -> None:
        samples = len(output)
        self.total += _called(self.function, output, target) * samples
        self.count += samples

    def compute(self) -> float:
        return self.total / self.count if self.count else 0.0


def _build(item: str, options: Any = None) -> Metric:
    if item not in FUNCTIONS:
        raise UserError(
            f"workload.metric.type: '{PREFIX}:{item}' is a score function given in Python to "
            "another process; open the result from Python, or name a metric of the project"
        )
    function, higher = FUNCTIONS[item]
    kind = ModelScore if len(inspect.signature(function).parameters) == 1 else BatchScore
    return kind(function, higher)


def metric_name(function: Callable[..., Any], higher: bool) -> str:
    """The METRICS name of a caller's function (registered on first use), e.g. `python:loss`."""
    if len(inspect.signature(function).parameters) not in (1, 2):
        raise UserError(
            "score: a function of the model (fn(model)) or of a batch's outputs and targets "
            "(fn(outputs, targets)); this one takes "
            f"{len(inspect.signature(function).parameters)} arguments"
        )
    if METRICS.namespace(f"{PREFIX}:x") is None:
        METRICS.register_namespace(PREFIX, placeholder="FUNCTION", listed=False)(_build)
    base = getattr(function, "__qualname__", "score").replace("<", "").replace(">", "")
    name, count = base, 1
    while name in FUNCTIONS and FUNCTIONS[name] != (function, higher):
        count += 1
        name = f"{base}_{count}"
    FUNCTIONS[name] = (function, higher)
    return f"{PREFIX}:{name}"
