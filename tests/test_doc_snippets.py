"""Every code block of the documentation's pages runs as a reader would run it: a page's Python
blocks in order in one namespace (a later block uses what an earlier one made), in a project
folder holding what the page names (the default workload with its trained weights, a search's
result file, an energy table), beside the objects the page says are the reader's own (`model`,
`x`) where the page does not make them. The README's block and docs/python-api.md's first
section make their own model and data and run from an empty folder. A page's YAML blocks are
validated as part of the default workload, and a block that says it lists the defaults is
checked against the settings model's own defaults.
docs/own-model.md is run by tests/test_walkthrough.py, commands in `sh` blocks by `make`."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
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


def _digits_model(workload_file: Path) -> Any:
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    return WorkloadContext(Workload.load(workload_file), device="cpu").build_model()


def _loaders(batch_size: int = 64) -> tuple[Any, Any]:
    from torch.utils.data import DataLoader

    from model_explorer.datasets import DatasetSpec, build_dataset

    def loader(split: str, limit: int) -> DataLoader:
        spec = DatasetSpec.model_validate({"type": "digits", "split": split})
        dataset = build_dataset(spec, 0)
        indices = list(range(min(limit, len(dataset))))
        return DataLoader([dataset[i] for i in indices], batch_size=batch_size)

    return loader("validation", 192), loader("train", 256), loader("test", 192)


def _resnet18() -> dict[str, Any]:
    import torchvision

    return {"model": torchvision.models.resnet18(num_classes=10)}


def _measure_ns(layer: Any) -> float:
    return float(sum(p.numel() for p in layer.parameters()))


# The reader's own objects each page's blocks use, by page (the workload file given).
READERS_OWN: dict[str, Callable[[Path], dict[str, Any]]] = {
    "cost.md": lambda workload: _resnet18(),
    "exploration.md": lambda workload: {"measure_ns": _measure_ns},
    "quantization.md": lambda workload: {
        "model": _digits_model(workload),
        "batches": [inputs for inputs, _ in _loaders()[1]],
    },
    "sparsity.md": lambda workload: {
        "model": _digits_model(workload),
        "x": next(iter(_loaders()[0]))[0],
    },
}


# Files a page's own blocks write (a search's output), so not there before it runs.
MADE_BY_THE_PAGE = {"python-api.md": ["results/my_search.pkl"]}


@pytest.fixture(scope="module")
def project(searched, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    """A reader's project folder: workloads/digits_cnn.yaml (trained weights), a search's
    result under the names the pages use, and the energy table of energy-analysis."""
    from model_explorer.operations.energy import analyze_energy, write_energy_csv
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    folder = tmp_path_factory.mktemp("reader")
    workload_file, result = searched
    (folder / "workloads").mkdir()
    (folder / "results").mkdir()
    shutil.copyfile(workload_file, folder / "workloads" / "digits_cnn.yaml")
    for name in ("my_search.pkl", "seed0.pkl", "seed1.pkl", "digits_cnn_search.pkl"):
        shutil.copyfile(result, folder / "results" / name)
    context = WorkloadContext(Workload.load(workload_file), device="cpu")
    write_energy_csv(analyze_energy(context), folder / "results" / "digits_cnn_dram_accesses.csv")
    return folder


@pytest.mark.parametrize("page", pages("python"))
def test_a_pages_python_runs(page: str, project: Path, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    from model_explorer.problems.objectives import OBJECTIVES

    folder = tmp_path / "project"
    shutil.copytree(project, folder)
    for name in MADE_BY_THE_PAGE.get(page, []):
        (folder / name).unlink()
    monkeypatch.chdir(folder)
    namespace: dict[str, Any] = READERS_OWN.get(page, lambda workload: {})(
        folder / "workloads" / "digits_cnn.yaml"
    )
    registered = set(OBJECTIVES.names())
    try:
        for index, code in enumerate(blocks(page, "python")):
            try:
                exec(compile(code, f"{page} block {index + 1}", "exec"), namespace)
            except Exception as error:
                where = f"{page}, Python block {index + 1}"
                raise AssertionError(f"{where} fails: {error!r}") from error
    finally:
        for name in set(OBJECTIVES.names()) - registered:  # the page's own registrations
            OBJECTIVES._entries.pop(name)
        pyplot.close("all")


def test_the_readmes_python_runs_as_pasted_in_an_empty_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's block defines its own model and data (no file of the project's), searches
    and exports the front's cheapest member, in a folder holding nothing."""
    text = (REPOSITORY / "README.md").read_text()
    (code,) = [m["code"] for m in FENCE.finditer(text) if m["language"] == "python"]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md's Python block", "exec"), {})
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
