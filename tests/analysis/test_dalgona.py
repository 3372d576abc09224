"""`analyze --dalgona`: analysis files written to dalgona's conventions (dalgona/TensorLog.py
and the helper beside it) on torchvision models presented as converted Circle models.

The oracles are independent of the presentation code: the PyTorch modules themselves (their
weights, batch-norm statistics and inputs, read with forward hooks), counts read off the
module structure, and a convolution written here from TensorFlow's documented SAME/VALID
rule, run on the NHWC tensors the hooks receive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from model_explorer.analysis.hooks import DalgonaRunner, load_analysis

ANALYSIS = Path(__file__).parent / "dalgona" / "TensorLog.py"


def randomized_batch_norms(model: nn.Module) -> nn.Module:
    """Batch norms with statistics and affine parameters far from identity, so that a fold
    that forgot one of them shows."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)
    return model.eval()


def run_log(model: nn.Module, samples, args: str = ""):  # noqa: ANN001, ANN201
    analysis, source = load_analysis(str(ANALYSIS), dalgona=True)
    DalgonaRunner(model, analysis, source, args).run(samples)
    return analysis


@pytest.fixture(scope="module")
def resnet():  # noqa: ANN201
    torch.manual_seed(0)
    model = randomized_batch_norms(torchvision.models.resnet18(weights=None))
    x = torch.randn(1, 3, 64, 64)
    return model, x, run_log(model, [(x,)])


@pytest.fixture(scope="module")
def mobilenet():  # noqa: ANN201
    torch.manual_seed(0)
    model = randomized_batch_norms(torchvision.models.mobilenet_v2(weights=None))
    return model, run_log(model, [(torch.randn(1, 3, 64, 64),)])


def nhwc(x: torch.Tensor) -> np.ndarray:
    return x.detach().permute(0, 2, 3, 1).numpy()


def tf_convolution(op: dict) -> np.ndarray:
    """The Circle convolution of TensorFlow's documentation on the NHWC tensors a hook got:
    SAME pads max((ceil(n/s) - 1) * s + (k - 1) * d + 1 - n, 0) in total, the smaller half
    before; a depthwise filter is (1, H, W, C * multiplier)."""
    x, weights, bias = (torch.from_numpy(t["data"]) for t in op["inputs"])
    x = x.permute(0, 3, 1, 2)
    stride = (op["stride"]["h"], op["stride"]["w"])
    dilation = (op["dilation"]["h"], op["dilation"]["w"])
    if op["opcode"] == "DepthwiseConv2D":
        weights, groups = weights.permute(3, 0, 1, 2), x.shape[1]
    else:
        weights, groups = weights.permute(0, 3, 1, 2), 1
    if op["padding"] == "SAME":
        pads = []
        for n, k, s, d in zip(x.shape[2:], weights.shape[2:], stride, dilation, strict=True):
            total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
            pads.append((total // 2, total - total // 2))
        x = F.pad(x, (*pads[1], *pads[0]))
    y = F.conv2d(x, weights, bias, stride, 0, dilation, groups)
    y = {"none": y, "relu": F.relu(y), "relu6": F.relu6(y)}[op["fused_act"]]
    return nhwc(y)


def test_hooks_are_called_positionally_pre_then_post_with_the_helper_beside(resnet) -> None:
    _, _, log = resnet
    assert log.args == ""  # dalgona passes '' without --analysis_args
    pres, posts = log.calls[0::2], log.calls[1::2]
    assert all(p[0] == "pre" for p in pres) and all(p[0] == "post" for p in posts)
    assert [p[1] for p in pres] == [p[1] for p in posts] == [op["name"] for op in log.ops]


def test_fused_activations_counted_on_resnet18(resnet) -> None:
    model, _, log = resnet
    blocks = [m for m in model.modules() if isinstance(m, torchvision.models.resnet.BasicBlock)]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    kinds = [(op["opcode"], op["fused_act"]) for op in log.ops]
    # A block's ReLU follows its first conv+bn and the residual addition; the stem's its conv.
    assert kinds.count(("Add", "relu")) == len(blocks) == 8
    assert kinds.count(("Conv2D", "relu")) == 1 + len(blocks)
    assert kinds.count(("Conv2D", "none")) == len(convs) - 1 - len(blocks)
    assert kinds.count(("FullyConnected", "none")) == 1
    opcodes = {op["opcode"] for op in log.ops}
    assert not opcodes & {"Relu", "BatchNorm", "Mul"}  # every one folded or fused
    assert {"MaxPool2D", "Mean", "Reshape"} <= opcodes


def test_fused_activations_and_depthwise_counted_on_mobilenet_v2(mobilenet) -> None:
    model, log = mobilenet
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    depthwise = [m for m in convs if m.groups == m.in_channels > 1]
    relu6 = [m for m in model.modules() if isinstance(m, nn.ReLU6)]
    residuals = [
        m
        for m in model.modules()
        if isinstance(m, torchvision.models.mobilenetv2.InvertedResidual) and m.use_res_connect
    ]
    ops = log.ops
    assert len([op for op in ops if op["opcode"] == "DepthwiseConv2D"]) == len(depthwise) == 17
    assert all(op["depth_multiplier"] == 1 for op in ops if op["opcode"] == "DepthwiseConv2D")
    fused = [op for op in ops if op["fused_act"] == "relu6"]
    assert len(fused) == len(relu6) == 35
    assert {op["opcode"] for op in fused} == {"Conv2D", "DepthwiseConv2D"}
    assert [op["fused_act"] for op in ops if op["opcode"] == "Add"] == ["none"] * len(residuals)
    assert len(residuals) == 10
    assert sum(op["opcode"] == "Conv2D" for op in ops) == len(convs) - len(depthwise)


def test_nhwc_activations_and_folded_ohwi_filters_match_the_nchw_model(resnet) -> None:
    model, x, log = resnet
    pad, first = log.ops[:2]
    bn = model.bn1
    factor = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    folded = model.conv1.weight * factor[:, None, None, None]
    shift = bn.bias - bn.running_mean * factor
    assert first["name"] == "conv1/Conv2D#0" and first["fused_act"] == "relu"
    image, filters, bias = first["inputs"]
    # conv1 pads 3 on each side of a 64x64 input at stride 2: not TensorFlow's SAME (2 and 3),
    # so a converter writes an explicit Pad, which ran before.
    assert log.networks[0]["inputs"][0]["data"].shape == (1, 64, 64, 3)
    np.testing.assert_array_equal(log.networks[0]["inputs"][0]["data"], nhwc(x))
    assert pad["opcode"] == "Pad" and image["name"] == pad["name"] == "conv1/Pad#0"
    assert first["padding"] == "VALID" and image["data"].shape == (1, 70, 70, 3)
    np.testing.assert_array_equal(image["data"][:, 3:-3, 3:-3, :], nhwc(x))
    np.testing.assert_allclose(filters["data"], nhwc(folded), rtol=1e-6)
    np.testing.assert_allclose(bias["data"], shift.detach().numpy(), rtol=1e-5, atol=1e-7)
    assert filters["name"] == "conv1.weight" and filters["is_const"] and bias["is_const"]
    expected = model.relu(model.bn1(model.conv1(x)))
    np.testing.assert_allclose(first["outputs"][0]["data"], nhwc(expected), atol=1e-5)
    fc = [op for op in log.ops if op["opcode"] == "FullyConnected"][0]
    np.testing.assert_array_equal(fc["inputs"][1]["data"], model.fc.weight.detach().numpy())
    np.testing.assert_allclose(fc["outputs"][0]["data"], model(x).detach().numpy(), atol=1e-4)


@pytest.mark.parametrize("which", ["resnet", "mobilenet"])
def test_every_convolution_recomputes_from_its_hook_arguments(which, request) -> None:
    log = request.getfixturevalue(which)[-1]
    convolutions = [op for op in log.ops if op["opcode"] in ("Conv2D", "DepthwiseConv2D")]
    assert {op["padding"] for op in convolutions} == {"SAME", "VALID"}
    for op in convolutions:
        output = op["outputs"][0]["data"]
        scale = max(float(np.abs(output).max()), 1.0)
        np.testing.assert_allclose(
            tf_convolution(op), output, atol=1e-4 * scale, err_msg=op["name"]
        )


@pytest.mark.parametrize("which", ["resnet", "mobilenet"])
def test_names_link_every_consumer_to_its_producer(which, request) -> None:
    log = request.getfixturevalue(which)[-1]
    network = log.networks[0]
    produced = {t["name"]: t["data"] for t in network["inputs"]}
    for op in log.ops:
        for tensor in op["inputs"]:
            assert set(tensor) == {"name", "data", "quantparam", "is_const"}
            assert tensor["quantparam"] == {"scale": [], "zero_point": [], "quantized_dimension": 0}
            if not tensor["is_const"]:
                assert tensor["name"] in produced, (op["name"], tensor["name"])
                np.testing.assert_array_equal(tensor["data"], produced[tensor["name"]])
        for output in op["outputs"]:
            assert output["name"] == op["name"] and not output["is_const"]
            produced[output["name"]] = output["data"]
    assert [t["name"] for t in network["outputs"]] == [log.ops[-1]["name"]]


def test_depthwise_multiplier_and_transposed_convolutions() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=1, groups=4),  # depthwise, multiplier 2
        nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1),  # crops as TensorFlow's SAME
        nn.ReLU(),
        nn.ConvTranspose2d(6, 2, 3, stride=2, padding=1, output_padding=1, bias=False),
    ).eval()
    x = torch.randn(1, 4, 5, 5)
    log = run_log(model, [(x,)])
    opcodes = [op["opcode"] for op in log.ops]
    assert opcodes == ["DepthwiseConv2D", "TransposeConv", "Relu", "TransposeConv", "StridedSlice"]
    depthwise, up, _, up2, crop = log.ops
    assert depthwise["depth_multiplier"] == 2 and depthwise["padding"] == "SAME"
    np.testing.assert_array_equal(
        depthwise["inputs"][1]["data"], model[0].weight.detach().permute(1, 2, 3, 0).numpy()
    )
    assert up["padding"] == "SAME" and up["stride"] == {"w": 2, "h": 2}
    np.testing.assert_array_equal(up["output_shape"]["data"], [1, 10, 10, 6])
    np.testing.assert_array_equal(
        up["inputs"][1]["data"], model[1].weight.detach().permute(1, 2, 3, 0).numpy()
    )
    with torch.no_grad():
        hidden = model[1](model[0](x))
        final = model(x)
    np.testing.assert_allclose(up["outputs"][0]["data"], nhwc(hidden), atol=1e-5)
    # PyTorch crops the second one 1 before and 0 after: no TensorFlow padding does that, so
    # the full VALID result (21x21) is sliced; no bias is dalgona's None.
    assert up2["padding"] == "VALID" and up2["inputs"][2] is None
    assert up2["outputs"][0]["data"].shape == (1, 21, 21, 2)
    np.testing.assert_allclose(crop["outputs"][0]["data"], nhwc(final), atol=1e-5)
