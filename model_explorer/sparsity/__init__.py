"""Activation block sparsity in the im2col domain: BlockSparsifier (sparsifier.py, kernel.py)
and SparseModel (model.py); the settings in spec.py (no torch). The public names below load
their modules on first use (SPEC 1)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "spec": ["SPARSIFIABLE_LAYERS"],
        "discretize": ["discretize_threshold", "threshold_steps"],
        "model": ["SparseModel"],
        "sparsifier": ["BlockSparsifier", "im2col", "layer_geometry"],
    },
)
