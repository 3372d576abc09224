"""The `model-explorer` command line: each command's arguments sit beside its function (one
module per group of commands); the parser is assembled from them here.

`python -m model_explorer` and scripts/*.py are the same CLI.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from model_explorer import __version__
from model_explorer.cli import analysis as _analysis  # noqa: F401
from model_explorer.cli import cost as _cost  # noqa: F401
from model_explorer.cli import debug as _debug  # noqa: F401
from model_explorer.cli import deployment as _deployment  # noqa: F401
from model_explorer.cli import latency as _latency  # noqa: F401
from model_explorer.cli import listing as _listing  # noqa: F401
from model_explorer.cli import search as _search  # noqa: F401
from model_explorer.cli import training as _training  # noqa: F401

# Explicit imports register the commands.
from model_explorer.cli import workload as _workload  # noqa: F401
from model_explorer.cli.common import COMMANDS
from model_explorer.errors import UserError, extras_said
from model_explorer.memory import keep_freed_memory

log = logging.getLogger("model_explorer")

# The order `--help` lists the commands in: the workflow's, then the analyses.
ORDER = (
    "validate",
    "retrain",
    "calibrate",
    "evaluate",
    "explore",
    "report",
    "evaluate-individual",
    "export",
    "cost",
    "energy-analysis",
    "latency",
    "blocks",
    "analyze",
    "diagnose",
    "debug",
    "compare",
    "list",
)


class _Once(argparse._StoreAction):
    """An option that takes one value (or one list), refused when given twice: argparse would
    keep the last silently (`--bits 8 --bits 4`). Options meant to be repeated say so
    (`append`, `extend`, `count`)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        given = namespace.__dict__.setdefault("_given_once", set())
        if self.dest in given:
            parser.error(
                f"{option_string} is given twice ({getattr(namespace, self.dest)!r}, then "
                f"{values!r}); give it once"
            )
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    """Reports a usage mistake in one line, like every other user error, with status 2; an
    option that takes one value is refused when given twice."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="model-explorer",
        description="Layer-wise quantization and sparsity exploration of PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"model-explorer {__version__}")
    common = Parser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)"
    )
    common.add_argument(
        "-p", "--progress", action="store_true", help="progress bars even when not on a terminal"
    )
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    ordered = sorted(COMMANDS, key=lambda name: (ORDER + (name,)).index(name))
    for name in ordered:
        entry = COMMANDS[name]
        sub = commands.add_parser(
            entry.name, parents=[common], help=entry.help, description=entry.description
        )
        entry.arguments(sub)
        if any(action.dest == "workload" for action in sub._actions):
            sub.add_argument(
                "--set",
                action="append",
                metavar="KEY=VALUE",
                help="override a workload setting for this run, validated like the file "
                "(repeatable; the key as under workload:, e.g. exploration.nsga.pop_size=4)",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user errors print one line on stderr and return 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    keep_freed_memory()  # many passes over the same large tensors (memory.py)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        with extras_said(f"model-explorer {args.command}"):
            return COMMANDS[args.command].run(args)
    except UserError as error:
        # One line per problem: a workload file reports all of its problems at once.
        for line in str(error).splitlines() or [""]:
            print(f"error: {line}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
