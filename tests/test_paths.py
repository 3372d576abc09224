"""One rule for a workload's relative paths: they start from the workload's root (the file's
folder; its parent for a file in `workloads/`, the layout of the original tool and of this
project; or the folder its `root:` names), wherever the command runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPOSITORY
from model_explorer.analysis.diagnose.base import Finding
from model_explorer.analysis.diagnose.diagnosis import write_recommended_workload
from model_explorer.cli import main
from model_explorer.errors import WorkloadError
from model_explorer.operations.explore import result_path
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def _project(folder: Path, layout: str) -> Path:
    """A user's project: digits as a .npz under data/, the workload file where `layout` says,
    naming the data relative to where its rule starts."""
    (folder / "data").mkdir(parents=True)
    inputs = np.random.default_rng(0).random((20, 1, 8, 8), dtype=np.float32)
    np.savez(folder / "data" / "digits.npz", inputs=inputs, labels=np.arange(20) % 10)
    places = {
        "beside": ("w.yaml", {}, "data/digits.npz"),
        "workloads": ("workloads/w.yaml", {}, "data/digits.npz"),
        "root": ("configs/deep/w.yaml", {"root": "../.."}, "data/digits.npz"),
        "plain": ("configs/w.yaml", {}, "../data/digits.npz"),
    }
    name, extra, data_path = places[layout]
    dataset = {"type": "arrays", "path": data_path, "batch_size": 10}
    body = {
        **extra,
        "model": {"type": "digits_cnn", "weights": "results/baseline.pt"},
        "calibration": {"file": "results/calibration.pt", "datasets": {"calibrate": dataset}},
        "exploration": {"datasets": {"exploration": dataset}},
    }
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"workload": body}, sort_keys=False))
    return path


@pytest.mark.parametrize("layout", ["beside", "workloads", "root", "plain"])
def test_relative_paths_start_from_the_workload_root_wherever_it_runs(
    tmp_path: Path, layout: str, monkeypatch
) -> None:
    path = _project(tmp_path / "project", layout)
    project = tmp_path / "project" / ("configs" if layout == "plain" else "")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["validate", str(path)]) == 0
    workload = Workload.load(path)
    assert workload.model.resolve(workload.model.weights) == project / "results" / "baseline.pt"
    assert workload.results_folder == project / "results"
    assert result_path(workload, None).parent == project / "results"
    assert result_path(workload, "mine.pkl") == Path("mine.pkl")  # the command line's: cwd
    batch = next(iter(WorkloadContext(workload, device="cpu").batches("exploration")))
    assert tuple(batch[0].shape) == (10, 1, 8, 8)


def test_a_missing_path_is_named_where_the_rule_looked(tmp_path: Path, monkeypatch) -> None:
    path = _project(tmp_path / "project", "workloads")
    (tmp_path / "project" / "data" / "digits.npz").unlink()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkloadError, match=str(tmp_path / "project" / "data" / "digits.npz")):
        Workload.load(path)


def test_a_root_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    path = _project(tmp_path / "project", "root")
    path.write_text(path.read_text().replace("root: ../..", "root: ../missing"))
    with pytest.raises(WorkloadError, match=r"workload.root: folder .*missing' does not exist"):
        Workload.load(path)


def test_the_shipped_and_the_original_layout_keep_their_paths(monkeypatch, tmp_path) -> None:
    """Files in workloads/ name `results/...` from the project (ours, and the original tool's
    `./results/resnet18_quant_calib.pkl`), from any working directory."""
    monkeypatch.chdir(tmp_path)
    ours = Workload.load(REPOSITORY / "workloads" / "digits_cnn.yaml")
    assert ours.calibration.resolve(ours.calibration.file) == (
        REPOSITORY / "results" / "digits_cnn_calibration.pt"
    )
    template = (REPOSITORY / "tests" / "data" / "original_template.yaml").read_text()
    (tmp_path / "project" / "workloads").mkdir(parents=True)
    copy = tmp_path / "project" / "workloads" / "template.yaml"
    copy.write_text(template.replace("results/digits_cnn_calibration.pt", "./results/c.pkl"))
    original = Workload.load(copy, check_paths=False)
    assert original.calibration.resolve(original.calibration.file) == (
        tmp_path / "project" / "results" / "c.pkl"
    )
    assert result_path(original, None) == tmp_path / "project" / "results" / "sparsity_results.pkl"


def test_a_worker_copy_resolves_from_the_root_it_is_given(tmp_path: Path) -> None:
    path = _project(tmp_path / "project", "workloads")
    data = Workload.load(path).to_dict()
    copy = Workload.from_dict(data, root=tmp_path / "project", check_paths=True)
    assert copy.model.resolve(copy.model.weights) == tmp_path / "project" / "results/baseline.pt"


def test_a_recommended_workload_written_elsewhere_names_the_same_files(tmp_path: Path) -> None:
    path = _project(tmp_path / "project", "workloads")
    workload = Workload.load(path)
    finding = Finding("warning", "Clipping", "x", recommendation={"calibration": {"method": "mse"}})
    written = tmp_path / "out" / "diagnosis" / "recommended.yaml"
    write_recommended_workload(workload, [finding], written)
    again = Workload.load(written)
    assert again.calibration.method == "mse"
    assert again.model.resolve(again.model.weights) == tmp_path / "project/results/baseline.pt"
    assert yaml.safe_load(written.read_text())["workload"]["root"] == "../../project"


def test_a_result_works_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A search run in its project (relative weights, calibration and result paths), then
    `export RESULT#ID` from another folder (a notebook's): the result stores its workload's
    root as an absolute folder, so the relative paths resolve as they did; a file that has
    really gone is named by the path that was tried."""
    import shutil

    from conftest import DIGITS_CHECKPOINT
    from model_explorer.cli import main
    from model_explorer.results import ExplorationResult

    project, notebook = tmp_path / "project", tmp_path / "notebooks"
    (project / "workloads").mkdir(parents=True)
    (project / "results").mkdir()
    notebook.mkdir()
    shutil.copyfile(DIGITS_CHECKPOINT, project / "results" / "baseline.pt")
    data = yaml.safe_load((REPOSITORY / "workloads" / "digits_cnn.yaml").read_text())
    body = data["workload"]
    body["model"]["weights"] = "results/baseline.pt"
    body["calibration"]["file"] = "results/calibration.pt"
    body["exploration"]["nsga"].update(pop_size=4, offsprings=4, generations=1)
    (project / "workloads" / "w.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(project)
    assert main(["calibrate", "workloads/w.yaml"]) == 0
    assert main(["explore", "workloads/w.yaml", "--output", "results/r.pkl"]) == 0
    stored = ExplorationResult.load(project / "results" / "r.pkl").workload["workload"]
    assert stored["root"] == str(project) and stored["model"]["weights"] == "results/baseline.pt"
    monkeypatch.chdir(notebook)
    reference = "../project/results/r.pkl#0"
    assert main(["export", reference, "--onnx", "member.onnx"]) == 0
    assert (notebook / "member.onnx").stat().st_size > 0
    (project / "results" / "baseline.pt").unlink()
    capsys.readouterr()
    assert main(["export", reference, "--onnx", "again.onnx"]) == 2
    said = capsys.readouterr().err
    assert f"'{project / 'results' / 'baseline.pt'}' does not exist" in said, said
