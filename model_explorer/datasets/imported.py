"""Datasets of the user's own code: `type: package.module:builder`.

The builder is called with `path` (when the spec gives one, resolved against the workload's
folder) and every other key beside the common ones as a keyword argument (`split: val`); it
returns a map-style dataset of (input, target) pairs (`len()` and `[index]`, e.g. a torch
`Dataset` or a list). `batch_size`, `sample_limit`, `randomize` and the tensor cache then apply
as to every other dataset. This is how a dataset the original tool had as its own module
(Cityscapes, BDD100K, ...) is brought here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset

from model_explorer.datasets.spec import DatasetSpec
from model_explorer.errors import UserError
from model_explorer.schema.registry import call_user_code


def from_user_code(function: Callable[..., Any]) -> Callable[[DatasetSpec, str], Dataset]:
    """The registry's `(spec, where) -> dataset` around the user's `builder(path=, **kwargs)`."""

    def build(spec: DatasetSpec, where: str) -> Dataset:
        kwargs = dict(spec.options.model_extra or {})
        if spec.path is not None:
            kwargs["path"] = str(spec.resolve(spec.path))
        dataset = call_user_code(
            function,
            kwargs,
            f"dataset builder '{spec.type}'",
            where,
            f"{where}.type",
            f"fix the builder or the keys of {where}",
        )
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise UserError(
                f"{where}.type: dataset builder '{spec.type}' returned a "
                f"{type(dataset).__name__}, not a dataset of (input, target) pairs with len() "
                "and [index]"
            )
        return dataset

    return build
