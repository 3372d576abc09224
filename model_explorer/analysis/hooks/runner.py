"""Operator-level analysis hooks: user code called before and after every operator of a forward.

Operators are intercepted at the ATen level (a TorchDispatchMode), so functional code counts as
operators (`x + y`, `torch.cat`, `F.relu`, `flatten`), not only modules, and any model that runs
eagerly can be analysed (nothing is traced). An analysis object may define:

    StartAnalysis(self) / EndAnalysis(self)
    StartNetworkExecution(self, inputs) / EndNetworkExecution(self, outputs)
    DefaultOpPre(self, name, opcode, inputs) / DefaultOpPost(self, name, opcode, inputs, output)
    <Opcode>Pre(self, name, <named arguments>) / <Opcode>Post(self, name, <named arguments>, output)

An operator whose specific hook is missing goes to the Default hook. Every tensor is passed as
{'name': str, 'data': numpy array, 'quantparam': {'scale', 'zero_point', 'quantized_dimension'} or
None}; quantparam is filled for the inputs and filters of a QuantizedModel's layers.
"""

from __future__ import annotations

import inspect
import linecache
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from model_explorer.analysis.hooks.operators import SKIPPED, Operator, operator_of, quantparam
from model_explorer.analysis.hooks.walk import OperatorWalk
from model_explorer.errors import UserError
from model_explorer.modules import tensors_in
from model_explorer.quantization.quantizer import WeightQuantizer


class StopAnalysis(Exception):
    """Raised by an analysis to end the run early; EndAnalysis is still called."""


class HookError(UserError):
    """An analysis hook raised an exception."""


def _user_line(
    error: BaseException, source: str | None, function: Callable[..., Any] | None = None
) -> str:
    """Where in the analysis file the error arose: its last frame there; a hook called with
    arguments it does not take never starts, so then the hook's own first line."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if source and Path(f.filename).resolve() == Path(source).resolve()]
    code = getattr(function, "__code__", None)
    if not own and code is not None and isinstance(error, TypeError):
        line = linecache.getline(code.co_filename, code.co_firstlineno).strip()
        return f" ({Path(code.co_filename).name}, line {code.co_firstlineno}: {line})"
    frame = own[-1] if own else (frames[-1] if frames else None)
    return f" ({Path(frame.filename).name}, line {frame.lineno}: {frame.line})" if frame else ""


class _Interceptor(TorchDispatchMode):
    def __init__(self, runner: HookRunner) -> None:
        super().__init__()
        self.runner = runner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        runner = self.runner
        packet = func.overloadpacket.__name__
        if runner.inside_quantizer() or packet in SKIPPED or not tensors_in((args, kwargs)):
            return func(*args, **kwargs)
        operator = operator_of(packet, args)
        if operator.opcode in ("Transpose", "Reshape") and runner.is_parameter(args[0]):
            # A view of a weight (a linear layer's transposed weight) is the weight, not an
            # operator of the network: remember it and run on.
            out = func(*args, **kwargs)
            runner.alias(args[0], out)
            return out
        if packet == "mm" and len(args) > 1 and id(args[1]) in runner.aliases:
            operator = Operator(
                "FullyConnected", ("input", "filter")
            )  # a linear layer without bias
        name = runner.operator_name(operator.opcode)
        runner.call_pre(name, operator, args)
        out = func(*args, **kwargs)
        runner.call_post(name, operator, args, out)
        return out


class HookRunner(OperatorWalk):
    """Runs a model over samples and calls an analysis object's hooks (see the module docstring)."""

    def __init__(self, model: nn.Module, analysis: Any, source: str | None = None) -> None:
        super().__init__(model)
        self.analysis = analysis
        self.source = source
        self.parameters = {id(p): n for n, p in self.root.named_parameters()}
        self.counts: Counter[str] = Counter()
        self.aliases: dict[int, str] = {}
        self.alive: list[Tensor] = []
        self.current = ""

    # -- naming and tensors ---------------------------------------------------------------
    def operator_name(self, opcode: str) -> str:
        module = self.current_module()
        key = f"{module}/{opcode}"
        index = self.counts[key]
        self.counts[key] += 1
        return f"{key}#{index}" if module else f"{opcode}#{index}"

    def tensor(self, value: Tensor, role: str, name: str) -> dict[str, Any]:
        parameter = self.parameters.get(id(value)) or self.aliases.get(id(value))
        layer = self.current_layer()
        param = None
        if layer is not None and role in ("input", "filter"):
            param = quantparam(layer.input_quantizer if role == "input" else layer.weight_quantizer)
        data = value.detach()
        if role == "filter" and id(value) in self.aliases and data.dim() == 2:
            data = data.t()  # a linear layer's weight, in its own (out, in) layout
        return {
            "name": parameter or f"{name}:{role}",
            "data": data.cpu().numpy(),
            "quantparam": param,
        }

    def _arguments(self, name: str, operator: Operator, args: tuple) -> dict[str, Any]:
        named = {}
        for index, value in enumerate(args):
            key = operator.arguments[index] if index < len(operator.arguments) else f"arg{index}"
            if isinstance(value, Tensor):
                named[key] = self.tensor(value, key, name)
            elif (
                isinstance(value, (list, tuple))
                and value
                and all(isinstance(v, Tensor) for v in value)
            ):
                named[key] = [self.tensor(v, f"{key}{i}", name) for i, v in enumerate(value)]
            else:
                named[key] = value
        return named

    # -- hooks ----------------------------------------------------------------------------
    def _call(
        self, hook: str, name: str, function: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        try:
            function(*args, **kwargs)
        except StopAnalysis:
            raise
        except Exception as error:
            where = f" at operator '{name}'" if name else ""
            raise HookError(
                f"analysis hook {hook}{where} failed: {type(error).__name__}: {error}"
                f"{_user_line(error, self.source, function)}"
            ) from error

    def hook(self, name: str) -> Callable[..., Any] | None:
        return getattr(self.analysis, name, None)

    def call_pre(self, name: str, operator: Operator, args: tuple) -> None:
        specific = self.hook(f"{operator.opcode}Pre")
        default = self.hook("DefaultOpPre")
        if specific is None and default is None:
            return
        named = self._arguments(name, operator, args)
        if specific is not None:
            self._call(f"{operator.opcode}Pre", name, specific, name, **_accepted(specific, named))
        else:
            self._call(
                "DefaultOpPre", name, default, name, operator.opcode, list(_tensor_values(named))
            )

    def is_parameter(self, value: Any) -> bool:
        return isinstance(value, Tensor) and (
            id(value) in self.parameters or id(value) in self.aliases
        )

    def alias(self, source: Tensor, out: Any) -> None:
        name = self.parameters.get(id(source)) or self.aliases[id(source)]
        for output in tensors_in(out):
            self.aliases[id(output)] = name
            self.alive.append(output)

    def call_post(self, name: str, operator: Operator, args: tuple, out: Any) -> None:
        specific = self.hook(f"{operator.opcode}Post")
        default = self.hook("DefaultOpPost")
        if specific is None and default is None:
            return
        named = self._arguments(name, operator, args)
        outputs = tensors_in(out)
        output = self.tensor(outputs[0], "output", name) if outputs else None
        if specific is not None:
            self._call(
                f"{operator.opcode}Post",
                name,
                specific,
                name,
                **_accepted(specific, {**named, "output": output}),
            )
        else:
            self._call(
                "DefaultOpPost",
                name,
                default,
                name,
                operator.opcode,
                list(_tensor_values(named)),
                output,
            )

    # -- running --------------------------------------------------------------------------
    def run(self, samples: Iterable[tuple[Tensor, ...]], max_samples: int | None = None) -> int:
        """Call the hooks over `samples` (tuples of model inputs); returns how many ran.
        EndAnalysis always runs, also after an error, so that written results are kept; the
        first error is the one raised, an EndAnalysis failure after it is added to it."""
        done = 0
        first: BaseException | None = None
        try:
            with self.watching():
                self._start_analysis()
                for inputs in samples:
                    if max_samples is not None and done >= max_samples:
                        break
                    self._sample(inputs)
                    done += 1
        except StopAnalysis:
            pass
        except BaseException as error:  # noqa: BLE001 - re-raised below, after EndAnalysis
            first = error
        self._end_analysis(first)
        if first is not None:
            raise first
        return done

    def _start_analysis(self) -> None:
        if (start := self.hook("StartAnalysis")) is not None:
            self._call("StartAnalysis", "", start)

    def _end_analysis(self, first: BaseException | None) -> None:
        end = self.hook("EndAnalysis")
        if end is None:
            return
        try:
            self._call("EndAnalysis", "", end)
        except HookError as error:
            if first is None:
                raise
            if isinstance(first, UserError):
                raise HookError(f"{first}; then EndAnalysis failed too: {error}") from first
            first.add_note(f"then EndAnalysis failed too: {error}")

    def _left(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        """After a module's forward: a weight quantizer's output stands for its layer's weight."""
        parent = self.trace.current
        if isinstance(module, WeightQuantizer) and parent is not None:
            layer = parent[0]
            self.aliases[id(output)] = f"{layer}.weight" if layer else "weight"
            self.alive.append(output)

    def _sample(self, inputs: tuple[Tensor, ...]) -> None:
        self.counts.clear()
        self.aliases.clear()
        self.alive.clear()
        if (start := self.hook("StartNetworkExecution")) is not None:
            self._call(
                "StartNetworkExecution",
                "",
                start,
                [self.tensor(x, f"input{i}", "network") for i, x in enumerate(inputs)],
            )
        with torch.no_grad(), _Interceptor(self):
            output = self.model(*inputs)
        if (end := self.hook("EndNetworkExecution")) is not None:
            outputs = tensors_in(output)
            self._call(
                "EndNetworkExecution",
                "",
                end,
                [self.tensor(x, f"output{i}", "network") for i, x in enumerate(outputs)],
            )


def _tensor_values(named: dict[str, Any]) -> Iterable[Any]:
    for value in named.values():
        if isinstance(value, dict):
            yield value
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            yield from value


def _accepted(function: Callable[..., Any], named: dict[str, Any]) -> dict[str, Any]:
    """The named arguments a hook declares (all of them if it takes **kwargs)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return named
    return {k: v for k, v in named.items() if k in parameters}
