"""The `model-explorer` command line: argument parsing for every command; the work is elsewhere.

`python -m model_explorer` and scripts/*.py are the same CLI.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence

from model_explorer import __version__
from model_explorer.errors import UserError

log = logging.getLogger("model_explorer")

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(
    name: str,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    def decorator(
        function: Callable[[argparse.Namespace], int],
    ) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = function
        return function

    return decorator


def _load(args: argparse.Namespace):  # noqa: ANN202
    from model_explorer.workload import Workload

    return Workload.load(args.workload)


def _progress(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def _format_accuracy(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4f}" for v in value) + "]"
    return f"{value:.4f}"


@command("validate")
def validate_command(args: argparse.Namespace) -> int:
    workload = _load(args)
    sections = [
        name
        for name in ("calibration", "exploration", "retraining", "reevaluation")
        if getattr(workload, name) is not None
    ]
    print(
        f"{args.workload}: valid workload '{workload.name}' (model {workload.model.type}, "
        f"problem {workload.problem.problem_function}, sections: {', '.join(sections) or 'none'})"
    )
    if args.show:
        print(json.dumps(workload.to_dict(), indent=2))
    return 0


@command("evaluate")
def evaluate_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext

    workload = _load(args)
    context = WorkloadContext(workload)
    model = context.build_model()
    roles = args.dataset or ["baseline"]
    results = {}
    for role in roles:
        accuracy = context.evaluate(model, role)
        info = context.describe(role)
        results[role] = {**info, "metric": workload.metric.type, "accuracy": accuracy}
        print(
            f"{workload.model.type} on {info['where']} ({info['samples']} samples, "
            f"{context.device}): {workload.metric.type} = {_format_accuracy(accuracy)}"
        )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


@command("retrain")
def retrain_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext
    from model_explorer.training import train_baseline
    from model_explorer.workload import resolve_path

    if not args.baseline:
        raise UserError(
            "retrain: pass --baseline to train the workload's float model and save it to "
            "model.weights"
        )
    workload = _load(args)
    if (
        args.if_missing
        and workload.model.weights
        and resolve_path(workload.model.weights).is_file()
    ):
        print(f"{workload.model.weights} exists; not training (drop --if-missing to train anyway)")
        return 0
    context = WorkloadContext(workload)
    result, path = train_baseline(
        context, from_scratch=args.from_scratch, epochs=args.epochs, progress=_progress(args)
    )
    record = result.history[result.best_epoch - 1]
    print(
        f"trained {workload.model.type} for {len(result.history)} epochs on {context.device}; "
        f"best epoch {result.best_epoch}: validation {workload.metric.type} = "
        f"{_format_accuracy(result.best_accuracy)} (loss {record.train_loss:.4f}); saved {path}"
    )
    return 0


@command("list")
def list_command(args: argparse.Namespace) -> int:
    if args.kind == "models":
        from model_explorer.models import MODELS

        names = MODELS.names(args.filter) + ["torchvision:<name>", "package.module:factory"]
    elif args.kind == "datasets":
        from model_explorer.datasets import DATASETS

        names = DATASETS.names(args.filter)
    else:
        from model_explorer.metrics import METRICS

        names = METRICS.names(args.filter)
    print("\n".join(names))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="model-explorer",
        description="Layer-wise quantization and sparsity exploration of PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"model-explorer {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)"
    )
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate", parents=[common], help="check a workload file and print what it holds"
    )
    validate.add_argument("workload", help="workload YAML file")
    validate.add_argument(
        "--show", action="store_true", help="print the workload with all defaults"
    )

    evaluate = commands.add_parser(
        "evaluate", parents=[common], help="accuracy of the workload's float model"
    )
    evaluate.add_argument("workload", help="workload YAML file")
    evaluate.add_argument(
        "--dataset",
        action="append",
        choices=["calibrate", "exploration", "baseline", "train", "validation", "reevaluate"],
        help="dataset role to evaluate on (repeatable; default: baseline)",
    )
    evaluate.add_argument("--json", action="store_true", help="also print the results as JSON")

    retrain = commands.add_parser(
        "retrain", parents=[common], help="train the workload's float baseline (--baseline)"
    )
    retrain.add_argument("workload", help="workload YAML file")
    retrain.add_argument(
        "--baseline", action="store_true", help="train the float model and save it to model.weights"
    )
    retrain.add_argument("--from-scratch", action="store_true", help="ignore existing weights")
    retrain.add_argument("--epochs", type=int, help="override retraining.epochs")
    retrain.add_argument(
        "--if-missing", action="store_true", help="do nothing when model.weights already exists"
    )

    listing = commands.add_parser("list", parents=[common], help="list registered names")
    listing.add_argument("kind", choices=["models", "datasets", "metrics"])
    listing.add_argument("filter", nargs="?", help="shell-style pattern, e.g. 'resnet*'")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user errors print one line on stderr and return 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
