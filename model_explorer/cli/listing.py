"""The list command: the names every registry of the project knows, each with its options."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from model_explorer.cli.common import command


def _models() -> Any:
    from model_explorer.models.spec import MODELS

    return MODELS


def _datasets() -> Any:
    from model_explorer.datasets.spec import DATASETS

    return DATASETS


def _metrics() -> Any:
    from model_explorer.metrics.spec import METRICS

    return METRICS


def _problems() -> Any:
    from model_explorer.problems import PROBLEMS

    return PROBLEMS


def _objectives() -> Any:
    from model_explorer.problems.objectives import OBJECTIVES

    return OBJECTIVES


def _runners() -> Any:
    from model_explorer.exploration.runners import RUNNERS

    return RUNNERS


def _strategies() -> Any:
    from model_explorer.exploration.strategies import STRATEGIES

    return STRATEGIES


def _algorithms() -> Any:
    from model_explorer.exploration.algorithms import ALGORITHMS

    return ALGORITHMS


def _formats() -> Any:
    from model_explorer.formats import FORMATS

    return FORMATS


def _calibrators() -> Any:
    from model_explorer.quantization.spec import CALIBRATORS

    return CALIBRATORS


def _inspectors() -> Any:
    from model_explorer.analysis.diagnose import INSPECTORS

    return INSPECTORS


def _energy() -> Any:
    from model_explorer.cost.energy.spec import ENERGY_BACKENDS

    return ENERGY_BACKENDS


def _environments() -> Any:
    from model_explorer.analysis.compare.environments import ENVIRONMENTS, with_every_runtime

    with_every_runtime()
    return ENVIRONMENTS


def _runtimes() -> Any:
    from model_explorer.deployment.runtimes import RUNTIMES

    return RUNTIMES


def _analyses() -> Any:
    from model_explorer.analysis.hooks import ANALYSES

    return ANALYSES


# kind -> the registry it lists (imported only when asked for).
REGISTRIES: dict[str, Callable[[], Any]] = {
    "models": _models,
    "datasets": _datasets,
    "metrics": _metrics,
    "problems": _problems,
    "objectives": _objectives,
    "runners": _runners,
    "strategies": _strategies,
    "algorithms": _algorithms,
    "formats": _formats,
    "calibrators": _calibrators,
    "inspectors": _inspectors,
    "energy": _energy,
    "environments": _environments,
    "analyses": _analyses,
    "runtimes": _runtimes,
}


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=list(REGISTRIES))
    parser.add_argument("filter", nargs="?", help="shell-style pattern, e.g. 'resnet*'")


@command(
    "list",
    _list_arguments,
    help="list registered names: " + ", ".join(REGISTRIES),
    description="Lists the registered names of one kind (those matching PATTERN), each with the "
    "options it takes beside its name in a workload and their defaults, then the other forms of "
    "names that kind accepts (e.g. torchvision:<name>, package.module:factory).",
)
def list_command(args: argparse.Namespace) -> int:
    registry = REGISTRIES[args.kind]()
    entries = [registry.get(name) for name in registry.names(args.filter)]
    width = max((len(entry.name) for entry in entries), default=0)
    texts = [options_text(entry.options) for entry in entries]
    # Entries that describe themselves (the formats: what they are and their bits per element).
    notes = [getattr(entry.builder, "description", "") for entry in entries]
    if any(notes):
        column = max(len(text) for text in texts)
        texts = [f"{text:<{column}}  {note}" for text, note in zip(texts, notes, strict=True)]
    lines = [
        f"{entry.name:<{width}}  {text}".rstrip()
        for entry, text in zip(entries, texts, strict=True)
    ]
    print("\n".join(lines + registry.forms()))
    return 0


def options_text(options: Any) -> str:
    """An options model's keys with their defaults, as a workload writes them:
    `{percentile: 99.99, num_bins: 2048}` ("" for none; `<required>` where none is default)."""
    if options is None or not options.model_fields:
        return ""
    items = []
    for key, field in options.model_fields.items():
        if field.is_required():
            value = "<required>"
        else:
            default = field.get_default(call_default_factory=True)
            value = default if isinstance(default, str) else json.dumps(default, default=str)
        items.append(f"{key}: {value}")
    return "{" + ", ".join(items) + "}"
