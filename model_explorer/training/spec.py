"""The workload's `retraining:` settings: optimizer and schedule, epochs, data (the training
loop that reads them is loop.py; nothing here imports torch)."""

from __future__ import annotations

from typing import Literal

from model_explorer.datasets.spec import DatasetSpec
from model_explorer.schema.specs import Fraction, NonNegativeFloat, PositiveFloat, PositiveInt, Spec


class RetrainingDatasets(Spec):
    """The data of `retrain`."""

    train: DatasetSpec
    """What the model is trained or fine-tuned on."""
    validation: DatasetSpec | None = None
    """What picks the best epoch (the training data when not given)."""


class RetrainingSpec(Spec):
    """How `retrain` trains the float baseline or fine-tunes a search's individuals."""

    epochs: PositiveInt = 10
    """Training epochs; the best on the validation data is kept."""
    optimizer: Literal["sgd", "adam", "adamw"] = "adam"
    """The optimizer."""
    learning_rate: PositiveFloat = 1e-3
    """Its learning rate at the start."""
    momentum: Fraction = 0.9
    """SGD's momentum."""
    weight_decay: NonNegativeFloat = 0.0
    """Weight decay (decoupled with `adamw`)."""
    scheduler: Literal["none", "cosine"] = "cosine"
    """The learning rate's schedule over the epochs."""
    gradient_clip: PositiveFloat | None = None
    """The largest gradient norm (none: not clipped)."""
    recalibrate_batchnorm: bool = False
    """Re-estimate batch-norm statistics on the quantized model before fine-tuning."""
    batchnorm_batches: PositiveInt = 20
    """The training batches that re-estimate them."""
    datasets: RetrainingDatasets
    """The data of `retrain`."""
