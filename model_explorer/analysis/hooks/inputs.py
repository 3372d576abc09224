"""Samples for the analysis hooks: HDF5 (also in dalgona's layout, rawData included), .npz/.npy
files, a workload's datasets, or dalgona's one random sample."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model_explorer.datasets.files import ArrayFile
from model_explorer.errors import UserError

LAYOUTS = (
    "dalgona's /value/<sample>/<input> (each input with its full shape, 4-D ones NHWC or "
    "NCHW, or raw bytes under a rawData attribute), one dataset per input (first axis = "
    "samples) or one group of datasets per sample"
)
# How the 4-D inputs of dalgona's records lie: a Circle model's (ONE converts with NHWC inputs
# when told --nchw_to_nhwc_input_shape) or PyTorch's (ONE's default keeps NCHW inputs).
RECORD_LAYOUTS = ("nhwc", "nchw")
RANDOM_RANGE = (-5.0, 5.0)  # dalgona's random input, "synced with record-minmax (-5,5)"


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


def _records(group: Any, where: str) -> Iterator[tuple[int, list[Any]]]:
    """(index, its datasets) of each record /value/0, /value/1, ... of dalgona's layout."""
    import h5py

    if not len(group):
        raise UserError(f"{where}: /value holds no sample")
    for index in range(len(group)):
        record = group.get(str(index))
        if not isinstance(record, h5py.Group) or not len(record):
            raise UserError(f"{where}: /value/{index} is not a group of input datasets")
        datasets = []
        for position in range(len(record)):
            dataset = record.get(str(position))
            if not isinstance(dataset, h5py.Dataset):
                raise UserError(f"{where}: /value/{index}/{position} is not a dataset")
            datasets.append(dataset)
        yield index, datasets


def _names(datasets: list[Any]) -> list[str]:
    """The inputs' names: their `name` attributes, else `input` (one) or `input_<i>`."""
    if len(datasets) == 1 and "name" not in datasets[0].attrs:
        return ["input"]
    return [str(d.attrs.get("name", f"input_{i}")) for i, d in enumerate(datasets)]


def _dalgona_samples(
    file: Any, where: str, shape: Sequence[int] | None, layout: str
) -> Iterator[Sample]:
    """dalgona's layout: group `value`, one group per sample named 0, 1, ..., in it one dataset
    per model input named 0, 1, ... with its full shape (a `name` attribute, where present,
    names the input); 4-D inputs lie as `layout` says (NHWC: as a Circle model reads them),
    read as NCHW. Under a `rawData` attribute, the datasets are raw bytes (`_raw_samples`)."""
    group = file["value"]
    if group.attrs.get("rawData") is not None:
        yield from _raw_samples(group, where, shape, layout)
        return
    for _, datasets in _records(group, where):
        arrays = [d[()] for d in datasets]
        if layout == "nhwc":
            arrays = [
                np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a for a in arrays
            ]
        yield _sample(arrays, _names(datasets))


def _raw_bytes(dataset: Any, where: str) -> bytes:
    """A rawData dataset's bytes: uint8 (as ONE's imgdata2hdf5.py writes them), int8, opaque or
    fixed-length bytes; values of wider types are refused (dalgona would narrow each one to a
    byte)."""
    value = dataset[()]
    if isinstance(value, bytes):
        return value
    array = np.asarray(value)
    if array.dtype.itemsize != 1 and array.dtype.kind not in "VS":
        raise UserError(
            f"{where} holds {array.dtype} values, not raw bytes; write the input's bytes as "
            "uint8 (np.frombuffer(data, np.uint8)), as ONE's imgdata2hdf5.py does, or drop "
            "rawData and write the array with its shape"
        )
    return array.tobytes()


def _raw_samples(
    group: Any, where: str, shape: Sequence[int] | None, layout: str
) -> Iterator[Sample]:
    """ONE's imgdata2hdf5.py: /value/<record>/0 holds the bytes of the model's one input, which
    dalgona copies into the Circle model's input tensor unchecked. Here float32 values of
    `shape` (as PyTorch takes it); a 4-D input lies NHWC unless `layout` is "nchw"."""
    if shape is None:
        raise UserError(
            f"{where}: holds raw bytes (rawData), which carry no shape; give the model input's "
            "shape with --input-shape N C H W"
        )
    shape = tuple(shape)
    nhwc = len(shape) == 4 and layout == "nhwc"
    stored = (shape[0], *shape[2:], shape[1]) if nhwc else shape
    expected = math.prod(shape) * 4
    for index, datasets in _records(group, where):
        if len(datasets) != 1:
            raise UserError(
                f"{where}: /value/{index} holds {len(datasets)} raw inputs; rawData records are "
                "read for models of one input (--input-shape gives one shape)"
            )
        data = _raw_bytes(datasets[0], f"{where}: /value/{index}/0")
        if len(data) != expected:
            raise UserError(
                f"{where}: record /value/{index}/0 holds {len(data)} bytes; an input of shape "
                f"{list(shape)} takes {expected} (float32, {math.prod(shape)} values)"
            )
        array = np.frombuffer(data, dtype="<f4").reshape(stored).copy()  # writable
        if nhwc:
            array = array.transpose(0, 3, 1, 2)
        yield _sample([np.ascontiguousarray(array)], _names(datasets))


def file_samples(
    path: str | Path, shape: Sequence[int] | None = None, layout: str = "nhwc"
) -> Iterator[Sample]:
    """One tuple of model inputs (each with a batch axis of 1) per sample.

    - `.npy`: one input, first axis = samples;
    - `.npz`: one array per model input (in the file's order), first axis = samples;
    - `.h5`/`.hdf5`: dalgona's layout (see `_dalgona_samples`), one dataset per model input
      (sorted by name), first axis = samples, or one group per sample (sorted by name)
      holding one dataset per input. A file that fits none is an error.

    Args:
        path: the file.
        shape: the model input's shape as PyTorch takes it (N x C x H x W for images), which
            dalgona's rawData records (raw bytes, no shape) are read in; None: such a file is
            an error naming --input-shape. Other files carry their shapes.
        layout: how 4-D inputs in dalgona's layout lie, "nhwc" (a Circle model's, dalgona's
            convention) or "nchw" (a model converted with its NCHW inputs kept); both are read
            as NCHW. Other layouts are PyTorch's already."""
    if layout not in RECORD_LAYOUTS:
        raise ValueError(f"layout must be one of {RECORD_LAYOUTS}, got {layout!r}")
    with ArrayFile(path, "--input-data") as file:
        where = f"--input-data: '{file.path}'"
        if file.suffix in (".h5", ".hdf5"):
            # opened (and checked) by ArrayFile
            yield from _hdf5_samples(file.handle, where, shape, layout)
        else:
            yield from _arrays_to_samples([file.read(name) for name in file.names], where)


def _is_group(item: Any) -> bool:
    import h5py

    return isinstance(item, h5py.Group)


def _is_dalgona(handle: Any) -> bool:
    return list(handle.keys()) == ["value"] and _is_group(handle["value"])


def _hdf5_samples(
    handle: Any, where: str, shape: Sequence[int] | None, layout: str
) -> Iterator[Sample]:
    import h5py

    names = sorted(handle.keys())
    groups = [isinstance(handle[n], h5py.Group) for n in names]
    if _is_dalgona(handle):
        yield from _dalgona_samples(handle, where, shape, layout)
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


@dataclass(frozen=True)
class DalgonaFile:
    """What an HDF5 file in dalgona's layout holds: raw bytes (rawData) or arrays, and the
    shape of the first 4-D input of its first record (None: raw, or no 4-D input there)."""

    raw: bool
    record_shape: tuple[int, ...] | None


def dalgona_file(path: str | Path) -> DalgonaFile | None:
    """The file at `path` when it is HDF5 in dalgona's /value layout, else None."""
    if Path(path).suffix.lower() not in (".h5", ".hdf5"):
        return None
    with ArrayFile(path, "--input-data") as file:
        if not _is_dalgona(file.handle):
            return None
        group = file.handle["value"]
        if group.attrs.get("rawData") is not None:
            return DalgonaFile(raw=True, record_shape=None)
        first = group.get("0")
        inputs = [first.get(str(i)) for i in range(len(first))] if _is_group(first) else []
        shapes = [tuple(getattr(dataset, "shape", None) or ()) for dataset in inputs]
        return DalgonaFile(raw=False, record_shape=next((s for s in shapes if len(s) == 4), None))


def choose_layout(
    record_shape: Sequence[int] | None, channels: int | None, layout: str = "auto"
) -> tuple[str, str]:
    """(layout, why) of 4-D records: `layout` when "nhwc" or "nchw"; for "auto", told by the
    model's first layer, which takes `channels`: NHWC where only axis 3 holds that many, NCHW
    where only axis 1 does, and dalgona's convention, NHWC, where both, neither or nothing
    tells (no 4-D record, raw bytes, a first layer that fixes no channels)."""
    if layout != "auto":
        return layout, f"--input-layout {layout}"
    if record_shape is None or len(record_shape) != 4 or channels is None:
        return "nhwc", "dalgona's convention; nothing tells NCHW from NHWC here"
    last, second = record_shape[3] == channels, record_shape[1] == channels
    takes = f"the {channels} channel{'' if channels == 1 else 's'} the model's first layer takes"
    first = f"of the first record {list(record_shape)}"
    if last != second:
        layout, axis = ("nhwc", 3) if last else ("nchw", 1)
        return layout, f"only axis {axis} {first} holds {takes}"
    which = "both axis 1 and axis 3" if last else "neither axis 1 nor axis 3"
    return "nhwc", f"dalgona's convention: {which} {first} holds {takes}"


def random_samples(shape: Sequence[int], seed: int = 0) -> Iterator[Sample]:
    """dalgona's run without input data: one sample of float32 values drawn uniformly from
    [-5, 5) (dalgona's range, synced with record-minmax's), of `shape`, from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    low, high = RANDOM_RANGE
    values = torch.rand(tuple(shape), generator=generator, dtype=torch.float32)
    yield Sample((values * (high - low) + low,))  # named `input`, as a file's one input
