"""The workload's `sparsity:` settings: which layers sparsify their input blocks, and the size of
the blocks (the original tool's `exploration.extra_args.block_size`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_explorer.schema import PositiveInt, Spec
from model_explorer.sparsity.model import SPARSIFIABLE_LAYERS


class SparsitySpec(Spec):
    """Which layers sparsify their input blocks, and the blocks' size [width, height] (width along
    the unfolded input's C*kh*kw columns, height along its output positions)."""

    block_size: tuple[PositiveInt, PositiveInt] = (8, 8)

    layer_types: list[Literal[SPARSIFIABLE_LAYERS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(SPARSIFIABLE_LAYERS)
    )
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    chunk_mib: PositiveInt = 64
