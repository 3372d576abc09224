"""Samples from arrays on disk: a .npz or HDF5 file of inputs and labels, or two .npy files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from model_explorer.datasets.files import ArrayFile
from model_explorer.datasets.spec import ArraysOptions, DatasetSpec
from model_explorer.errors import UserError


def read_arrays(path: str, options: ArraysOptions, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The (inputs, labels) arrays a spec names."""
    with ArrayFile(path, f"{where}.path") as file:
        if file.suffix == ".npy":
            return file.read(file.names[0]), _labels_file(file.path, options, where)
        arrays = []
        for role, key in (("inputs_key", options.inputs_key), ("labels_key", options.labels_key)):
            if key not in file.names:
                raise UserError(
                    f"{where}.{role}: '{file.path}' has no array named '{key}'; it holds "
                    f"{sorted(file.names)}"
                )
            arrays.append(file.read(key))
        return arrays[0], arrays[1]


def _labels_file(inputs: Path, options: ArraysOptions, where: str) -> np.ndarray:
    if options.labels_path is None:
        raise UserError(
            f"{where}.labels_path: '{inputs}' is a single .npy array; name the .npy file of labels"
        )
    labels_file = options.resolve(options.labels_path)
    with ArrayFile(labels_file, f"{where}.labels_path") as file:
        return file.read(file.names[0])


def arrays(spec: DatasetSpec, where: str) -> Dataset:
    """Inputs as float32 in the stored layout (e.g. N, C, H, W); integer labels as int64."""
    inputs, labels = read_arrays(str(spec.resolve(spec.path or "")), spec.options, where)
    _check_kinds(inputs, labels, spec.path or "", where)
    if len(inputs) != len(labels):
        raise UserError(
            f"{where}.path: {len(inputs)} inputs but {len(labels)} labels; both arrays need "
            "one entry per sample"
        )
    if len(inputs) == 0:
        raise UserError(
            f"{where}.path: '{spec.path}' holds 0 samples; point it at a file with samples"
        )
    x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
    integer = np.issubdtype(labels.dtype, np.integer)
    y = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64 if integer else np.float32))
    return TensorDataset(x, y)


def _check_kinds(inputs: object, labels: object, path: str, where: str) -> None:
    """Inputs of numbers with a sample axis, labels of numbers one per sample."""
    for role, array in (("inputs", inputs), ("labels", labels)):
        if not isinstance(array, np.ndarray):
            raise UserError(
                f"{where}.path: the {role} of '{path}' are a group of arrays, not one array; "
                f"name the array with {role}_key"
            )
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise UserError(
                f"{where}.path: the {role} of '{path}' hold {array.dtype} values, not numbers; "
                "store numeric arrays"
            )
        if array.ndim == 0:
            raise UserError(
                f"{where}.path: the {role} of '{path}' are a single number, not one entry per "
                "sample"
            )
