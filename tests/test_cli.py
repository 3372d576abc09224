"""The command line: one CLI behind `model-explorer`, `python -m model_explorer` and scripts/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import model_explorer
from conftest import REPOSITORY, write_workload
from model_explorer.cli import main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)


def test_version_and_help_through_python_m() -> None:
    done = run("-m", "model_explorer", "--version")
    assert (
        done.returncode == 0
        and done.stdout.strip() == f"model-explorer {model_explorer.__version__}"
    )
    done = run("-m", "model_explorer", "--help")
    assert done.returncode == 0
    for name in ("validate", "evaluate", "retrain", "list"):
        assert name in done.stdout


@pytest.mark.slow
def test_retrain_script_trains_then_skips_when_asked(
    tmp_path: Path, default_workload_data: dict
) -> None:
    default_workload_data["workload"]["model"]["weights"] = str(tmp_path / "model.pt")
    workload = write_workload(default_workload_data, tmp_path / "w.yaml")
    script = str(REPOSITORY / "scripts" / "retrain.py")
    done = run(script, "--baseline", str(workload), "--epochs", "1", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "trained digits_cnn for 1 epochs" in done.stdout and (tmp_path / "model.pt").is_file()
    before = (tmp_path / "model.pt").stat().st_mtime_ns
    done = run(script, "--baseline", "--if-missing", str(workload))
    assert done.returncode == 0 and "not training" in done.stdout
    assert (tmp_path / "model.pt").stat().st_mtime_ns == before


def test_evaluate_prints_the_accuracy_of_each_dataset(trained_digits, capsys) -> None:
    workload_file, _ = trained_digits
    assert (
        main(["evaluate", str(workload_file), "--dataset", "baseline", "--dataset", "reevaluate"])
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert "workload.exploration.datasets.exploration (360 samples" in lines[0]
    assert "workload.reevaluation.datasets.reevaluate" in lines[1] and "top1 = 0.9" in lines[1]


@pytest.mark.parametrize(
    "change, dataset, message",
    [
        (
            lambda w, tmp: w["model"].update(weights=str(tmp / "none.pt")),
            "baseline",
            "workload.model.weights: checkpoint",
        ),
        (
            lambda w, tmp: w.pop("reevaluation"),
            "reevaluate",
            "workload.reevaluation.datasets.reevaluate: this command needs",
        ),
    ],
)
def test_user_errors_exit_2_with_one_line(
    tmp_path: Path,
    trained_digits,
    default_workload_data: dict,
    change,
    dataset: str,
    message: str,
    capsys,
) -> None:
    default_workload_data["workload"]["model"]["weights"] = str(trained_digits[1])
    change(default_workload_data["workload"], tmp_path)
    path = write_workload(default_workload_data, tmp_path / "w.yaml")
    status = main(["evaluate", str(path), "--dataset", dataset])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_retrain_without_baseline_says_what_to_pass(capsys) -> None:
    assert main(["retrain", str(REPOSITORY / "workloads" / "digits_cnn.yaml")]) == 2
    assert "give RESULTS and OUTPUT_DIR to fine-tune individuals of a result, or --baseline" in (
        capsys.readouterr().err
    )


def test_list_models() -> None:
    done = run("-m", "model_explorer", "list", "models", "resnet*")
    assert done.stdout.split() == [
        "resnet18",
        "resnet20",
        "resnet32",
        "resnet44",
        "resnet50",
        "resnet56",
        "torchvision:<name>",
        "package.module:factory",
    ]


def test_importing_the_package_does_no_work(tmp_path: Path) -> None:
    code = (
        "import sys, model_explorer; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert model_explorer.Workload.__name__ == 'Workload'; "
        "print(sorted(p.name for p in __import__('pathlib').Path('.').iterdir()))"
    )
    done = run("-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
