"""Result files on disk: a pickle of builtin types only, whose loader refuses every class and
function (so a result file never runs code), and the check of its layout."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path

FORMAT = "model_explorer.result"
VERSION = 1


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every class and function: only builtin containers and scalars load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name}: result files hold plain data only"
        )


def load_plain(path: str | os.PathLike[str]) -> Any:
    with open(path, "rb") as file:
        return _PlainUnpickler(io.BytesIO(file.read())).load()


def save_plain(data: Any, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    with atomic_path(path) as temporary:
        temporary.write_bytes(pickle.dumps(data, protocol=4))
    return path


# What each key of a result file holds; a file whose keys hold something else is refused.
_LAYOUT: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "workload": (dict,),
    "problem": (dict,),
    "baseline": (list, type(None)),
    "individuals": (list,),
    "generations": (list,),
    "stats": (dict,),
    "complete": (bool,),
    "seed": (int,),
    "partial": (list, type(None)),
    "owner": (dict, type(None)),
}
_PARTIAL = {"configuration": list, "values": dict, "accuracies": list}
_RECORD = {**_PARTIAL, "id": int, "generation": int}


def check_layout(data: Any, path: Path) -> None:
    """Refuse plain data that is not a result, naming the first key that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        kind = type(data).__name__
        raise UserError(f"{path}: not a model_explorer result file (it holds a {kind})")
    optional = ("partial", "owner")
    for key, kinds in _LAYOUT.items():
        if key not in data and key not in optional:
            raise UserError(f"{path}: damaged result file: it has no '{key}'")
        if key in data and not isinstance(data[key], kinds):
            raise UserError(
                f"{path}: damaged result file: '{key}' holds a {type(data[key]).__name__}, "
                f"not a {' or '.join(k.__name__ for k in kinds if k is not type(None))}"
            )
    if data["version"] > VERSION:
        raise UserError(f"{path}: written by a newer model_explorer (format {data['version']})")
    records = [(_RECORD, r) for r in data["individuals"]]
    records += [(_PARTIAL, r) for r in data.get("partial") or []]
    for position, (layout, record) in enumerate(records):
        wrong = [
            key
            for key, kind in layout.items()
            if not isinstance(record, dict) or not isinstance(record.get(key), kind)
        ]
        if wrong:
            raise UserError(
                f"{path}: damaged result file: individual {position} lacks '{wrong[0]}' or "
                "holds something else there"
            )
