"""Image datasets read from local files with torchvision: CIFAR-10 and any ImageFolder tree.

Nothing downloads: a missing data set is an error that says where to put it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from model_explorer.datasets.spec import (
    Cifar10Options,
    DatasetSpec,
    ImageFolderOptions,
)
from model_explorer.errors import UserError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


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
