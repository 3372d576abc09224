"""Sparsity and joint problems on the trained digits model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPOSITORY
from model_explorer.cli import main
from model_explorer.operations.rebuild import build_problem
from model_explorer.results import ExplorationResult
from model_explorer.sparsity import threshold_steps
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


@pytest.fixture
def workload_file(trained_digits, tmp_path: Path):
    def make(name: str, **nsga) -> Path:
        _, checkpoint = trained_digits
        data = yaml.safe_load((REPOSITORY / "workloads" / name).read_text())
        data["workload"]["model"]["weights"] = str(checkpoint)
        if "calibration" in data["workload"]:
            data["workload"]["calibration"]["file"] = str(tmp_path / "calibration.pt")
        data["workload"]["exploration"]["nsga"].update(nsga)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path

    return make


def test_sparsity_search_trades_accuracy_for_blocks_and_reevaluates_exactly(workload_file) -> None:
    path = workload_file("digits_cnn_sparsity.yaml", pop_size=10, offsprings=10, generations=4)
    output = path.parent / "sparsity.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    result = ExplorationResult.load(output)
    workload = Workload.load(path)
    limits = workload.problem.options
    edges = set(
        threshold_steps(limits.threshold_limit, limits.discrete_threshold_steps, "linear").tolist()
    )
    # The recorded configuration is the discretized thresholds that ran, not the raw genome.
    assert all(set(i.configuration) <= edges for i in result.individuals)
    assert any(i.genome != i.configuration for i in result.individuals)
    # The three predefined individuals (all thresholds equal) are in the first generation.
    first = [i.configuration for i in result.individuals if i.generation == 0]
    assert [0.0] * 5 in first and [0.05] * 5 in first and [0.1] * 5 in first
    assert len(first) == 10
    # The front trades the divergence from the float model, which ranks it (the metric is
    # top-1: selection auto), for created blocks; top-1 is recorded beside it.
    assert result.selection == "kl"
    front = sorted(result.pareto_front(), key=lambda i: i.values["created_blocks"])
    assert len(front) >= 2
    divergences = [i.values["kl"] for i in front]
    assert divergences == sorted(divergences) and divergences[0] < divergences[-1]
    assert all(0.0 <= i.values["accuracy"] <= 1.0 for i in front)
    # Re-evaluating a recorded individual reproduces its accuracy and block counts exactly.
    context = WorkloadContext(workload, device="cpu")
    problem = build_problem(context, None, "sparsity_problem")
    for individual in [i for i in front if i.complete][:3]:
        _, evaluation = problem.evaluate(individual.genome)
        assert evaluation.accuracies == individual.accuracies
        assert evaluation.extra["blocks"] == individual.extra["blocks"]
        assert evaluation.values["created_blocks"] == individual.values["created_blocks"]


def test_joint_problem_runs_with_mixed_genes(workload_file) -> None:
    path = workload_file("digits_cnn_joint.yaml", pop_size=8, offsprings=8, generations=2)
    assert main(["calibrate", str(path)]) == 0
    output = path.parent / "joint.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    result = ExplorationResult.load(output)
    names = result.variable_names
    assert names[:2] == ["0.input_quantizer", "0.weight_quantizer"] and names[-1] == "14"
    for individual in result.individuals:
        bits, thresholds = individual.configuration[:10], individual.configuration[10:]
        assert all(isinstance(b, int) and 2 <= b <= 8 for b in bits)
        assert all(0.0 <= t <= 1.0 for t in thresholds) and len(thresholds) == 5
        assert individual.values["effective_bops"] <= individual.values["bops"] + 1e-6
    dense = [i for i in result.individuals if i.configuration[10:] == [0.0] * 5]
    assert dense  # the predefined all-zero thresholds
    # the default start (auto) leaves a joint genome alone: no sensitivity table was measured
    assert "sensitivity_forwards" not in result.stats
    for individual in dense:  # nothing skipped but blocks that were zero anyway
        assert individual.values["created_blocks"] == 0


def test_a_sensitivity_start_for_the_joint_problem_is_one_sentence(workload_file, capsys) -> None:
    path = workload_file("digits_cnn_joint.yaml", pop_size=4, offsprings=4, generations=1)
    assert main(["calibrate", str(path)]) == 0
    output = path.parent / "joint.pkl"
    status = main(
        [
            "explore",
            str(path),
            "--set",
            "exploration.initialization=sensitivity",
            "--output",
            str(output),
        ]
    )
    assert status == 2
    error = capsys.readouterr().err
    assert "exploration.initialization: 'sensitivity' seeds bit widths" in error
    assert "block thresholds too" in error and "use 'random'" in error
