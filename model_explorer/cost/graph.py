"""Which layers' outputs feed each layer: data lineage through every operation of a forward pass.

A TorchDispatchMode gives every tensor the set of chosen layers whose outputs flowed into it
(through batch norms, activations, additions of residual branches, concatenations, ...); a
layer's producers are the set its input carries when the layer runs. "input" stands for the
model's own input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from model_explorer.modules import module_hooks, tensors_in

MODEL_INPUT = "input"


class _Lineage(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.sources: dict[int, frozenset[str]] = {}
        self.alive: list[Tensor] = []  # keeps ids unique during the pass

    def mark(self, tensors: list[Tensor], sources: frozenset[str]) -> None:
        for tensor in tensors:
            self.sources[id(tensor)] = sources
            self.alive.append(tensor)

    def of(self, tensors: list[Tensor]) -> frozenset[str]:
        found: frozenset[str] = frozenset()
        for tensor in tensors:
            found |= self.sources.get(id(tensor), frozenset())
        return found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        inputs = self.of(tensors_in((args, kwargs)))
        outputs = tensors_in(out)
        if inputs:
            self.mark(outputs, inputs | self.of(outputs))
        return out


def layer_producers(
    model: nn.Module, example: Tensor, layers: dict[str, nn.Module]
) -> dict[str, set[str]]:
    """For each named layer, the layers (or "input") whose outputs make up its input."""
    lineage = _Lineage()
    producers: dict[str, set[str]] = {}

    def before(name: str, module: nn.Module, args: tuple) -> None:
        producers.setdefault(name, set()).update(lineage.of(tensors_in(args)))

    def after(name: str, module: nn.Module, args: tuple, output: Any) -> None:
        lineage.mark(tensors_in(output), frozenset({name}))

    with module_hooks(model, before, after, layers.items()), torch.no_grad():
        lineage.mark([example], frozenset({MODEL_INPUT}))
        with lineage:
            model(example)
    return producers
