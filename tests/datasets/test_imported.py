"""Datasets of the user's own code (`type: package.module:builder`): the way to bring a dataset
the original tool had as its own module. The builder below is the test's own: it reads the
digits with scikit-learn directly, so the samples it gives are checked against the built-in
`digits` type, and the same model must score the same on both."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from model_explorer.cli import main
from model_explorer.datasets import DatasetSpec, build_dataset, build_loader
from model_explorer.errors import UserError

BUILDER = '''
import numpy as np
import torch
from sklearn.datasets import load_digits

from model_explorer.datasets.digits import digits_split_indices


def digits_pairs(path, split="test", scale=1.0):
    """The digits of one split as (image, label) pairs, standardised as the built-in type does
    (the train split's mean and std); `path` is a file whose first line must read 'digits'."""
    assert open(path).read().startswith("digits")
    data = load_digits()
    splits = digits_split_indices(0)
    images = data.images.astype(np.float32)
    train = images[splits["train"]]
    mean, std = train.mean(), train.std()
    chosen = splits[split]
    return [
        (torch.from_numpy((images[i] - mean) / std * scale).unsqueeze(0), int(data.target[i]))
        for i in chosen
    ]


def broken(path):
    raise FileNotFoundError("no annotations next to " + path)


def not_a_dataset(path):
    return 42
'''


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of the user's in the working directory, as research code usually sits."""
    (tmp_path / "my_datasets.py").write_text(textwrap.dedent(BUILDER))
    (tmp_path / "marker.txt").write_text("digits\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_datasets", None)


def imported(**fields) -> DatasetSpec:
    return DatasetSpec.model_validate(
        {"type": "my_datasets:digits_pairs", "path": "marker.txt", **fields}
    )


def test_a_builder_of_the_users_gives_the_builtin_digits_samples(user_code: Path) -> None:
    ours = build_loader(imported(split="validation", batch_size=50), seed=0)
    builtin = build_loader(
        DatasetSpec.model_validate({"type": "digits", "split": "validation", "batch_size": 50}),
        seed=0,
    )
    pairs = list(zip(ours, builtin, strict=True))
    assert len(pairs) == 8  # 360 samples in batches of 50
    for (x, y), (bx, by) in pairs:
        assert torch.equal(y, by)
        assert torch.allclose(x, bx, atol=1e-5)


def test_common_keys_apply_to_an_imported_dataset(user_code: Path) -> None:
    whole = build_dataset(imported(), seed=0)
    limited = build_dataset(imported(sample_limit=40, randomize=True), seed=3)
    assert len(whole) == 360 and len(limited) == 40
    labels = [int(y) for _, y in limited]
    again = [int(y) for _, y in build_dataset(imported(sample_limit=40, randomize=True), seed=3)]
    assert labels == again  # seeded like every other dataset
    assert sorted(labels) != labels  # randomized


def test_the_same_model_scores_the_same_on_both(user_code: Path, trained_digits, capsys) -> None:
    workload_file, _ = trained_digits
    data = yaml.safe_load(Path(workload_file).read_text())
    datasets = data["workload"]["exploration"]["datasets"]
    scores = {}
    for name, dataset in {
        "builtin": {"type": "digits", "split": "test", "batch_size": 90},
        "imported": {
            "type": "my_datasets:digits_pairs",
            "path": "marker.txt",
            "split": "test",  # beside the common keys: a keyword argument of the builder
            "batch_size": 90,
        },
    }.items():
        datasets["baseline"] = dataset
        path = user_code / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        assert main(["validate", str(path)]) == 0
        capsys.readouterr()
        assert main(["evaluate", "--json", "--no-progress", str(path)]) == 0
        out = capsys.readouterr().out
        (row,) = json.loads(out[out.index("[") :])
        assert row["type"] == dataset["type"]
        scores[name] = (row["samples"], row["accuracy"])
    assert scores["imported"] == scores["builtin"]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            {"colour": "red"},
            "baseline: dataset builder 'my_datasets:digits_pairs' does not accept these arguments",
        ),
        (
            {"type": "my_datasets:broken"},
            "baseline.type: dataset builder 'my_datasets:broken' raised FileNotFoundError",
        ),
        (
            {"type": "my_datasets:not_a_dataset"},
            "returned a int, not a dataset of (input, target) pairs",
        ),
        ({"type": "my_datasets:missing"}, "module 'my_datasets' has no attribute 'missing'"),
        ({"type": "no_such_module:builder"}, "cannot import 'no_such_module'"),
    ],
)
def test_a_broken_builder_is_one_sentence_naming_the_key(user_code: Path, fields, says) -> None:
    with pytest.raises(UserError) as caught:
        build_dataset(imported(**fields), seed=0, where="workload.exploration.datasets.baseline")
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_common_keys_of_an_imported_dataset_are_checked_by_the_schema(user_code) -> None:  # noqa: ANN001
    with pytest.raises(Exception, match="does not exist"):
        imported(path="no_such_file.txt")
    with pytest.raises(Exception, match="batch_size"):
        imported(batch_size=0)


def test_a_dataset_type_of_the_original_tool_says_how_to_bring_it() -> None:
    with pytest.raises(Exception) as caught:
        DatasetSpec.model_validate({"type": "cityscapes", "path": "x"})
    text = str(caught.value)
    assert "cityscapes" in text and "package.module:builder" in text
    assert np.char.count(text, "a module of the original tool") == 1


def test_a_dataset_of_the_original_layout_needs_only_its_type_changed(
    user_code: Path, trained_digits, caplog
) -> None:
    """The original's dataset sections carry `kind: null`, `split: val` and `total_samples`;
    with `type` naming the user's builder, `split` reaches the builder and the others are
    ignored as the original ignored them for every type but ImageNet."""
    workload_file, _ = trained_digits
    data = yaml.safe_load(Path(workload_file).read_text())
    data["workload"]["exploration"]["datasets"]["baseline"] = {
        "type": "my_datasets:digits_pairs",
        "kind": None,
        "path": "marker.txt",
        "sample_limit": None,
        "batch_size": 8,
        "randomize": True,
        "split": "validation",
        "total_samples": 1281167,
    }
    path = user_code / "original.yaml"
    path.write_text(yaml.safe_dump(data))
    with caplog.at_level("INFO"):
        assert main(["validate", str(path)]) == 0
    ignored = " ".join(r.getMessage() for r in caplog.records)
    assert "baseline.kind" in ignored and "baseline.total_samples" in ignored
    assert main(["evaluate", "--no-progress", str(path)]) == 0
