"""Broken data and models, by class: files that are not arrays, data the model cannot take,
labels outside its classes, NaN inputs, factories that raise. Each ends in one `error:` line
naming the dataset key (or the model key) with exit status 2, before any search, and leaves
the files already there as they were."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from bad_input_support import run_cli, write

EXPLORATION = "workload.exploration.datasets.exploration"


def _npz(folder: Path, inputs, labels) -> Path:  # noqa: ANN001
    np.savez(folder / "data.npz", inputs=inputs, labels=labels)
    return folder / "data.npz"


def _images(count: int = 20, shape=(1, 8, 8)) -> np.ndarray:  # noqa: ANN001
    return np.random.default_rng(0).random((count, *shape), dtype=np.float32)


def _labels(count: int = 20) -> np.ndarray:
    return np.arange(count) % 10


def _truncated(folder: Path) -> Path:
    whole = _npz(folder, _images(), _labels())
    data = whole.read_bytes()
    whole.write_bytes(data[: len(data) // 2])
    return whole


def _text(folder: Path, name: str) -> Path:
    (folder / name).write_text("inputs,labels\n0.5,1\n")
    return folder / name


def _with_nan(count: int) -> np.ndarray:
    images = _images()
    images[:count, 0, 3, 3] = np.nan
    return images


BROKEN_FILES = {
    "no samples": (
        lambda f: _npz(f, np.zeros((0, 1, 8, 8), np.float32), np.zeros(0, np.int64)),
        ".path: ",
        "holds 0 samples",
    ),
    "a text file named .npz": (lambda f: _text(f, "data.npz"), ".path: ", "not a readable .npz"),
    "a truncated archive": (_truncated, ".path: ", "not a readable .npz"),
    "a text file named .h5": (lambda f: _text(f, "data.h5"), ".path: ", "not a readable .h5"),
    "object arrays": (
        lambda f: _npz(f, np.array([{"x": 1}] * 20, dtype=object), _labels()),
        ".path: ",
        "array 'inputs' of",
    ),
    "labels as strings": (
        lambda f: _npz(f, _images(), np.array(["cat"] * 20)),
        ".path: ",
        "the labels of",
    ),
    "flattened inputs to a CNN": (
        lambda f: _npz(f, _images().reshape(20, 64), _labels()),
        ": ",
        "one sample has shape [64]; model 'digits_cnn' takes samples of shape [1, 8, 8]",
    ),
    "three channels to a one-channel model": (
        lambda f: _npz(f, _images(shape=(3, 8, 8)), _labels()),
        ": ",
        "one sample has shape [3, 8, 8]; model 'digits_cnn' takes samples of shape [1, 8, 8]",
    ),
    "channels last": (
        lambda f: _npz(f, _images(shape=(8, 8, 1)), _labels()),
        ": ",
        "one sample has shape [8, 8, 1]; model 'digits_cnn' takes samples of shape [1, 8, 8]",
    ),
    "labels beyond the model's classes": (
        lambda f: _npz(f, _images(), np.full(20, 12)),
        ": ",
        "labels go up to 12 but the model has 10 outputs",
    ),
    "negative labels": (
        lambda f: _npz(f, _images(), np.r_[np.full(5, -1), np.zeros(15, np.int64)]),
        ": ",
        "5 labels are negative (e.g. -1)",
    ),
    "fractional labels": (
        lambda f: _npz(f, _images(), np.full(20, 1.5)),
        ": ",
        "20 labels are not whole class numbers (e.g. 1.5)",
    ),
    "nan labels": (
        lambda f: _npz(f, _images(), np.r_[np.full(2, np.nan), np.zeros(18)]),
        ": ",
        "2 labels are not whole class numbers",
    ),
    "nan in three samples": (
        lambda f: _npz(f, _with_nan(3), _labels()),
        ": ",
        "3 of 20 samples hold NaN or infinity in their inputs",
    ),
    "infinity in every sample": (
        lambda f: _npz(f, np.full((20, 1, 8, 8), np.inf, np.float32), _labels()),
        ": ",
        "20 of 20 samples hold NaN or infinity",
    ),
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("case", BROKEN_FILES, ids=list(BROKEN_FILES))
def test_broken_data_ends_in_one_line_naming_the_dataset(case, tiny, tmp_path, capsys) -> None:
    make, after_key, words = BROKEN_FILES[case]
    path = make(tmp_path)
    tiny["workload"]["exploration"]["datasets"]["exploration"] = {
        "type": "arrays",
        "path": str(path),
        "batch_size": 8,
    }
    workload = write(tiny, tmp_path / "w.yaml")
    (tmp_path / "earlier.pkl").write_bytes(b"a result of an earlier run")
    before = _snapshot(tmp_path)
    run_cli(capsys, "evaluate", workload).one_error(f"error: {EXPLORATION}{after_key}", words)
    output = tmp_path / "r.pkl"
    run_cli(capsys, "explore", workload, "--output", output).one_error(EXPLORATION, words)
    assert _snapshot(tmp_path) == before


def test_a_model_with_fewer_outputs_than_the_classes_is_refused(tiny, tmp_path, capsys) -> None:
    tiny["workload"]["model"]["num_classes"] = 5
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "evaluate", workload).one_error(
        f"error: {EXPLORATION}: labels go up to 9 but the model has 5 outputs (classes 0 to 4)"
    )


def test_training_data_is_checked_before_training(tiny, tmp_path, capsys) -> None:
    data = _npz(tmp_path, _images(), np.full(20, 11))
    tiny["workload"]["model"]["weights"] = str(tmp_path / "trained.pt")
    tiny["workload"]["retraining"] = {
        "epochs": 1,
        "datasets": {"train": {"type": "arrays", "path": str(data), "batch_size": 8}},
    }
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "retrain", workload, "--baseline", "--no-progress").one_error(
        "error: workload.retraining.datasets.train: labels go up to 11"
    )
    assert not (tmp_path / "trained.pt").exists()


def test_segmentation_labels_may_hold_the_ignore_index(tiny, tmp_path, capsys) -> None:
    """255 is the segmentation metrics' `ignore_index`: legal in labels, so no error; other
    values beyond the classes still are one."""
    import torch

    from model_explorer.datasets.checks import check_labels
    from model_explorer.errors import UserError

    scores = torch.zeros(2, 4, 3, 3)
    maps = torch.tensor([[[0, 1, 255]] * 3, [[3, 2, 255]] * 3])
    check_labels([scores], maps, "labels", ignore_index=255)
    with pytest.raises(UserError, match="labels go up to 255 but the model has 4 outputs"):
        check_labels([scores], maps, "labels", ignore_index=None)


FACTORIES = {
    "raises RuntimeError": (
        "raise RuntimeError('planted: no such layer')",
        "RuntimeError: planted",
    ),
    "raises ValueError": ("raise ValueError('planted width')", "ValueError: planted width"),
    "fails an import": ("import no_such_package_here", "ModuleNotFoundError: No module named"),
    "raises without a message": ("raise KeyError()", "raised KeyError; fix the factory"),
}


@pytest.mark.parametrize("case", FACTORIES, ids=list(FACTORIES))
def test_a_model_factory_that_raises_is_named(case, tiny, tmp_path, capsys, monkeypatch) -> None:
    body, words = FACTORIES[case]
    module = f"planted_factory_{abs(hash(case))}"
    (tmp_path / f"{module}.py").write_text(f"def build(num_classes=10):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    tiny["workload"]["model"]["type"] = f"{module}:build"
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "evaluate", workload).one_error(
        f"error: workload.model.type: the model factory of '{module}:build' raised", words
    )


def test_a_truncated_archive_is_really_broken(tmp_path) -> None:
    """The planted fault of the truncated case is what it claims to be: numpy's own reader
    fails on it."""
    with pytest.raises((zipfile.BadZipFile, ValueError, OSError, EOFError)):
        np.load(_truncated(tmp_path))["inputs"]
