"""The retrain command: the float baseline, or fine-tuning individuals of a result."""

from __future__ import annotations

import argparse

from model_explorer.cli.common import (
    command,
    format_accuracy,
    load_workload,
    positive_int,
    progress,
)
from model_explorer.errors import UserError


def _retrain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument("results", nargs="?", help="result file whose individuals to fine-tune")
    parser.add_argument("output_dir", nargs="?", help="folder for checkpoints and retrained.csv")
    parser.add_argument(
        "--baseline", action="store_true", help="train the float model and save it to model.weights"
    )
    parser.add_argument("-n", "--count", type=positive_int, default=1, help="how many individuals")
    parser.add_argument(
        "--select",
        default="pareto",
        help="pareto (the front, lowest cost first), best-cost (lowest cost, feasible first) "
        "or ids=<id>,<id>,...",
    )
    parser.add_argument("--from-scratch", action="store_true", help="ignore existing weights")
    parser.add_argument("--epochs", type=positive_int, help="override retraining.epochs")
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing when model.weights already exists"
    )


@command(
    "retrain",
    _retrain_arguments,
    help="train the float baseline (--baseline) or fine-tune individuals of a result",
)
def retrain_command(args: argparse.Namespace) -> int:
    if not args.baseline:
        return retrain_individuals_command(args)
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.operations.retraining import train_baseline
    from model_explorer.workload.context import WorkloadContext

    if (
        args.if_missing
        and workload.model.weights
        and workload.model.resolve(workload.model.weights).is_file()
    ):
        print(f"{workload.model.weights} exists; not training (drop --if-missing to train anyway)")
        return 0
    context = WorkloadContext(workload)
    result, path = train_baseline(
        context, from_scratch=args.from_scratch, epochs=args.epochs, progress=progress(args)
    )
    record = result.history[result.best_epoch - 1]
    print(
        f"trained {workload.model.type} for {len(result.history)} epochs on {context.device}; "
        f"best epoch {result.best_epoch}: validation {workload.metric.type} = "
        f"{format_accuracy(result.best_accuracy)} (loss {record.train_loss:.4f}); saved {path}"
    )
    return 0


def retrain_individuals_command(args: argparse.Namespace) -> int:
    if args.results is None or args.output_dir is None:
        raise UserError(
            "retrain: give RESULTS and OUTPUT_DIR to fine-tune individuals of a result, or "
            "--baseline to train the float model"
        )
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.operations.retraining import retrain_individuals
    from model_explorer.results import ExplorationResult
    from model_explorer.workload.file import dataset_spec

    result = ExplorationResult.load(args.results)
    table, description, path = retrain_individuals(
        workload, result, args.output_dir, args.count, args.select, args.epochs, progress(args)
    )
    print(f"retrained {description}:")
    columns = [
        "id",
        "accuracy",
        "accuracy_before_training",
        "accuracy_after_training",
        "best_epoch",
    ]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    print(
        "accuracy: as the search recorded it, on the exploration data; before/after training: "
        f"on the reevaluation data ({dataset_spec(workload, 'reevaluate')[1]}); "
        "best_epoch chosen on the retraining validation data"
    )
    print(f"wrote {path} and {len(table)} checkpoints to {args.output_dir}")
    return 0
