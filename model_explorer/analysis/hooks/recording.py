"""One forward pass recorded operator by operator, for presentations that need the whole graph
before the first hook runs (`analyze --dalgona` folds and fuses operators, which takes knowing
every consumer of a tensor)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.modules import tensors_in
from model_explorer.quantization.layers import TransformedLayer
from model_explorer.tracing import Consumer, OperatorCall, Tracer


def snapshot(tensor: Tensor, copy: bool = True) -> np.ndarray:
    """`tensor` as numpy, copied (later in-place operators must not change it) unless it is a
    parameter."""
    data = tensor.detach()
    if data.dtype in (torch.float16, torch.bfloat16):
        data = data.float()
    array = data.cpu().numpy()
    return array.copy() if copy else array


@dataclass(eq=False)
class Value:
    """One tensor as operators saw it: its data in PyTorch's layout at that moment, whether it
    is a constant (parameter, buffer, number) and its name. Activations are named after the
    operator that produces them once the operators are known; `nchw` says that a 4-D `data`
    is in PyTorch's layout (False for constants already written in the presented layout)."""

    data: np.ndarray
    is_const: bool = False
    name: str | None = None
    nchw: bool = True
    source: Value | None = None  # the same tensor before an input quantizer
    quantizer: nn.Module | None = None  # that input quantizer
    quantparam: dict[str, Any] | None = None  # a Quantize operator's integers' parameters
    view: str | None = None  # a constant's view ('t': transposed) whose data is the constant's

    @property
    def base(self) -> Value:
        return self.source.base if self.source is not None else self

    @property
    def label(self) -> str | None:
        return self.base.name if self.source is not None else self.name


@dataclass(eq=False)
class Call:
    """One ATen operator of the forward: its arguments (tensors as Values, lists of tensors as
    lists of Values, anything else as it was), its output Values, the module running it, the
    quantized layer it belongs to (or None) and its name (as the tracer names it)."""

    packet: str
    args: tuple[Any, ...]
    outputs: list[Value]
    module: str
    layer: TransformedLayer | None = None
    name: str = ""
    opcode: str = ""

    def values(self) -> Iterator[Value]:
        for argument in self.args:
            if isinstance(argument, Value):
                yield argument
            elif isinstance(argument, list):
                yield from (a for a in argument if isinstance(a, Value))


@dataclass
class Recording:
    """A forward pass: the network's input and output Values and every operator call."""

    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)


class Recorder(Consumer):
    """Runs a model once and records its operators (see Recording), as the tracer
    (model_explorer.tracing) finds them. Tensors that stand for others are not operators: a
    transparent call's output is its input, a view of a weight is the weight (a linear layer's
    transposed weight keeps the weight's own layout, marked `view='t'`; other views of a
    constant are the constant as used, folded), an input quantizer's output is its input,
    quantized, and a weight quantizer's output is its layer's weight."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.tracer = Tracer(model, [self])
        self.values: dict[int, Value] = {}
        self.alive: list[Any] = []
        self.recording = Recording()

    # -- where a tensor comes from ------------------------------------------------------
    def _keep(self, tensor: Tensor, value: Value) -> Value:
        self.values[id(tensor)] = value
        self.alive.append(tensor)  # ids stay unique while the forward runs
        return value

    def value(self, tensor: Tensor) -> Value:
        """The Value a tensor argument stands for now (one nobody produced is a constant)."""
        known = self.values.get(id(tensor))
        if known is not None:
            return known
        name = self.tracer.constant(tensor)
        data = snapshot(tensor, copy=self.tracer.parameter(tensor) is not tensor)
        return self._keep(tensor, Value(data, is_const=True, name=name))

    def aliased(self, source: Tensor, outputs: list[Tensor], packet: str) -> None:
        known = self.value(source)
        for output in outputs:
            if not known.is_const or known.name is None:
                self._keep(output, known)  # the same tensor under another identity
            elif packet == "t":  # a linear layer's weight, in the weight's own layout
                self._keep(output, Value(known.data, True, known.name, known.nchw, view=packet))
            else:
                self._keep(output, Value(snapshot(output), True, known.name, view=packet))

    def quantized(
        self, name: str, module: nn.Module, source: Tensor | None, output: Tensor
    ) -> None:
        weight = self.tracer.constant(output)
        if weight is not None:
            self._keep(output, Value(snapshot(output), is_const=True, name=weight))
        elif source is not None:
            known = self.value(source)
            found = Value(snapshot(output), known.is_const, source=known)
            found.quantizer = module  # its parameters are read after the forward, untraced
            self._keep(output, found)

    def _argument(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return self.value(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, Tensor) for v in value):
            return [self.value(v) for v in value]
        return value

    def after(self, call: OperatorCall) -> None:
        arguments = tuple(self._argument(a) for a in (*call.args, *call.kwargs.values()))
        outputs = [self._keep(t, Value(snapshot(t))) for t in call.outputs]
        layer = call.owner if isinstance(call.owner, TransformedLayer) else None
        recorded = Call(call.packet, arguments, outputs, call.module, layer, call.name, call.opcode)
        self.recording.calls.append(recorded)

    # -- running ------------------------------------------------------------------------
    def run(self, inputs: tuple[Tensor, ...], names: list[str]) -> Recording:
        self.recording = Recording()
        self.values.clear()
        self.alive.clear()
        for tensor, name in zip(inputs, names, strict=True):
            self.recording.inputs.append(self._keep(tensor, Value(snapshot(tensor), name=name)))
        with self.tracer.watching():
            output = self.tracer.run(*inputs)
        self.recording.outputs = [self.value(t) for t in tensors_in(output)]
        self.values.clear()
        self.alive.clear()
        return self.recording
