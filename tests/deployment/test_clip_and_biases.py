"""Two graph edits of the QDQ export on a small ReLU6 network, checked against onnxruntime's
kernels and the onnx reference evaluator: a ReLU6 (a Clip) between a convolution and the next
quantizer lets the convolution's output be quantized when that quantizer maps the Clip's bounds
to its own end levels, and a near-dead output channel (weights of 1e-7 beside a bias of 2, as
batch-norm folding leaves them) still gets an INT32 bias, at a coarser weight scale. And the
audit's reading of a file sees through the zero Pad of TensorFlow's SAME padding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from model_explorer.api.quantize import quantize  # noqa: E402
from model_explorer.deployment.export import export_qdq  # noqa: E402
from model_explorer.deployment.runtimes import describe_kernels, open_runtime  # noqa: E402


def _network(dead_channel: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(), nn.Conv2d(8, 4, 1), nn.Flatten()
    ).eval()
    with torch.no_grad():
        model[0].weight.mul_(4)  # so that ReLU6 saturates on part of the inputs
        if dead_channel:
            model[0].weight[0] = 1e-7 * torch.sign(model[0].weight[0])
            model[0].bias[0] = 2.0
    return model


def _exported(model: nn.Module, tmp_path: Path, amax: float | None = None) -> tuple:
    inputs = torch.randn(64, 3, 6, 6)
    quantized = quantize(model, 8, [inputs[:32]], method="max")
    second = quantized.layers["2"].input_quantizer
    assert second.unsigned and second.amax.item() == pytest.approx(6.0)  # ReLU6's range
    if amax is not None:
        second.amax.fill_(amax)
    with torch.no_grad():
        expected = quantized(inputs[32:]).numpy()
    path = tmp_path / "model.onnx"
    summary = export_qdq(quantized, inputs[:1], path)
    kernels = describe_kernels(open_runtime("onnxruntime", path).kernels(), quantized.layers)
    reference = ReferenceEvaluator(str(path)).run(None, {"input": inputs[32:].numpy()})[0]
    return summary, kernels, reference, expected


def test_a_relu6_before_an_unsigned_quantizer_of_its_range_lets_the_output_be_quantized(
    tmp_path: Path,
) -> None:
    summary, kernels, reference, expected = _exported(_network(), tmp_path)
    assert summary.quantized_outputs == 1 and summary.integer_biases == 1
    assert kernels["integer"] == ["0"]  # the second layer's output is the network's: float
    # an INT32 bias moves each output by half a product level at most (see test_export.py)
    np.testing.assert_allclose(reference, expected, atol=0.05)


def test_a_quantizer_wider_than_the_clip_keeps_the_convolution_float(tmp_path: Path) -> None:
    # amax 8: values in (6, 8] would quantize to levels the Clip never lets through, so
    # quantizing before the Clip would change them; the export must not.
    summary, kernels, reference, expected = _exported(_network(), tmp_path, amax=8.0)
    assert summary.quantized_outputs == 0 and kernels["integer"] == []
    np.testing.assert_allclose(reference, expected, atol=1e-4)


def test_an_activation_whose_amax_is_zero_is_zero_in_the_runtime_too(tmp_path: Path) -> None:
    """A quantizer calibrated on zeros (amax 0) rounds every input to 0: the exported file
    must do the same (a tiny scale, not 1, which would let the ReLU6's values through), so
    the second convolution gives its bias alone, in the runtime as in PyTorch."""
    model = _network()
    summary, kernels, reference, expected = _exported(model, tmp_path, amax=0.0)
    bias = model[2].bias.detach().numpy()
    np.testing.assert_allclose(expected, np.tile(np.repeat(bias, 36), (32, 1)), atol=1e-6)
    np.testing.assert_allclose(reference, expected, atol=1e-4)


def test_a_near_dead_channel_gets_an_int32_bias_at_a_coarser_weight_scale(
    tmp_path: Path,
) -> None:
    # weight scale 1e-7 / 127, input scale about 0.05: the bias of 2 would be 3e11 levels
    summary, kernels, reference, expected = _exported(_network(dead_channel=True), tmp_path)
    assert summary.integer_biases == 1 and kernels["integer"] == ["0"]
    np.testing.assert_allclose(reference, expected, atol=0.05)


def test_a_coarser_channel_scale_keeps_its_weights_within_half_a_new_level() -> None:
    """By hand, on stored values: a channel whose bias (2.0) needs more than 2^30 levels at
    input scale x weight scale gets the scale |bias| / (input scale x 2^30), and its values,
    requantized to it, dequantize to its weights within half a new level (plus half an old
    one, the first rounding); the other channels keep their scales and values."""
    from onnx import TensorProto

    from model_explorer.deployment.biases import BIAS_LEVELS, _fit_bias
    from model_explorer.deployment.encodings import Encoding

    rng = np.random.default_rng(0)
    weights = rng.uniform(-1, 1, (3, 16))
    weights[1] *= 1e-7  # near-dead, as batch-norm folding leaves a channel
    old_scale = (np.abs(weights).max(axis=1) / 127).astype(np.float32)
    values = np.round(weights / old_scale[:, None]).astype(np.int8)
    bias, input_scale = np.array([0.5, 2.0, -0.1]), 0.05
    encoding = Encoding(
        TensorProto.INT8, np.int8, old_scale.copy(), 0, None, -128, 127, values.copy()
    )
    _fit_bias(encoding, bias, input_scale)
    needed = 2.0 / (input_scale * BIAS_LEVELS)
    assert needed > old_scale[1]
    assert encoding.scale[1] == pytest.approx(needed, rel=1e-6)
    assert encoding.scale[[0, 2]].tolist() == old_scale[[0, 2]].tolist()
    assert np.array_equal(encoding.values[[0, 2]], values[[0, 2]])
    dequantized = encoding.values[1].astype(np.float64) * encoding.scale[1]
    assert np.abs(dequantized - weights[1]).max() <= needed / 2 + old_scale[1] / 2 + 1e-15
    assert np.abs(bias / (input_scale * encoding.scale)).max() <= BIAS_LEVELS * (1 + 1e-6)


@pytest.mark.parametrize(
    ("mode", "value", "dequantized"),
    [
        ("constant", 0.0, True),
        ("constant", None, True),
        ("constant", 1.0, False),
        ("reflect", 0.0, False),
    ],
)
def test_the_audit_looks_through_a_zero_pad_to_the_dequantize_before_it(
    tmp_path: Path, mode: str, value: float | None, dequantized: bool
) -> None:
    """TensorFlow's SAME padding is a Pad between the DequantizeLinear and the convolution;
    onnxruntime folds a zero Pad into the convolution, so the file's facts look through it (and
    through nothing else)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from model_explorer.deployment.audit import file_facts

    initializers = [
        numpy_helper.from_array(np.ones((1, 3, 4, 4), np.int8), "x_quantized"),
        numpy_helper.from_array(np.array(0.1, np.float32), "x_scale"),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w"),
    ]
    pad_inputs = ["x", "pads"]
    if value is not None:
        initializers.append(numpy_helper.from_array(np.array(value, np.float32), "pad_value"))
        pad_inputs.append("pad_value")
    nodes = [
        helper.make_node("DequantizeLinear", ["x_quantized", "x_scale"], ["x"]),
        helper.make_node("Pad", pad_inputs, ["x_padded"], mode=mode),
        helper.make_node("Conv", ["x_padded", "w"], ["y"], name="conv"),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "padded", [], [output], initializers)
    path = tmp_path / "padded.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert file_facts(path, ["conv"])["conv"].input_dequantized is dequantized
