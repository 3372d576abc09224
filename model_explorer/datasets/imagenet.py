"""The original tool's `imagenet` dataset: an image folder or WebDataset tar shards, with
ImageNet's evaluation preprocessing (resize 256, centre crop 224, ImageNet mean and std); and its
`imagenet_c`: one corruption and severity of ImageNet-C, stored as image folders."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

from model_explorer.datasets.shards import ShardStream
from model_explorer.datasets.spec import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DatasetSpec,
    ImageNetCOptions,
    ImageNetOptions,
    expand_shards,
)
from model_explorer.datasets.vision import open_image_folder


def imagenet_transform(resize: int, crop: int) -> Any:
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.Resize(resize),
            transforms.CenterCrop(crop),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def imagenet(spec: DatasetSpec, where: str) -> Dataset:
    """RGB images as (3, crop, crop) tensors and integer labels: from class folders (numbered
    in sorted folder-name order) or from shards (labels as stored in `<key>.cls`)."""
    options: ImageNetOptions = spec.options
    transform = imagenet_transform(options.resize, options.crop)
    if options.kind == "webdataset":
        shards = [str(spec.resolve(shard)) for shard in expand_shards(spec.path or "")]
        length = options.total_samples or 0
        return ShardStream(shards, length, transform, options.shuffle_buffer, where)
    return open_image_folder(spec.resolve(spec.path or ""), transform, where)


def imagenet_c(spec: DatasetSpec, where: str) -> Dataset:
    """ImageNet-C (Hendrycks and Dietterich, 2019) as it is distributed:
    `path/<condition>/<severity>/<class>/<image>`, with ImageNet's preprocessing."""
    options: ImageNetCOptions = spec.options
    root = spec.resolve(spec.path or "") / options.condition / str(options.severity)
    return open_image_folder(root, imagenet_transform(options.resize, options.crop), where)
