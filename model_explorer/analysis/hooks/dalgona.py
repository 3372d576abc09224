"""dalgona's conventions (Samsung/ONE `compiler/dalgona`), so that analysis files written for it
run unchanged (`analyze --dalgona`).

Each sample's forward is recorded, presented as the Circle model converted from it would be
(circle_ops.py: batch norms folded, activations fused, NHWC data, OHWI filters) and then the
hooks are called as dalgona calls them: positionally, with dalgona's argument lists:

    StartAnalysis(args) / EndAnalysis()
    StartNetworkExecution(inputs) / EndNetworkExecution(outputs)
    Conv2DPre(name, input, filter, bias, padding, stride, dilation, fused_act)
    DepthwiseConv2DPre(name, input, filter, bias, padding, stride, depth_multiplier, dilation,
                       fused_act)
    AddPre(name, x, y, fused_act)
    FullyConnectedPre(name, input, weights, bias, fused_act)
    TransposeConvPre(name, input, filter, output_shape, bias, padding, stride)
    SplitPre(name, split_dim, input, num_split)
    DefaultOpPre(name, opcode, inputs)

and the Post hooks with `output` before `fused_act` (TransposeConvPost: last; SplitPost: the
list `outputs`; DefaultOpPost(name, opcode, inputs, outputs): a list, which also answers
`outputs['data']` for a single output; a DefaultOpPost written to the earlier contract,
`(name, opcode, inputs, output)`, gets that one output's dict and, as dalgona then did, is not
called for operators with several outputs).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from torch import Tensor, nn

from model_explorer.analysis.hooks.circle import CircleOp, circle_data
from model_explorer.analysis.hooks.circle_ops import circle_ops
from model_explorer.analysis.hooks.recording import Recorder, Value
from model_explorer.analysis.hooks.runner import HookRunner
from model_explorer.errors import UserError


def tensor(value: Value | None, quantparam: dict[str, Any] | None = None) -> dict | None:
    """dalgona's tensor: {'name', 'data', 'quantparam', 'is_const'}, quantparam always a dict
    (empty lists for a float tensor); an empty tensor's data is None, a missing one None."""
    if value is None:
        return None
    if quantparam is None and value.source is None:
        quantparam = value.quantparam  # a Quantize operator's integers
    data = circle_data(value).copy()  # an analysis may change it; later hooks must not see that
    return {
        "name": value.label,
        "data": data if data.size else None,
        "quantparam": copy.deepcopy(quantparam)
        or {"scale": [], "zero_point": [], "quantized_dimension": 0},
        "is_const": value.is_const,
    }


class OutputList(list):
    """DefaultOpPost's outputs: a list of tensors (dalgona since 2023); a string key reads the
    only output (`output['data']`, as analyses written before then do)."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and len(self) == 1:
            return list.__getitem__(self, 0)[key]
        return list.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[0].get(key, default) if len(self) == 1 else default


@functools.cache
def _parameter_names(function: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return ()


def takes_one_output(hook: Callable[..., Any]) -> bool:
    """Whether a DefaultOpPost is written to dalgona's earlier contract, `(name, opcode,
    inputs, output)`: one output dict, multi-output operators never passed (told by the name
    of its fourth parameter, `output` rather than `outputs`, as dalgona's template named it)."""
    names = _parameter_names(getattr(hook, "__func__", hook))
    names = names[1:] if names and names[0] == "self" else names
    return len(names) >= 4 and names[3] == "output"


# The operators dalgona calls hooks of their own for (`Conv2DPre`, ...); the others get the
# Default hooks.
OWN_HOOKS = {"Conv2D", "DepthwiseConv2D", "Add", "FullyConnected", "TransposeConv", "Split"}


def _arguments(op: CircleOp, t: list[dict | None]) -> tuple[tuple, tuple]:
    """(arguments before the output, arguments after it) of an operator's own hooks (one of
    OWN_HOOKS)."""
    o = op.options
    if op.opcode == "Conv2D":
        return (t[0], t[1], t[2], o["padding"], o["stride"], o["dilation"]), (o["fused_act"],)
    if op.opcode == "DepthwiseConv2D":
        head = (t[0], t[1], t[2], o["padding"], o["stride"], o["depth_multiplier"])
        return (*head, o["dilation"]), (o["fused_act"],)
    if op.opcode in ("Add", "FullyConnected"):  # both always carry a fused_act
        return tuple(t), (o["fused_act"],)
    if op.opcode == "TransposeConv":
        return (t[2], t[1], t[0], t[3], o["padding"], o["stride"]), ()
    assert op.opcode == "Split", op.opcode
    return (t[0], t[1], o["num_split"]), ()


class DalgonaRunner(HookRunner):
    """Calls an analysis object's hooks as dalgona does (see the module docstring).

    Args:
        model, analysis, source: as for HookRunner.
        args: the string StartAnalysis receives (dalgona's --analysis_args, '' if none).
    """

    def __init__(
        self, model: nn.Module, analysis: Any, source: str | None = None, args: str = ""
    ) -> None:
        super().__init__(model, analysis, source)
        self.args = args
        self.recorder = Recorder(model)
        self.samples = 0

    def watching(self) -> AbstractContextManager[None]:
        """No hooks around the whole run: the Recorder walks each sample itself (hooks of both
        would run every module's hooks twice and keep every quantized weight of every sample)."""
        return nullcontext()

    def _start_analysis(self) -> None:
        if (start := self.hook("StartAnalysis")) is not None:
            self._call("StartAnalysis", "", start, self.args)

    def _sample(self, inputs: tuple[Tensor, ...]) -> None:
        names = getattr(inputs, "names", None) or [
            "input" if len(inputs) == 1 else f"input_{i}" for i in range(len(inputs))
        ]
        try:
            recording = self.recorder.run(tuple(inputs), list(names))
        except RuntimeError as error:
            shapes = ", ".join(str(tuple(x.shape)) for x in inputs)
            raise UserError(
                f"the model does not run on sample {self.samples} (inputs of shape {shapes}, "
                f"in PyTorch's layout): {str(error).splitlines()[0]}"
            ) from error
        self.samples += 1
        ops = circle_ops(recording)
        if (start := self.hook("StartNetworkExecution")) is not None:
            self._call("StartNetworkExecution", "", start, [tensor(v) for v in recording.inputs])
        for op in ops:
            self._operator(op)
        if (end := self.hook("EndNetworkExecution")) is not None:
            self._call("EndNetworkExecution", "", end, [tensor(v) for v in recording.outputs])

    def _operator(self, op: CircleOp) -> None:
        """Pre, then Post: the operator's own hook if the analysis has it, else the Default
        one; tensors built afresh for each call (as dalgona does), and only for hooks that
        exist."""
        own = op.opcode in OWN_HOOKS
        pre = self.hook(f"{op.opcode}Pre") if own else None
        if pre is not None:
            head, tail = _arguments(op, self._inputs(op))
            self._positional(f"{op.opcode}Pre", op.name, pre, *head, *tail)
        elif (default := self.hook("DefaultOpPre")) is not None:
            given = [x for x in self._inputs(op) if x is not None]  # dalgona skips missing ones
            self._positional("DefaultOpPre", op.name, default, op.opcode, given)
        post = self.hook(f"{op.opcode}Post") if own else None
        if post is not None:
            head, tail = _arguments(op, self._inputs(op))
            outputs = [tensor(v) for v in op.outputs]
            output = outputs if op.opcode == "Split" else outputs[0]
            self._positional(f"{op.opcode}Post", op.name, post, *head, output, *tail)
        elif (default := self.hook("DefaultOpPost")) is not None:
            if takes_one_output(default) and len(op.outputs) > 1:
                return  # the single-output contract: dalgona skipped these operators
            given = [x for x in self._inputs(op) if x is not None]
            outputs = OutputList(tensor(v) for v in op.outputs)
            output = outputs[0] if takes_one_output(default) else outputs
            self._positional("DefaultOpPost", op.name, default, op.opcode, given, output)

    @staticmethod
    def _inputs(op: CircleOp) -> list[dict | None]:
        return [tensor(v, op.quantparams.get(i)) for i, v in enumerate(op.inputs)]

    def _positional(self, hook: str, name: str, function: Callable[..., Any], *args: Any) -> None:
        self._call(hook, name, function, name, *args)
