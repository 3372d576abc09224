"""Every code block of the documentation's pages runs as a reader would run it: a page's Python
blocks in order in one namespace (a later block uses what an earlier one made), pasted into an
empty folder with nothing handed to them: each page makes its own model and data (none of them
the default workload's), its own result files and workload file. A page's YAML blocks are
validated as part of the default workload, and a block that says it lists the defaults is
checked against the settings model's own defaults.
docs/own-model.md is run by tests/test_walkthrough.py, commands in `sh` blocks by `make`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import DEFAULT_WORKLOAD, REPOSITORY

DOCS = REPOSITORY / "docs"
FENCE = re.compile(r"^```(?P<language>\w*)[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
ELSEWHERE = {"own-model.md", "ARCHITECTURE.md"}  # run by the walkthrough test; not a page of use


def blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text()
    return [m["code"] for m in FENCE.finditer(text) if m["language"] == language]


def pages(language: str) -> list[str]:
    found = sorted(p.name for p in DOCS.glob("*.md") if p.name not in ELSEWHERE)
    return [page for page in found if blocks(page, language)]


def run_as_pasted(code_blocks: list[tuple[str, str]], folder: Path) -> dict[str, Any]:
    """Run (name, code) blocks in order in one namespace, in `folder`, with the figures drawn
    off screen and the objectives a page registers taken out again afterwards."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    from model_explorer.problems.objectives import OBJECTIVES

    namespace: dict[str, Any] = {}
    registered = set(OBJECTIVES.names())
    before = Path.cwd()
    os.chdir(folder)
    try:
        for name, code in code_blocks:
            try:
                exec(compile(code, name, "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"{name} fails: {error!r}") from error
    finally:
        os.chdir(before)
        for entry in set(OBJECTIVES.names()) - registered:  # the page's own registrations
            OBJECTIVES._entries.pop(entry)
        pyplot.close("all")
    return namespace


# The extras a page names in the install it asks for (the others need the base install only).
NAMED_EXTRAS = {"python-api.md": {"onnx"}}


def _installed_without_extras(named: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every optional package (model_explorer.errors.EXTRAS, the table a missing one is told
    by) of an extra not `named` made unimportable; those the base install holds are kept."""
    import importlib.metadata
    import sys

    from model_explorer.errors import EXTRAS

    required = importlib.metadata.requires("model_explorer") or []
    base = {re.split(r"[<>=!~;\[ ]", r)[0].replace("-", "_") for r in required if "extra" not in r}
    for package, extra in EXTRAS.items():
        if extra not in named and package not in base:
            monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError


@pytest.mark.parametrize("page", pages("python"))
def test_a_pages_python_runs_as_pasted_in_an_empty_folder(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's blocks, one after the other, in a folder holding nothing, after the install
    the page names: a name a block uses that neither it nor an earlier block of the page
    defines, or a package of an extra the page does not name, fails here."""
    _installed_without_extras(NAMED_EXTRAS.get(page, set()), monkeypatch)
    code = [(f"{page}, Python block {i + 1}", c) for i, c in enumerate(blocks(page, "python"))]
    run_as_pasted(code, tmp_path)


def test_the_readmes_python_runs_as_pasted_in_an_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's block defines its own model and data (no file of the project's), searches
    and exports the front's cheapest member, in a folder holding nothing, after `make run`'s
    install (no extra)."""
    _installed_without_extras(set(), monkeypatch)
    text = (REPOSITORY / "README.md").read_text()
    (code,) = [m["code"] for m in FENCE.finditer(text) if m["language"] == "python"]
    run_as_pasted([("README.md's Python block", code)], tmp_path)
    assert (tmp_path / "cheapest.onnx").stat().st_size > 1000


def _under_workload(fragment: dict[str, Any]) -> dict[str, Any]:
    return fragment["workload"] if set(fragment) == {"workload"} else fragment


@pytest.mark.parametrize("page", pages("yaml"))
def test_a_pages_yaml_is_a_valid_workload_part(page: str) -> None:
    """Each YAML block, put into the default workload, validates; one whose comment says it
    lists the defaults gives the section the model's own defaults."""
    from model_explorer.api.search import _merged  # a section's keys merged one by one
    from model_explorer.workload.file import Workload

    base = yaml.safe_load(DEFAULT_WORKLOAD.read_text())
    for index, code in enumerate(blocks(page, "yaml")):
        fragment = _under_workload(yaml.safe_load(code))
        data = {"workload": _merged(base["workload"], fragment)}
        where = f"{page}, YAML block {index + 1}"
        workload = Workload.from_dict(data, source=DEFAULT_WORKLOAD, check_paths=False)
        if re.search(r"#.*\bdefaults\b", code.splitlines()[0]):
            for section in fragment:
                written = getattr(workload, section).model_dump()
                default = type(getattr(workload, section))().model_dump()
                assert written == default, f"{where}: {section} is not the defaults"


def command_lines() -> list[tuple[str, str]]:
    """(page, command) of every `model-explorer` line in the pages' code blocks, continuation
    lines joined and comments cut."""
    import shlex

    found = []
    for page in sorted(p.name for p in DOCS.glob("*.md")):
        for match in FENCE.finditer((DOCS / page).read_text()):
            code = match["code"].replace("\\\n", " ")
            for line in code.splitlines():
                if line.strip().startswith("model-explorer "):
                    command = re.sub(r"\s#.*$", "", line)  # a comment, not `RESULTS#ID`
                    found.append((page, shlex.join(shlex.split(command))))
    return found


@pytest.mark.parametrize(("page", "command"), command_lines())
def test_a_pages_commands_are_what_the_cli_takes(page: str, command: str) -> None:
    """Each command a page shows is accepted by the command-line parser as written (an
    option renamed or removed fails here); running them is the walkthrough's and `make`'s."""
    import shlex

    from model_explorer.cli import build_parser

    parser = build_parser()
    try:
        parser.parse_args(shlex.split(command)[1:])
    except SystemExit as error:
        raise AssertionError(f"{page}: `{command}` is refused by the parser") from error
