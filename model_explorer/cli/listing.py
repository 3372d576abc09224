"""The list command: the names every registry of the project knows."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from model_explorer.cli.common import command


def _models() -> Any:
    from model_explorer.models import MODELS

    return MODELS


def _datasets() -> Any:
    from model_explorer.datasets import DATASETS

    return DATASETS


def _metrics() -> Any:
    from model_explorer.metrics import METRICS

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


def _inspectors() -> Any:
    from model_explorer.analysis.diagnose import INSPECTORS

    return INSPECTORS


def _energy() -> Any:
    from model_explorer.cost.energy import ENERGY_BACKENDS

    return ENERGY_BACKENDS


def _environments() -> Any:
    from model_explorer.analysis.compare import ENVIRONMENTS

    return ENVIRONMENTS


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
    "inspectors": _inspectors,
    "energy": _energy,
    "environments": _environments,
    "analyses": _analyses,
}


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=list(REGISTRIES))
    parser.add_argument("filter", nargs="?", help="shell-style pattern, e.g. 'resnet*'")


@command(
    "list",
    _list_arguments,
    help="list registered names: " + ", ".join(REGISTRIES),
    description="Lists the registered names of one kind (those matching PATTERN), then the "
    "other forms of names that kind accepts (e.g. torchvision:<name>, package.module:factory).",
)
def list_command(args: argparse.Namespace) -> int:
    registry = REGISTRIES[args.kind]()
    print("\n".join(registry.names(args.filter) + registry.forms()))
    return 0
