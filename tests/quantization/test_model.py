"""QuantizedModel on torchvision networks and on one layer of every supported type."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from model_explorer.deployment.toolchains import modelopt_config, quantization_plan
from model_explorer.errors import UserError
from model_explorer.quantization import QuantizedModel, WeightQuantizer, fake_quantize
from model_explorer.quantization.spec import QuantizerSpec


def torchvision_model(name: str) -> nn.Module:
    """A randomly initialised torchvision model whose batch-norm statistics are estimated on
    random images, so that its activations keep a sensible scale through every layer (fresh
    statistics of 0 and 1 let mobilenet_v2's activations fade to ~1e-10)."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None  # a plain average over the batches below
    model.train()
    with torch.no_grad():
        for seed in (100, 101):
            model(images(seed, count=8))
    return model.eval()


def images(seed: int, count: int = 4, size: int = 64) -> torch.Tensor:
    return torch.randn(count, 3, size, size, generator=torch.Generator().manual_seed(seed))


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    return float((output - reference).norm() / reference.norm())


@pytest.fixture(scope="module", params=["resnet18", "mobilenet_v2"])
def calibrated(request) -> tuple[str, nn.Module, QuantizedModel]:
    float_model = torchvision_model(request.param)
    quantized = QuantizedModel(copy.deepcopy(float_model))
    quantized.calibrate([images(1), images(2)], method="max")
    return request.param, float_model, quantized


def test_every_conv_and_linear_gets_an_input_and_a_weight_quantizer(calibrated) -> None:
    name, float_model, quantized = calibrated
    layers = [n for n, m in float_model.named_modules() if type(m) in (nn.Conv2d, nn.Linear)]
    assert len(layers) == {"resnet18": 21, "mobilenet_v2": 53}[name]
    expected = [f"{layer}.{kind}_quantizer" for layer in layers for kind in ("input", "weight")]
    assert quantized.explorable_modules == expected
    assert quantized.bit_widths == [8] * len(expected)
    # The swapped model's weights are the float model's, under the same state_dict keys.
    assert quantized.model.state_dict().keys() == float_model.state_dict().keys()


def test_sixteen_bits_reproduce_the_float_outputs(calibrated) -> None:
    name, float_model, quantized = calibrated
    quantized.bit_widths = [16] * len(quantized.bit_widths)
    x = images(1)  # seen in calibration, so what remains is rounding, not clipping
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        module.register_forward_pre_hook(
            lambda m, args, n=layer: inputs.setdefault(n, args[0].clone())
        )
        for layer, module in float_model.named_modules()
        if layer in quantized.layers
    ]
    with torch.no_grad():
        reference = float_model(x)
        for hook in hooks:
            hook.remove()
        # Each quantized layer on the float layer's input: only 16-bit rounding remains.
        for layer, module in quantized.layers.items():
            float_layer = module.to_float()
            assert relative_error(module(inputs[layer]), float_layer(inputs[layer])) < 2e-4, layer
        end_to_end = relative_error(quantized(x), reference)
    # Randomly initialised networks amplify small errors from layer to layer: about 1.3x per
    # inverted-residual block of mobilenet_v2 (measured), so 53 layers of ~5e-5 end near 6e-3.
    assert end_to_end < {"resnet18": 1e-3, "mobilenet_v2": 1e-2}[name]


def test_fewer_bits_raise_the_error_on_average(calibrated) -> None:
    _, float_model, quantized = calibrated
    batches = [images(seed) for seed in (4, 5, 6)]
    with torch.no_grad():
        references = [float_model(x) for x in batches]
        errors = []
        for bits in (16, 12, 8, 6, 4):
            quantized.bit_widths = [bits] * len(quantized.bit_widths)
            errors.append(
                sum(
                    relative_error(quantized(x), r)
                    for x, r in zip(batches, references, strict=True)
                )
            )
    assert errors == sorted(errors), errors


def test_calibration_file_round_trip_and_rejection(calibrated, tmp_path: Path) -> None:
    name, float_model, quantized = calibrated
    path = quantized.save_calibration(tmp_path / "calibration.pt")
    fresh = QuantizedModel(copy.deepcopy(float_model))
    fresh.load_calibration(path)
    random.seed(0)
    bits = [random.randint(3, 10) for _ in quantized.bit_widths]
    quantized.bit_widths = fresh.bit_widths = bits
    x = images(7)
    with torch.no_grad():
        assert torch.equal(quantized(x), fresh(x))
    other = QuantizedModel(torchvision_model("resnet18" if name != "resnet18" else "mobilenet_v2"))
    with pytest.raises(UserError, match="was made for another model"):
        other.load_calibration(path)
    with pytest.raises(UserError, match="does not exist; make it with `model-explorer calibrate"):
        other.load_calibration(tmp_path / "missing.pt")


def test_changing_bits_requantizes_only_the_changed_layers(monkeypatch) -> None:
    quantized = QuantizedModel(torchvision_model("resnet18"))
    quantized.calibrate([images(1)], method="max")
    calls: list[int] = []
    original = WeightQuantizer.quantize

    def counting(self, x):
        calls.append(id(self))
        return original(self, x)

    monkeypatch.setattr(WeightQuantizer, "quantize", counting)
    x = images(2)
    with torch.inference_mode():
        quantized(x)
        assert len(calls) == 21  # first pass: every weight quantized once
        calls.clear()
        quantized(x)
        assert calls == []  # unchanged bits: nothing re-quantized
        bits = quantized.bit_widths
        bits[3] = 5  # layer1.0.conv1's weight quantizer
        quantized.bit_widths = bits
        quantized(x)
        assert calls == [id(quantized.layers["layer1.0.conv1"].weight_quantizer)]
        calls.clear()
        bits[3] = 8  # back to a width seen before: served from the cache
        quantized.bit_widths = bits
        quantized(x)
        assert calls == []


def test_weight_changes_are_followed(monkeypatch) -> None:
    layer_model = nn.Sequential(nn.Linear(6, 4))
    quantized = QuantizedModel(layer_model)
    quantized.calibrate([torch.randn(10, 6)], method="max")
    x = torch.randn(3, 6)
    with torch.no_grad():
        before = quantized(x)
        layer_model[0].weight.mul_(2)  # an in-place update, as an optimizer step makes
        after = quantized(x)
    bias = layer_model[0].bias
    assert torch.allclose(after - bias, 2 * (before - bias), atol=1e-5)


def _one_layer_models():
    yield nn.Conv1d(3, 4, 3, padding=1), torch.randn(2, 3, 9)
    yield nn.Conv2d(3, 4, 3, groups=1, stride=2), torch.randn(2, 3, 9, 9)
    yield nn.Conv2d(4, 4, 3, groups=4), torch.randn(2, 4, 9, 9)  # depthwise
    yield nn.Conv3d(2, 3, 2), torch.randn(2, 2, 5, 5, 5)
    yield nn.ConvTranspose1d(3, 2, 3, stride=2), torch.randn(2, 3, 5)
    yield nn.ConvTranspose2d(3, 2, 3, stride=2, output_padding=1), torch.randn(2, 3, 5, 5)
    yield nn.ConvTranspose3d(2, 2, 2), torch.randn(1, 2, 3, 3, 3)
    yield nn.Linear(7, 5), torch.randn(4, 7)


@pytest.mark.parametrize("layer, x", list(_one_layer_models()), ids=lambda v: type(v).__name__)
def test_each_layer_type_is_the_float_layer_on_quantized_operands(layer: nn.Module, x) -> None:
    float_layer = copy.deepcopy(layer)
    quantized = QuantizedModel(nn.Sequential(layer), input=QuantizerSpec(num_bits=5))
    quantized.calibrate([x], method="max")
    q = quantized.layers["0"]
    with torch.no_grad():
        expected_input = fake_quantize(x, x.abs().max(), 5)
        weight = float_layer.weight
        amax = weight.abs().amax(dim=tuple(range(1, weight.dim())))
        float_layer.weight.copy_(fake_quantize(weight, amax, 8, axis=0))
        assert torch.allclose(quantized(x), float_layer(expected_input), atol=1e-6)
    assert type(quantized.restore()[0]) is type(layer)
    assert isinstance(q, type(layer))


def test_include_exclude_and_unsigned_auto() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(64, 2)
    )
    quantized = QuantizedModel(
        model, exclude=["4"], input=QuantizerSpec(unsigned="auto"), layer_types=["Conv2d", "Linear"]
    )
    assert list(quantized.layers) == ["0", "2"]
    quantized.calibrate([torch.randn(8, 1, 8, 8)], method="max")
    # The image input has negative values; the input after the ReLU has none.
    assert not quantized.layers["0"].input_quantizer.unsigned
    assert quantized.layers["2"].input_quantizer.unsigned
    with pytest.raises(UserError, match="has no layer of types"):
        QuantizedModel(nn.Sequential(nn.ReLU()))


def test_restore_gives_back_the_float_model() -> None:
    float_model = torchvision_model("resnet18")
    x = images(1)
    with torch.no_grad():
        reference = float_model(x)
        quantized = QuantizedModel(float_model)
        quantized.calibrate([x], method="max")
        quantized.bit_widths = [4] * len(quantized.bit_widths)
        assert not torch.equal(quantized(x), reference)
        restored = quantized.restore()
        assert torch.equal(restored(x), reference)
    assert not any(isinstance(m, WeightQuantizer) for m in restored.modules())


def test_plan_and_modelopt_config_describe_every_quantizer() -> None:
    quantized = QuantizedModel(torchvision_model("resnet18"))
    quantized.calibrate([images(1)], method="max")
    quantized.bit_widths = list(range(2, 16)) * 3
    plan = quantization_plan(quantized)
    assert plan["conv1"]["input"]["num_bits"] == 2 and plan["conv1"]["weight"]["num_bits"] == 3
    assert len(plan["conv1"]["weight"]["amax"]) == 64 and len(plan["conv1"]["input"]["amax"]) == 1
    config = modelopt_config(quantized)
    entries = {e["quantizer_name"]: e for e in config["quant_cfg"][1:]}
    assert list(entries) == quantized.explorable_modules
    assert entries["fc.weight_quantizer"]["cfg"] == {
        "num_bits": quantized.bit_widths[-1],
        "axis": 0,
        "unsigned": False,
        "narrow_range": False,
    }


def test_modelopt_applies_the_exported_config_with_the_same_results() -> None:
    mtq = pytest.importorskip("modelopt.torch.quantization")
    float_model = torchvision_model("resnet18")
    x = images(1)
    ours = QuantizedModel(copy.deepcopy(float_model))
    ours.calibrate([x], method="max")
    random.seed(1)
    ours.bit_widths = [random.randint(4, 12) for _ in ours.bit_widths]
    theirs = mtq.quantize(
        copy.deepcopy(float_model), modelopt_config(ours), forward_loop=lambda m: m(x)
    )
    their_modules = dict(theirs.named_modules())
    quantization_plan(ours)  # brings weight amax up to date
    for name, quantizer in ours.quantizers.items():
        other = their_modules[name]
        assert other.is_enabled and other.num_bits == quantizer.num_bits
        assert torch.equal(other.amax.float().flatten(), quantizer.amax.flatten())
    # Layer by layer on the same input, the two quantized layers agree.
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        module.register_forward_pre_hook(lambda m, args, n=name: inputs.setdefault(n, args[0]))
        for name, module in float_model.named_modules()
        if name in ours.layers
    ]
    with torch.no_grad():
        float_model(x)
        for hook in hooks:
            hook.remove()
        for name, layer in ours.layers.items():
            mine, other = layer(inputs[name]), their_modules[name](inputs[name])
            assert relative_error(mine, other) < 1e-3, name


def test_wrappers_keep_the_wrapped_models_mode() -> None:
    from model_explorer.problems.quantization import LayerwiseQuantizationProblem
    from model_explorer.sparsity import SparseModel

    model = torchvision_model("resnet18")
    quantized = QuantizedModel(model)
    assert not quantized.training
    quantized.calibrate([images(1)], method="max")
    # Building a problem measures the layers with a forward pass and must leave every batch
    # norm in eval mode, so that a later forward cannot change running statistics.
    problem = LayerwiseQuantizationProblem(
        quantized, [(images(2), torch.zeros(4, dtype=torch.long))]
    )
    assert not any(m.training for m in problem.model.modules())
    assert not SparseModel(torchvision_model("resnet18")).training
    assert QuantizedModel(torchvision_model("resnet18").train()).training
