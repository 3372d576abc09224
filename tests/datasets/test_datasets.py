"""Dataset builders on small data the tests make, seeded subsets, and the tensor cache."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from model_explorer.datasets import (
    DATASETS,
    DatasetSpec,
    TensorCache,
    build_dataset,
    build_loader,
    select_indices,
)
from model_explorer.datasets.digits import digits_split_indices
from model_explorer.errors import UserError


def spec(**fields) -> DatasetSpec:
    return DatasetSpec.model_validate(fields)


def test_registry_lists_the_builtin_datasets() -> None:
    assert DATASETS.names() == [
        "arrays",
        "cifar10",
        "digits",
        "imagefolder",
        "imagenet",
        "imagenet_c",
        "photos",
        "sentences",
    ]


def test_digits_splits_partition_the_data_by_class() -> None:
    labels = load_digits().target
    splits = digits_split_indices(0)
    parts = [splits[name] for name in ("train", "validation", "test")]
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(len(labels)))  # disjoint and complete
    assert [len(p) for p in parts] == [1077, 360, 360]
    for part in parts:  # stratified: every class in every split, in proportion
        share = np.bincount(labels[part], minlength=10) / len(part)
        assert np.abs(share - np.bincount(labels) / len(labels)).max() < 0.01
    assert not np.array_equal(digits_split_indices(1)["test"], splits["test"])


def test_digits_values_shapes_and_labels() -> None:
    data = load_digits()
    test = build_dataset(spec(type="digits", split="test"), seed=0)
    x, y = test[0]
    index = digits_split_indices(0)["test"][0]
    assert x.shape == (1, 8, 8) and int(y) == data.target[index]
    # Standardised with the train split's statistics: undoing it gives the raw pixels back.
    train_pixels = data.images[digits_split_indices(0)["train"]] / 16.0
    restored = x[0].numpy() * train_pixels.std(ddof=1) + train_pixels.mean()
    np.testing.assert_allclose(restored, data.images[index] / 16.0, atol=1e-5)
    big = build_dataset(spec(type="digits", split="validation", resize=32, channels=3), seed=0)
    assert big[0][0].shape == (3, 32, 32)
    assert torch.equal(big[0][0][0], big[0][0][2])


def test_seeded_subsets_are_identical_across_calls() -> None:
    first = select_indices(1000, 100, randomize=True, seed=7)
    assert np.array_equal(first, select_indices(1000, 100, randomize=True, seed=7))
    assert not np.array_equal(first, select_indices(1000, 100, randomize=True, seed=8))
    ordered = select_indices(1000, 100, randomize=False, seed=7)
    assert np.all(np.diff(ordered) > 0)  # kept in dataset order
    assert sorted(first.tolist()) == ordered.tolist()  # randomize only reorders the same subset
    assert select_indices(50, 100, randomize=False, seed=0).tolist() == list(range(50))
    a = build_dataset(spec(type="digits", split="all", sample_limit=64, randomize=True), seed=3)
    b = build_dataset(spec(type="digits", split="all", sample_limit=64, randomize=True), seed=3)
    assert len(a) == 64
    assert all(torch.equal(a[i][0], b[i][0]) for i in range(64))


def test_evaluation_loader_order_does_not_change_between_epochs() -> None:
    loader = build_loader(
        spec(type="digits", sample_limit=100, randomize=True, batch_size=32), seed=1
    )
    first = torch.cat([y for _, y in loader])
    assert torch.equal(first, torch.cat([y for _, y in loader]))
    training = build_loader(
        spec(type="digits", sample_limit=100, batch_size=32), seed=1, shuffle=True
    )
    epochs = [torch.cat([y for _, y in training]) for _ in range(2)]
    assert not torch.equal(epochs[0], epochs[1])
    again = build_loader(spec(type="digits", sample_limit=100, batch_size=32), seed=1, shuffle=True)
    assert torch.equal(torch.cat([y for _, y in again]), epochs[0])  # shuffling is seeded


def test_tensor_cache_returns_the_loaders_batches() -> None:
    dataset_spec = spec(type="digits", split="all", sample_limit=300, randomize=True, batch_size=64)
    loader = build_loader(dataset_spec, seed=5)
    cache = TensorCache.from_spec(dataset_spec, seed=5)
    assert len(cache) == len(loader) == 5 and cache.num_samples == 300
    for (x_loader, y_loader), (x_cache, y_cache) in zip(loader, cache, strict=True):
        assert torch.equal(x_loader, x_cache)
        assert torch.equal(y_loader, y_cache)
    # Iterating twice gives the same batches, as views of one tensor (no copies, no decoding).
    batches = list(cache)
    assert all(b[0].data_ptr() == a[0].data_ptr() for a, b in zip(batches, cache, strict=True))


def test_tensor_cache_keeps_tuple_targets() -> None:
    batches = [(torch.full((4, 2), i), (torch.arange(4) + i, torch.ones(4) * i)) for i in range(3)]
    cache = TensorCache.from_batches(batches)
    for (x, (a, b)), (cx, (ca, cb)) in zip(batches, cache, strict=True):
        assert torch.equal(x, cx) and torch.equal(a, ca) and torch.equal(b, cb)


@pytest.fixture
def arrays_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 3, 4, 4)).astype(np.float64), rng.integers(0, 5, size=20)


def test_arrays_from_npz_h5_and_npy(tmp_path: Path, arrays_data) -> None:
    inputs, labels = arrays_data
    np.savez(tmp_path / "data.npz", images=inputs, classes=labels)
    with h5py.File(tmp_path / "data.h5", "w") as file:
        file["inputs"] = inputs
        file["labels"] = labels
    np.save(tmp_path / "x.npy", inputs)
    np.save(tmp_path / "y.npy", labels)
    specs = [
        spec(
            type="arrays",
            path=str(tmp_path / "data.npz"),
            inputs_key="images",
            labels_key="classes",
        ),
        spec(type="arrays", path=str(tmp_path / "data.h5")),
        spec(type="arrays", path=str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y.npy")),
    ]
    for dataset_spec in specs:
        dataset = build_dataset(dataset_spec, seed=0)
        x, y = dataset[3]
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        np.testing.assert_allclose(x.numpy(), inputs[3], rtol=1e-6)
        assert int(y) == labels[3]


def test_arrays_errors_name_the_key(tmp_path: Path, arrays_data) -> None:
    inputs, labels = arrays_data
    np.savez(tmp_path / "data.npz", inputs=inputs, labels=labels[:-1])
    np.savez(tmp_path / "other.npz", x=inputs)
    with pytest.raises(UserError, match="20 inputs but 19 labels"):
        build_dataset(spec(type="arrays", path=str(tmp_path / "data.npz")), 0, "workload.d")
    with pytest.raises(
        UserError, match=r"workload.d.inputs_key: .* has no array named 'inputs'; it holds \['x'\]"
    ):
        build_dataset(spec(type="arrays", path=str(tmp_path / "other.npz")), 0, "workload.d")
    np.save(tmp_path / "x.npy", inputs)
    with pytest.raises(UserError, match="workload.d.labels_path"):
        build_dataset(spec(type="arrays", path=str(tmp_path / "x.npy")), 0, "workload.d")
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(UserError, match="is not one of .npz"):
        build_dataset(spec(type="arrays", path=str(tmp_path / "data.csv")), 0, "workload.d")


def test_imagefolder_of_generated_pngs(tmp_path: Path) -> None:
    # Two classes of flat-coloured images; the class is the folder name in sorted order.
    colours = {"cat": (200, 10, 10), "dog": (10, 10, 200)}
    for name, colour in colours.items():
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.new("RGB", (20, 12), colour).save(tmp_path / name / f"{i}.png")
    dataset = build_dataset(
        spec(
            type="imagefolder", path=str(tmp_path), resize=10, crop=8, mean=[0, 0, 0], std=[1, 1, 1]
        ),
        seed=0,
    )
    assert len(dataset) == 6
    x, y = dataset[4]
    assert x.shape == (3, 8, 8) and y == 1
    np.testing.assert_allclose(x[:, 0, 0].numpy(), np.array(colours["dog"]) / 255, atol=1e-6)
    normalised = build_dataset(spec(type="imagefolder", path=str(tmp_path), crop=8), seed=0)[0][0]
    expected = (np.array(colours["cat"]) / 255 - np.array([0.485, 0.456, 0.406])) / np.array(
        [0.229, 0.224, 0.225]
    )
    np.testing.assert_allclose(normalised[:, 4, 4].numpy(), expected, atol=1e-5)


def test_grey_imagefolder_takes_one_channel_statistic(tmp_path: Path) -> None:
    """grayscale with the default statistics normalises by ImageNet's averaged mean and std
    (torchvision's Normalize refuses three values for one channel); three values given by hand
    are one error naming the key."""
    (tmp_path / "a").mkdir()
    Image.new("RGB", (8, 8), (51, 102, 153)).save(tmp_path / "a" / "0.png")
    x = build_dataset(spec(type="imagefolder", path=str(tmp_path), grayscale=True, crop=4), 0)[0][0]
    grey = (0.299 * 51 + 0.587 * 102 + 0.114 * 153) / 255  # ITU-R 601-2 luma, PIL's "L"
    mean, std = np.mean([0.485, 0.456, 0.406]), np.mean([0.229, 0.224, 0.225])
    assert x.shape == (1, 4, 4)
    np.testing.assert_allclose(x[0, 0, 0].item(), (grey - mean) / std, atol=2e-2)
    with pytest.raises(ValueError, match="one value per channel of the grey images"):
        spec(type="imagefolder", path=str(tmp_path), grayscale=True, mean=[0.5, 0.5, 0.5])


def test_missing_data_is_a_clear_error_not_a_download(tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match="workload.d.path: no CIFAR-10 data under .*extract cifar-10-python.tar.gz"
    ):
        build_dataset(spec(type="cifar10", path=str(tmp_path)), 0, "workload.d")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="is not an image folder"):
        build_dataset(spec(type="imagefolder", path=str(tmp_path)), 0, "workload.d")


def test_sentences_come_from_pythons_documentation_split_without_overlap(  # noqa: ANN001
    tmp_path, monkeypatch
) -> None:
    from model_explorer.datasets.text import _split, python_docs_sentences

    texts = python_docs_sentences()
    assert len(texts) > 1000 and all(5 <= len(t.split()) <= 40 for t in texts)
    parts = {split: set(_split(texts, split, 0)) for split in ("train", "validation", "test")}
    assert sum(len(p) for p in parts.values()) == len(set(texts))
    assert not (parts["train"] & parts["validation"]) and not (parts["train"] & parts["test"])
    assert len(parts["train"]) == int(0.6 * len(texts))
    from model_explorer.datasets.text import sentences
    from model_explorer.errors import UserError

    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    spec = DatasetSpec.model_validate({"type": "sentences", "path": str(empty)})
    with pytest.raises(UserError, match="holds no text"):
        sentences(spec, "workload.exploration.datasets.exploration")
    # a relative path starts from the workload's root, wherever the command runs
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = {"type": "sentences", "path": "empty.txt"}
    spec = DatasetSpec.model_validate(relative, context={"root": tmp_path})
    with pytest.raises(UserError, match="holds no text"):
        sentences(spec, "workload.exploration.datasets.exploration")
