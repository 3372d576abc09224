"""The walkthrough for one's own model and data (docs/own-model.md), run as written: its files
are cut from the page's code blocks into a fresh project, its commands run in their order from
another directory (the model module is found from the workload's root, as its data is), with
smaller search settings given by --set."""

from __future__ import annotations

import re
import runpy
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import REPOSITORY
from model_explorer.cli import main

# What each command adds to the README's line, so that the test stays short.
FASTER = {
    "retrain": ["--set", "retraining.epochs=3"],
    "diagnose": ["--order", "Norm,Coverage"],
    "explore": [
        "--set",
        "exploration.nsga.pop_size=4",
        "--set",
        "exploration.nsga.generations=1",
    ],
}


def walkthrough() -> tuple[dict[str, str], list[str]]:
    """The section's files (code blocks whose first line is `# <path>`) and its commands."""
    section = (REPOSITORY / "docs" / "own-model.md").read_text()
    blocks = re.findall(r"```[a-z]*\n(.*?)```", section, re.DOTALL)
    files = {}
    commands: list[str] = []
    for block in blocks:
        first, _, rest = block.partition("\n")
        if re.fullmatch(r"# [\w./]+\.(py|yaml)", first):
            files[first[2:]] = rest
        elif "model-explorer " in block:
            commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    return files, commands


def test_the_walkthrough_runs_as_written(tmp_path: Path, monkeypatch, capsys) -> None:
    files, commands = walkthrough()
    assert set(files) == {"mynet.py", "make_data.py", "workloads/mynet.yaml"}
    assert commands[0] == "python make_data.py"
    project = tmp_path / "myproject"
    for name, content in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(content)
    monkeypatch.chdir(project)
    runpy.run_path("make_data.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not where the model's module is
    for line in commands[1:]:
        argv = shlex.split(line)[1:]
        argv = [str(project / a) if a.startswith("workloads/") else a for a in argv]
        assert main(argv + FASTER.get(argv[0], [])) == 0, (line, capsys.readouterr().err)
    assert (project / "results" / "mynet.pt").is_file()
    assert list((project / "results").glob("expl_*_report/report.md"))
    assert not (elsewhere / "results").exists()


def test_a_relative_path_that_does_not_exist_names_the_root(tmp_path: Path, capsys) -> None:
    files, _ = walkthrough()
    data = yaml.safe_load(files["workloads/mynet.yaml"])
    (tmp_path / "workloads").mkdir()
    path = tmp_path / "workloads" / "mynet.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    said = capsys.readouterr().err
    assert f"'{tmp_path / 'data' / 'train.npz'}' does not exist" in said
    assert f"relative paths start from the workload's root, {tmp_path}" in said


def test_a_module_found_nowhere_says_where_it_was_looked_for(tmp_path: Path, capsys) -> None:
    from model_explorer.errors import UserError
    from model_explorer.models import create_model

    with pytest.raises(UserError, match=f"looked in installed packages and in {tmp_path}"):
        create_model("nomodule_here:build", module_folders=[tmp_path])
