"""Baseline training: the default workload reaches its accuracy, runs are reproducible, the best
epoch is the one kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import model_explorer.operations.retraining as retraining
import model_explorer.training.loop as training
from conftest import train_digits
from model_explorer.models import load_checkpoint
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def test_default_workload_trains_to_95_percent_test_accuracy(tmp_path: Path) -> None:
    workload_file, checkpoint = train_digits(tmp_path)
    context = WorkloadContext(Workload.load(workload_file), device="cpu")
    model = context.build_model()
    assert context.evaluate(model, "reevaluate") >= 0.95  # the held-out test split
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["model_spec"]["type"] == "digits_cnn"
    assert saved["validation_accuracy"] == pytest.approx(context.evaluate(model, "validation"))


def _context(tmp_path: Path, data: dict, epochs: int = 2) -> WorkloadContext:
    data["workload"]["model"]["weights"] = str(tmp_path / "weights.pt")
    data["workload"]["retraining"]["epochs"] = epochs
    data["workload"]["retraining"]["datasets"]["train"]["sample_limit"] = 256
    return WorkloadContext(Workload.from_dict(data), device="cpu")


def test_training_is_reproducible_for_a_seed(tmp_path: Path, default_workload_data: dict) -> None:
    states = []
    for run in range(2):
        context = _context(tmp_path / str(run), default_workload_data)
        retraining.train_baseline(context, progress=False)
        states.append(
            torch.load(tmp_path / str(run) / "weights.pt", weights_only=True)["state_dict"]
        )
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][key], states[1][key]) for key in states[0])


def test_the_best_validation_epoch_is_kept(
    tmp_path: Path, default_workload_data: dict, monkeypatch
) -> None:
    scripted = iter([0.5, 0.9, 0.7])
    snapshots = []

    def scripted_evaluate(model, batches, metric, device):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scripted)

    monkeypatch.setattr(training, "evaluate", scripted_evaluate)
    context = _context(tmp_path, default_workload_data, epochs=3)
    result, path = retraining.train_baseline(context, progress=False)
    assert (result.best_epoch, result.best_accuracy) == (2, 0.9)
    assert [r.validation_accuracy for r in result.history] == [0.5, 0.9, 0.7]
    saved = torch.load(path, weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], snapshots[1][k]) for k in saved)
    assert not all(torch.equal(saved[k], snapshots[2][k]) for k in saved)


def test_training_continues_from_existing_weights(
    tmp_path: Path, trained_digits, default_workload_data: dict, monkeypatch
) -> None:
    _, checkpoint = trained_digits
    context = _context(tmp_path, default_workload_data, epochs=1)
    (tmp_path / "weights.pt").write_bytes(checkpoint.read_bytes())
    starts = []
    real_train = retraining.train

    def recording_train(model, *args, **kwargs):
        starts.append({k: v.clone() for k, v in model.state_dict().items()})
        return real_train(model, *args, **kwargs)

    monkeypatch.setattr(retraining, "train", recording_train)
    retraining.train_baseline(context, progress=False)
    retraining.train_baseline(context, from_scratch=True, progress=False)
    reference = context.build_model(load_weights=False)
    load_checkpoint(reference, checkpoint)
    expected = reference.state_dict()
    assert all(torch.equal(starts[0][k], expected[k]) for k in expected)
    assert not all(torch.equal(starts[1][k], expected[k]) for k in expected)


def test_a_folding_workload_trains_and_saves_its_batch_norms(
    tmp_path: Path, trained_digits, default_workload_data: dict
) -> None:
    """`model.fold_batchnorm` folds the model the search explores, never the one trained: a
    baseline continued from its checkpoint is saved with its batch norms, and loads again."""
    _, checkpoint = trained_digits
    default_workload_data["workload"]["model"]["fold_batchnorm"] = True
    context = _context(tmp_path, default_workload_data, epochs=1)
    (tmp_path / "weights.pt").write_bytes(checkpoint.read_bytes())
    retraining.train_baseline(context, progress=False)
    saved = torch.load(tmp_path / "weights.pt", weights_only=True)["state_dict"]
    assert any(key.endswith("running_var") for key in saved)
    folded = context.build_model()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
