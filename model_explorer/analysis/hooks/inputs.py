"""Samples for the analysis hooks: HDF5, .npz/.npy files, or a workload's datasets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model_explorer.datasets.files import ArrayFile
from model_explorer.errors import UserError


def _arrays_to_samples(arrays: list[np.ndarray], where: str) -> Iterator[tuple[torch.Tensor, ...]]:
    counts = {len(a) for a in arrays}
    if len(counts) != 1:
        raise UserError(f"{where}: the inputs hold different numbers of samples {sorted(counts)}")
    for index in range(counts.pop()):
        yield tuple(
            torch.from_numpy(np.asarray(a[index : index + 1], dtype=np.float32)) for a in arrays
        )


def _group_sample(group: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    return tuple(
        torch.from_numpy(np.asarray(group[key], dtype=np.float32)).unsqueeze(0)
        for key in sorted(group)
    )


def file_samples(path: str | Path) -> Iterator[tuple[torch.Tensor, ...]]:
    """One tuple of model inputs (each with a batch axis of 1) per sample.

    - `.npy`: one input, first axis = samples;
    - `.npz`: one array per model input (in the file's order), first axis = samples;
    - `.h5`/`.hdf5`: one dataset per model input (sorted by name), first axis = samples, or one
      group per sample (sorted by name) holding one dataset per input."""
    with ArrayFile(path, "--input-data") as file:
        where = f"--input-data: '{file.path}'"
        names = file.names
        if file.suffix in (".h5", ".hdf5") and names and all(map(file.is_group, names)):
            for name in names:
                yield _group_sample(file.read(name))
        else:
            yield from _arrays_to_samples([file.read(name) for name in names], where)


def dataset_samples(batches) -> Iterator[tuple[torch.Tensor, ...]]:  # noqa: ANN001
    """Single samples from a workload's batches."""
    for inputs, _ in batches:
        for index in range(len(inputs)):
            yield (inputs[index : index + 1],)
