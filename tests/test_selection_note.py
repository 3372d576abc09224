"""The note that a front scored above the float model on the data it was selected on: said where
a feasible member beats the baseline, not otherwise, and its command scores the front on the
reevaluation data as written."""

from __future__ import annotations

import shlex
from pathlib import Path

import torch
from test_results_analysis import synthetic_result

from model_explorer.cli import main
from model_explorer.context import WorkloadContext
from model_explorer.reporting import selection_note
from model_explorer.results import ExplorationResult
from model_explorer.workload import Workload


def with_baseline(points: list[dict[str, float]], baseline: float, maximize: bool = True):  # noqa: ANN201
    result = synthetic_result(points, [("accuracy", maximize), ("bits", False)])
    result.baseline = [baseline]
    return result


def test_said_only_where_a_feasible_member_beats_the_float_model() -> None:
    points = [{"accuracy": 0.99, "bits": 28.0}, {"accuracy": 0.97, "bits": 20.0}]
    note = selection_note(with_baseline(points, 0.98))
    assert note is not None
    assert note.startswith("1 of 2 feasible front members score above")
    assert "(0.9900 against 0.9800)" in note
    assert selection_note(with_baseline(points, 0.995)) is None
    assert selection_note(with_baseline(points, 0.99)) is None  # equal is not above
    beaten = with_baseline(points, 0.98)
    beaten.records[0]["feasible"] = False  # an infeasible member is no claim
    assert selection_note(beaten) is None
    losses = [{"accuracy": 0.2, "bits": 28.0}, {"accuracy": 0.4, "bits": 20.0}]
    assert "below" in selection_note(with_baseline(losses, 0.3, maximize=False))  # type: ignore[operator]
    assert selection_note(synthetic_result(points, [("accuracy", True), ("bits", False)])) is None


def test_the_default_search_says_it_and_its_command_runs(
    searched: tuple[Path, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    workload, result_file = searched
    result = ExplorationResult.load(result_file)
    above = [
        i for i in result.pareto_front() if i.feasible and i.values["accuracy"] > result.baseline[0]
    ]
    command = f"model-explorer evaluate-individual {workload} {result_file} --front"
    note = selection_note(result, command)
    assert (note is not None) == bool(above)
    if note is None:
        return
    written = note.split("`")[1]
    assert written == command
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "front.csv"
    assert main([*shlex.split(written)[1:], "--output", str(output)]) == 0
    rows = output.read_text().splitlines()
    assert "reevaluation_accuracy" in rows[0]
    assert len(rows) - 1 == len([i for i in result.pareto_front() if i.feasible])
    # Beside them, the float model on the same data, counted here by hand.
    context = WorkloadContext(Workload.load(workload))
    model, correct, total = context.build_model(), 0, 0
    with torch.no_grad():
        for inputs, targets in context.batches("reevaluate"):
            correct += int((model(inputs).argmax(dim=1) == targets).sum())
            total += len(targets)
    said = capsys.readouterr().out
    assert f"the float model: {correct / total:.4f} on the reevaluation data" in said
