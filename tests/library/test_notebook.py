"""evaluation_scripts/search_from_python.ipynb runs top to bottom as a user runs it: the kernel
in evaluation_scripts/ of a project, the model defined in the notebook, its figure inline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPOSITORY

nbformat = pytest.importorskip("nbformat", reason="the notebooks extra is not installed")
nbclient = pytest.importorskip("nbclient", reason="the notebooks extra is not installed")


def test_the_search_notebook_runs_the_whole_loop(tmp_path: Path, monkeypatch) -> None:
    notebook = nbformat.read(REPOSITORY / "evaluation_scripts" / "search_from_python.ipynb", 4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    project = tmp_path / "project"
    (project / "evaluation_scripts").mkdir(parents=True)
    (project / "results").mkdir()
    for variable in ("DISPLAY", "MPLBACKEND"):
        monkeypatch.delenv(variable, raising=False)
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(project / "evaluation_scripts")}},
    )
    client.execute()
    text = json.dumps([cell.get("outputs", []) for cell in notebook.cells])
    assert "Error" not in text and "Traceback" not in text
    assert "on the front" in text and "after fine-tuning" in text
    assert (project / "results" / "search_from_python.pkl").is_file()
    assert (project / "results" / "search_from_python_cheapest.onnx").stat().st_size > 1000
    assert any(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )
