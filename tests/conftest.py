"""Shared fixtures: the default workload as data, a digits checkpoint trained once per session."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

# The fixtures of the broken-input tests (a tiny workload and its calibration).
pytest_plugins = ["bad_input_support"]

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = REPOSITORY / "workloads" / "digits_cnn.yaml"


@pytest.fixture
def default_workload_data() -> dict:
    """The default workload file, parsed (a fresh copy per test, free to mutate)."""
    return copy.deepcopy(yaml.safe_load(DEFAULT_WORKLOAD.read_text()))


def write_workload(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(workload file, checkpoint) for the default workload, trained once into a temp folder."""
    from model_explorer.context import WorkloadContext
    from model_explorer.retraining import train_baseline
    from model_explorer.workload import Workload

    folder = tmp_path_factory.mktemp("digits")
    data = yaml.safe_load(DEFAULT_WORKLOAD.read_text())
    data["workload"]["model"]["weights"] = str(folder / "baseline.pt")
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    workload_file = write_workload(data, folder / "digits_cnn.yaml")
    train_baseline(WorkloadContext(Workload.load(workload_file), device="cpu"), progress=False)
    return workload_file, folder / "baseline.pt"
