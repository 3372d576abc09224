"""ProblemRecipe: the plain data from which another process builds the problem being explored."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class ProblemRecipe:
    """What defines a problem: the workload (as plain data), the minimum accuracy the exploring
    process derived from its baseline, the hashes of the files the model is built from, the
    folder the workload's relative paths start from (its root, where it was read), and the
    `package.module:function` that builds the problem from the recipe in a worker."""

    workload: dict[str, Any]
    minimum_accuracy: list[float] | None = None
    files: dict[str, str] = field(default_factory=dict)
    root: str | None = None
    builder: str = ""

    @cached_property
    def key(self) -> str:
        """The recipe's identity: a hash of all of it, computed once (a runner reads it for
        every generation, a Dask worker for every genome; the recipe does not change)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_digest(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_files(workload: Any) -> dict[str, str]:
    """path -> hash of the files a Workload's problem is built from (weights, calibration), so
    that a worker holding other files refuses to evaluate rather than answer differently."""
    paths = [workload.model.weights]
    if workload.calibration is not None:
        paths.append(workload.calibration.file)
    resolved = [workload.resolve(path) for path in paths if path is not None]
    return {str(path): file_digest(path) for path in resolved if path.is_file()}
