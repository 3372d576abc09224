"""Dataset registry: digits (bundled with scikit-learn), cifar10, imagefolder, imagenet (image
folder or WebDataset shards), imagenet_c and arrays from local files, `package.module:builder`
of the user's code; seeded subsets; and a TensorCache that decodes an evaluation subset once."""

from __future__ import annotations

# Explicit imports register the built-in builders; nothing else runs at import.
from model_explorer.datasets import arrays as _arrays  # noqa: E402,F401
from model_explorer.datasets import digits as _digits  # noqa: E402,F401
from model_explorer.datasets import imagenet as _imagenet  # noqa: E402,F401
from model_explorer.datasets import imported as _imported  # noqa: E402,F401
from model_explorer.datasets import photos as _photos  # noqa: E402,F401
from model_explorer.datasets import text as _text  # noqa: E402,F401
from model_explorer.datasets import vision as _vision  # noqa: E402,F401
from model_explorer.datasets.base import (
    DATASETS,
    DatasetSpec,
    SampleStream,
    build_dataset,
    build_loader,
    register_dataset,
    select_indices,
)
from model_explorer.datasets.cache import TensorCache

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "SampleStream",
    "TensorCache",
    "build_dataset",
    "build_loader",
    "register_dataset",
    "select_indices",
]
