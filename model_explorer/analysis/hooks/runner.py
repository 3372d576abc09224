"""Operator-level analysis hooks: user code called before and after every operator of a forward.

Operators are the tracer's (model_explorer.tracing: ATen calls, named `<module>/<Opcode>#<n>`
as the cost table's rows are), so functional code counts as operators (`x + y`, `torch.cat`,
`F.relu`, `flatten`), not only modules, and any model that runs eagerly can be analysed
(nothing is traced ahead of time). An analysis object may define:

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
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from model_explorer.analysis.hooks.operators import quantparam
from model_explorer.errors import UserError
from model_explorer.modules import tensors_in
from model_explorer.quantization.layers import TransformedLayer
from model_explorer.tracing import Consumer, Operator, OperatorCall, Tracer

# Views that present a weight transposed: hooks see the weight in its own layout.
_TRANSPOSITIONS = ("t", "transpose")


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


class HookRunner(Consumer):
    """Runs a model over samples and calls an analysis object's hooks (see the module
    docstring), at every operator the tracer (model_explorer.tracing) finds; `run(samples)`.

    Args:
        model: the model (a QuantizedModel's operators are named as in the model it wraps,
            and its layers' tensors carry their quantization parameters).
        analysis: the object whose hook methods are called (none is required).
        source: the analysis file, so that a failing hook is reported with its line.
    """

    def __init__(self, model: nn.Module, analysis: Any, source: str | None = None) -> None:
        self.model = model
        self.analysis = analysis
        self.source = source
        self.layer: TransformedLayer | None = None  # the quantized layer of the operator, if any
        self.tracer = Tracer(model, [self])

    def watching(self) -> AbstractContextManager[Any]:
        """What surrounds the whole run: the tracer's module hooks."""
        return self.tracer.watching()

    # -- tensors --------------------------------------------------------------------------
    def tensor(self, value: Tensor, role: str, name: str) -> dict[str, Any]:
        """An operand as the analysis hooks receive it: its name, its data and its quantization
        parameters."""
        param, layer = None, self.layer
        if layer is not None and role in ("input", "filter"):
            param = quantparam(layer.input_quantizer if role == "input" else layer.weight_quantizer)
        data = value.detach()
        view = self.tracer.view_of(value)
        if role == "filter" and view is not None and view[1] in _TRANSPOSITIONS and data.dim() == 2:
            data = view[0].detach()  # a linear layer's weight, in its own (out, in) layout
        return {
            "name": self.tracer.constant(value) or f"{name}:{role}",
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
        """The analysis's hook of that name, if it defines one."""
        return getattr(self.analysis, name, None)

    def before(self, call: OperatorCall) -> None:
        self.layer = call.owner if isinstance(call.owner, TransformedLayer) else None
        self.call_pre(call.name, call.operator, call.args)

    def after(self, call: OperatorCall) -> None:  # the layer `before` found
        self.call_post(call.name, call.operator, call.args, call.out)

    def call_pre(self, name: str, operator: Operator, args: tuple) -> None:
        """Call the analysis's `<Opcode>Pre` (else `DefaultOpPre`) with the operator's named
        arguments."""
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

    def call_post(self, name: str, operator: Operator, args: tuple, out: Any) -> None:
        """Call the analysis's `<Opcode>Post` (else `DefaultOpPost`) with its arguments and
        its output."""
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

    def _sample(self, inputs: tuple[Tensor, ...]) -> None:
        self.layer = None
        if (start := self.hook("StartNetworkExecution")) is not None:
            self._call(
                "StartNetworkExecution",
                "",
                start,
                [self.tensor(x, f"input{i}", "network") for i, x in enumerate(inputs)],
            )
        output = self.tracer.run(*inputs)
        self.layer = None
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
