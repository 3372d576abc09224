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
from torch.utils._python_dispatch import TorchDispatchMode

from model_explorer.analysis.hooks.operators import SKIPPED
from model_explorer.analysis.hooks.walk import OperatorWalk
from model_explorer.modules import tensors_in
from model_explorer.quantization.layers import QuantLayer
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer

# Operators whose output is their (first) input under another identity: no operator of the
# network, the tensor keeps its producer.
TRANSPARENT = {
    "detach",
    "alias",
    "lift_fresh",
    "clone",
    "_to_copy",
    "contiguous",
    "as_strided_",  # restrides an output in place (memory format), values unchanged
}
# Views of a weight are the weight (a linear layer's transposed weight).
WEIGHT_VIEWS = {"t", "transpose", "permute", "view", "reshape", "_unsafe_view"}


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
    lists of Values, anything else as it was), its output Values, the module running it and the
    quantized layer it belongs to (or None)."""

    packet: str
    args: tuple[Any, ...]
    outputs: list[Value]
    module: str
    layer: QuantLayer | None = None

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


class _Interceptor(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        recorder = self.recorder
        packet = func.overloadpacket.__name__
        out = func(*args, **kwargs)
        if recorder.inside_quantizer() or not tensors_in((args, kwargs)):
            return out
        if packet in TRANSPARENT or packet == "copy_":
            source = args[1] if packet == "copy_" else args[0]
            if isinstance(source, Tensor):
                recorder.same(source, out)
        elif packet in SKIPPED:
            pass
        elif packet in WEIGHT_VIEWS and recorder.is_weight(args[0]):
            recorder.weight_view(packet, args[0], out)
        else:
            recorder.record(packet, args, kwargs, out)
        return out


class Recorder(OperatorWalk):
    """Runs a model once and records its operators (see Recording). Operators inside
    quantizers are not recorded: an input quantizer's output is its input, quantized; a weight
    quantizer's output is its layer's weight."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.constants = {id(p): n for n, p in self.root.named_parameters()}
        self.constants.update({id(b): n for n, b in self.root.named_buffers()})
        self.values: dict[int, Value] = {}
        self.alive: list[Any] = []
        self.recording = Recording()

    # -- where a tensor comes from ------------------------------------------------------
    def is_weight(self, value: Any) -> bool:
        return (
            isinstance(value, Tensor)
            and id(value) in self.constants
            and (id(value) not in self.values or self.values[id(value)].is_const)
        )

    def _keep(self, tensor: Tensor, value: Value) -> Value:
        self.values[id(tensor)] = value
        self.alive.append(tensor)  # ids stay unique while the forward runs
        return value

    def value(self, tensor: Tensor) -> Value:
        """The Value a tensor argument stands for now."""
        known = self.values.get(id(tensor))
        if known is not None:
            return known
        name = self.constants.get(id(tensor))
        data = snapshot(tensor, copy=name is None)
        return self._keep(tensor, Value(data, is_const=True, name=name))

    def same(self, source: Tensor, out: Any) -> None:
        for output in tensors_in(out):
            self._keep(output, self.value(source))

    def weight_view(self, packet: str, weight: Tensor, out: Any) -> None:
        """A view of a weight stands for the weight, in the weight's own layout."""
        known = self.value(weight)
        for output in tensors_in(out):
            view = Value(known.data, True, known.name, known.nchw, view=packet)
            self._keep(output, view)
            self.constants[id(output)] = self.constants[id(weight)]

    def _argument(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return self.value(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, Tensor) for v in value):
            return [self.value(v) for v in value]
        return value

    def record(self, packet: str, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        arguments = tuple(self._argument(a) for a in (*args, *kwargs.values()))
        outputs = [self._keep(t, Value(snapshot(t))) for t in tensors_in(out)]
        call = Call(packet, arguments, outputs, self.current_module(), self.current_layer())
        self.recording.calls.append(call)

    def _left(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        """After a quantizer: a weight quantizer's output is its layer's weight; an input
        quantizer's output is its input, quantized."""
        if not isinstance(module, TensorQuantizer) or not isinstance(output, Tensor):
            return
        if isinstance(module, WeightQuantizer):
            layer = self.current_module()
            name = f"{layer}.weight" if layer else "weight"
            self.constants[id(output)] = name
            self._keep(output, Value(snapshot(output), is_const=True, name=name))
        elif args and isinstance(args[0], Tensor):
            source = self.value(args[0])
            self._keep(output, Value(snapshot(output), source.is_const, source=source))

    # -- running ------------------------------------------------------------------------
    def run(self, inputs: tuple[Tensor, ...], names: list[str]) -> Recording:
        self.recording = Recording()
        self.values.clear()
        self.alive.clear()
        for tensor, name in zip(inputs, names, strict=True):
            self.recording.inputs.append(self._keep(tensor, Value(snapshot(tensor), name=name)))
        with self.watching(), torch.no_grad(), _Interceptor(self):
            output = self.model(*inputs)
        self.recording.outputs = [self.value(t) for t in tensors_in(output)]
        self.values.clear()
        self.alive.clear()
        return self.recording
