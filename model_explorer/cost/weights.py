"""Weight MACs by the module owning the weight, told apart by whether a weight quantizer's
output or the float weight was multiplied: a consumer of the tracer (tracing/), so that the
quantization coverage (quantization/coverage.py) is counted by the same operators, formulas and
module attribution as the cost table.

A product (convolution, linear, matmul: torch's FLOP formulas / 2) counts where one operand is
a parameter of two or more dimensions or a tensor standing for one: a view of it (the tracer
follows those), the output of a weight quantizer (an Opaque module whose `traced_output` is
"weight"; quantized where it changed the weight) or a tensor computed from weights alone (a
standardised weight), by the module owning the parameter. Weights something other than a product
reads together with an activation (an embedding's lookup, a positional parameter added to
activations) are `unread`. A recurrent layer running torch's own kernel (one operator with no
formula) is counted by `recurrent_macs` when it returns, its parameters left out of the
operators so that a decomposed kernel is not counted twice.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torch.utils.flop_counter import flop_registry

from model_explorer.cost.layers import recurrent_macs
from model_explorer.tracing import Consumer, OperatorCall, Tracer


def float_recurrent(module: nn.Module) -> bool:
    """A recurrent layer that runs torch's fused kernel (not one computed in the open, whose
    products are layers of their own: quantization/recurrent.py)."""
    return isinstance(module, nn.RNNBase) and not hasattr(module, "quantized_layers")


class WeightMacs(Consumer):
    """Per owner: `macs` (every weight product), `quantized_macs` (those whose weight operand a
    weight quantizer changed), and the owners in `unread`; `owners` maps id(parameter) to its
    module's name."""

    def __init__(self, owners: dict[int, str]) -> None:
        self.owners = owners
        self.macs: dict[str, int] = {}
        self.quantized_macs: dict[str, int] = {}
        self.unread: set[str] = set()
        self._derived: dict[int, tuple[str, bool]] = {}  # computed from weights: owner, quantized
        self._alive: list[Tensor] = []

    def _weight(self, tensor: Any) -> tuple[str, bool] | None:
        """(owner, quantized) of a tensor standing for a weight, else None."""
        if not isinstance(tensor, Tensor):
            return None
        found = self._derived.get(id(tensor))
        if found is not None:
            return found
        base = self.tracer.base(tensor)
        owner = self.owners.get(id(base)) if base is not None else None
        if owner is None:
            return None
        source = tensor
        while id(source) not in self._derived:
            viewed = self.tracer.view_of(source)
            if viewed is None:
                return owner, False
            source = viewed[0]
        return owner, self._derived[id(source)][1]

    def _keep(self, tensor: Tensor, owner: str, quantized: bool) -> None:
        self._derived[id(tensor)] = (owner, quantized)
        self._alive.append(tensor)

    def quantized(  # type: ignore[override]
        self, name: str, module: nn.Module, source: Tensor | None, output: Tensor
    ) -> None:
        if getattr(module, "traced_output", "") != "weight":
            return
        weight = self._weight(source)
        if weight is not None:
            self._keep(output, weight[0], weight[1] or output is not source)

    def after(self, call: OperatorCall) -> None:
        weights = [(t, w) for t in call.inputs if (w := self._weight(t)) is not None]
        if not weights:
            return
        owner, quantized = weights[0][1]
        if call.func.overloadpacket in flop_registry:
            formula = flop_registry[call.func.overloadpacket]
            macs = int(formula(*call.args, **call.kwargs, out_val=call.out)) // 2
            self.macs[owner] = self.macs.get(owner, 0) + macs
            if quantized:
                self.quantized_macs[owner] = self.quantized_macs.get(owner, 0) + macs
        elif len(weights) == len([t for t in call.inputs if t.dim() > 0]):
            # computed from weights alone (a standardised weight): that weight's
            for tensor in call.outputs:
                self._keep(tensor, owner, any(w[1] for _, w in weights))
        else:
            self.unread.add(owner)

    def left(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if float_recurrent(module) and args:
            self.macs[name] = self.macs.get(name, 0) + recurrent_macs(module, args[0])  # type: ignore[arg-type]


def weight_macs(model: nn.Module, owners: dict[int, str], run: Any) -> WeightMacs:
    """The WeightMacs of `model` on the forward pass `run()` makes, traced; `owners` maps
    id(parameter) to the name of its module (parameters of two or more dimensions, none of a
    float recurrent layer's)."""
    counter = WeightMacs(owners)
    tracer = Tracer(model, [counter])
    with tracer.watching():
        tracer.during(run)
    return counter
