"""`analyze --dalgona` where a converted Circle model differs from the PyTorch one most: grouped
convolutions (a Split, a Conv2D per group and a Concatenation, as converters write them), the
Quantize / Dequantize pairs of ONE's fake-quantized model under `--quantized`, and analyses
written to dalgona's earlier `DefaultOpPost(name, opcode, inputs, output)` contract.

Oracles: the PyTorch modules run directly (forward hooks), the convolution of TensorFlow's
padding rule on the tensors the hooks got (test_dalgona.tf_convolution), and analysis files
written here in both of dalgona's contracts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from test_dalgona import nhwc, randomized_batch_norms, run_log, tf_convolution
from torch import nn

from model_explorer.analysis.hooks import DalgonaRunner, load_analysis
from model_explorer.quantization import QuantizedModel

DUMP = Path(__file__).parent / "dalgona" / "DumpDequantized.py"


def grouped_net() -> nn.Module:
    """Two grouped convolutions (4 and 2 groups), one with a batch norm and ReLU to fold and
    fuse, one with explicit padding, then a depthwise one."""
    torch.manual_seed(0)
    return randomized_batch_norms(
        nn.Sequential(
            nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 8, 3, stride=2, padding=(2, 1), groups=2),
            nn.Conv2d(8, 8, 3, padding=1, groups=8),
        )
    )


def test_grouped_convolutions_are_split_convolved_and_concatenated() -> None:
    model = grouped_net()
    x = torch.randn(1, 8, 10, 10)
    log = run_log(model, [(x,)])
    opcodes = [op["opcode"] for op in log.ops]
    assert opcodes.count("Split") == 2 and opcodes.count("Concatenation") == 2
    assert opcodes.count("Conv2D") == 4 + 2 and opcodes.count("DepthwiseConv2D") == 1
    for op in log.ops:
        if op["opcode"] == "Conv2D":  # what a Circle interpreter requires of its filter
            assert op["inputs"][1]["data"].shape[3] == op["inputs"][0]["data"].shape[3]
            np.testing.assert_allclose(
                tf_convolution(op), op["outputs"][0]["data"], rtol=1e-4, atol=1e-5
            )
    # Each Concatenation gives what the PyTorch convolution (with its batch norm and ReLU)
    # gives, and each Split's parts are its input's channel groups.
    expected = [nhwc(model[:3](x)), nhwc(model[:4](x))]
    concatenations = [op for op in log.ops if op["opcode"] == "Concatenation"]
    for op, reference in zip(concatenations, expected, strict=True):
        np.testing.assert_allclose(op["outputs"][0]["data"], reference, rtol=1e-4, atol=1e-5)
    split = next(op for op in log.ops if op["opcode"] == "Split")
    assert int(split["inputs"][0]["data"]) == 3 and len(split["outputs"]) == 4
    for index, part in enumerate(split["outputs"]):
        np.testing.assert_array_equal(part["data"], nhwc(x)[..., index * 2 : index * 2 + 2])


def test_every_torchvision_convolution_takes_its_input_channels() -> None:
    """regnet_x_400mf's grouped convolutions (group width 16) become Conv2D per group: every
    presented Conv2D's filter spans its input's channels, and their count is the sum of the
    groups of the convolutions that are not depthwise."""
    torch.manual_seed(0)
    model = torchvision.models.regnet_x_400mf(weights=None).eval()
    log = run_log(model, [(torch.randn(1, 3, 32, 32),)])
    convolutions = [op for op in log.ops if op["opcode"] == "Conv2D"]
    assert all(
        op["inputs"][1]["data"].shape[3] == op["inputs"][0]["data"].shape[3] for op in convolutions
    )
    modules = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convolutions) == sum(m.groups for m in modules if m.groups != m.in_channels)
    assert any(1 < m.groups < m.in_channels for m in modules)


def _dump(model: nn.Module, samples: list, folder: Path, tensors: list[str]) -> object:
    folder.mkdir(exist_ok=True)
    (folder / "tensors.txt").write_text("\n".join(tensors) + "\n")
    analysis, source = load_analysis(str(DUMP), dalgona=True)
    DalgonaRunner(model, analysis, source, str(folder)).run(samples)
    return analysis


def test_an_earlier_default_hook_never_gets_an_operator_of_several_outputs(tmp_path: Path) -> None:
    """shufflenet_v2 splits its channels in two: the list contract sees those operators with
    both outputs, the single-output contract (`output`) is never called for them, as dalgona
    before its list form, and gets each other operator's output dict."""
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(weights=None).eval()
    x = [(torch.randn(1, 3, 32, 32),)]
    listed = run_log(model, x)
    several = {op["name"] for op in listed.ops if len(op["outputs"]) > 1}
    assert several and {op["opcode"] for op in listed.ops if op["name"] in several} == {"Split"}
    earlier = _dump(model, x, tmp_path / "dump", [])
    called = {name for _, name, _ in earlier.seen}
    assert called and not called & several
    assert all(name == output for _, name, output in earlier.seen)  # one output, named as it


def test_quantized_feature_maps_dump_as_from_a_fake_quantized_circle_model(tmp_path: Path) -> None:
    """With --quantized, every activation an integer quantizer reads is a Quantize and a
    Dequantize after its producer, named with ONE's fake-quantization suffix: a dump keyed on
    those names (as visq's) finds every quantized tensor, with the values the PyTorch layer's
    own input quantizer gives its input."""
    torch.manual_seed(0)
    model = randomized_batch_norms(torchvision.models.resnet18(weights=None))
    quantized = QuantizedModel(model)
    quantized.calibrate([torch.randn(4, 3, 32, 32)], method="max")
    seen: dict[str, torch.Tensor] = {}
    handles = [
        layer.register_forward_pre_hook(
            lambda _, args, name=name: seen.__setitem__(name, args[0].detach())
        )
        for name, layer in quantized.layers.items()
    ]
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        quantized(x)
    for handle in handles:
        handle.remove()
    log = run_log(quantized, [(x,)])
    consumer = {}  # a Dequantize's output name -> the layer that reads it
    for op in log.ops:
        for tensor in op["inputs"][:1]:
            if tensor["name"].endswith("_FQ_Quantize_FQ_Dequantize"):
                consumer[tensor["name"]] = op["name"].split("/")[0]
    produced = sorted(name[: -len("_FQ_Quantize_FQ_Dequantize")] for name in consumer)
    assert len(consumer) == len(quantized.layers) == 21
    _dump(quantized, [(x,)], tmp_path / "fm", produced)
    for name, layer in consumer.items():
        tensor = name[: -len("_FQ_Quantize_FQ_Dequantize")]
        dumped = np.load(tmp_path / "fm" / "0" / (tensor.replace("/", "_") + ".npy"))
        with torch.no_grad():
            expected = quantized.layers[layer].input_quantizer(seen[layer])
        if expected.ndim == 4:
            expected = expected.permute(0, 2, 3, 1)
        np.testing.assert_allclose(dumped, expected.numpy(), rtol=1e-6, atol=1e-6)
    quantizes = [op for op in log.ops if op["opcode"] == "Quantize"]
    for op in quantizes:  # integers on the grid, in the type ONE's int16 quantization uses
        integers = op["outputs"][0]
        assert integers["data"].dtype == np.int16 and np.abs(integers["data"]).max() <= 127
        assert len(integers["quantparam"]["scale"]) == 1


@pytest.mark.parametrize("bits", [4])
def test_the_integers_follow_the_bit_width(bits: int) -> None:
    torch.manual_seed(0)
    quantized = QuantizedModel(grouped_net())
    quantized.calibrate([torch.randn(4, 8, 10, 10)], method="max")
    quantized.bit_widths = [bits] * len(quantized.bit_widths)
    log = run_log(quantized, [(torch.randn(1, 8, 10, 10),)])
    integers = [op["outputs"][0] for op in log.ops if op["opcode"] == "Quantize"]
    bound = 2 ** (bits - 1) - 1
    assert integers and all(np.abs(t["data"]).max() <= bound for t in integers)
    assert any(np.abs(t["data"]).max() == bound for t in integers)  # max calibration reaches it


def test_asymmetric_integers_are_uint8_with_their_zero_point() -> None:
    """ONE's asymmetric uint8: levels 0 to 2**bits - 1 with the quantizer's zero point, so that
    (integers - zero_point) * scale gives back the fake-quantized floats."""
    from model_explorer.quantization.spec import QuantizerSpec

    torch.manual_seed(0)
    quantized = QuantizedModel(grouped_net(), input=QuantizerSpec(asymmetric=True))
    quantized.calibrate([torch.randn(4, 8, 10, 10) + 0.5], method="max")
    quantized.bit_widths = [4] * len(quantized.bit_widths)
    log = run_log(quantized, [(torch.randn(1, 8, 10, 10) + 0.5,)])
    pairs = [op for op in log.ops if op["opcode"] in ("Quantize", "Dequantize")]
    assert pairs
    for quantize, dequantize in zip(pairs[::2], pairs[1::2], strict=True):
        integers = quantize["outputs"][0]
        param = integers["quantparam"]
        assert integers["data"].dtype == np.uint8 and integers["data"].max() <= 15
        floats = (integers["data"].astype(np.float64) - param["zero_point"][0]) * param["scale"][0]
        np.testing.assert_allclose(floats, dequantize["outputs"][0]["data"], atol=1e-5)
    assert any(op["outputs"][0]["quantparam"]["zero_point"][0] > 0 for op in pairs[::2])
