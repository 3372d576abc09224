"""The training loop and the workload's `retraining:` settings: optimizer and schedule,
validation every epoch, the best epoch's weights kept, deterministic for a seed."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from model_explorer.metrics.functions import evaluate, output_list
from model_explorer.metrics.spec import MetricSpec
from model_explorer.modules import to_device
from model_explorer.training.spec import RetrainingSpec

log = logging.getLogger(__name__)


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    validation_accuracy: float | list[float]
    seconds: float


@dataclass
class TrainingResult:
    """What a run of `train` did; the model holds the best epoch's weights afterwards."""

    best_epoch: int
    best_accuracy: float | list[float]
    history: list[EpochRecord] = field(default_factory=list)


def make_optimizer(model: nn.Module, config: RetrainingSpec) -> torch.optim.Optimizer:
    parameters = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=config.learning_rate,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
    optimizer = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return optimizer(parameters, lr=config.learning_rate, weight_decay=config.weight_decay)


def loss_of(output: Any, target: Any) -> Tensor:
    """Cross entropy, summed over the outputs of a multi-output model."""
    outputs = output_list(output)
    targets = target if isinstance(target, (list, tuple)) else [target] * len(outputs)
    return sum(
        F.cross_entropy(o, t, ignore_index=255) for o, t in zip(outputs, targets, strict=True)
    )


def _score(accuracy: float | list[float]) -> float:
    return sum(accuracy) / len(accuracy) if isinstance(accuracy, list) else accuracy


def reestimate_batchnorm(
    model: nn.Module, loader: Iterable[tuple[Any, Any]], device: torch.device, batches: int
) -> None:
    """Recompute every batch norm's running statistics as a plain average over `batches`
    training batches of the model as it now computes (e.g. with quantized weights), before
    fine-tuning starts from them."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for index, (inputs, _) in enumerate(loader):
            if index >= batches:
                break
            model(to_device(inputs, device))
    for norm, momentum in zip(norms, momenta, strict=True):
        norm.momentum = momentum
    log.info("re-estimated %d batch norms on %d batches", len(norms), min(index + 1, batches))


def train_epoch(
    model: nn.Module,
    loader: Iterable[tuple[Any, Any]],
    optimizer: torch.optim.Optimizer,
    gradient_clip: float | None,
    device: torch.device,
) -> float:
    """One pass over `loader` in training mode; the mean loss per sample."""
    model.train()
    total_loss, total_samples = 0.0, 0
    for inputs, targets in loader:
        inputs, targets = to_device(inputs, device), to_device(targets, device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model(inputs), targets)
        loss.backward()
        if gradient_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clip)
        optimizer.step()
        samples = len(inputs)
        total_loss += float(loss.detach()) * samples
        total_samples += samples
    return total_loss / max(total_samples, 1)


def make_scheduler(optimizer: torch.optim.Optimizer, config: RetrainingSpec, epochs: int) -> Any:
    """The learning-rate schedule of `retraining.scheduler` (cosine over the epochs), or None."""
    if config.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    return None


def _said(accuracy: float | list[float]) -> str:
    """An epoch's accuracy (or each output's) to four places, as the summary line gives it."""
    values = accuracy if isinstance(accuracy, list) else [accuracy]
    return ", ".join(f"{float(value):.4f}" for value in values)


def train(
    model: nn.Module,
    train_loader: DataLoader,
    validation_batches: Iterable[tuple[Any, Any]] | None,
    config: RetrainingSpec,
    metric: MetricSpec | str = "top1",
    device: torch.device | str = "cpu",
    seed: int = 0,
    epochs: int | None = None,
    progress: bool = True,
) -> TrainingResult:
    """Train `model` in place and leave it holding the weights of its best validation epoch.

    Without validation data the last epoch counts as best and is scored on the training data.

    Args:
        model: the model to train (float, or a quantized individual: quantizers pass gradients
            straight through).
        train_loader: the training batches, reshuffled each epoch by the loader.
        validation_batches: (inputs, targets) scored after every epoch, or None.
        config: the workload's `retraining:` section (optimizer, learning rate, scheduler,
            gradient clip, batch-norm re-estimation, epochs).
        metric: what "best" is measured with (a MetricSpec or a metric's name).
        device: where training runs.
        seed: seeds torch before the first epoch.
        epochs: overrides `config.epochs` when given.
        progress: show progress bars.
    """
    torch.manual_seed(seed)
    device = torch.device(device)
    model.to(device)
    epochs = epochs or config.epochs
    if config.recalibrate_batchnorm:
        reestimate_batchnorm(model, train_loader, device, config.batchnorm_batches)
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer, config, epochs)
    history: list[EpochRecord] = []
    best_state: dict[str, Tensor] | None = None
    best: tuple[float, int, float | list[float]] | None = None
    bar = tqdm(range(1, epochs + 1), desc="training", unit="epoch", disable=not progress)
    for epoch in bar:
        started = time.perf_counter()
        loss = train_epoch(model, train_loader, optimizer, config.gradient_clip, device)
        if scheduler is not None:
            scheduler.step()
        accuracy = evaluate(model, validation_batches or train_loader, metric, device)
        record = EpochRecord(epoch, loss, accuracy, time.perf_counter() - started)
        history.append(record)
        where = "validation" if validation_batches is not None else "training-data"
        log.info("epoch %d: loss %.4f, %s accuracy %s", epoch, loss, where, _said(accuracy))
        bar.set_postfix(loss=f"{record.train_loss:.4f}", accuracy=f"{_score(accuracy):.4f}")
        if validation_batches is None or best is None or _score(accuracy) > best[0]:
            best = (_score(accuracy), epoch, accuracy)
            best_state = copy.deepcopy(model.state_dict())
    assert best is not None and best_state is not None  # epochs >= 1
    model.load_state_dict(best_state)
    model.eval()
    return TrainingResult(best_epoch=best[1], best_accuracy=best[2], history=history)
