"""The front judged on data the search did not select on: each feasible member and the float
model scored on the reevaluation data when a search ends (counted here by hand), and the note
that a front scored above the float model on the data it was selected on: said where a feasible
member beats the baseline, not otherwise, its command scoring the front as written."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_results_analysis import synthetic_result

from model_explorer.cli import main
from model_explorer.operations.held_out import score_front_held_out
from model_explorer.operations.rebuild import rebuild_problem
from model_explorer.reports.text import held_out_summary, pareto_table, selection_note
from model_explorer.results import ExplorationResult
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


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


def hand_accuracy(model: torch.nn.Module, batches) -> float:  # noqa: ANN001
    correct = total = 0
    with torch.no_grad():
        for inputs, targets in batches:
            correct += int((model(inputs).argmax(dim=1) == targets).sum())
            total += len(targets)
    return correct / total


def test_the_default_search_scores_its_front_on_held_out_data(searched) -> None:  # noqa: ANN001
    workload_file, result_file = searched
    result = ExplorationResult.load(result_file)
    members = [i for i in result.pareto_front() if i.feasible]
    context = WorkloadContext(Workload.load(workload_file))
    batches = context.batches("reevaluate")
    held = result.stats["held_out"]
    assert held["baseline"] == pytest.approx(hand_accuracy(context.build_model(), batches))
    assert held["samples"] == 360 and held["members"] == len(members)
    problem = rebuild_problem(context, result.problem["name"], result.variable_names)
    for member in members:
        problem.apply_plan(result.plan_of(member))
        assert member.extra["held_out"] == pytest.approx(hand_accuracy(problem.model, batches))
    assert "held_out" in pareto_table(result).splitlines()[0]
    assert held_out_summary(result).startswith(
        "digits (workload.reevaluation.datasets.reevaluate), 360 samples"
    )
    note = selection_note(result)
    assert note is None or f"the float model scores {held['baseline']:.4f}" in note
    # Turned off, it leaves the result as it was.
    off = WorkloadContext(
        Workload.load(workload_file, overrides=["reevaluation.score_front=false"])
    )
    assert score_front_held_out(off, problem, result) is None


def test_the_default_search_says_it_and_its_command_runs(
    searched: tuple[Path, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    workload, result_file = searched
    result = ExplorationResult.load(result_file)
    result.stats.pop("held_out", None)  # as a result of a workload without reevaluation data
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
    table = pd.read_csv(output).set_index("id")
    front = {i.id: i for i in result.pareto_front() if i.feasible}
    assert sorted(table.index) == sorted(front)
    for identity, member in front.items():  # the same figures as the search's own scoring
        assert table.loc[identity, "reevaluation_accuracy"] == pytest.approx(
            member.extra["held_out"]
        )
    # Beside them, the float model on the same data, counted here by hand.
    context = WorkloadContext(Workload.load(workload))
    baseline = hand_accuracy(context.build_model(), context.batches("reevaluate"))
    said = capsys.readouterr().out
    assert f"the float model: {baseline:.4f} on the reevaluation data" in said


def test_held_out_data_that_cannot_be_read_leaves_the_search_standing(
    searched, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    workload_file, result_file = searched
    result = ExplorationResult.load(result_file)
    result.stats.pop("held_out")
    missing = f"reevaluation.datasets.reevaluate={{type: arrays, path: {tmp_path / 'no.npz'}}}"
    # checked when loaded; gone by the time the search ends
    context = WorkloadContext(Workload.load(workload_file, False, overrides=[missing]))
    problem = rebuild_problem(context, result.problem["name"], result.variable_names)
    with caplog.at_level("WARNING"):
        assert score_front_held_out(context, problem, result) is None
    assert "the front was not scored on the held-out data" in caplog.text
    assert "no.npz" in caplog.text and "held_out" not in result.stats


def test_the_splits_are_never_mixed(trained_digits, tmp_path: Path) -> None:  # noqa: ANN001
    """Every sample any module sees while the search runs is an exploration sample, never a
    held-out one; the judgement after it sees held-out samples only (and the float model's
    exploration samples before it: the baseline), found by each forwarded row's bytes."""
    import yaml

    from model_explorer.datasets.digits import digits_tensors
    from model_explorer.exploration import explorer as explorer_module

    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["calibration"]["file"] = str(tmp_path / "calibration.pt")
    data["workload"]["exploration"]["nsga"].update(pop_size=6, offsprings=6, generations=2)
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    rows = {
        split: {row.numpy().tobytes() for row in digits_tensors(split)[0]}
        for split in ("train", "validation", "test")
    }
    seen: dict[str, set[bytes]] = {"search": set(), "after": set()}
    phase = ["before"]

    def record(module: torch.nn.Module, args: tuple) -> None:
        if phase[0] in seen and args and isinstance(args[0], torch.Tensor):
            if args[0].dim() == 4 and tuple(args[0].shape[1:]) == (1, 8, 8):
                seen[phase[0]].update(row.numpy().tobytes() for row in args[0])

    real_run = explorer_module.Explorer.run

    def run(self):  # noqa: ANN001, ANN202
        phase[0] = "search"
        try:
            return real_run(self)
        finally:
            phase[0] = "after"

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    explorer_module.Explorer.run = run  # type: ignore[method-assign]
    try:
        assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 0
    finally:
        explorer_module.Explorer.run = real_run  # type: ignore[method-assign]
        handle.remove()
    assert seen["search"] and seen["search"] <= rows["validation"]
    assert not seen["search"] & rows["test"]
    assert seen["after"] and seen["after"] <= rows["test"]
