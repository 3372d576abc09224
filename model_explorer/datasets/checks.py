"""The data of a dataset role checked against the model once, before any search: inputs the
model can take, inputs without NaN, and labels that are classes of the model's outputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError, first_line
from model_explorer.modules import run_on


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _outputs(output: Any) -> list[Tensor]:
    if isinstance(output, dict) and "out" in output:
        return [output["out"]]
    return _tensors(output)


def _shape(value: Any) -> str:
    shapes = [list(t.shape[1:]) for t in _tensors(value)]
    return str(shapes[0]) if len(shapes) == 1 else str(shapes)


def check_inputs_finite(inputs: Any, where: str) -> None:
    """Refuse inputs holding NaN or infinity, saying how many samples do."""
    tensors = [t for t in _tensors(inputs) if t.is_floating_point()]
    if not tensors:
        return
    bad = torch.zeros(len(tensors[0]), dtype=torch.bool, device=tensors[0].device)
    for tensor in tensors:
        bad |= ~torch.isfinite(tensor.reshape(len(tensor), -1)).all(dim=1)
    count = int(bad.sum())
    if count:
        raise UserError(
            f"{where}: {count} of {len(bad)} samples hold NaN or infinity in their inputs; "
            "clean the data or leave those samples out"
        )


@torch.inference_mode()
def run_first_batch(model: nn.Module, inputs: Any, where: str, expects: str | None) -> list[Tensor]:
    """The model's outputs on one batch, or a UserError naming the dataset and both shapes."""
    try:
        output = run_on(model, inputs)
    except Exception as error:  # shape, dtype and device errors of any layer
        text = first_line(error)
        if expects is None:
            from model_explorer.input_shapes import first_layer_expects

            expects = first_layer_expects(model)
        wanted = f"; {expects}" if expects else ""
        raise UserError(
            f"{where}: the model cannot take these inputs: one sample has shape "
            f"{_shape(inputs)}{wanted} (the model failed with: {text}); reshape the data or "
            "pick the model it was made for"
        ) from error
    return _outputs(output)


def check_labels(
    outputs: list[Tensor], targets: Any, where: str, ignore_index: int | None = None
) -> None:
    """Labels must be whole class numbers from 0 to the model's output width - 1 (a
    segmentation's `ignore_index` excepted)."""
    paired = list(targets) if isinstance(targets, (list, tuple)) else [targets] * len(outputs)
    for output, labels in zip(outputs, paired, strict=False):
        if not isinstance(labels, Tensor) or output.dim() < 2 or labels.numel() == 0:
            continue
        if labels.is_floating_point():
            whole = torch.isfinite(labels) & (labels == labels.round())
            if not bool(whole.all()):
                example = float(labels[~whole].flatten()[0])
                raise UserError(
                    f"{where}: {int((~whole).sum())} labels are not whole class numbers (e.g. "
                    f"{example}); labels are classes 0, 1, 2, ..."
                )
        values = labels.long().flatten()
        if ignore_index is not None:
            values = values[values != ignore_index]
        if values.numel() == 0:
            continue
        classes = output.shape[1]
        low, high = int(values.min()), int(values.max())
        if low < 0:
            raise UserError(
                f"{where}: {int((values < 0).sum())} labels are negative (e.g. {low}); labels "
                f"are the classes 0 to {classes - 1} of the model's outputs"
            )
        if high >= classes:
            raise UserError(
                f"{where}: labels go up to {high} but the model has {classes} outputs (classes "
                f"0 to {classes - 1}); check model.num_classes, or the labels"
            )


def check_against_model(
    model: nn.Module,
    batches: Any,
    where: str,
    expects: str | None = None,
    labels: bool = True,
    ignore_index: int | None = None,
) -> None:
    """Every check of a dataset role's data against `model`: NaN in any input of `batches` (a
    TensorCache), the first batch through the model, every label within its outputs."""
    check_inputs_finite(batches.inputs, where)
    first_inputs, _ = next(iter(batches))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    moved = first_inputs.to(device) if isinstance(first_inputs, Tensor) else first_inputs
    outputs = run_first_batch(model.eval(), moved, where, expects)
    if labels:
        check_labels(outputs, batches.targets, where, ignore_index)


@torch.inference_mode()
def nonfinite_samples(model: nn.Module, batches: Any) -> int:
    """How many samples of `batches` give an output holding NaN or infinity."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    count = 0
    for inputs, _ in batches:
        moved = inputs.to(device) if isinstance(inputs, Tensor) else inputs
        output = model(*moved) if isinstance(moved, (list, tuple)) else model(moved)
        bad = None
        for tensor in _outputs(output):
            rows = ~torch.isfinite(tensor.reshape(len(tensor), -1)).all(dim=1)
            bad = rows if bad is None else bad | rows
        count += int(bad.sum()) if bad is not None else 0
    return count
