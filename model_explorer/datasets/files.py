"""Named arrays in a file: one .npy array, a .npz archive, or an HDF5 file. The `arrays`
dataset and the samples of `analyze --input-data` read files through this one reader."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from model_explorer.errors import UserError
from model_explorer.schema.paths import resolve_path

SUFFIXES = (".npz", ".npy", ".h5", ".hdf5")
# How each kind of file starts: a file that does not is named as what it is not.
MAGIC = {".npz": b"PK", ".npy": b"\x93NUMPY"}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


class ArrayFile:
    """The arrays of one file by name, read on demand (use it as a context manager).

    A .npy file holds one array, named after the file; a .npz archive its arrays in stored
    order; an HDF5 file its top-level datasets and groups in sorted order, a group reading as a
    dict of its datasets (sorted). `where` starts every error message."""

    def __init__(self, path: str | os.PathLike[str], where: str) -> None:
        self.path = resolve_path(path)
        self.where = where
        if not self.path.is_file():
            raise UserError(f"{where}: '{self.path}' does not exist")
        self.suffix = self.path.suffix.lower()
        if self.suffix not in SUFFIXES:
            raise UserError(f"{where}: '{self.path}' is not one of {', '.join(SUFFIXES)}")
        self._handle: Any = None

    def _not_readable(self, error: BaseException | None = None) -> UserError:
        detail = f" ({_first_line(error)})" if error is not None else ""
        return UserError(
            f"{self.where}: '{self.path}' is not a readable {self.suffix} file{detail}; "
            f"write it with numpy (np.savez, np.save) or h5py"
        )

    def __enter__(self) -> ArrayFile:
        magic = MAGIC.get(self.suffix)
        if magic is not None:
            with open(self.path, "rb") as file:
                if file.read(len(magic)) != magic:
                    raise self._not_readable()
        try:
            if self.suffix == ".npz":
                self._handle = np.load(self.path)
            elif self.suffix in (".h5", ".hdf5"):
                import h5py

                self._handle = h5py.File(self.path, "r")
        except Exception as error:  # zip, HDF5 and numpy errors all mean "not readable"
            raise self._not_readable(error) from error
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @property
    def handle(self) -> Any:
        """The open h5py.File or npz archive (None for `.npy`), for layouts read beyond
        `names`/`read` (HDF5 attributes)."""
        return self._handle

    @property
    def names(self) -> list[str]:
        if self.suffix == ".npy":
            return [Path(self.path).stem]
        if self.suffix == ".npz":
            return list(self._handle.files)
        return sorted(self._handle.keys())

    def is_group(self, name: str) -> bool:
        """Whether `name` is an HDF5 group (of datasets) rather than an array."""
        if self._handle is None or self.suffix == ".npz":
            return False
        import h5py

        return isinstance(self._handle[name], h5py.Group)

    def read(self, name: str) -> Any:
        """The array `name` (an HDF5 group: a dict of its arrays by name, sorted)."""
        try:
            return self._read(name)
        except UserError:
            raise
        except ValueError as error:
            if "allow_pickle" in str(error):
                raise UserError(
                    f"{self.where}: array '{name}' of '{self.path}' holds Python objects, not "
                    "numbers (an object array, which is never unpickled); store numeric arrays"
                ) from None
            raise self._not_readable(error) from error
        except Exception as error:  # a truncated archive, a damaged HDF5 dataset
            raise self._not_readable(error) from error

    def _read(self, name: str) -> Any:
        if self.suffix == ".npy":
            return np.load(self.path)
        if name not in self.names:
            raise UserError(
                f"{self.where}: '{self.path}' has no array named '{name}'; it holds "
                f"{sorted(self.names)}"
            )
        if self.is_group(name):
            group = self._handle[name]
            return {key: group[key][()] for key in sorted(group.keys())}
        return self._handle[name] if self.suffix == ".npz" else self._handle[name][()]
