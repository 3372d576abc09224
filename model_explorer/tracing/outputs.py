"""Every operator's output of one forward pass, by the tracer's names: what localisation
compares and where a runtime's taps are placed."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model_explorer.tracing.tracer import Consumer, OperatorCall, trace


class _OperatorOutputs(Consumer):
    def __init__(self) -> None:
        self.outputs: dict[str, Tensor] = {}

    def after(self, call: OperatorCall) -> None:
        found = call.outputs
        if found and found[0].is_floating_point():
            # A copy: a later in-place operator (ReLU(inplace=True)) must not change it.
            self.outputs[call.name] = found[0].detach().to("cpu", torch.float64, copy=True)


def operator_outputs(model: nn.Module, inputs: Tensor) -> dict[str, Tensor]:
    """Every operator's output of one forward of `model`, by the tracer's names
    (`<module path>/<Opcode>#<n>`, as the hooks and the cost table name them; a QuantizedModel's
    as in the model it wraps), as float64 copies on the CPU, in execution order."""
    found = _OperatorOutputs()
    trace(model, [found], inputs)
    return found.outputs
