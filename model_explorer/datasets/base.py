"""Dataset registry, the dataset spec, seeded subset selection, and DataLoaders built from it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import ValidationInfo, model_validator
from pydantic_core import PydanticCustomError
from torch.utils.data import DataLoader, Dataset, Subset

from model_explorer.registry import Registry
from model_explorer.schema import NonNegativeInt, PositiveInt, TypedSpec, check_existing_path

log = logging.getLogger(__name__)

# A builder takes the validated spec and the key path it came from (for error messages) and
# returns a map-style dataset of (input, target) pairs: the whole split, before subsetting.
DatasetBuilder = Callable[["DatasetSpec", str], Dataset]
DATASETS: Registry[DatasetBuilder] = Registry("dataset")


class DatasetSpec(TypedSpec):
    """Where one set of samples comes from and how it is batched; `type` names a registered
    dataset whose own options sit beside these keys."""

    registry: ClassVar[Registry[Any]] = DATASETS
    type: str
    batch_size: PositiveInt = 64
    sample_limit: PositiveInt | None = None
    randomize: bool = False
    path: str | None = None
    workers: NonNegativeInt = 0

    @model_validator(mode="after")
    def _check_path(self, info: ValidationInfo) -> DatasetSpec:
        entry = DATASETS.get(self.type)
        needs_path = getattr(entry.options, "requires_path", False)
        if needs_path and self.path is None:
            raise PydanticCustomError(
                "path_required",
                "dataset type '{name}' needs a 'path' to its local files",
                {"name": self.type},
            )
        if self.path is not None:
            check_existing_path(self.path, info, "dataset path", key="path")
        return self


def register_dataset(name: str, options: Any = None) -> Callable[[DatasetBuilder], DatasetBuilder]:
    """Register a dataset builder; `options` is the pydantic model of its type-specific keys."""
    return DATASETS.register(name, options=options)


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
    """The spec's samples: the builder's split reduced to the seeded subset."""
    dataset = DATASETS.get(spec.type, f"{where}.type").builder(spec, where)
    length = len(dataset)  # type: ignore[arg-type]
    if spec.sample_limit is not None and spec.sample_limit > length:
        log.warning(
            "%s.sample_limit is %d but the data holds %d samples; using all of them",
            where,
            spec.sample_limit,
            length,
        )
    indices = select_indices(length, spec.sample_limit, spec.randomize, seed)
    if len(indices) == length and not spec.randomize:
        return dataset
    return Subset(dataset, indices.tolist())


def build_loader(
    spec: DatasetSpec, seed: int, where: str = "dataset", shuffle: bool = False
) -> DataLoader:
    """A DataLoader over the spec's subset. `shuffle` reorders every epoch (for training only),
    from a generator seeded by `seed`."""
    dataset = build_dataset(spec, seed, where)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=shuffle,
        generator=generator,
        num_workers=spec.workers,
        persistent_workers=spec.workers > 0,
    )
