"""The original tool's `imagenet` dataset: an image folder or WebDataset tar shards, with
ImageNet's evaluation preprocessing (resize 256, centre crop 224, ImageNet mean and std); and its
`imagenet_c`: one corruption and severity of ImageNet-C, stored as image folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import model_validator
from pydantic_core import PydanticCustomError
from torch.utils.data import Dataset

from model_explorer.datasets.base import DatasetSpec, register_dataset
from model_explorer.datasets.shards import ShardStream, expand_shards
from model_explorer.datasets.vision import IMAGENET_MEAN, IMAGENET_STD, open_image_folder
from model_explorer.schema.specs import PositiveInt, Spec


class ImageNetOptions(Spec):
    requires_path: ClassVar[bool] = True
    kind: Literal["imagefolder", "webdataset"]
    """How the images are stored: `imagefolder`, `path/<class>/<image>`; `webdataset`, tar
    shards named by a brace pattern in `path` (`train-{0000..0136}.tar`)."""
    total_samples: PositiveInt | None = None
    """The number of samples in all shards together, the stream's length; required with
    `webdataset` and not used with `imagefolder`."""
    resize: PositiveInt = 256
    """The shorter side of each image is resized to this many pixels before the centre crop."""
    crop: PositiveInt = 224
    """Side in pixels of the centre square cut from the resized image: the network's input
    size."""
    shuffle_buffer: PositiveInt = 10000
    """Samples a `webdataset` training stream (without `sample_limit`) shuffles among; a larger
    buffer mixes better and holds more decoded images in memory."""

    @model_validator(mode="after")
    def _stream_length(self) -> ImageNetOptions:
        if self.kind == "webdataset" and self.total_samples is None:
            raise PydanticCustomError(
                "total_samples_missing",
                "is required with kind: webdataset (the number of samples in all shards; a "
                "stream has no length of its own)",
                {"key": "total_samples"},
            )
        return self

    @staticmethod
    def local_paths(path: str, data: dict[str, Any]) -> list[str]:
        """The files `path` names: the shards of its brace pattern with kind webdataset."""
        if data.get("kind") == "webdataset":
            return expand_shards(path)
        return [path]


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


@register_dataset("imagenet", options=ImageNetOptions)
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


class ImageNetCOptions(Spec):
    requires_path: ClassVar[bool] = True
    kind: Literal["imagefolder"] = "imagefolder"
    """Accepted for the original tool's files, which read ImageNet-C from image folders only."""
    condition: Literal["fog", "frost", "snow", "brightness"] = "fog"
    """The corruption: the images under `path/<condition>/`."""
    severity: Literal[1, 2, 3, 4, 5] = 1
    """How strong the corruption is, `1` mildest to `5` strongest: the images under
    `path/<condition>/<severity>/`."""
    resize: PositiveInt = 256
    """The shorter side of each image is resized to this many pixels before the centre crop."""
    crop: PositiveInt = 224
    """Side in pixels of the centre square cut from the resized image: the network's input
    size."""

    @staticmethod
    def local_paths(path: str, data: dict[str, Any]) -> list[str]:
        """The folder of the chosen corruption and severity: `path/<condition>/<severity>`."""
        condition, severity = data.get("condition", "fog"), data.get("severity", 1)
        if not isinstance(condition, str) or not isinstance(severity, int):
            return [path]  # their own checks say what is wrong
        return [str(Path(path) / condition / str(severity))]


@register_dataset("imagenet_c", options=ImageNetCOptions)
def imagenet_c(spec: DatasetSpec, where: str) -> Dataset:
    """ImageNet-C (Hendrycks and Dietterich, 2019) as it is distributed:
    `path/<condition>/<severity>/<class>/<image>`, with ImageNet's preprocessing."""
    options: ImageNetCOptions = spec.options
    root = spec.resolve(spec.path or "") / options.condition / str(options.severity)
    return open_image_folder(root, imagenet_transform(options.resize, options.crop), where)
