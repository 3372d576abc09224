"""Training with a workload's settings: the float baseline, and fine-tuning chosen individuals
of a result, each from the same baseline.

Every individual gets a model built afresh from the baseline checkpoint and the calibration
file, its decoded configuration (bit widths, thresholds), a new optimizer and the seed reset:
nothing carries over from one individual to the next (the original tool reused one model and
one optimizer). Quantizers pass gradients straight through; thresholds stay fixed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path, read_torch_file
from model_explorer.models.checkpoints import load_checkpoint, save_checkpoint
from model_explorer.operations.rebuild import individual_problem, rebuild_problem
from model_explorer.operations.reevaluate import check_same_model, primary_cost
from model_explorer.plan import plan_of
from model_explorer.problems import Problem
from model_explorer.results import ExplorationResult, Individual
from model_explorer.training.loop import TrainingResult, train
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload

log = logging.getLogger(__name__)

SELECTIONS = ("pareto", "best-cost", "ids=<id>,<id>,...")


def select_individuals(
    result: ExplorationResult, count: int, rule: str
) -> tuple[list[Individual], str]:
    """The individuals a selection rule picks (feasible ones first) and the rule in words."""
    cost = primary_cost(result)
    individuals = result.individuals
    if rule.startswith("ids="):
        try:
            ids = [int(part) for part in rule[4:].split(",") if part]
        except ValueError:
            raise UserError(f"--select: '{rule}' is not ids=<id>,<id>,...") from None
        unknown = [i for i in ids if not 0 <= i < len(individuals)]
        if unknown:
            raise UserError(f"--select: the result has no individuals {unknown}")
        return [individuals[i] for i in ids], f"the individuals {ids}"
    ranked = sorted(
        individuals,
        key=lambda i: (not i.feasible, i.values[cost], -i.values.get("accuracy", 0.0)),
    )
    if rule == "pareto":
        front = {i.id for i in result.pareto_front()}
        chosen = [i for i in ranked if i.id in front][:count]
        return chosen, f"{len(chosen)} of the Pareto front, lowest {cost} first"
    if rule == "best-cost":
        chosen = ranked[:count]
        return chosen, f"the {len(chosen)} with the lowest {cost}, feasible ones first"
    raise UserError(f"--select: unknown rule '{rule}'; use one of {', '.join(SELECTIONS)}")


def retrain_one(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    output_dir: Path,
    epochs: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Fine-tune one individual from the baseline; save its checkpoint; return its CSV row."""
    workload = context.workload
    workload.require("retraining")
    problem = individual_problem(context, result, individual)
    plan = result.plan_of(individual)
    model = problem.model
    before = context.evaluate(model, "reevaluate")
    trained = train_in_context(context, model, epochs, progress)
    problem.apply_plan(plan)
    after = context.evaluate(model, "reevaluate")
    path = output_dir / f"retrained_{individual.id}.pt"
    network = getattr(model, "model", model)
    state = {k: v.detach().cpu() for k, v in network.state_dict().items()}
    with atomic_path(path) as temporary:
        torch.save(
            {
                "state_dict": state,
                "problem": result.problem["name"],
                "variables": result.variable_names,
                "configuration": individual.configuration,
                "plan": plan,
                "individual": individual.id,
                "best_epoch": trained.best_epoch,
                "workload": workload.name,
            },
            temporary,
        )
    row = {
        "id": individual.id,
        **individual.values,
        **dict(zip(result.variable_names, individual.configuration, strict=True)),
        "feasible": individual.feasible,
        "accuracy_before_training": before,
        "accuracy_after_training": after,
        "accuracies_over_epochs": json.dumps([r.validation_accuracy for r in trained.history]),
        "best_epoch": trained.best_epoch,
        "checkpoint": str(path),
    }
    log.info("individual %d: %s -> %s", individual.id, before, after)
    return row


def retrain_individuals(
    workload: Workload,
    result: ExplorationResult,
    output_dir: str | os.PathLike[str],
    count: int = 1,
    rule: str = "pareto",
    epochs: int | None = None,
    progress: bool = False,
    context: WorkloadContext | None = None,
) -> tuple[pd.DataFrame, str, Path]:
    """Retrain the selected individuals one after the other; write `retrained.csv`."""
    check_same_model(workload, result)
    chosen, description = select_individuals(result, count, rule)
    if not chosen:
        raise UserError("RESULTS: the selection picked no individual")
    context = context or WorkloadContext(workload)
    context.dataset("train")
    context.dataset("reevaluate")
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    rows = [retrain_one(context, result, i, output, epochs, progress) for i in chosen]
    table = pd.DataFrame(rows)
    path = output / "retrained.csv"
    with atomic_path(path) as temporary:
        table.to_csv(temporary, index=False)
    return table, description, path


def load_retrained(
    context: WorkloadContext, path: str | os.PathLike[str]
) -> tuple[Problem, dict[str, Any]]:
    """The problem (with its model) of a retrained checkpoint: the workload's model with the
    checkpoint's weights and the configuration that produced them applied."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"--retrained: '{file}' does not exist")
    checkpoint = read_torch_file(file, "--retrained", "checkpoint written by `retrain`")
    if not isinstance(checkpoint, dict) or "configuration" not in checkpoint:
        raise UserError(f"--retrained: '{file}' is not a checkpoint written by `retrain`")
    where = f"--retrained: '{file}'"
    problem = rebuild_problem(context, checkpoint["problem"], checkpoint["variables"], where)
    network = getattr(problem.model, "model", problem.model)
    load_checkpoint(network, file, where="--retrained")
    plan = checkpoint.get("plan") or plan_of(checkpoint["variables"], checkpoint["configuration"])
    problem.apply_plan(plan)
    return problem, checkpoint


def train_in_context(
    context: WorkloadContext, model: nn.Module, epochs: int | None = None, progress: bool = True
) -> TrainingResult:
    """`train` with the workload's settings: `retraining:` options, its train data (shuffled,
    seeded), its validation data when it has some, its metric, device and seed."""
    workload = context.workload
    validation = context.batches("validation") if context.has_dataset("validation") else None
    return train(
        model,
        context.loader("train", shuffle=True),
        validation,
        workload.require("retraining"),
        workload.metric,
        context.device,
        workload.seed,
        epochs,
        progress,
    )


def train_baseline(
    context: WorkloadContext,
    from_scratch: bool = False,
    epochs: int | None = None,
    progress: bool = True,
) -> tuple[TrainingResult, Path]:
    """Train the workload's float model on `retraining.datasets.train` (from the checkpoint
    `model.weights` when it exists, else from scratch), validate on
    `retraining.datasets.validation` each epoch, and save the best epoch to `model.weights`."""
    workload = context.workload
    workload.require("retraining")  # before anything else: the command needs that section
    if workload.model.weights is None:
        raise UserError(
            "workload.model.weights: name the checkpoint file that baseline training should write"
        )
    path = workload.model.resolve(workload.model.weights)
    resume = path.is_file() and not from_scratch
    log.info("training %s %s", workload.model.type, f"from {path}" if resume else "from scratch")
    model = context.build_model(load_weights=resume, fold=False)  # trains its batch norms
    result = train_in_context(context, model, epochs, progress)
    save_checkpoint(
        model,
        path,
        model_spec=workload.model.model_dump(mode="json"),
        best_epoch=result.best_epoch,
        validation_accuracy=result.best_accuracy,
        epochs=len(result.history),
        workload=workload.name,
    )
    return result, path
