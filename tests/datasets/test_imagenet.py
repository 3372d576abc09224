"""The `imagenet` dataset type: an image folder or WebDataset shards, checked against
torchvision's own ImageFolder reading the same images and against the labels written."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from digits_images import DigitsImages, png_bytes, write_digits_images
from PIL import Image
from pydantic import ValidationError

from model_explorer.datasets import DatasetSpec, SampleStream, TensorCache, build_dataset
from model_explorer.datasets.base import build_loader
from model_explorer.errors import UserError

COUNT = 150


@pytest.fixture(scope="module")
def digits_images(tmp_path_factory: pytest.TempPathFactory) -> DigitsImages:
    return write_digits_images(tmp_path_factory.mktemp("digits_images"), np.arange(COUNT))


def spec(**fields) -> DatasetSpec:
    return DatasetSpec.model_validate({"type": "imagenet", "resize": 12, "crop": 12, **fields})


def shards_spec(images: DigitsImages, **fields) -> DatasetSpec:
    return spec(kind="webdataset", path=images.pattern, total_samples=COUNT, **fields)


def test_default_preprocessing_is_imagenets(tmp_path: Path) -> None:
    """Resize the short side to 256, centre-crop 224, ImageNet mean/std: a 300x400 image of
    one colour becomes a 3x224x224 tensor of (colour/255 - mean) / std, computed by hand."""
    (tmp_path / "a").mkdir()
    Image.new("RGB", (400, 300), (200, 100, 50)).save(tmp_path / "a" / "x.png")
    dataset = build_dataset(spec(kind="imagefolder", path=str(tmp_path), resize=256, crop=224), 0)
    image, label = dataset[0]
    assert image.shape == (3, 224, 224) and label == 0
    expected = [
        (200 / 255 - 0.485) / 0.229,
        (100 / 255 - 0.456) / 0.224,
        (50 / 255 - 0.406) / 0.225,
    ]
    for channel, value in enumerate(expected):
        assert image[channel].mean().item() == pytest.approx(value, abs=1e-3)


def test_a_limited_subset_of_the_shards_is_the_same_as_of_the_folder(digits_images) -> None:
    """sample_limit and randomize pick the same positions, so the same images, in the same
    order, whether torchvision's ImageFolder or the tar stream reads them."""
    folder = build_dataset(
        spec(kind="imagefolder", path=str(digits_images.folder), sample_limit=40, randomize=True),
        seed=7,
    )
    shards = build_dataset(shards_spec(digits_images, sample_limit=40, randomize=True), seed=7)
    assert len(folder) == len(shards) == 40
    for (x_folder, y_folder), (x_shard, y_shard) in zip(folder, shards, strict=True):
        assert y_folder == y_shard
        torch.testing.assert_close(x_folder, x_shard)
    cache = TensorCache.from_spec(shards_spec(digits_images, sample_limit=40), seed=7)
    assert cache.num_samples == 40 and cache.inputs.shape == (40, 3, 12, 12)


def test_the_whole_stream_has_the_declared_length_and_every_sample(digits_images) -> None:
    stream = build_dataset(shards_spec(digits_images), seed=0)
    assert isinstance(stream, SampleStream) and len(stream) == COUNT
    labels = [int(label) for _, label in stream]
    assert labels == digits_images.labels  # stored order: shards by pattern, samples by tar


def test_training_passes_are_shuffled_by_the_seed(digits_images) -> None:
    def passes(seed: int, count: int) -> list[list[int]]:
        loader = build_loader(shards_spec(digits_images, batch_size=32), seed, shuffle=True)
        return [torch.cat([y for _, y in loader]).tolist() for _ in range(count)]

    first, second = passes(seed=3, count=2)
    written = Counter(digits_images.labels)
    assert Counter(first) == written and Counter(second) == written  # each sample once a pass
    assert first != digits_images.labels and first != second  # shuffled, anew each pass
    assert passes(seed=3, count=2) == [first, second]  # reproducible by the seed
    assert passes(seed=4, count=1)[0] != first


def test_the_original_tools_sample_keys_are_read(tmp_path: Path) -> None:
    """The original read `<key>.input.jpeg` with `<key>.target.cls`."""
    images = write_digits_images(
        tmp_path, np.arange(12), shards=1, image_key="input.jpeg", label_key="target.cls"
    )
    stream = build_dataset(spec(kind="webdataset", path=images.pattern, total_samples=12), seed=0)
    assert [int(label) for _, label in stream] == images.labels


def test_a_sample_without_label_is_named(tmp_path: Path) -> None:
    import webdataset as wds

    (tmp_path / "s").mkdir()
    with wds.TarWriter(str(tmp_path / "s" / "a-0.tar")) as writer:
        writer.write({"__key__": "k", "png": png_bytes(np.zeros((8, 8), np.uint8))})
    stream = build_dataset(
        spec(kind="webdataset", path=str(tmp_path / "s" / "a-{0..0}.tar"), total_samples=1), 0
    )
    with pytest.raises(UserError, match=r"no label \(<key>.cls\)"):
        list(stream)


def test_shard_patterns_are_checked_when_the_spec_is_read(digits_images) -> None:
    missing = digits_images.pattern.replace("{00..02}", "{00..04}")
    with pytest.raises(ValidationError, match=r"2 of the 5 files it names are missing"):
        spec(kind="webdataset", path=missing, total_samples=COUNT)
    with pytest.raises(ValidationError, match="total_samples\n.*is required with kind: webdataset"):
        spec(kind="webdataset", path=digits_images.pattern)
    with pytest.raises(ValidationError, match="kind\n"):
        spec(path=digits_images.pattern)


def test_more_samples_declared_than_the_shards_hold_is_an_error(digits_images) -> None:
    declared = shards_spec(digits_images, sample_limit=20)
    declared.options.total_samples = 10 * COUNT
    with pytest.raises(UserError, match="samples declared, but the shards"):
        build_dataset(declared, seed=0)


def test_imagenet_c_reads_the_folder_of_its_corruption_and_severity(tmp_path: Path) -> None:
    """The original's `imagenet_c`: `path/<condition>/<severity>/<class>/<image>`."""
    for condition, severity, colour in (("fog", 3, (10, 20, 30)), ("snow", 3, (200, 0, 0))):
        folder = tmp_path / condition / str(severity) / "n01"
        folder.mkdir(parents=True)
        Image.new("RGB", (10, 10), colour).save(folder / "a.png")
    fields = {"type": "imagenet_c", "path": str(tmp_path), "severity": 3, "resize": 4, "crop": 4}
    snow = build_dataset(DatasetSpec.model_validate({**fields, "condition": "snow"}), 0)
    image, label = snow[0]
    assert label == 0 and image[0].mean().item() == pytest.approx((200 / 255 - 0.485) / 0.229)
    with pytest.raises(ValidationError, match=r"path\n.*dataset path '.*fog/4' does not exist"):
        DatasetSpec.model_validate({**fields, "condition": "fog", "severity": 4})
