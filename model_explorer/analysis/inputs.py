"""Samples for the analysis hooks: HDF5, .npz/.npy files, or a workload's datasets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from model_explorer.errors import UserError


def _arrays_to_samples(arrays: list[np.ndarray], where: str) -> Iterator[tuple[torch.Tensor, ...]]:
    counts = {len(a) for a in arrays}
    if len(counts) != 1:
        raise UserError(f"{where}: the inputs hold different numbers of samples {sorted(counts)}")
    for index in range(counts.pop()):
        yield tuple(
            torch.from_numpy(np.asarray(a[index : index + 1], dtype=np.float32)) for a in arrays
        )


def file_samples(path: str | Path) -> Iterator[tuple[torch.Tensor, ...]]:
    """One tuple of model inputs (each with a batch axis of 1) per sample.

    - `.npy`: one input, first axis = samples;
    - `.npz`: one array per model input (in the file's order), first axis = samples;
    - `.h5`/`.hdf5`: one dataset per model input (sorted by name), first axis = samples, or one
      group per sample (sorted by name) holding one dataset per input."""
    file = Path(path)
    where = f"--input-data: '{file}'"
    if not file.is_file():
        raise UserError(f"{where} does not exist")
    suffix = file.suffix.lower()
    if suffix == ".npy":
        yield from _arrays_to_samples([np.load(file)], where)
    elif suffix == ".npz":
        with np.load(file) as archive:
            arrays = [archive[name] for name in archive.files]
        yield from _arrays_to_samples(arrays, where)
    elif suffix in (".h5", ".hdf5"):
        import h5py

        with h5py.File(file, "r") as archive:
            names = sorted(archive.keys())
            if names and all(isinstance(archive[n], h5py.Group) for n in names):
                for name in names:
                    group = archive[name]
                    yield tuple(
                        torch.from_numpy(np.asarray(group[key][()], dtype=np.float32)).unsqueeze(0)
                        for key in sorted(group.keys())
                    )
            else:
                arrays = [archive[n][()] for n in names]
                yield from _arrays_to_samples(arrays, where)
    else:
        raise UserError(f"{where} is not .h5, .hdf5, .npz or .npy")


def dataset_samples(batches) -> Iterator[tuple[torch.Tensor, ...]]:  # noqa: ANN001
    """Single samples from a workload's batches."""
    for inputs, _ in batches:
        for index in range(len(inputs)):
            yield (inputs[index : index + 1],)
