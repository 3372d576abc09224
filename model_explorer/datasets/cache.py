"""TensorCache: an evaluation subset decoded once and kept as tensors on the device."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from model_explorer.datasets.base import DatasetSpec, build_loader
from model_explorer.errors import UserError


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, Tensor):
        return torch.cat(parts)
    if isinstance(first, (list, tuple)):
        return type(first)(_concat([part[i] for part in parts]) for i in range(len(first)))
    raise TypeError(f"cannot cache batch element of type {type(first).__name__}")


def _slice(value: Any, start: int, stop: int) -> Any:
    if isinstance(value, Tensor):
        return value[start:stop]
    return type(value)(_slice(item, start, stop) for item in value)


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    return type(value)(_to(item, device) for item in value)


class TensorCache:
    """Holds all inputs and targets of a subset as tensors on a device and yields the same
    batches, in the same order, as the loader it was made from, without decoding or DataLoader
    work (`from_spec`, `from_loader` and `from_batches` make one).

    Args:
        inputs: every sample's input, one tensor (or a tuple of tensors) along dim 0.
        targets: every sample's target: a tensor, or a tuple of tensors for multi-output
            workloads.
        batch_size: the samples per batch it yields.
    """

    def __init__(self, inputs: Any, targets: Any, batch_size: int) -> None:
        self.inputs = inputs
        self.targets = targets
        self.batch_size = batch_size
        self.num_samples = len(inputs[0] if isinstance(inputs, (list, tuple)) else inputs)

    @classmethod
    def from_batches(
        cls,
        batches: Iterable[tuple[Any, Any]],
        device: torch.device | str = "cpu",
        where: str = "dataset",
    ) -> TensorCache:
        """Decode `batches` once into tensors on `device` (`where` names the data in errors)."""
        inputs, targets, batch_size = [], [], None
        for batch_inputs, batch_targets in batches:
            inputs.append(batch_inputs)
            targets.append(batch_targets)
            if batch_size is None:
                batch_size = len(
                    batch_targets[0] if isinstance(batch_targets, (list, tuple)) else batch_targets
                )
        if not inputs:
            raise UserError(
                f"{where}: the data holds no samples; point it at data with at least one sample"
            )
        device = torch.device(device)
        return cls(_to(_concat(inputs), device), _to(_concat(targets), device), batch_size or 1)

    @classmethod
    def from_spec(
        cls,
        spec: DatasetSpec,
        seed: int,
        device: torch.device | str = "cpu",
        where: str = "dataset",
    ) -> TensorCache:
        """Decode the spec's subset once through its DataLoader and keep it on `device`."""
        return cls.from_batches(build_loader(spec, seed, where), device, where)

    @property
    def device(self) -> torch.device:
        """The device the cached inputs are on."""
        first = self.inputs[0] if isinstance(self.inputs, (list, tuple)) else self.inputs
        return first.device

    def __len__(self) -> int:
        return -(-self.num_samples // self.batch_size)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for start in range(0, self.num_samples, self.batch_size):
            stop = start + self.batch_size
            yield _slice(self.inputs, start, stop), _slice(self.targets, start, stop)
