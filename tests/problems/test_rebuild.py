"""A result's individuals rebuilt from the workload: the stored plan re-applied to a fresh model
gives the accuracy the search recorded; files without stored plans decode the same plans."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from sklearn.metrics import accuracy_score

from model_explorer.cli import main
from model_explorer.errors import UserError
from model_explorer.operations.rebuild import individual_problem, rebuild_problem
from model_explorer.plan import plan_of
from model_explorer.results import ExplorationResult, load_individual
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


@pytest.fixture(scope="module")
def searched(trained_digits, tmp_path_factory) -> tuple[Path, Path]:
    workload_file, checkpoint = trained_digits
    folder = tmp_path_factory.mktemp("rebuild")
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    data["workload"]["exploration"]["nsga"].update(pop_size=6, offsprings=6, generations=1)
    data["workload"]["problem"]["early_reject"] = False
    path = folder / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    output = folder / "result.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    return path, output


def test_every_record_stores_the_plan_of_its_configuration(searched) -> None:
    _, output = searched
    result = ExplorationResult.load(output)
    for individual in result.individuals:
        assert individual.plan == plan_of(result.variable_names, individual.configuration)
        assert set(individual.plan) == {"0", "3", "7", "12", "14"}


def test_a_rebuilt_individual_reproduces_its_recorded_accuracy(searched) -> None:
    """The rebuilt model's top-1 on the exploration data, counted by scikit-learn from its
    outputs' arg-max and the labels (not through the metric the search scored with), is the
    accuracy the search recorded; the individuals differ, so the plan is what decides it."""
    path, output = searched
    result = ExplorationResult.load(output)
    context = WorkloadContext(Workload.load(path), device="cpu")
    data = context.batches("exploration")
    recorded = []
    for individual in result.individuals[:4]:
        problem = individual_problem(context, result, individual)
        with torch.no_grad():  # in the search's batches, whose sums round as it scored them
            predicted = torch.cat([problem.model(inputs).argmax(1) for inputs, _ in data])
        assert accuracy_score(data.targets.numpy(), predicted.numpy()) == pytest.approx(
            individual.accuracies[0], abs=1e-12
        )
        recorded.append(individual.accuracies[0])
    assert len(set(recorded)) > 1


def test_files_without_stored_plans_decode_the_same_plans(searched, tmp_path: Path) -> None:
    _, output = searched
    result = ExplorationResult.load(output)
    for record in result.records:
        del record["plan"]
    result.save(tmp_path / "old.pkl")
    old = ExplorationResult.load(tmp_path / "old.pkl")
    new = ExplorationResult.load(output)
    for before, after in zip(old.individuals, new.individuals, strict=True):
        assert before.plan is None
        assert old.plan_of(before) == after.plan


def test_a_problem_with_other_variables_is_refused(searched) -> None:
    path, _ = searched
    context = WorkloadContext(Workload.load(path), device="cpu")
    with pytest.raises(UserError, match="RESULTS: its variables do not match"):
        rebuild_problem(context, "quantization_problem", ["conv.input_quantizer"])


@pytest.mark.parametrize(
    "reference, message",
    [
        ("{path}", "is not RESULTS#ID"),
        ("{path}#first", "is not RESULTS#ID"),
        ("{path}#999", "has no individual 999"),
        ("{folder}/none.pkl#1", "result file does not exist"),
    ],
)
def test_results_id_references_are_checked(searched, reference: str, message: str) -> None:
    _, output = searched
    text = reference.format(path=output, folder=output.parent)
    with pytest.raises(UserError, match=message):
        load_individual(text, "--individual")
    result, individual = load_individual(f"{output}#3", "--individual")
    assert individual.id == 3 and individual.configuration == result.records[3]["configuration"]
