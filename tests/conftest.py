"""Shared fixtures: the default workload as data, the digits model with shipped trained weights."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest
import yaml

# The fixtures of the broken-input tests (a tiny workload and its calibration).
pytest_plugins = ["bad_input_support"]

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = REPOSITORY / "workloads" / "digits_cnn.yaml"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker takes its share of the cores for torch's threads (and
    for the processes a test starts): workers that each ran as many threads as there are cores
    would spin against one another."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
        import torch

        torch.set_num_threads(int(threads))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked slow first (in their order), the others after: pytest-xdist hands
    tests out in this order, so no worker starts a long test while the others run out. With
    the C kernels off (MODEL_EXPLORER_COMPILE=0: `make test`'s second lane, every machine
    without a compiler) the tests of the kernels themselves are skipped; the rest must give
    the same values on the torch path."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if os.environ.get("MODEL_EXPLORER_COMPILE", "1") == "0":
        off = pytest.mark.skip(reason="the C kernels are off (MODEL_EXPLORER_COMPILE=0)")
        for item in items:
            if item.get_closest_marker("kernels") is not None:
                item.add_marker(off)


@pytest.fixture
def default_workload_data() -> dict:
    """The default workload file, parsed (a fresh copy per test, free to mutate)."""
    return copy.deepcopy(yaml.safe_load(DEFAULT_WORKLOAD.read_text()))


def write_workload(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# The default workload's float model, trained once by `train_digits` (15 epochs of the shipped
# retraining section on this repository's digits split) and kept, so that the tests that start
# from a trained model do not depend on a training run: a short training lands elsewhere on
# another processor (other kernels round the gradients' sums otherwise), and everything
# measured on the model would move with it. Training itself is tested on its own
# (tests/test_training.py). Write it again, only when digits_cnn or its data change, with
# `python tests/conftest.py`.
DIGITS_CHECKPOINT = REPOSITORY / "tests" / "data" / "digits_cnn_baseline.pt"


def digits_workload(folder: Path, checkpoint: Path) -> Path:
    """The default workload in `folder`, its weights `checkpoint`, its calibration file there."""
    data = yaml.safe_load(DEFAULT_WORKLOAD.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    return write_workload(data, folder / "digits_cnn.yaml")


def train_digits(folder: Path) -> tuple[Path, Path]:
    """(workload file, checkpoint): the default workload's baseline trained into `folder`."""
    from model_explorer.operations.retraining import train_baseline
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    workload_file = digits_workload(folder, folder / "baseline.pt")
    train_baseline(WorkloadContext(Workload.load(workload_file), device="cpu"), progress=False)
    return workload_file, folder / "baseline.pt"


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(workload file, checkpoint) for the default workload with the shipped trained weights,
    copied into a temp folder (a test may write beside them)."""
    folder = tmp_path_factory.mktemp("digits")
    checkpoint = folder / "baseline.pt"
    shutil.copyfile(DIGITS_CHECKPOINT, checkpoint)
    return digits_workload(folder, checkpoint), checkpoint


@pytest.fixture(scope="session")
def searched(trained_digits: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """(workload file, result file) of the default workload's shipped search, run once for the
    deployment tests."""
    from model_explorer.cli import main

    folder = tmp_path_factory.mktemp("deployment")
    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    workload = write_workload(data, folder / "digits_cnn.yaml")
    assert main(["calibrate", str(workload)]) == 0
    result = folder / "result.pkl"
    assert main(["explore", str(workload), "--output", str(result)]) == 0
    return workload, result


# resnet20_digits's float model trained for three epochs by `train_resnet20` and kept, for the
# same reason as the digits one (and to spare the suite the training). Written again by
# `python tests/conftest.py` with the digits one.
RESNET20_CHECKPOINT = REPOSITORY / "tests" / "data" / "resnet20_digits_baseline.pt"


def resnet20_workload(folder: Path, checkpoint: Path) -> Path:
    """resnet20_digits (residual additions) in `folder`, its weights `checkpoint`, with a
    shorter training and search than shipped, to keep the suite fast: three epochs, a random
    start (the sensitivity start's two tables of 44 quantizers would take three times the
    search)."""
    data = yaml.safe_load((REPOSITORY / "workloads" / "resnet20_digits.yaml").read_text())
    body = data["workload"]
    body["model"]["weights"] = str(checkpoint)
    body["calibration"]["file"] = str(folder / "calibration.pt")
    body["retraining"]["epochs"] = 3
    body["exploration"]["nsga"].update(pop_size=8, offsprings=8, generations=4)
    body["exploration"]["initialization"] = "random"
    return write_workload(data, folder / "resnet20.yaml")


def train_resnet20(folder: Path) -> Path:
    """The checkpoint of resnet20_workload's three epochs, trained into `folder`."""
    import torch

    from model_explorer.cli import main

    torch.manual_seed(0)
    assert main(["retrain", "--baseline", str(resnet20_workload(folder, folder / "r.pt"))]) == 0
    return folder / "r.pt"


@pytest.fixture(scope="session")
def resnet20_searched(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """(workload file, result file) of resnet20_workload, the kept weights calibrated and
    searched once."""
    from model_explorer.cli import main

    folder = tmp_path_factory.mktemp("resnet20")
    checkpoint = folder / "baseline.pt"
    shutil.copyfile(RESNET20_CHECKPOINT, checkpoint)
    workload = str(resnet20_workload(folder, checkpoint))
    assert main(["calibrate", workload]) == 0
    result = folder / "result.pkl"
    assert main(["explore", workload, "--output", str(result)]) == 0
    return Path(workload), result


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        _, trained = train_digits(Path(name))
        shutil.copyfile(trained, DIGITS_CHECKPOINT)
        shutil.copyfile(train_resnet20(Path(name)), RESNET20_CHECKPOINT)
    print(f"wrote {DIGITS_CHECKPOINT} and {RESNET20_CHECKPOINT}")
