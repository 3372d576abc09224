"""A caller's model called the caller's way: batches of dicts (as Hugging Face models take
them) and a `forward_step(model, batch)` for models whose call is not `model(batch)`, as
modelopt's `forward_step` is. The package passes inputs as tensors, so a dict batch travels as
a tuple of its tensors in key order and is put back together here.

`Stepped` shares its model's children, parameters and buffers instead of holding the model as
a child, so layer names are the caller's own (`encoder.layer.0...`, not `inner.encoder...`)
and a layer swapped in it is swapped in the model."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from model_explorer.errors import UserError

# A dict batch's entry that holds targets, not inputs (Hugging Face's name).
LABELS = "labels"


def checked_output(output: Any, stepped: bool) -> Any:
    """What the package scores: a tensor or a tuple of tensors. A Hugging Face ModelOutput
    from `model(**batch)` gives its first field (logits, or the last hidden state)."""
    if isinstance(output, torch.Tensor) or (
        isinstance(output, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in output)
    ):
        return output
    if not stepped and hasattr(output, "to_tuple"):
        return output.to_tuple()[0]
    what = "forward_step" if stepped else "the model"
    raise UserError(
        f"{what} returned {type(output).__name__}; return a tensor or a tuple of tensors "
        "(e.g. outputs.logits) from a forward_step(model, batch)"
    )


class Stepped(nn.Module):
    """`model` run on a batch rebuilt from tensors (`keys`: a dict batch's keys, in order),
    through `forward_step(model, batch)` when given, else `model(**batch)` for a dict and
    `model(*tensors)` otherwise. Called with keyword arguments (the caller's own call), it is
    the model itself."""

    def __init__(
        self,
        model: nn.Module,
        forward_step: Callable[[nn.Module, Any], Any] | None = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        object.__setattr__(self, "inner", model)  # not a child: its children are ours
        self._modules = model._modules
        self._parameters = model._parameters
        self._buffers = model._buffers
        self.forward_step = forward_step
        self.keys = None if keys is None else list(keys)
        self.training = model.training  # eval stays eval: calibration restores this flag

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or (self.keys is None and self.forward_step is None):
            return self.inner(*args, **kwargs)
        batch: Any = dict(zip(self.keys, args, strict=True)) if self.keys else args
        if not self.keys and len(args) == 1:
            batch = args[0]
        if self.forward_step is not None:
            return checked_output(self.forward_step(self.inner, batch), stepped=True)
        return checked_output(self.inner(**batch), stepped=False)

    def train(self, mode: bool = True) -> Stepped:
        self.inner.training = mode
        return super().train(mode)

    def __deepcopy__(self, memo: dict[int, Any]) -> Stepped:
        return Stepped(copy.deepcopy(self.inner, memo), self.forward_step, self.keys)


def as_pair(batch: Any, keys: list[str] | None) -> tuple[Any, Any, list[str] | None]:
    """A caller's batch as (inputs, targets or None) with a dict's tensors as a tuple in key
    order (its `labels` as the targets), and the keys (those of the first dict seen)."""
    targets = None
    if isinstance(batch, (tuple, list)) and len(batch) == 2:  # (inputs, targets)
        batch, targets = batch
    elif isinstance(batch, (tuple, list)) and len(batch) == 1:
        batch = batch[0]
    if isinstance(batch, Mapping):
        if LABELS in batch and targets is None:
            targets = batch[LABELS]
        keys = keys or [key for key in batch if key != LABELS]
        missing = [key for key in keys if key not in batch]
        if missing:
            raise UserError(f"data: a batch lacks '{missing[0]}', which the first batch had")
        batch = tuple(batch[key] for key in keys)
    return batch, targets, keys
