"""Activation block sparsity in the im2col domain: BlockSparsifier and SparseModel."""

from __future__ import annotations

from model_explorer.sparsity.discretize import discretize_threshold, threshold_steps
from model_explorer.sparsity.model import SPARSIFIABLE_LAYERS, SparseModel
from model_explorer.sparsity.sparsifier import BlockSparsifier, im2col, layer_geometry

__all__ = [
    "SPARSIFIABLE_LAYERS",
    "BlockSparsifier",
    "SparseModel",
    "discretize_threshold",
    "im2col",
    "layer_geometry",
    "threshold_steps",
]
