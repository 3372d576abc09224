"""The workload's `sparsity:` settings (the block size is `exploration.extra_args.block_size`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_explorer.schema import PositiveInt, Spec
from model_explorer.sparsity.model import SPARSIFIABLE_LAYERS


class SparsitySpec(Spec):
    """Which layers sparsify their input blocks."""

    layer_types: list[Literal[SPARSIFIABLE_LAYERS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(SPARSIFIABLE_LAYERS)
    )
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    chunk_mib: PositiveInt = 64
