"""Fine-tuning individuals: recovery at low bits, no state shared between individuals, files."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import yaml

from model_explorer.cli import main
from model_explorer.operations.pipeline import calibrate_workload
from model_explorer.operations.rebuild import build_problem
from model_explorer.operations.retraining import load_retrained, retrain_individuals
from model_explorer.results import ExplorationResult
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


@pytest.fixture(scope="module")
def setting(trained_digits, tmp_path_factory):
    """A digits workload for fine-tuning and a result holding two hand-made individuals."""
    folder = tmp_path_factory.mktemp("retrain")
    workload_file, checkpoint = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "c.pt")
    data["workload"]["retraining"].update(
        epochs=3, learning_rate=0.001, gradient_clip=5.0, recalibrate_batchnorm=True
    )
    data["workload"]["retraining"]["datasets"]["train"]["sample_limit"] = 600
    path = folder / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    workload = Workload.load(path)
    context = WorkloadContext(workload, device="cpu")
    calibrate_workload(context)
    problem = build_problem(context, None, "quantization_problem")
    configurations = [[2] * 10, [4, 3, 5, 3, 4, 3, 6, 3, 8, 8]]
    records = []
    for index, configuration in enumerate(configurations):
        _, evaluation = problem.evaluate(configuration)
        records.append(
            {
                "id": index,
                "generation": 0,
                "index": index,
                "genome": [float(b) for b in configuration],
                "configuration": configuration,
                "values": evaluation.values,
                "accuracies": evaluation.accuracies,
                "feasible": True,
                "complete": True,
                "seconds": 0.0,
                "extra": {},
            }
        )
    result = ExplorationResult(
        workload.to_dict(), problem.describe(), individuals=records, complete=True
    )
    result_path = result.save(folder / "result.pkl")
    return workload, result, result_path, folder


def test_low_bits_recover_and_individuals_share_nothing(setting) -> None:
    workload, result, _, folder = setting
    together, description, csv = retrain_individuals(
        workload, result, folder / "both", rule="ids=0,1"
    )
    assert description == "the individuals [0, 1]"
    assert list(together["id"]) == [0, 1]
    # Three epochs at 2 bits recover 13.6 to 17.5 points on the shipped checkpoint (seeds 0-2
    # under each kernel setting of tests/across_kernels.py); at 3 bits, with less to recover,
    # 1.4 to 2.2 here and 0.8 on another processor, too close to any bound worth asserting.
    two_bits = together.iloc[0]
    assert two_bits["accuracy_after_training"] > two_bits["accuracy_before_training"] + 0.05
    alone = [
        retrain_individuals(workload, result, folder / f"alone{i}", rule=f"ids={i}")[0].iloc[0]
        for i in (0, 1)
    ]
    for i in (0, 1):
        for column in (
            "accuracy_before_training",
            "accuracy_after_training",
            "accuracies_over_epochs",
        ):
            assert together.iloc[i][column] == alone[i][column]
        a = torch.load(folder / "both" / f"retrained_{i}.pt", weights_only=True)["state_dict"]
        b = torch.load(folder / f"alone{i}" / f"retrained_{i}.pt", weights_only=True)["state_dict"]
        assert all(torch.equal(a[k], b[k]) for k in a)
    table = pd.read_csv(csv)
    assert len(table) == 2
    assert {
        "accuracy_before_training",
        "accuracy_after_training",
        "accuracies_over_epochs",
        "weighted_bits",
        "0.input_quantizer",
    } <= set(table.columns)
    assert len(json.loads(table.loc[0, "accuracies_over_epochs"])) == 3


def test_checkpoint_reloads_to_identical_outputs(setting, capsys) -> None:
    workload, result, result_path, folder = setting
    output = folder / "cli"
    status = main(
        [
            "retrain",
            str(workload.source),
            str(result_path),
            str(output),
            "--select",
            "ids=0",
            "--epochs",
            "2",
        ]
    )
    assert status == 0 and "retrained the individuals [0]" in capsys.readouterr().out
    row = pd.read_csv(output / "retrained.csv").iloc[0]
    context = WorkloadContext(workload, device="cpu")
    problems = [load_retrained(context, output / "retrained_0.pt")[0] for _ in range(2)]
    x = next(iter(context.batches("reevaluate")))[0]
    with torch.no_grad():
        assert torch.equal(problems[0].model(x), problems[1].model(x))
    assert problems[0].model.bit_widths == [2] * 10
    assert context.evaluate(problems[0].model, "reevaluate") == row["accuracy_after_training"]
    assert (
        main(
            [
                "evaluate-individual",
                str(workload.source),
                "--retrained",
                str(output / "retrained_0.pt"),
            ]
        )
        == 0
    )
    assert f"full accuracy {row['accuracy_after_training']:.4f}" in capsys.readouterr().out


def test_selection_rules(setting, capsys) -> None:
    workload, _, result_path, folder = setting
    assert (
        main(
            [
                "retrain",
                str(workload.source),
                str(result_path),
                str(folder / "x"),
                "--select",
                "ids=7",
            ]
        )
        == 2
    )
    assert "has no individuals [7]" in capsys.readouterr().err
    assert (
        main(
            [
                "retrain",
                str(workload.source),
                str(result_path),
                str(folder / "x"),
                "--select",
                "cheapest",
            ]
        )
        == 2
    )
    assert "unknown rule 'cheapest'" in capsys.readouterr().err
    assert main(["retrain", str(workload.source)]) == 2
    assert "give RESULTS and OUTPUT_DIR" in capsys.readouterr().err
