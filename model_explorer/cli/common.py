"""What every command shares: the command registry, argument types, the workload loader."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """A command: its name, the function adding its arguments, the function running it."""

    name: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    help: str
    description: str | None = None


COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    arguments: Callable[[argparse.ArgumentParser], None],
    help: str,  # noqa: A002 - argparse's word
    description: str | None = None,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Decorator registering a command's function with its arguments and help."""

    def decorator(
        function: Callable[[argparse.Namespace], int],
    ) -> Callable[[argparse.Namespace], int]:
        if name in COMMANDS:
            raise ValueError(f"command '{name}' is registered twice")
        COMMANDS[name] = Command(name, arguments, function, help, description)
        return function

    return decorator


def bit_width(text: str) -> int:
    value = int(text)
    if not 2 <= value <= 16:
        raise argparse.ArgumentTypeError(f"bit widths are 2 to 16, got {value}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def registered_input_shape(name: str) -> tuple[int, ...] | None:
    """The input shape, batch 1, of a model registered as `name`; None for other models."""
    from model_explorer.models.spec import MODELS

    return (1, *MODELS.get(name).info.input_shape) if name in MODELS else None


def load_workload(args: argparse.Namespace) -> Any:
    from model_explorer.workload.file import Workload

    return Workload.load(args.workload, overrides=getattr(args, "set", None) or ())


def progress(args: argparse.Namespace) -> bool:
    """Progress bars: forced on by -p, off by --no-progress, else on when stderr is a terminal."""
    if args.progress:
        return True
    return not args.no_progress and sys.stderr.isatty()


def format_accuracy(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4f}" for v in value) + "]"
    return f"{value:.4f}"
