"""The workload's `sparsity:` settings: which layers sparsify their input blocks, and the size of
the blocks (the original tool's `exploration.extra_args.block_size`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_explorer.schema.specs import PositiveInt, Spec

# The layer types a SparseModel sparsifies (names as in torch.nn).
SPARSIFIABLE_LAYERS = ("Conv1d", "Conv2d", "Linear")


class SparsitySpec(Spec):
    """Which layers sparsify their input blocks, and the blocks' size [width, height] (width along
    the unfolded input's C*kh*kw columns, height along its output positions)."""

    block_size: tuple[PositiveInt, PositiveInt] = (8, 8)
    """[width, height] of the blocks a sparsified layer may zero: width along the unfolded
    input's C x kh x kw columns, height along its output positions."""
    layer_types: list[Literal[SPARSIFIABLE_LAYERS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(SPARSIFIABLE_LAYERS)
    )
    """The torch.nn layer types that sparsify their input."""
    include: list[str] = Field(default_factory=lambda: ["*"])
    """Shell-style patterns of the module names to sparsify."""
    exclude: list[str] = Field(default_factory=list)
    """Patterns of module names left dense (they win over `include`)."""
    chunk_mib: PositiveInt = 64
    """The memory in MiB an unfolded input may take at once; a larger one is sparsified in
    chunks of samples."""
