"""Small helpers over modules and tensors shared by the layer swaps, cost analysis and hooks."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn
from torch.utils._pytree import tree_flatten


def set_child(root: nn.Module, name: str, child: nn.Module) -> None:
    """Replace the submodule at dotted path `name` of `root` with `child`."""
    parent_name, _, attribute = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attribute, child)


def selected(name: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether a module name matches an `include` pattern and no `exclude` pattern."""
    return any(fnmatch.fnmatchcase(name, p) for p in include) and not any(
        fnmatch.fnmatchcase(name, p) for p in exclude
    )


def tensors_in(value: Any) -> list[Tensor]:
    """Every tensor in a (nested) structure of arguments or outputs."""
    return [v for v in tree_flatten(value)[0] if isinstance(v, Tensor)]
