"""The workload's dataset sections and the registry of datasets, with every built-in dataset's
options declared here (its builder named by import path, imported when it first builds), so
that reading and checking a workload imports no builder (nor torch). The builders are
arrays.py, digits.py, imagenet.py, photos.py, text.py and vision.py; a `package.module:builder`
of the user's code is wrapped by imported.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.schema.paths import missing_path_text
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import (
    NonNegativeInt,
    PositiveInt,
    Rejected,
    Spec,
    TypedSpec,
)

# A builder takes the validated spec and the key path it came from (for error messages) and
# returns a map-style dataset of (input, target) pairs: the whole split, before subsetting.
DatasetBuilder = Callable[["DatasetSpec", str], Any]  # -> a map-style Dataset

DATASETS: Registry[DatasetBuilder] = Registry(
    "dataset", imports="dataset builder", import_form="package.module:builder"
)

ORIGINAL_DATASETS = {
    "cityscapes": "Cityscapes segmentation",
    "cityscapes_weather": "Cityscapes with weather corruptions",
    "david": "the DAVID segmentation data",
    "bdd100k": "BDD100K driving scenes for YOLOP",
    "bdd100k_corrupted": "BDD100K with corruptions",
    "yolo_dataset": "a YOLO-format detection data set",
    "coco": "COCO detection",
    "mnist": "MNIST, downloaded by torchvision there",
}


class DatasetSpec(TypedSpec):
    """Where one set of samples comes from and how it is batched; `type` names a registered
    dataset whose own options sit beside these keys."""

    registry: ClassVar[Registry[Any]] = DATASETS
    type: str
    """The dataset: `digits`, `photos`, `sentences`, `cifar10`, `imagefolder`, `arrays`,
    `imagenet` or `imagenet_c`, or your own `package.module:builder`; its options sit beside
    these keys."""
    batch_size: PositiveInt = 64
    """Samples per batch, in evaluation and in training."""
    sample_limit: PositiveInt | None = None
    """Use a fixed subset of this many samples, drawn with the workload's `seed`, so that every
    evaluation sees the same ones (`null`: all samples)."""
    randomize: bool = False
    """Shuffle the samples once, by the workload's `seed`, and keep that order for every
    evaluation (for a `webdataset` stream only together with `sample_limit`); otherwise they
    stay in stored order."""
    path: str | None = None
    """Where the local data lies, a file or folder as the type reads it; relative paths start
    from the workload's root. `digits` and `photos` take none; `sentences` without one reads
    Python's own documentation."""
    workers: NonNegativeInt = 0
    """Background processes that read and decode batches (`0`: the main process does it).
    Evaluation data is decoded only once, so this mostly speeds up training."""

    @classmethod
    def _unknown_hint(cls, name: str) -> str:
        if name in ORIGINAL_DATASETS:
            return (
                f" ({ORIGINAL_DATASETS[name]}: a module of the original tool, not shipped here;"
                " bring it as 'type: package.module:builder', a function of yours that returns"
                " the (input, target) samples)"
            )
        return ""

    @classmethod
    def _check_entry(cls, entry: Any, data: dict[str, Any], context: Any) -> dict[str, Any]:
        """The path a type needs, and the files it names: one path, or those its options
        expand it to (`local_paths`, e.g. the shards of a brace pattern)."""
        path = data.get("path")
        if path is None:
            if getattr(entry.options, "requires_path", False):
                text = f"dataset type '{entry.name}' needs a 'path' to its local files"
                return {**data, "path": Rejected(text)}
            return data
        if not isinstance(path, str):
            return data  # the field's own check says what is wrong
        expand = getattr(entry.options, "local_paths", None)
        files = expand(path, data) if expand is not None else [path]
        missing = [t for f in files if (t := missing_path_text(f, context, "dataset path"))]
        if not missing:
            return data
        if len(files) > 1:
            missing[0] = (
                f"{len(missing)} of the {len(files)} files it names are missing: {missing[0]}"
            )
        return {**data, "path": Rejected(missing[0])}


def register_dataset(name: str, options: Any = None) -> Callable[[DatasetBuilder], DatasetBuilder]:
    """Register a dataset builder; `options` is the pydantic model of its type-specific keys."""
    return DATASETS.register(name, options=options)


def expand_shards(pattern: str) -> list[str]:
    """The shard files a brace pattern names (`train-{0000..0136}.tar`), in its order."""
    from braceexpand import braceexpand

    return list(braceexpand(pattern))


IMAGENET_MEAN = (0.485, 0.456, 0.406)

IMAGENET_STD = (0.229, 0.224, 0.225)


class ImportedDatasetOptions(Spec):
    """A `package.module:builder` dataset takes any key beside the common ones: each is a
    keyword argument of the builder, checked against its signature when it is called."""

    model_config = ConfigDict(extra="allow")


class ArraysOptions(Spec):
    requires_path: ClassVar[bool] = True
    inputs_key: str = "inputs"
    """Name of the inputs array in a `.npz` or `.h5` file (one entry per sample along the first
    axis); not used for a `.npy` file."""
    labels_key: str = "labels"
    """Name of the labels array in a `.npz` or `.h5` file; not used for a `.npy` file."""
    labels_path: str | None = None
    """The `.npy` file of labels when `path` is a `.npy` file of inputs, and needed then;
    relative paths start from the workload's root."""


class DigitsOptions(Spec):
    split: Literal["train", "validation", "test", "all"] = "test"
    """Which part of the 1797 images: a 60 / 20 / 20 % split stratified by class, or `all` of
    them."""
    resize: Literal[8, 16, 32] = 8
    """Side of the images in pixels: `8` as stored, `16` or `32` upsampled bilinearly."""
    channels: Literal[1, 3] = 1
    """`1`: grey images; `3`: the grey channel repeated, for networks that take RGB."""
    split_seed: NonNegativeInt = 0
    """Draws the split; kept apart from the workload's `seed` so that changing the search seed
    never moves test images into training."""


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


class PhotosOptions(Spec):
    split: Literal["calibrate", "explore", "test", "all"] = "explore"
    """`calibrate`: the crops of five photographs (194); `test`: those of five others, which no
    search selects on (reevaluation); `explore`: those of the remaining ten; `all`: every crop
    (804)."""
    size: PositiveInt = 224
    """Side in pixels of the square input each crop is resized to."""
    preprocessing: Literal["lite", "imagenet"] = "lite"
    """How pixels are normalised: `lite`, (pixel - 127) / 128 as EfficientNet-Lite expects;
    `imagenet`, with torchvision's ImageNet mean and std."""


class SentencesOptions(Spec):
    split: Literal["train", "validation", "test", "all"] = "test"
    """Which part of the texts: a 60 / 20 / 20 % split drawn by `split_seed`, or `all` of
    them."""
    tokenizer: str = "all_minilm_l6_v2"
    """The tokenizer that turns texts into token ids: that of a model that ships one
    (`all_minilm_l6_v2`), or a local Hugging Face tokenizer folder."""
    max_length: PositiveInt = 32
    """Tokens per text: longer texts are cut, shorter ones padded to this length."""
    split_seed: NonNegativeInt = 0
    """Draws the split; kept apart from the workload's `seed` so that changing the search seed
    never moves test texts into training."""


class Cifar10Options(Spec):
    requires_path: ClassVar[bool] = True
    split: Literal["train", "test"] = "test"
    """`train`: the 50,000 training images; `test`: the 10,000 test images."""
    augment: bool = False
    """Random crops (4 pixels of padding) and horizontal flips, for training; off, the images
    are used as stored."""
    normalize: bool = True
    """Normalise with CIFAR-10's per-channel mean and std; off, pixels stay in 0 to 1."""


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


DATASETS.import_options = ImportedDatasetOptions
DATASETS.declare_import_adapter("model_explorer.datasets.imported:from_user_code")
for _name, _path, _options in (
    ("arrays", "arrays:arrays", ArraysOptions),
    ("digits", "digits:digits", DigitsOptions),
    ("imagenet", "imagenet:imagenet", ImageNetOptions),
    ("imagenet_c", "imagenet:imagenet_c", ImageNetCOptions),
    ("photos", "photos:photos", PhotosOptions),
    ("sentences", "text:sentences", SentencesOptions),
    ("cifar10", "vision:cifar10", Cifar10Options),
    ("imagefolder", "vision:imagefolder", ImageFolderOptions),
):
    DATASETS.declare(_name, f"model_explorer.datasets.{_path}", options=_options)
