"""Asymmetric activation quantizers (a zero point) against the definitions they follow: ATen's
affine fake quantization with AIMET's encoding formula (scale = (max - min) / (2**b - 1),
offset = round(min / scale)), onnxruntime's QuantizeLinear/DequantizeLinear, the unsigned grid
they must equal on data without negatives, and brute force for the calibrated ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from model_explorer.cli import main
from model_explorer.deployment.toolchains import modelopt_quantizer_config, quantization_plan
from model_explorer.errors import UserError
from model_explorer.quantization import QuantizedModel, TensorQuantizer, make_calibrator
from model_explorer.quantization.spec import QuantizerSpec
from model_explorer.workload.file import Workload
from tests_support import digits_workload_file


def calibrated(data: torch.Tensor, bits: int, method: str = "max", **kwargs) -> TensorQuantizer:
    quantizer = TensorQuantizer(bits, calibrator=make_calibrator(method), **kwargs)
    quantizer.start_calibration()
    for chunk in data.split(4096):
        quantizer(chunk)
    quantizer.finish_calibration()
    return quantizer


def shifted(seed: int = 0, size: int = 40_000) -> torch.Tensor:
    """A GELU-like activation: mostly positive, a small negative side."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, generator=generator) * 1.5 + 0.8
    return torch.where(x < 0, x * 0.1, x)


def aimet_reference(x: torch.Tensor, low: float, high: float, bits: int) -> torch.Tensor:
    """AIMET's asymmetric encoding (its documented formula) run by ATen's affine kernel."""
    levels = 2**bits - 1
    scale = (high - low) / levels
    offset = round(low / scale)
    return torch.fake_quantize_per_tensor_affine(x, scale, -offset, 0, levels)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_max_ranges_quantize_as_atens_affine_kernel_with_aimets_encoding(bits: int) -> None:
    x = shifted()
    quantizer = calibrated(x, bits, asymmetric=True)
    low, high = float(x.min()), float(x.max())
    assert (quantizer.params().zero, float(quantizer.amax)) == (
        round(-low / ((high - low) / (2**bits - 1))),
        pytest.approx(high),
    )
    expected = aimet_reference(x, low, high, bits)
    step = (high - low) / (2**bits - 1)
    with torch.no_grad():
        torch.testing.assert_close(quantizer(x), expected, atol=step * 1e-5, rtol=1e-6)
    # The differentiable path (ATen's kernel with shifted bounds) gives the same values.
    graded = quantizer(x.clone().requires_grad_())
    torch.testing.assert_close(graded.detach(), expected, atol=step * 1e-5, rtol=1e-6)
    assert len(torch.unique(expected)) <= 2**bits


def test_eight_bits_equal_onnxruntimes_quantize_and_dequantize_linear() -> None:
    ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    from onnx import TensorProto, helper, numpy_helper

    x = shifted(1)
    quantizer = calibrated(x, 8, "percentile", asymmetric=True)
    params = quantizer.params()
    scale = np.float32(params.scale.item())
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
        ],
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(x)])],
        [
            numpy_helper.from_array(np.array(scale), "scale"),
            numpy_helper.from_array(np.array(params.zero, dtype=np.uint8), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        actual = quantizer(x).numpy()
    # onnxruntime divides by the scale where the kernels multiply by its inverse: a value
    # within a float ulp of a rounding boundary may land one level over, nothing more.
    differs = np.abs(actual - expected) > scale * 1e-4
    assert differs.mean() < 1e-3
    assert np.all(np.abs(actual - expected)[differs] <= scale * 1.0001)


@pytest.mark.parametrize("method", ["max", "percentile", "mse"])
def test_without_negatives_the_asymmetric_grid_is_the_unsigned_one(method: str) -> None:
    x = torch.relu(shifted(2))
    for bits in (3, 8):
        asymmetric = calibrated(x, bits, method, asymmetric=True)
        unsigned = calibrated(x, bits, method, unsigned=True)
        assert asymmetric.params().zero == 0
        with torch.no_grad():
            torch.testing.assert_close(asymmetric(x), unsigned(x), atol=1e-6, rtol=0)


def test_percentile_keeps_its_share_of_each_side() -> None:
    x = shifted(3)
    quantizer = calibrated(x, 8, "percentile", asymmetric=True)
    width = quantizer.calibrator.bin_width
    low, high = quantizer.calibrator.compute_range(8)
    negatives, positives = -x[x < 0].numpy(), x[x >= 0].numpy()
    assert abs(-low - np.percentile(negatives, 99.99, method="inverted_cdf")) <= 2 * width
    assert abs(high - np.percentile(positives, 99.99, method="inverted_cdf")) <= 2 * width


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_mse_range_is_as_good_as_a_brute_force_search_on_the_data(bits: int) -> None:
    """The histogram's choice against a search of 400 scalings of the observed range, each
    scored by the real quantization error of every value; and a zero point pays: the
    asymmetric error is below the symmetric mse quantizer's on this one-sided data."""
    x = shifted(4)
    quantizer = calibrated(x, bits, "mse", asymmetric=True)
    with torch.no_grad():
        chosen = float(((quantizer(x) - x) ** 2).mean())
    low, high = float(x.min()), float(x.max())
    levels = 2**bits - 1
    best = min(
        float(((aimet_reference(x, f * low, f * high, bits) - x) ** 2).mean())
        for f in np.linspace(0.05, 1.0, 400)
    )
    assert chosen <= best * 1.03
    symmetric = calibrated(x, bits, "mse")
    with torch.no_grad():
        assert chosen < float(((symmetric(x) - x) ** 2).mean())
    assert quantizer.params().low == -round(-quantizer._amin / quantizer.params().scale.item())
    assert levels == quantizer.params().high - quantizer.params().low


def test_the_range_follows_the_bit_width_and_entropy_has_no_asymmetric_rule() -> None:
    x = shifted(5)
    quantizer = calibrated(x, 8, "mse", asymmetric=True)
    wide = float(quantizer.amax)
    quantizer.num_bits = 2
    assert float(quantizer.amax) < wide * 0.6  # two bits clip far more than eight
    quantizer.num_bits = 8
    assert float(quantizer.amax) == wide
    with pytest.raises(UserError, match="entropy.*no rule for asymmetric.*max, percentile or mse"):
        calibrated(x, 8, "entropy", asymmetric=True)


def test_modelopt_has_no_form_for_a_zero_point_and_the_plan_states_it() -> None:
    x = shifted(6)
    quantizer = calibrated(x, 8, asymmetric=True)
    with pytest.raises(UserError, match="modelopt's integer quantizers are symmetric"):
        modelopt_quantizer_config(quantizer)
    layer = QuantizedModel(nn.Sequential(nn.Linear(4, 2)), input=QuantizerSpec(asymmetric=True))
    layer.calibrate([x[:400].reshape(100, 4)], method="max")
    entry = quantization_plan(layer)["0"]["input"]
    step = (float(x[:400].max()) - float(x[:400].min())) / 255
    assert entry["asymmetric"] and entry["zero_point"] == round(-float(x[:400].min()) / step)
    assert entry["low"] == pytest.approx(-entry["zero_point"] * step)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"input": {"asymmetric": True, "unsigned": True}}, "quantization.input.unsigned"),
        ({"input": {"asymmetric": True, "narrow_range": True}}, "quantization.input.narrow_range"),
        ({"input": {"asymmetric": True, "axis": 1}}, "quantization.input.axis"),
        ({"weight": {"asymmetric": True}}, "quantization.weight.asymmetric"),
    ],
)
def test_settings_that_contradict_a_zero_point_are_named(
    default_workload_data: dict, setting: dict, named: str
) -> None:
    data = default_workload_data
    data["workload"]["quantization"] = setting
    with pytest.raises(UserError, match=named.replace(".", r"\.")):
        Workload.from_dict(data, check_paths=False)


def test_the_calibration_file_records_asymmetry(trained_digits, tmp_path: Path, capsys) -> None:
    """A file made symmetric is refused by an asymmetric workload (naming the setting) and
    redone by `calibrate --if-missing`; the asymmetric one evaluates, its zero points in it."""
    path = digits_workload_file(trained_digits, tmp_path)
    assert main(["calibrate", str(path)]) == 0
    setting = ["--set", "quantization.input.asymmetric=true"]
    capsys.readouterr()
    assert main(["evaluate", str(path), "--bits", "4", *setting]) == 2
    assert "quantization.input.asymmetric False there and True" in capsys.readouterr().err
    assert main(["calibrate", "--if-missing", str(path), *setting]) == 0
    assert main(["evaluate", str(path), "--bits", "4", *setting]) == 0
    stored = torch.load(path.parent / "calibration.pt", weights_only=True)
    assert stored["settings"]["input"]["asymmetric"] is True
    assert all(
        entry["calibrator"]["negative"] is not None for entry in stored["input_quantizers"].values()
    )
