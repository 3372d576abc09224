"""Block counts of a workload's layers: total blocks for an input shape, zero blocks present."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from model_explorer.errors import UserError
from model_explorer.input_shapes import run_on_shape
from model_explorer.sparsity.model import SparseModel
from model_explorer.workload.context import WorkloadContext


def _sparse_model(context: WorkloadContext, load_weights: bool) -> SparseModel:
    model = context.build_model(load_weights=load_weights)
    return SparseModel.from_spec(model, context.workload.sparsity)


def _table(model: SparseModel) -> pd.DataFrame:
    rows = []
    for name, stats in model.stats().items():
        samples = max(stats["samples"], 1)
        rows.append(
            {
                "layer": name,
                "type": type(model.model.get_submodule(name))
                .__name__.replace("Sparse", "")
                .replace("Quant", ""),
                "total_blocks": stats["total_blocks"] / samples,
                "present_blocks": stats["present_blocks"] / samples,
                "present_share": stats["present_blocks"] / stats["total_blocks"]
                if stats["total_blocks"]
                else 0.0,
            }
        )
    return pd.DataFrame(rows)


def total_blocks(
    context: WorkloadContext, input_shape: Sequence[int] | None = None
) -> pd.DataFrame:
    """Blocks per sample of every sparsified layer's im2col input for `input_shape` (N, C, ...;
    default: one sample of the exploration data's shape). Shapes only: no weights, no data."""
    model = _sparse_model(context, load_weights=False).to(context.device)
    if input_shape is None:
        if not context.has_dataset("exploration"):
            raise UserError(
                "--input-shape: give the input shape, the workload has no exploration data"
            )
        example = next(iter(context.batches("exploration")))[0][:1]
        input_shape = tuple(example.shape)
    run_on_shape(model, input_shape, "--input-shape", context.device)
    return _table(model)[["layer", "type", "total_blocks"]]


def present_blocks(context: WorkloadContext, role: str = "exploration") -> pd.DataFrame:
    """Blocks per sample that are all zero already (every threshold 0), over a dataset role."""
    model = _sparse_model(context, load_weights=True).to(context.device)
    with torch.no_grad():
        for inputs, _ in context.batches(role):
            model(inputs)
    return _table(model)
