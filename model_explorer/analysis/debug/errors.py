"""Per-layer error of a quantized individual in PyTorch: where its quantization noise enters
and how it accumulates, in SQNR (dB) as onnxruntime's `qdq_loss_debug` and Hailo's diagnostic
tool define it.

At the tensor a layer reads (its input, after its input quantizer), as onnxruntime defines it:
`local_db` compares that tensor before and after the quantizer in the quantized model (what
the quantizer itself adds, `qdq_err`), `accumulated_db` the float model's tensor with the
quantized model's after the quantizer (everything before it, `xmodel_err`). At the layer's
output, as Hailo's tool gives its two figures: `output_db` with everything up to and including
the layer quantized, `network_db` at the network's output with only this layer quantized.
`weight_only_db` and `activation_only_db` split the layer's own error at its output into what
its weight and what its input quantizer add, each alone on the float model's input (AIMET's
weight-only and activation-only quantization, per layer); `weight_db` is the weight itself."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.metrics.functions import output_list
from model_explorer.modules import module_hooks, run_on

# onnxruntime's floor for both norms (numpy's float epsilon), so a noiseless tensor gives a
# finite figure as there.
EPSILON = float(np.finfo(float).eps)
COLUMNS = (
    "local_db",
    "accumulated_db",
    "output_db",
    "network_db",
    "weight_only_db",
    "activation_only_db",
    "weight_db",
)


@dataclass
class SQNR:
    """Signal-to-quantization-noise ratio accumulated over batches: 20 log10(|reference| /
    |reference - other|) over every element seen, as onnxruntime's
    `compute_signal_to_quantization_noice_ratio` computes it on the concatenated tensors."""

    signal: float = 0.0
    noise: float = 0.0

    def add(self, reference: Any, other: Any) -> None:
        reference, other = _flat(reference), _flat(other)
        self.signal += float(reference.square().sum())
        self.noise += float((reference - other).square().sum())

    @property
    def db(self) -> float:
        signal = max(math.sqrt(self.signal), EPSILON)
        return 20 * math.log10(signal / max(math.sqrt(self.noise), EPSILON))


def _flat(values: Any) -> Tensor:
    """A tensor or array (a runtime's output) as one float64 vector."""
    if not isinstance(values, Tensor):
        values = torch.from_numpy(np.asarray(values))
    return values.detach().double().reshape(-1)


def network_output(output: Any) -> Tensor:
    """A model's outputs, every one flattened per sample, side by side."""
    return torch.cat([o.detach().double().reshape(o.shape[0], -1) for o in output_list(output)], 1)


@dataclass
class LayerErrors:
    """One layer's SQNRs (see the module's docstring), accumulated over the samples seen."""

    meters: dict[str, SQNR] = field(default_factory=lambda: {c: SQNR() for c in COLUMNS})

    def values(self) -> dict[str, float]:
        return {name: meter.db for name, meter in self.meters.items()}


def layer_io(model: Any, layers: dict[str, nn.Module], inputs: Any) -> tuple[dict, Tensor]:
    """Each layer's calls, as (input, output, call arguments), and the network's output, on
    one batch: a layer called more than once (a recurrent layer's hidden product, once per
    time step; a layer shared by two branches) has every call."""
    seen: dict[str, list[tuple[Tensor, Tensor, tuple]]] = {}

    def keep(name: str, module: nn.Module, args: tuple, output: Any) -> None:
        # copies: a later in-place operator (ReLU(inplace=True)) would change them
        if args and isinstance(args[0], Tensor):
            call = (args[0].detach().clone(), output.detach().clone(), args[1:])
            seen.setdefault(name, []).append(call)

    with module_hooks(model, after=keep, modules=layers.items(), eval_mode=False):
        output = run_on(model, inputs)
    return seen, network_output(output)


def _own(layer: str) -> tuple[str, str]:
    """The names of a layer's input and weight quantizers."""
    return f"{layer}.input_quantizer", f"{layer}.weight_quantizer"


def _alone(model: Any, name: str, x: Tensor, rest: tuple, which: str) -> Tensor:
    """The layer's output on `x` with only its `which` quantizer on (as the individual has it)."""
    input_name, weight_name = _own(name)
    with model.preserved_settings():
        model.quantizers[weight_name if which == "input" else input_name].enabled = False
        # through the layer's own forward: a subclass's (TensorFlow's SAME padding) pads first
        return model.layers[name](x, *rest).detach()


def _add_batch(model: Any, errors: dict[str, LayerErrors], floats: dict, quantized: dict) -> None:
    """One batch's layer inputs and outputs, float and quantized, call by call, into each
    layer's meters."""
    for name, layer in model.layers.items():
        meters = errors[name].meters
        for (x_float, y_float, rest), (x_quantized, y_quantized, _) in zip(
            floats.get(name, []), quantized.get(name, []), strict=False
        ):
            after = layer.input_quantizer(x_quantized)
            meters["local_db"].add(x_quantized, after)
            meters["accumulated_db"].add(x_float, after)
            meters["output_db"].add(y_float, y_quantized)
            meters["weight_only_db"].add(y_float, _alone(model, name, x_float, rest, "weight"))
            meters["activation_only_db"].add(y_float, _alone(model, name, x_float, rest, "input"))


@torch.no_grad()
def layer_errors(model: Any, batches: Iterable[Any]) -> dict[str, dict[str, float]]:
    """Layer -> its SQNR columns (COLUMNS), for a QuantizedModel with an individual's plan and
    quantizer states in effect, over the input batches given (each `(inputs, ...)`)."""
    layers = dict(model.layers)
    errors = {name: LayerErrors() for name in layers}
    batches = list(batches)
    float_outputs = []
    model.eval()
    for batch in batches:
        with model.preserved_settings():
            model.set_enabled(False)
            floats, float_output = layer_io(model, layers, batch[0])
        quantized, _ = layer_io(model, layers, batch[0])
        float_outputs.append(float_output)
        _add_batch(model, errors, floats, quantized)
    for name, layer in layers.items():
        errors[name].meters["weight_db"].add(layer.weight, layer.quantized_weight())
        meter = errors[name].meters["network_db"]
        with _only(model, name):
            for batch, reference in zip(batches, float_outputs, strict=True):
                meter.add(reference, network_output(run_on(model, batch[0])))
    return {name: errors[name].values() for name in layers}


@contextmanager
def _only(model: Any, name: str) -> Iterator[None]:
    """Within the block only layer `name`'s quantizers are on (as the individual has them):
    Hailo's first figure, the network's output with that layer alone quantized."""
    states = {quantizer: model.quantizers[quantizer].enabled for quantizer in _own(name)}
    with model.preserved_settings():
        model.set_enabled(False)
        for quantizer, state in states.items():
            model.quantizers[quantizer].enabled = state
        yield
