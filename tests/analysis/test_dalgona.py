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


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return randomized_batch_norms(
        nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 4),
        )
    )


def write_dalgona_h5(path: Path, images: np.ndarray, name: str | None = "image") -> Path:
    """dalgona's input layout: /value/<record>/<input>, each input with its full NHWC shape."""
    import h5py

    with h5py.File(path, "w") as file:
        group = file.create_group("value")
        group.attrs["desc"] = "records for the test"
        for index, image in enumerate(images):
            record = group.create_group(str(index))
            record.attrs["desc"] = f"record {index}"
            dataset = record.create_dataset("0", data=image[None])
            if name:
                dataset.attrs["name"] = name
    return path


def test_dalgona_hdf5_layout_runs_as_the_same_samples_in_nchw(tmp_path: Path) -> None:
    images = np.random.default_rng(0).normal(size=(3, 6, 6, 3)).astype(np.float32)  # NHWC
    h5 = write_dalgona_h5(tmp_path / "data.h5", images)
    np.save(tmp_path / "data.npy", images.transpose(0, 3, 1, 2))
    model = small_net()
    from model_explorer.analysis.hooks import file_samples

    from_h5 = run_log(model, file_samples(h5))
    from_npy = run_log(model, file_samples(tmp_path / "data.npy"))
    assert len(from_h5.networks) == 3
    for index, network in enumerate(from_h5.networks):
        (given,) = network["inputs"]
        assert given["name"] == "image" and not given["is_const"]
        np.testing.assert_array_equal(given["data"], images[index : index + 1])
    assert [op["name"] for op in from_h5.ops] == [op["name"] for op in from_npy.ops]
    for a, b in zip(from_h5.ops, from_npy.ops, strict=True):
        np.testing.assert_array_equal(a["outputs"][0]["data"], b["outputs"][0]["data"])
    assert from_h5.ops[0]["inputs"][0]["name"] == "image"
    assert from_npy.ops[0]["inputs"][0]["name"] == "input"


def test_hdf5_files_that_fit_no_layout_are_one_clear_error(tmp_path: Path) -> None:
    import h5py

    from model_explorer.analysis.hooks import file_samples
    from model_explorer.errors import UserError

    with h5py.File(tmp_path / "raw.h5", "w") as file:
        group = file.create_group("value")
        group.attrs["rawData"] = "1"
        group.create_group("0")["0"] = np.zeros(12, np.uint8)
    with h5py.File(tmp_path / "nested.h5", "w") as file:
        file.create_group("a").create_group("b")["c"] = np.zeros(3)
    with h5py.File(tmp_path / "mixed.h5", "w") as file:
        file["x"] = np.zeros((2, 3))
        file.create_group("y")["z"] = np.zeros(3)
    # Raw bytes (rawData) are read in a shape given (tests/analysis/test_dalgona_inputs.py).
    with pytest.raises(
        UserError, match=r"raw bytes \(rawData\), which carry no shape; .*--input-shape"
    ):
        list(file_samples(tmp_path / "raw.h5"))
    ((raw,),) = list(file_samples(tmp_path / "raw.h5", shape=(1, 3)))  # 12 bytes: 3 floats
    assert raw.tolist() == [[0.0, 0.0, 0.0]]
    for name in ("nested.h5", "mixed.h5"):
        with pytest.raises(UserError, match="fits none of the layouts read: dalgona's"):
            list(file_samples(tmp_path / name))


def test_quantparam_of_a_quantized_layer_with_its_batch_norm_folded() -> None:
    from model_explorer.analysis.hooks.operators import quantparam
    from model_explorer.quantization import QuantizedModel

    model = small_net()
    quantized = QuantizedModel(model)
    quantized.calibrate([torch.randn(4, 3, 6, 6)], method="max")
    x = torch.randn(1, 3, 6, 6)
    log = run_log(quantized, [(x,)])
    quantize, dequantize, conv = log.ops[:3]
    image, filters, bias = conv["inputs"]
    layer = quantized.layers["0"]
    bn = model[1]
    factor = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().abs().numpy()
    weight_scale = np.asarray(quantparam(layer.weight_quantizer)["scale"])
    input_scale = float(layer.input_quantizer.amax) / 127
    # ONE's fake-quantized model: Quantize and Dequantize after the quantized tensor, named
    # after it; the integers carry the scale, the convolution reads the dequantized floats.
    assert (quantize["opcode"], dequantize["opcode"]) == ("Quantize", "Dequantize")
    assert quantize["inputs"][0]["name"] == "input"
    integers = quantize["outputs"][0]
    assert integers["name"] == "input_FQ_Quantize"
    assert integers["quantparam"]["scale"] == pytest.approx([input_scale])
    assert integers["data"].dtype == np.int16
    expected = np.clip(np.round(nhwc(x) / input_scale), -127, 127)
    np.testing.assert_array_equal(integers["data"], expected)
    assert image["name"] == "input_FQ_Quantize_FQ_Dequantize" == dequantize["outputs"][0]["name"]
    assert image["quantparam"]["scale"] == []
    np.testing.assert_allclose(image["data"], expected * input_scale, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(filters["quantparam"]["scale"], weight_scale * factor, rtol=1e-6)
    assert filters["quantparam"]["quantized_dimension"] == 0
    np.testing.assert_allclose(
        bias["quantparam"]["scale"], input_scale * weight_scale * factor, rtol=1e-6
    )
    # The folded filter lies on its grid: every value an integer multiple of its scale.
    steps = filters["data"] / np.asarray(filters["quantparam"]["scale"])[:, None, None, None]
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    fc = log.ops[-1]
    assert fc["opcode"] == "FullyConnected"
    assert [op["opcode"] for op in log.ops[-3:-1]] == ["Quantize", "Dequantize"]
    fc_scale = float(quantized.layers["5"].input_quantizer.amax) / 127
    assert log.ops[-3]["outputs"][0]["quantparam"]["scale"] == pytest.approx([fc_scale])
    assert log.ops[-3]["inputs"][0]["name"] == log.ops[-4]["outputs"][0]["name"]
    between = [t for op in log.ops[3:-3] for t in op["inputs"]]  # Mean, Reshape: float
    assert between and all(t["quantparam"]["scale"] == [] for t in between)


FAULTY = """
class Faulty:
    def StartAnalysis(self, args):
        self.path = args
        self.seen = 0

    def Conv2DPost(self, name, input, filter, bias, padding, stride, dilation, output, act):
        self.seen += 1
        if self.seen == 2:
            raise ZeroDivisionError("planted")

    def EndAnalysis(self):
        open(self.path, "w").write(f"seen {self.seen}")
        raise KeyError("planted at the end")
"""


def test_first_failing_hook_is_reported_then_end_analysis_runs_and_fails(
    tmp_path: Path, capsys
) -> None:
    from model_explorer.cli import main

    (tmp_path / "Faulty.py").write_text(FAULTY)
    images = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype(np.float32)
    data = write_dalgona_h5(tmp_path / "data.h5", images, name=None)
    out = tmp_path / "seen.txt"
    command = ["analyze", "--dalgona", "--input_model", "digits_cnn", "--input_data", str(data)]
    command += ["--analysis", str(tmp_path / "Faulty.py"), "--analysis_args", str(out)]
    assert main(command) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    first = "analysis hook Conv2DPost at operator '3/Conv2D#0' failed: ZeroDivisionError: planted"
    assert error.index(first) < error.index("then EndAnalysis failed too")
    assert 'Faulty.py, line 10: raise ZeroDivisionError("planted")' in error
    assert "KeyError: 'planted at the end' (Faulty.py, line 14" in error
    assert out.read_text() == "seen 2"  # EndAnalysis ran after the failure


def test_a_hook_taking_other_arguments_is_named_with_its_line(tmp_path: Path) -> None:
    from model_explorer.errors import UserError

    (tmp_path / "Narrow.py").write_text(
        "class Narrow:\n    def Conv2DPost(self, name, output):\n        pass\n"
    )
    analysis, source = load_analysis(str(tmp_path / "Narrow.py"), dalgona=True)
    with pytest.raises(UserError) as error:
        DalgonaRunner(small_net(), analysis, source).run([(torch.randn(1, 3, 6, 6),)])
    message = str(error.value)
    assert "Conv2DPost at operator '0/Conv2D#0' failed: TypeError" in message
    assert "(Narrow.py, line 2: def Conv2DPost(self, name, output):)" in message


OUTPUTS = '''
import json


class Outputs:
    """DefaultOpPost as current dalgona calls it (a list) and as older analyses read it."""

    def StartAnalysis(self, args):
        self.path, self.seen = args, []

    def DefaultOpPost(self, name, opcode, inputs, outputs):
        assert outputs[0] is not None and outputs["name"] == outputs[0]["name"] == name
        assert outputs["data"].shape == outputs[0]["data"].shape
        self.seen.append([opcode, [t["name"] for t in inputs], len(outputs)])

    def EndAnalysis(self):
        json.dump(self.seen, open(self.path, "w"))
'''


def test_analyze_command_with_dalgona_spellings(tmp_path: Path, capsys) -> None:
    import json

    from model_explorer.cli import main

    (tmp_path / "Outputs.py").write_text(OUTPUTS)
    images = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype(np.float32)
    data = write_dalgona_h5(tmp_path / "data.h5", images, name=None)
    seen = tmp_path / "seen.json"
    command = ["analyze", "--dalgona", "--input_model", "digits_cnn", "--input_data", str(data)]
    assert (
        main([*command, "--analysis", str(tmp_path / "Outputs.py"), "--analysis_args", str(seen)])
        == 0
    )
    assert "ran 2 samples through Outputs" in capsys.readouterr().out
    calls = json.loads(seen.read_text())
    # Conv2D and FullyConnected go to the Default hooks with Circle's inputs: input, filter, bias.
    assert calls[0] == ["Conv2D", ["input", "0.weight", "0.bias"], 1]
    assert {c[0] for c in calls} >= {"Conv2D", "MaxPool2D", "Reshape", "FullyConnected"}
    assert (
        main(["analyze", "--dalgona", "--input_model", "model.circle", "--analysis", "x.py"]) == 2
    )
    assert "is a model file; analyze runs PyTorch models" in capsys.readouterr().err
    assert main([*command, "--analysis", "zero_ratio"]) == 2
    assert "written for analyze without --dalgona" in capsys.readouterr().err


def test_dalgona_builds_the_class_named_as_the_file_without_arguments(tmp_path: Path) -> None:
    from model_explorer.errors import UserError

    (tmp_path / "Chosen.py").write_text(
        "class Helper:\n    pass\n\n\nclass Chosen:\n    def StartAnalysis(self, args):\n"
        "        self.args = args\n"
    )
    analysis, _ = load_analysis(str(tmp_path / "Chosen.py"), "ignored here", dalgona=True)
    assert type(analysis).__name__ == "Chosen"
    (tmp_path / "Needs.py").write_text(
        "class Needs:\n    def __init__(self, args):\n        pass\n"
    )
    with pytest.raises(UserError, match=r"Needs\(\) needs arguments; dalgona builds the class"):
        load_analysis(str(tmp_path / "Needs.py"), dalgona=True)
    (tmp_path / "Other.py").write_text("class A:\n    pass\n\n\nclass B:\n    pass\n")
    with pytest.raises(UserError, match="must define a class named Other"):
        load_analysis(str(tmp_path / "Other.py"), dalgona=True)
