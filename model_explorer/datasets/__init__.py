"""Dataset registry: digits (bundled with scikit-learn), cifar10, imagefolder and arrays from
local files; seeded subsets; and a TensorCache that decodes an evaluation subset once."""

from __future__ import annotations

# Explicit imports register the built-in builders; nothing else runs at import.
from model_explorer.datasets import arrays as _arrays  # noqa: E402,F401
from model_explorer.datasets import digits as _digits  # noqa: E402,F401
from model_explorer.datasets import vision as _vision  # noqa: E402,F401
from model_explorer.datasets.base import (
    DATASETS,
    DatasetSpec,
    build_dataset,
    build_loader,
    register_dataset,
    select_indices,
)
from model_explorer.datasets.cache import TensorCache

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "TensorCache",
    "build_dataset",
    "build_loader",
    "register_dataset",
    "select_indices",
]
