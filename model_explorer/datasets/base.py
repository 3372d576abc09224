"""Dataset registry, the dataset spec, seeded subset selection, and DataLoaders built from it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from model_explorer.schema.paths import missing_path_text
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import NonNegativeInt, PositiveInt, Rejected, TypedSpec

log = logging.getLogger(__name__)

# A builder takes the validated spec and the key path it came from (for error messages) and
# returns a map-style dataset of (input, target) pairs: the whole split, before subsetting.
DatasetBuilder = Callable[["DatasetSpec", str], Dataset]
DATASETS: Registry[DatasetBuilder] = Registry(
    "dataset", imports="dataset builder", import_form="package.module:builder"
)

# The dataset types of the original tool that were its own modules, and what they held.
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


class SampleStream(IterableDataset):
    """A dataset read as a stream (tar shards) whose length the spec declares. Subsets are
    taken by position in its stored order; a training loader shuffles it by seed."""

    def __len__(self) -> int:
        raise NotImplementedError

    def shuffle_by(self, seed: int) -> None:
        """Shuffle every pass from now on, reproducibly by `seed`."""
        raise NotImplementedError

    def pick(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """The decoded samples at these positions of the stored order, in the order given."""
        raise NotImplementedError


def register_dataset(name: str, options: Any = None) -> Callable[[DatasetBuilder], DatasetBuilder]:
    """Register a dataset builder; `options` is the pydantic model of its type-specific keys."""
    return DATASETS.register(name, options=options)


_WARNED: set[tuple[str, int | None, int]] = set()


def select_indices(length: int, sample_limit: int | None, randomize: bool, seed: int) -> np.ndarray:
    """The fixed subset a spec stands for: `sample_limit` indices drawn by `seed` (kept in
    dataset order), shuffled once by `seed` when `randomize` is set. The same arguments always
    give the same indices, so every evaluation sees the same samples."""
    rng = np.random.default_rng(seed)
    if sample_limit is not None and sample_limit < length:
        indices = np.sort(rng.choice(length, size=sample_limit, replace=False))
    else:
        indices = np.arange(length)
    if randomize:
        indices = rng.permutation(indices)
    return indices


def build_dataset(spec: DatasetSpec, seed: int, where: str = "dataset") -> Dataset:
    """The spec's samples: the builder's split reduced to the seeded subset.

    Args:
        spec: a dataset spec (`type`, `sample_limit`, `randomize`, the type's options).
        seed: draws the subset (and its order with `randomize`).
        where: the key path named in errors.
    """
    folders = [spec.resolve(".")]  # the workload's root (the working directory without one)
    dataset = DATASETS.resolve(spec.type, f"{where}.type", folders)(spec, where)
    streamed = isinstance(dataset, SampleStream)
    if streamed and spec.sample_limit is None:
        return dataset  # the whole stream: its order is the stored one, shuffled for training
    length = len(dataset)  # type: ignore[arg-type]
    said = (where, spec.sample_limit, length)
    if spec.sample_limit is not None and spec.sample_limit > length and said not in _WARNED:
        _WARNED.add(said)  # the data set is built by several steps of one command: say it once
        log.warning(
            "%s.sample_limit is %d but the data holds %d samples; using all of them",
            where,
            spec.sample_limit,
            length,
        )
    indices = select_indices(length, spec.sample_limit, spec.randomize, seed)
    if streamed:
        return dataset.pick(indices.tolist())  # type: ignore[return-value]
    if len(indices) == length and not spec.randomize:
        return dataset
    return Subset(dataset, indices.tolist())


def build_loader(
    spec: DatasetSpec, seed: int, where: str = "dataset", shuffle: bool = False
) -> DataLoader:
    """A DataLoader over the spec's subset, in batches of its `batch_size`.

    Args:
        spec: a dataset spec, as for `build_dataset`.
        seed: draws the subset and seeds the shuffling.
        where: the key path named in errors.
        shuffle: reorder every epoch (for training only), from a generator seeded by `seed`.
    """
    dataset = build_dataset(spec, seed, where)
    if isinstance(dataset, SampleStream):
        if shuffle:
            dataset.shuffle_by(seed)
        shuffle = False  # a stream shuffles itself
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_size=spec.batch_size,
        shuffle=shuffle,
        generator=generator,
        num_workers=spec.workers,
        persistent_workers=spec.workers > 0,
    )
