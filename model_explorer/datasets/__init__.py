"""Datasets: the registry and every dataset's settings (spec.py, no torch), the built-in builders
(digits, bundled with scikit-learn; photos; sentences; cifar10; imagefolder; imagenet, image
folders or WebDataset shards; imagenet_c; arrays from local files; imported.py: a
`package.module:builder` of the user's code, each imported when it first builds), seeded
subsets and loaders (base.py), and a TensorCache that decodes an evaluation subset once
(cache.py). Its public names load their modules on first use (SPEC 1)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DATASETS": "spec",
    "DatasetSpec": "spec",
    "register_dataset": "spec",
    "SampleStream": "base",
    "build_dataset": "base",
    "build_loader": "base",
    "select_indices": "base",
    "TensorCache": "cache",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
