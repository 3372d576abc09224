"""Samples for the analysis hooks: HDF5 (also in dalgona's layout), .npz/.npy files, or a
workload's datasets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model_explorer.datasets.files import ArrayFile
from model_explorer.errors import UserError

LAYOUTS = (
    "dalgona's /value/<sample>/<input> (each input with its full shape, 4-D ones NHWC), "
    "one dataset per input (first axis = samples) or one group of datasets per sample"
)


class Sample(tuple):
    """The inputs of one sample, with the names the file gives them (or None)."""

    names: list[str] | None = None


def _sample(arrays: list[np.ndarray], names: list[str] | None = None) -> Sample:
    sample = Sample(torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in arrays)
    sample.names = names
    return sample


def _arrays_to_samples(arrays: list[np.ndarray], where: str) -> Iterator[Sample]:
    counts = {len(a) for a in arrays}
    if len(counts) != 1:
        raise UserError(f"{where}: the inputs hold different numbers of samples {sorted(counts)}")
    for index in range(counts.pop()):
        yield _sample([a[index : index + 1] for a in arrays])


def _dalgona_samples(file: Any, where: str) -> Iterator[Sample]:
    """dalgona's layout: group `value`, one group per sample named 0, 1, ..., in it one dataset
    per model input named 0, 1, ... with its full shape (a `name` attribute, where present,
    names the input); 4-D inputs are NHWC, as a Circle model reads them."""
    import h5py

    group = file["value"]
    if group.attrs.get("rawData") is not None:
        raise UserError(
            f"{where}: holds raw bytes (rawData), whose shape only a Circle model knows; write "
            "each input as an array with its shape (/value/<sample>/<input>)"
        )
    if not len(group):
        raise UserError(f"{where}: /value holds no sample")
    for index in range(len(group)):
        record = group.get(str(index))
        if not isinstance(record, h5py.Group) or not len(record):
            raise UserError(f"{where}: /value/{index} is not a group of input datasets")
        arrays, names = [], []
        for position in range(len(record)):
            dataset = record.get(str(position))
            if not isinstance(dataset, h5py.Dataset):
                raise UserError(f"{where}: /value/{index}/{position} is not a dataset")
            array = dataset[()]
            arrays.append(
                np.ascontiguousarray(array.transpose(0, 3, 1, 2)) if array.ndim == 4 else array
            )
            names.append(str(dataset.attrs.get("name", f"input_{position}")))
        if len(arrays) == 1 and "name" not in record["0"].attrs:
            names = ["input"]
        yield _sample(arrays, names)


def file_samples(path: str | Path) -> Iterator[Sample]:
    """One tuple of model inputs (each with a batch axis of 1) per sample.

    - `.npy`: one input, first axis = samples;
    - `.npz`: one array per model input (in the file's order), first axis = samples;
    - `.h5`/`.hdf5`: dalgona's layout (see `_dalgona_samples`), one dataset per model input
      (sorted by name), first axis = samples, or one group per sample (sorted by name)
      holding one dataset per input. A file that fits none is an error."""
    with ArrayFile(path, "--input-data") as file:
        where = f"--input-data: '{file.path}'"
        if file.suffix in (".h5", ".hdf5"):
            yield from _hdf5_samples(file.handle, where)  # opened (and checked) by ArrayFile
        else:
            yield from _arrays_to_samples([file.read(name) for name in file.names], where)


def _hdf5_samples(handle: Any, where: str) -> Iterator[Sample]:
    import h5py

    names = sorted(handle.keys())
    groups = [isinstance(handle[n], h5py.Group) for n in names]
    if names == ["value"] and groups[0]:
        yield from _dalgona_samples(handle, where)
    elif names and not any(groups):
        yield from _arrays_to_samples([handle[n][()] for n in names], where)
    elif names and all(groups):
        for name in names:
            datasets = [handle[name][key] for key in sorted(handle[name].keys())]
            if not datasets or not all(isinstance(d, h5py.Dataset) for d in datasets):
                raise UserError(f"{where}: '{name}' fits none of the layouts read: {LAYOUTS}")
            yield _sample([d[()][None] for d in datasets])
    else:
        raise UserError(f"{where}: fits none of the layouts read: {LAYOUTS}")


def dataset_samples(batches) -> Iterator[tuple[torch.Tensor, ...]]:  # noqa: ANN001
    """Single samples from a workload's batches."""
    for inputs, _ in batches:
        for index in range(len(inputs)):
            yield (inputs[index : index + 1],)
