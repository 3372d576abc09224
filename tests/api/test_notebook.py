"""evaluation_scripts/search_from_python.ipynb runs top to bottom as a user runs it: the kernel
in evaluation_scripts/ of a project, the model defined in the notebook, its figure inline."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPOSITORY
from tests_support import notebook_project, run_in_project

nbformat = pytest.importorskip("nbformat", reason="the notebooks extra is not installed")
pytest.importorskip("nbclient", reason="the notebooks extra is not installed")


@pytest.mark.slow
def test_the_search_notebook_runs_the_whole_loop(tmp_path: Path, monkeypatch) -> None:
    notebook = nbformat.read(REPOSITORY / "evaluation_scripts" / "search_from_python.ipynb", 4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    project = notebook_project(tmp_path)
    for variable in ("DISPLAY", "MPLBACKEND"):
        monkeypatch.delenv(variable, raising=False)
    text = run_in_project(notebook, project)
    assert "on the front" in text and "after fine-tuning" in text
    assert len(list((project / "results").glob("search_from_python_*.pkl"))) == 1
    assert (project / "results" / "search_from_python_cheapest.onnx").stat().st_size > 1000
    assert any(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )
    # run again, as one does with a notebook: a search of its own, not a refusal of the file
    again = nbformat.read(REPOSITORY / "evaluation_scripts" / "search_from_python.ipynb", 4)
    assert "after fine-tuning" in run_in_project(again, project)
    assert len(list((project / "results").glob("search_from_python_*.pkl"))) == 2
