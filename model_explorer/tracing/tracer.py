"""The tracer: a forward pass seen ATen call by ATen call, each call attributed to the module
running it and sorted as tracing/operators.py says, told to every consumer at once.

Consumers (the cost table, the data lineage, the analysis hooks, dalgona's recording, compare's
localisation) define what they need of `Consumer`: `before`/`after` an operator of the network,
`aliased` (a tensor that stands for another: transparent calls and views of constants),
`quantized` (what a fake quantizer returned), `entered`/`left` a module. The tracer alone works
out which module runs, skips the work inside quantizers (modules marked `Opaque`), follows views
of weights back to the weight, names operators and keeps the tensors whose identity it tracks
alive, so that no id is reused while the pass runs.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from model_explorer.modules import ModuleTrace, module_hooks, tensors_in, unfused_attention
from model_explorer.tracing.operators import (
    FACTORIES,
    TRANSPARENT,
    Operator,
    is_view,
    operator_of,
    transparent_source,
)


class Opaque:
    """Mixin of modules whose inner work is no operator of the network (fake quantizers): the
    tracer emits nothing from inside one, and tells consumers what its output stands for:
    `traced_output` "input" (its input, changed in value only) or "weight" (the weight of the
    module that calls it)."""

    traced_output: ClassVar[str] = "input"


class Wrapper:
    """Mixin of modules that wrap a model (`self.model`) and whose operators are named as in
    the model they wrap (QuantizedModel, SparseModel)."""

    model: nn.Module


@dataclass(eq=False)
class OperatorCall:
    """One operator of the network: its name (`<module>/<Opcode>#<n>`), presentation
    (opcode, argument names), ATen packet, the module running it (`module`, `owner`), its
    arguments, whether it only views its input, and after it ran its output and seconds."""

    name: str
    operator: Operator
    packet: str
    func: Any
    module: str
    owner: nn.Module | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    view: bool
    inputs: list[Tensor]  # the tensors among the arguments
    out: Any = None
    outputs: list[Tensor] = field(default_factory=list)  # the tensors of `out`
    seconds: float = 0.0

    @property
    def opcode(self) -> str:
        return self.operator.opcode


class Consumer:
    """What a consumer of the tracer may define; every method does nothing by default. The
    tracer attaches itself (`self.tracer`) before the first call."""

    tracer: Tracer

    def attach(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def before(self, call: OperatorCall) -> None:
        """An operator is about to run (`call.out` is None)."""

    def after(self, call: OperatorCall) -> None:
        """An operator ran: `call.out` and `call.seconds` are set."""

    def aliased(self, source: Tensor, outputs: list[Tensor], packet: str) -> None:
        """`outputs` stand for `source` (a transparent call, or a view of a constant)."""

    def quantized(
        self, name: str, module: nn.Module, source: Tensor | None, output: Tensor
    ) -> None:
        """An Opaque module returned `output` for `source`; `tracer.constant(output)` names it
        when it stands for a weight."""

    def entered(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        """A module's forward starts (none inside an Opaque module)."""

    def left(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        """A module's forward ended (none inside an Opaque module)."""


@dataclass
class _Constant:
    name: str
    base: Tensor  # the parameter or buffer it stands for
    source: Tensor | None = None  # for a view of a constant: the tensor it views
    packet: str | None = None  # and the ATen view that made it


@dataclass
class _Pass:
    """What the tracer tracks during one forward pass."""

    counts: Counter[str] = field(default_factory=Counter)
    derived: dict[int, _Constant] = field(default_factory=dict)  # views, quantized weights
    alive: list[Tensor] = field(default_factory=list)
    opaque: int = 0  # depth of Opaque modules running


def root_of(model: nn.Module) -> nn.Module:
    """The model whose names operators carry: the wrapped one of a Wrapper."""
    return model.model if isinstance(model, Wrapper) else model


class Tracer:
    """Traces forward passes of `model` for `consumers`: `with tracer.watching():` then
    `tracer.run(*inputs)` per pass.

    Args:
        model: the model (a Wrapper's operators are named as in the model it wraps).
        consumers: what is told every operator, alias, quantizer output and module call.
        timed: time each operator (`call.seconds`).
        sync: run around each timed operator (torch.cuda.synchronize on a GPU), so that the
            time is the operator's own.
    """

    def __init__(
        self,
        model: nn.Module,
        consumers: Sequence[Consumer] = (),
        timed: bool = False,
        sync: Callable[[], Any] | None = None,
    ) -> None:
        self.model = model
        self.root = root_of(model)
        self.names = {id(m): n for n, m in self.root.named_modules()}
        self.consumers = list(consumers)
        self.timed = timed
        self.sync = sync or (lambda: None)
        self._constants = {
            id(t): _Constant(n, t)
            for n, t in [*self.root.named_parameters(), *self.root.named_buffers()]
        }
        self.trace = ModuleTrace()
        self.state = _Pass()
        for consumer in self.consumers:
            consumer.attach(self)

    # -- what a tensor stands for --------------------------------------------------------
    def _constant(self, tensor: Any) -> _Constant | None:
        if not isinstance(tensor, Tensor):
            return None
        return self.state.derived.get(id(tensor)) or self._constants.get(id(tensor))

    def constant(self, tensor: Any) -> str | None:
        """The name of the parameter, buffer or quantized weight `tensor` is or stands for
        (through views), else None."""
        found = self._constant(tensor)
        return found.name if found is not None else None

    def base(self, tensor: Any) -> Tensor | None:
        """The parameter or buffer `tensor` stands for, else None."""
        found = self._constant(tensor)
        return found.base if found is not None else None

    def view_of(self, tensor: Any) -> tuple[Tensor, str] | None:
        """For a view of a constant (a linear layer's transposed weight): the tensor it views
        and the ATen view that made it, else None."""
        found = self._constant(tensor)
        if found is None or found.source is None or found.packet is None:
            return None
        return found.source, found.packet

    def parameter(self, tensor: Any) -> nn.Parameter | None:
        base = self.base(tensor)
        return base if isinstance(base, nn.Parameter) else None

    def _stand_for(self, outputs: Iterable[Tensor], constant: _Constant) -> None:
        for output in outputs:
            self.state.derived[id(output)] = constant
            self.state.alive.append(output)

    # -- modules --------------------------------------------------------------------------
    def current(self) -> tuple[str, nn.Module | None]:
        current = self.trace.current
        return (current[0], current[1]) if current is not None else ("", None)

    def _entered(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        if isinstance(module, Opaque):
            self.state.opaque += 1
        elif not self.state.opaque:
            for consumer in self.consumers:
                consumer.entered(name, module, args)

    def _left(self, name: str, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if isinstance(module, Opaque):
            self.state.opaque -= 1
            if not self.state.opaque and isinstance(output, Tensor):
                self._quantized(name, module, args, output)
        elif not self.state.opaque:
            for consumer in self.consumers:
                consumer.left(name, module, args, output)

    def _quantized(self, name: str, module: nn.Module, args: tuple[Any, ...], out: Tensor) -> None:
        source = args[0] if args and isinstance(args[0], Tensor) else None
        if module.traced_output == "weight":  # type: ignore[attr-defined]
            layer = self.current()[0]
            base = self.base(source) if source is not None else None
            weight = _Constant(
                f"{layer}.weight" if layer else "weight", base if base is not None else out
            )
            self._stand_for([out], weight)
        for consumer in self.consumers:
            consumer.quantized(name, module, source, out)

    # -- operators ------------------------------------------------------------------------
    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        packet = func.overloadpacket.__name__
        if self.state.opaque or packet in FACTORIES:
            return func(*args, **kwargs)
        inputs = tensors_in((args, kwargs))
        if not inputs:
            return func(*args, **kwargs)
        if packet in TRANSPARENT:
            out = func(*args, **kwargs)
            self._aliased(transparent_source(packet, args), out, packet)
            return out
        view = is_view(func, packet)
        if view and self._constant(args[0]) is not None:
            out = func(*args, **kwargs)
            self._aliased(args[0], out, packet)
            return out
        call = self._call(func, packet, args, kwargs, view, inputs)
        for consumer in self.consumers:
            consumer.before(call)
        if self.timed:
            self.sync()
            started = time.perf_counter()
        call.out = func(*args, **kwargs)
        if self.timed:
            self.sync()
            call.seconds = time.perf_counter() - started
        call.outputs = tensors_in(call.out)
        for consumer in self.consumers:
            consumer.after(call)
        return call.out

    def _aliased(self, source: Any, out: Any, packet: str) -> None:
        outputs = tensors_in(out)
        constant = self._constant(source)
        if constant is not None:
            self._stand_for(outputs, _Constant(constant.name, constant.base, source, packet))
        if isinstance(source, Tensor):
            for consumer in self.consumers:
                consumer.aliased(source, outputs, packet)

    def _call(
        self,
        func: Any,
        packet: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        view: bool,
        inputs: list[Tensor],
    ) -> OperatorCall:
        weight_second = len(args) > 1 and self._constant(args[1]) is not None
        operator = operator_of(packet, args, weight_second)
        module, owner = self.current()
        key = f"{module}/{operator.opcode}"
        index = self.state.counts[key]
        self.state.counts[key] += 1
        name = f"{key}#{index}" if module else f"{operator.opcode}#{index}"
        return OperatorCall(name, operator, packet, func, module, owner, args, kwargs, view, inputs)

    # -- running --------------------------------------------------------------------------
    @contextmanager
    def watching(self) -> Iterator[Tracer]:
        """Module hooks over every module (named as in the root model; `Inline` ones, a
        layer's default transforms, are left out, so that their work is the layer's), attention
        unfused and gradients off, for the block; forward passes in it go through `run`."""
        modules = [(self.names.get(id(m), ""), m) for m in self.model.modules()]
        with ExitStack() as stack:
            self.trace = stack.enter_context(
                module_hooks(self.model, self._entered, self._left, modules)
            )
            stack.enter_context(unfused_attention())
            stack.enter_context(torch.no_grad())
            yield self

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """One forward pass, traced (inside `watching`): the model on these inputs."""
        return self.during(lambda: self.model(*args, **kwargs))

    def during(self, call: Callable[[], Any]) -> Any:
        """`call()` traced (inside `watching`), a forward pass of the model as its caller makes
        it (a batch in the caller's own form); operator counts start afresh.

        Python's cyclic garbage collector is paused for the pass: the pass keeps thousands of
        small objects alive, and collections scanning them took a fifth of the cost table's
        time (resnet50: 115 ms with it, 90 ms without). Reference counting frees everything
        the pass drops as usual; cycles wait for the pass to end."""
        self.state = _Pass()
        collecting = gc.isenabled()
        gc.disable()
        try:
            with _Mode(self):
                return call()
        finally:
            self.state = _Pass()
            if collecting:
                gc.enable()


class _Mode(TorchDispatchMode):
    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return self.tracer.dispatch(func, args, kwargs or {})


def trace(model: nn.Module, consumers: Sequence[Consumer], *args: Any, **kwargs: Any) -> Any:
    """Run `model` once with `consumers` told every operator; its output.

    Args:
        model: the model.
        consumers: the Consumers of the pass.
        *args: the model's positional inputs.
        **kwargs: the model's keyword inputs.
    """
    tracer = Tracer(model, consumers)
    with tracer.watching():
        return tracer.run(*args, **kwargs)
