"""Image datasets read from local files with torchvision: CIFAR-10 and any ImageFolder tree.

Nothing downloads: a missing data set is an error that says where to put it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import model_validator
from pydantic_core import PydanticCustomError
from torch.utils.data import Dataset

from model_explorer.datasets.base import DatasetSpec, register_dataset
from model_explorer.errors import UserError
from model_explorer.schema.specs import PositiveInt, Spec

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Cifar10Options(Spec):
    requires_path: ClassVar[bool] = True
    split: Literal["train", "test"] = "test"
    """`train`: the 50,000 training images; `test`: the 10,000 test images."""
    augment: bool = False
    """Random crops (4 pixels of padding) and horizontal flips, for training; off, the images
    are used as stored."""
    normalize: bool = True
    """Normalise with CIFAR-10's per-channel mean and std; off, pixels stay in 0 to 1."""


@register_dataset("cifar10", options=Cifar10Options)
def cifar10(spec: DatasetSpec, where: str) -> Dataset:
    """`path` is the folder holding `cifar-10-batches-py` (or that folder itself)."""
    from torchvision import datasets, transforms

    options: Cifar10Options = spec.options
    root = spec.resolve(spec.path or "")
    if root.name == "cifar-10-batches-py":
        root = root.parent
    steps = []
    if options.augment:
        steps += [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
    steps.append(transforms.ToTensor())
    if options.normalize:
        steps.append(transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD))
    try:
        return datasets.CIFAR10(
            str(root),
            train=options.split == "train",
            transform=transforms.Compose(steps),
            download=False,
        )
    except RuntimeError as error:
        raise UserError(
            f"{where}.path: no CIFAR-10 data under '{root}' ({error}); extract "
            "cifar-10-python.tar.gz there so that it holds cifar-10-batches-py/"
        ) from error


class ImageFolderOptions(Spec):
    requires_path: ClassVar[bool] = True
    resize: PositiveInt | None = 256
    """The shorter side of each image is resized to this many pixels (`null`: not resized)."""
    crop: PositiveInt | None = 224
    """Side in pixels of the centre square cut from the resized image (`null`: not cropped)."""
    augment: bool = False
    """For training: random crops, rescaled to `crop` (or `resize`), and horizontal flips in
    place of the resize and centre crop."""
    grayscale: bool = False
    """Convert the images to one grey channel; `mean` and `std` then take one value each (the
    average of ImageNet's three when not given)."""
    mean: tuple[float, ...] = IMAGENET_MEAN
    """Per-channel mean subtracted from pixels scaled to 0 to 1, one value per channel
    (ImageNet's by default)."""
    std: tuple[float, ...] = IMAGENET_STD
    """Per-channel standard deviation the pixels are divided by after `mean`, one value per
    channel (ImageNet's by default)."""

    @model_validator(mode="after")
    def _one_value_per_channel(self) -> ImageFolderOptions:
        channels = 1 if self.grayscale else 3
        for key in ("mean", "std"):
            values = getattr(self, key)
            if self.grayscale and key not in self.model_fields_set:
                setattr(self, key, (round(sum(values) / len(values), 4),))
            elif len(values) not in (1, channels):
                raise PydanticCustomError(
                    "channels",
                    "takes one value per channel of the {kind} images ({channels}), got {count}",
                    {
                        "key": key,
                        "kind": "grey" if self.grayscale else "RGB",
                        "channels": channels,
                        "count": len(values),
                    },
                )
        return self


@register_dataset("imagefolder", options=ImageFolderOptions)
def imagefolder(spec: DatasetSpec, where: str) -> Dataset:
    """`path/<class name>/<image>` files; classes are numbered in sorted folder-name order."""
    from torchvision import transforms

    options: ImageFolderOptions = spec.options
    steps = []
    if options.augment:
        steps += [
            transforms.RandomResizedCrop(options.crop or options.resize or 224),
            transforms.RandomHorizontalFlip(),
        ]
    else:
        if options.resize is not None:
            steps.append(transforms.Resize(options.resize))
        if options.crop is not None:
            steps.append(transforms.CenterCrop(options.crop))
    if options.grayscale:
        steps.append(transforms.Grayscale())
    steps += [transforms.ToTensor(), transforms.Normalize(options.mean, options.std)]
    return open_image_folder(spec.resolve(spec.path or ""), transforms.Compose(steps), where)


def open_image_folder(root: Path, transform: Any, where: str) -> Dataset:
    """torchvision's ImageFolder at `root` (classes numbered in sorted folder-name order); a
    folder it cannot read is one error naming `where`.path."""
    from torchvision import datasets

    try:
        return datasets.ImageFolder(str(root), transform=transform)
    except (FileNotFoundError, OSError) as error:
        raise UserError(
            f"{where}.path: '{root}' is not an image folder ({error}); it needs one sub-folder "
            "per class holding that class's images"
        ) from error
