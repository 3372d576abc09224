"""Label-free fidelity metrics (agreement, cosine, kl) against hand computations and scipy, their
exact early-rejection bounds, float reference outputs computed once, and a search bounded by a
maximum divergence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from scipy.special import softmax
from scipy.stats import entropy

from model_explorer.cli import main
from model_explorer.datasets import TensorCache
from model_explorer.metrics.functions import create_metric, score
from model_explorer.reports.plots import plot_front
from model_explorer.reports.text import write_report
from model_explorer.results import ExplorationResult
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def _pair(seed: int = 0, shape: tuple[int, ...] = (40, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    reference = torch.randn(*shape, generator=generator)
    return reference + 0.7 * torch.randn(*shape, generator=generator), reference


def _accumulated(name: str, output: torch.Tensor, reference: torch.Tensor) -> float:
    metric = create_metric(name)
    for start in range(0, len(output), 7):  # uneven batches
        metric.update(output[start : start + 7], reference[start : start + 7])
    return metric.compute()


def test_agreement_by_hand() -> None:
    reference = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    output = torch.tensor([[0.1, 0.9, 0.0], [0.0, 3.0, 0.0], [0.2, 0.0, 0.5], [0.0, 0.0, 4.0]])
    metric = create_metric("agreement")
    metric.update(output, reference)
    assert metric.compute() == 2 / 4  # samples 0 and 2 keep the float model's top-1 class
    output, reference = _pair()
    expected = float(np.mean(output.numpy().argmax(1) == reference.numpy().argmax(1)))
    assert _accumulated("agreement", output, reference) == pytest.approx(expected)


def test_cosine_by_hand() -> None:
    output, reference = _pair(1, (30, 4, 5))  # embeddings of any shape are flattened per sample
    a, b = output.reshape(30, -1).numpy(), reference.reshape(30, -1).numpy()
    expected = np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))
    assert _accumulated("cosine", output, reference) == pytest.approx(float(expected), rel=1e-5)
    assert _accumulated("cosine", reference, reference) == pytest.approx(1.0)


def test_kl_is_scipys_entropy_of_the_softmax_outputs() -> None:
    output, reference = _pair(2)
    p, q = softmax(reference.double().numpy(), axis=1), softmax(output.double().numpy(), axis=1)
    expected = np.mean([entropy(p[i], q[i]) for i in range(len(p))])  # KL(float || quantized)
    assert _accumulated("kl", output, reference) == pytest.approx(float(expected), rel=1e-4)
    assert _accumulated("kl", reference, reference) == pytest.approx(0.0, abs=1e-6)
    assert not create_metric("kl").higher_is_better
    assert create_metric("cosine").higher_is_better


@pytest.mark.parametrize(("name", "limit"), [("agreement", 0.9), ("cosine", 0.95), ("kl", 0.05)])
def test_early_rejection_is_exact(name: str, limit: float) -> None:
    """Scoring stops early only when the full-subset value could not meet the limit: a
    minimum for agreement and cosine, a maximum for kl."""
    output, reference = _pair(3, (64, 5))
    model = torch.nn.Identity()
    batches = TensorCache(output, reference, batch_size=8)
    full = score(model, batches, name).accuracies[0]
    early = score(model, batches, name, minimum=[limit])
    meets = full >= limit if name != "kl" else full <= limit
    assert early.complete == meets
    if not early.complete:
        assert early.samples < 64
        # the bound that stopped it is still on the right side of the final value
        assert early.accuracies[0] >= full if name != "kl" else early.accuracies[0] <= full


def test_reference_outputs_are_the_float_models_and_computed_once(
    trained_digits, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["metric"] = "cosine"
    workload = Workload.from_dict(data, source=workload_file)
    context = WorkloadContext(workload, device="cpu")
    model = context.build_model()
    calls = []
    original = context.build_model
    monkeypatch.setattr(context, "build_model", lambda *a, **k: calls.append(1) or original())
    batches = context.batches("exploration")
    with torch.no_grad():
        torch.testing.assert_close(batches.targets, model(batches.inputs))
    assert context.evaluate(model, "exploration") == pytest.approx(1.0)
    context.batches("exploration")
    assert len(calls) == 1


def test_a_search_bounded_by_a_maximum_divergence(trained_digits, tmp_path: Path, capsys) -> None:
    workload_file, checkpoint = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    workload = data["workload"]
    workload["metric"] = "kl"
    workload["calibration"]["file"] = str(tmp_path / "c.pt")
    problem = workload["problem"]
    problem.pop("allowable_accuracy_drop", None)
    problem.pop("minimum_accuracy", None)
    problem["maximum_divergence"] = 0.05
    workload["exploration"]["nsga"].update(pop_size=6, offsprings=4, generations=2)
    path = tmp_path / "kl.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    output = tmp_path / "kl.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    result = ExplorationResult.load(output)
    assert result.problem["metric"] == "kl"
    assert dict(result.objectives)["accuracy"] is False  # minimised
    constraint = result.problem["constraints"][0]
    assert constraint["name"] == "accuracy" and constraint["maximum"] == 0.05
    assert result.baseline == [pytest.approx(0.0, abs=1e-6)]
    for individual in result.individuals:
        if individual.complete:
            assert individual.feasible == (individual.values["accuracy"] <= 0.05)
    # Plots and the report name the metric, and draw its bound as a maximum.
    axes = plot_front(result).axes[0]
    assert axes.get_ylabel() == "accuracy (kl)"  # the objective, as tables name it, and its metric
    line = next(a for a in axes.get_lines() if a.get_gid() == "constraint")
    assert line.get_ydata()[0] == 0.05 and line.get_label() == "maximum kl"
    report = write_report(result, tmp_path / "report")[-1]
    assert "- baseline kl:" in report.read_text()
    # A higher-is-better bound on a divergence is refused, naming the key to use.
    problem["minimum_accuracy"] = 0.9
    path.write_text(yaml.safe_dump(data))
    assert main(["explore", str(path), "--output", str(tmp_path / "x.pkl")]) == 2
    assert "maximum_divergence" in capsys.readouterr().err
