"""Checks of problem settings that need the model: each names its key and what to do."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from model_explorer.errors import UserError


def check_layer_bounds(
    layer_bounds: dict[str, tuple[int, int]],
    names: Sequence[str],
    key: str = "workload.problem.layer_bounds",
) -> None:
    """Every pattern of `layer_bounds` (written at `key`) must match some quantizer of the
    model."""
    for pattern in layer_bounds:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise UserError(
                f"{key}.{pattern}: matches no quantizer of the model "
                f"(they are {shown}); a pattern such as '{names[0].rpartition('.')[0]}.*' "
                "matches both quantizers of a layer"
                if names
                else f"{key}.{pattern}: the model has no quantizer"
            )
