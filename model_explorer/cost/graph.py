"""Which layers' outputs feed each layer: data lineage through every operation of a forward pass.

A consumer of the tracer (tracing/) gives every tensor the set of chosen layers whose outputs
flowed into it (through batch norms, activations, additions of residual branches,
concatenations, views, copies and fake quantizers); a layer's producers are the set its input
carries when the layer runs. "input" stands for the model's own input.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from model_explorer.modules import tensors_in
from model_explorer.tracing import Consumer, OperatorCall, Tracer

MODEL_INPUT = "input"


class Lineage(Consumer):
    """The sources of every tensor of a pass, and the producers of the `layers` (by name)."""

    def __init__(self, layers: dict[str, nn.Module]) -> None:
        self.layers = {id(module): name for name, module in layers.items()}
        self.sources: dict[int, frozenset[str]] = {}
        self.alive: list[Tensor] = []  # keeps ids unique during the pass
        self.producers: dict[str, set[str]] = {}

    def mark(self, tensors: list[Tensor], sources: frozenset[str]) -> None:
        for tensor in tensors:
            self.sources[id(tensor)] = sources
            self.alive.append(tensor)

    def of(self, tensors: list[Tensor]) -> frozenset[str]:
        found: frozenset[str] = frozenset()
        for tensor in tensors:
            found |= self.sources.get(id(tensor), frozenset())
        return found

    def _flow(self, inputs: list[Tensor], outputs: list[Tensor]) -> None:
        sources = self.of(inputs)
        if sources:
            self.mark(outputs, sources | self.of(outputs))

    def after(self, call: OperatorCall) -> None:
        self._flow(call.inputs, call.outputs)

    def aliased(self, source: Tensor, outputs: list[Tensor], packet: str) -> None:
        self._flow([source], outputs)

    def quantized(
        self, name: str, module: nn.Module, source: Tensor | None, output: Tensor
    ) -> None:
        if source is not None:
            self._flow([source], [output])

    def entered(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        if id(module) in self.layers:
            layer = self.layers[id(module)]
            self.producers.setdefault(layer, set()).update(self.of(tensors_in(args)))

    def left(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if id(module) in self.layers:
            self.mark(tensors_in(output), frozenset({self.layers[id(module)]}))


def layer_producers(
    model: nn.Module, example: Tensor, layers: dict[str, nn.Module]
) -> dict[str, set[str]]:
    """For each named layer, the layers (or "input") whose outputs make up its input.

    Args:
        model: the model to run.
        example: one batch of inputs.
        layers: the layers whose inputs to trace back, by name; data flows through every other
            operation.
    """
    lineage = Lineage(layers)
    tracer = Tracer(model, [lineage])
    with tracer.watching():
        lineage.mark([example], frozenset({MODEL_INPUT}))
        tracer.run(example)
    return lineage.producers
