"""The QDQ ONNX export against the ONNX specification (onnx's reference evaluator runs every
exported file and must compute what the fake-quantized model computes) and against what the
file must hold (integer types, levels, folded batch norms), and onnxruntime's kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from model_explorer.deployment.export import OPSET, export_qdq  # noqa: E402
from model_explorer.deployment.runtimes import describe_kernels, open_runtime  # noqa: E402
from model_explorer.errors import UserError  # noqa: E402
from model_explorer.formats.integer import integer_bounds  # noqa: E402
from model_explorer.tracing.onnx_export import export_onnx  # noqa: E402
from tests_support import calibrated_digits  # noqa: E402


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):  # noqa: ANN001, ANN201
    """(context, calibrated QuantizedModel, exploration inputs) of the default workload."""
    context, model = calibrated_digits(trained_digits, tmp_path_factory.mktemp("export"))
    inputs = torch.cat([batch[0] for batch in context.batches("exploration")])
    return context, model, inputs


def set_formats(model, plan: dict[str, tuple]) -> None:  # noqa: ANN001
    """Each layer's (input, weight) format, by layer name; '*' for every layer."""
    for name, layer in model.layers.items():
        chosen = plan.get(name, plan.get("*"))
        layer.input_quantizer.format, layer.weight_quantizer.format = chosen


def run_reference(path: Path, inputs: torch.Tensor) -> np.ndarray:
    return ReferenceEvaluator(str(path)).run(None, {"input": inputs.numpy()})[0]


PLANS = {
    "mixed int 2-8 bits": {
        "0": ("int4", "int3"),
        "3": ("int3", "int5"),
        "7": ("int6", "int2"),
        "12": ("int8", "int4"),
        "14": ("int2", "int8"),
    },
    "int8": {"*": ("int8", "int8")},
    "fp8_e4m3": {"*": ("fp8_e4m3", "fp8_e4m3")},
    "fp8_e5m2 inputs, int6 weights": {"*": ("fp8_e5m2", "int6")},
    "int8 inputs, int4_g16 weights": {"*": ("int8", "int4_g16")},
}


@pytest.mark.parametrize("plan", list(PLANS))
def test_the_onnx_reference_evaluator_computes_what_the_fake_quantizers_do(
    digits, plan: str, tmp_path: Path
) -> None:
    _, model, inputs = digits
    set_formats(model, PLANS[plan])
    with torch.no_grad():
        expected = model(inputs[:60]).numpy()
    path = tmp_path / "model.onnx"
    summary = export_qdq(model, inputs[:1], path)
    assert summary.quantizers == 10 and summary.folded_batch_norms == 3
    graph = onnx.load(str(path))
    assert {entry.version for entry in graph.opset_import if entry.domain in ("", "ai.onnx")} == {
        OPSET
    }
    assert "BatchNormalization" not in {node.op_type for node in graph.graph.node}
    actual = run_reference(path, inputs[:60])
    if summary.integer_biases:
        # 8-bit layers whose outputs are quantized take their biases as INT32 at input scale x
        # weight scale, as integer kernels read them: each bias moves by half that at most.
        assert plan == "int8" and summary.integer_biases == 3  # 0, 3, 12: not the output layer
        np.testing.assert_array_equal(actual.argmax(1), expected.argmax(1))
        np.testing.assert_allclose(actual, expected, atol=0.1)
    else:
        assert_equal_but_for_level_flips(actual, expected)


# The reference evaluator's convolutions (numpy) and torch's sum in other orders, so a value
# within float rounding of a quantization level's edge may round to the next level in one of
# them; that sample's outputs then move by a fraction of a level's effect, the others agree to
# float rounding. Measured on the 60 samples across the kernel settings of
# tests/across_kernels.py: no sample natively, one (int8 inputs with int4_g16 weights, 0.009
# apart) under AVX and SSE4.2. A wrong scale, zero point or level moves most samples, and by
# far more.
ROUNDING = 1e-4
LEVEL_FLIPS = 2  # samples
LEVEL_FLIP_EFFECT = 0.1


def assert_equal_but_for_level_flips(actual: np.ndarray, expected: np.ndarray) -> None:
    apart = np.abs(actual - expected).max(axis=1)
    flipped = np.flatnonzero(apart > ROUNDING + ROUNDING * np.abs(expected).max(axis=1))
    assert len(flipped) <= LEVEL_FLIPS, f"samples {flipped.tolist()} differ by {apart[flipped]}"
    assert apart.max() <= LEVEL_FLIP_EFFECT, f"samples {flipped.tolist()}: {apart[flipped]}"


def test_integer_biases_are_the_float_biases_at_the_product_scale(digits, tmp_path: Path) -> None:
    _, model, inputs = digits
    set_formats(model, {"*": ("int8", "int8")})
    path = tmp_path / "model.onnx"
    export_qdq(model, inputs[:1], path)
    stored = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    layer = model.layers["12"]
    _, bound = integer_bounds(8, layer.input_quantizer.unsigned)
    input_scale = layer.input_quantizer.amax.item() / bound
    weight_scale = layer.weight_quantizer.amax.numpy() / 127
    levels = stored["model.12.weight_quantizer_bias_quantized"]
    assert levels.dtype == np.int32
    np.testing.assert_allclose(
        stored["model.12.weight_quantizer_bias_scale"], input_scale * weight_scale, rtol=1e-6
    )
    error = np.abs(levels * input_scale * weight_scale - layer.bias.detach().numpy())
    assert np.all(error <= input_scale * weight_scale / 2 * (1 + 1e-5))


@pytest.mark.parametrize("bits", [4, 8])
def test_unsigned_and_narrow_quantizers_keep_their_levels(
    digits, bits: int, tmp_path: Path
) -> None:
    """Unsigned inputs are UINT8 ([0, 2**b - 1], negatives saturate to 0 as in the fake
    quantizer); narrow-range weights INT4/INT8 without the most negative level."""
    _, model, inputs = digits
    set_formats(model, {"*": (f"int{bits}", f"int{bits}")})
    quantizers = [
        (layer.input_quantizer, layer.weight_quantizer) for layer in model.layers.values()
    ]
    signedness = [input_quantizer.unsigned for input_quantizer, _ in quantizers]
    try:
        for input_quantizer, weight_quantizer in quantizers:
            input_quantizer.unsigned, weight_quantizer.narrow_range = True, True
        with torch.no_grad():
            expected = model(inputs[:60]).numpy()
        path = tmp_path / "model.onnx"
        export_qdq(model, inputs[:1], path)
        np.testing.assert_allclose(
            run_reference(path, inputs[:60]), expected, atol=0.1 if bits == 8 else 1e-4
        )
        stored = {t.name: t for t in onnx.load(str(path)).graph.initializer}
        assert stored["model.3.input_quantizer_zero_point"].data_type == TensorProto.UINT8
        levels = numpy_helper.to_array(stored["model.3.weight_quantizer_quantized"]).astype(int)
        assert levels.min() >= -(2 ** (bits - 1)) + 1
    finally:
        for (input_quantizer, weight_quantizer), unsigned in zip(
            quantizers, signedness, strict=True
        ):
            input_quantizer.unsigned, weight_quantizer.narrow_range = unsigned, False


@pytest.mark.parametrize("bits", [3, 8])
def test_asymmetric_inputs_are_uint8_with_their_zero_points(
    digits, bits: int, tmp_path: Path
) -> None:
    """An asymmetric input quantizer is UINT8 with its zero point; onnx's reference evaluator
    and onnxruntime compute what the fake-quantized model does (8 bits: biases as INT32)."""
    _, model, inputs = digits
    set_formats(model, {"*": (f"int{bits}", "int8")})
    quantizers = [layer.input_quantizer for layer in model.layers.values()]
    try:
        for quantizer in quantizers:
            quantizer.asymmetric = True
        zeros = {q: q.params().zero for q in quantizers}
        with torch.no_grad():
            expected = model(inputs[:60]).numpy()
        path = tmp_path / "model.onnx"
        export_qdq(model, inputs[:1], path)
        atol = 0.1 if bits == 8 else 1e-4
        np.testing.assert_allclose(run_reference(path, inputs[:60]), expected, atol=atol)
        outputs = open_runtime("onnxruntime", path).run(inputs[:60].numpy())
        np.testing.assert_array_equal(outputs.argmax(1), expected.argmax(1))
        stored = {t.name: t for t in onnx.load(str(path)).graph.initializer}
        for name, layer in model.layers.items():
            zero = stored[f"model.{name}.input_quantizer_zero_point"]
            assert zero.data_type == TensorProto.UINT8
            assert int(numpy_helper.to_array(zero)) == zeros[layer.input_quantizer]
        assert any(0 < zero < 2**bits - 1 for zero in zeros.values())  # a two-sided input
    finally:
        for quantizer in quantizers:
            quantizer.asymmetric = False


def test_weights_are_stored_as_integers_of_their_levels_and_activations_clipped(
    digits, tmp_path: Path
) -> None:
    _, model, inputs = digits
    set_formats(model, PLANS["mixed int 2-8 bits"])
    path = tmp_path / "model.onnx"
    export_qdq(model, inputs[:1], path)
    graph = onnx.load(str(path)).graph
    stored = {tensor.name: tensor for tensor in graph.initializer}
    # The signed levels of b bits are [-2**(b-1), 2**(b-1) - 1], held by INT4 up to 4 bits.
    for layer, bits, onnx_type in (("0", 3, TensorProto.INT4), ("3", 5, TensorProto.INT8)):
        tensor = stored[f"model.{layer}.weight_quantizer_quantized"]
        assert tensor.data_type == onnx_type
        levels = numpy_helper.to_array(tensor).astype(np.int32)
        assert levels.min() >= -(2 ** (bits - 1)) and levels.max() <= 2 ** (bits - 1) - 1
        assert len(np.unique(levels)) > 2 ** (bits - 1)  # the levels are used, not squeezed
    clips = {
        node.input[0].split("_quantized")[0]: node for node in graph.node if node.op_type == "Clip"
    }
    low, high = (
        numpy_helper.to_array(stored[name]) for name in clips["model.3.input_quantizer"].input[1:]
    )
    # 3 bits inside INT8 (signed) or UINT8 (unsigned after a ReLU: unsigned auto).
    unsigned = model.layers["3"].input_quantizer.unsigned
    assert (int(low), int(high)) == ((0, 7) if unsigned else (-4, 3))
    assert "model.12.input_quantizer" not in clips  # 8 bits: INT8's own range
    dequantize = next(n for n in graph.node if n.name == "model.0.weight_quantizer/Dequantize")
    assert {a.name: a.i for a in dequantize.attribute}.get("axis") == 0  # per output channel


def test_a_negative_batch_norm_scale_is_folded_exactly(digits, tmp_path: Path) -> None:
    _, model, inputs = digits
    norm = model.model[1]
    saved = norm.weight.detach().clone()
    try:
        with torch.no_grad():
            norm.weight[::2] *= -1  # half the channels flip sign after the convolution
        set_formats(model, {"*": ("int4", "int4")})
        with torch.no_grad():
            expected = model(inputs[:60]).numpy()
        path = tmp_path / "model.onnx"
        export_qdq(model, inputs[:1], path)
        np.testing.assert_allclose(run_reference(path, inputs[:60]), expected, atol=1e-4)
    finally:
        with torch.no_grad():
            norm.weight.copy_(saved)


def test_onnxruntime_runs_eight_bit_layers_on_integer_kernels(digits, tmp_path: Path) -> None:
    """What onnxruntime documents for QDQ graphs: DequantizeLinear -> Conv -> QuantizeLinear
    with 8-bit operands becomes QLinearConv (QGemm for Gemm). Layer 7 is followed by an average
    pooling, which does not commute with the next quantizer, so its output stays float, and
    with it the convolution."""
    _, model, inputs = digits
    set_formats(model, {"*": ("int8", "int8")})
    path = tmp_path / "model.onnx"
    export_qdq(model, inputs[:1], path)
    session = open_runtime("onnxruntime", path)
    kernels = describe_kernels(session.kernels(), model.layers)
    assert sorted(kernels["integer"]) == ["0", "12", "14", "3"]
    assert kernels["float"] == ["7"]
    operators = {kernel.operator for kernel in session.kernels()}
    assert {"QLinearConv", "QGemm"} <= operators
    # 4-bit weights packed as INT4 have no integer kernel there; stored as INT8 they do.
    set_formats(model, {"*": ("int8", "int4")})
    export_qdq(model, inputs[:1], path)
    assert (
        describe_kernels(open_runtime("onnxruntime", path).kernels(), model.layers)["integer"] == []
    )
    export_qdq(model, inputs[:1], path, pack=False)
    integer = describe_kernels(open_runtime("onnxruntime", path).kernels(), model.layers)["integer"]
    assert sorted(integer) == ["0", "12", "14", "3"]


def test_four_bit_weights_take_at_most_a_fifth_of_the_float_file(digits, tmp_path: Path) -> None:
    context, model, inputs = digits
    float_file = export_onnx(context.build_model(), inputs[:1], tmp_path / "float.onnx")
    set_formats(model, {"*": ("int8", "int4")})
    summary = export_qdq(model, inputs[:1], tmp_path / "int4.onnx")
    assert summary.size <= 0.2 * float_file.stat().st_size


@pytest.mark.parametrize(
    ("formats", "named"),
    [
        (("mxfp4", "int8"), "mxfp4"),
        (("int8", "nvfp4"), "nvfp4"),
        (("int4_g16", "int8"), "int4_g16"),
    ],
)
def test_formats_without_an_onnx_form_are_refused_in_one_sentence(
    digits, formats: tuple, named: str, tmp_path: Path
) -> None:
    _, model, inputs = digits
    set_formats(model, {"*": formats})
    path = tmp_path / "model.onnx"
    with pytest.raises(UserError, match=f"quantizer 'model.0.*format {named} has no ONNX QDQ form"):
        export_qdq(model, inputs[:1], path)
    assert not path.exists()


def test_a_block_sparsified_layer_is_refused_by_name(digits, tmp_path: Path) -> None:
    from model_explorer.sparsity.sparsifier import BlockSparsifier

    _, model, inputs = digits
    set_formats(model, {"*": ("int8", "int8")})
    model.layers["3"].set_sparsifier(BlockSparsifier((4, 4), 0.1))
    try:
        with pytest.raises(UserError, match="layer '3' is block-sparsified"):
            export_qdq(model, inputs[:1], tmp_path / "model.onnx")
    finally:
        model.layers["3"].set_sparsifier(None)


def test_a_model_the_exporter_cannot_trace_is_one_sentence(digits, tmp_path: Path, capsys) -> None:
    _, model, inputs = digits
    set_formats(model, {"*": ("int8", "int8")})

    class Spectrum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x).abs()

    model.model.append(Spectrum())
    try:
        with pytest.raises(UserError, match="cannot be exported to ONNX") as raised:
            export_qdq(model, inputs[:1], tmp_path / "model.onnx")
        assert "\n" not in str(raised.value)
        assert capsys.readouterr().out == ""  # the exporter's graph dump is kept quiet
    finally:
        del model.model[-1]
    assert not (tmp_path / "model.onnx").exists()


def test_a_batch_size_fixed_by_tracing_is_one_sentence(digits, tmp_path: Path) -> None:
    _, model, inputs = digits
    set_formats(model, {"*": ("int8", "int8")})

    class Offset(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(len(x), -1)  # len(x): a Python number to the tracer

    model.model.append(Offset())
    try:
        with pytest.raises(UserError, match="reads the batch size as a Python number"):
            export_qdq(model, inputs[:1], tmp_path / "model.onnx")
    finally:
        del model.model[-1]
    assert not (tmp_path / "model.onnx").exists()


def test_the_vision_transformer_exports_and_runs_on_any_batch(tmp_path: Path) -> None:
    """Attention layers and the class token (digits_vit), against the reference evaluator."""
    from model_explorer.models import create_model
    from model_explorer.quantization import QuantizedModel

    torch.manual_seed(0)
    model = QuantizedModel(create_model("digits_vit").eval())
    x = torch.randn(16, 1, 8, 8)
    model.calibrate([x], "max")
    for index, layer in enumerate(model.layers.values()):
        layer.input_quantizer.num_bits = 8 - index % 4
        layer.weight_quantizer.num_bits = 4 + index % 3
    with torch.no_grad():
        expected = model(x).numpy()
    path = tmp_path / "vit.onnx"
    export_qdq(model, x[:1], path)
    np.testing.assert_allclose(run_reference(path, x), expected, atol=1e-4)
