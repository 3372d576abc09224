"""Datasets built from their spec (spec.py: the registry and the settings), seeded subset
selection, and DataLoaders built from it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from model_explorer.datasets.spec import DATASETS, DatasetSpec

log = logging.getLogger(__name__)


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
