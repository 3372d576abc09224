"""The export-fidelity audit against the runtimes' own reports: onnxruntime's optimised graph
and OpenVINO's runtime model, read here, say which layers ran in float; the audit must warn of
exactly those layers asked 8-bit integers, and of a layer whose QDQ pair was planted away."""

from __future__ import annotations

from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")

from model_explorer.deployment.audit import (  # noqa: E402
    Asked,
    FidelityAudit,
    RuntimeRun,
    audit_export,
)
from model_explorer.deployment.audit_render import audit_markdown, audit_table  # noqa: E402
from model_explorer.deployment.export import export_qdq  # noqa: E402
from model_explorer.deployment.runtimes import Kernel, open_runtime  # noqa: E402
from runtime_probes import default_precision  # noqa: E402
from tests_support import calibrated_digits  # noqa: E402

# onnxruntime's operators that compute a product, told apart by the test itself.
ORT_INTEGER = {"QLinearConv", "QGemm", "QLinearMatMul", "ConvInteger", "MatMulInteger"}
ORT_FLOAT = {"Conv", "FusedConv", "NchwcConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"}


@pytest.fixture(scope="module")
def int8_file(trained_digits, tmp_path_factory):  # noqa: ANN001, ANN201
    """(digits_cnn QuantizedModel with every quantizer at int8, its QDQ file)."""
    folder = tmp_path_factory.mktemp("audit")
    context, model = calibrated_digits(trained_digits, folder)
    for layer in model.layers.values():
        layer.input_quantizer.format = layer.weight_quantizer.format = "int8"
    example = next(iter(context.batches("exploration")))[0][:1]
    path = folder / "int8.onnx"
    export_qdq(model, example, path)
    return model, path


def ran(runtime: str, path: Path) -> list[tuple[str, str, list[Kernel]]]:
    """(label, version, kernels) of `path` opened in `runtime`, and the runtime itself open
    for the test's own reading."""
    opened = open_runtime(runtime, path)
    return [(opened.label, opened.version, opened.kernels())], opened


def ort_float_layers(optimized: Path, layers: list[str]) -> set[str]:
    """The layers whose product onnxruntime's optimised graph keeps as a float operator (its
    nodes are named after the layer, with a suffix where it fused)."""
    found = set()
    for node in onnx.load(str(optimized)).graph.node:
        if node.op_type in ORT_FLOAT | ORT_INTEGER:
            layer = next(
                (name for name in layers if node.name == name or node.name.startswith(name + "_")),
                None,
            )
            assert layer is not None, node.name
            if node.op_type in ORT_FLOAT:
                found.add(layer)
    return found


def warned(audit: FidelityAudit, runtime: str) -> set[str]:
    return {warning.layer for warning in audit.warnings if warning.runtime == runtime}


def test_the_audit_warns_of_exactly_the_layers_onnxruntime_runs_in_float(int8_file) -> None:
    """digits_cnn's layer 7 is followed by an average pooling, so the export quantizes no output
    of it and onnxruntime keeps a float Conv (as of this export; the oracle is the optimised
    graph, whatever the export does)."""
    model, path = int8_file
    runs, session = ran("onnxruntime", path)
    audit = audit_export(model, path, runs)
    floats = ort_float_layers(session.optimized, list(model.layers))
    assert warned(audit, "onnxruntime") == floats
    for warning in audit.warnings:
        assert warning.text.startswith(f"warning: layer '{warning.layer}' asked int8 x int8 but")
        assert "onnxruntime ran it in float (f32 Conv" in warning.text or "Gemm" in warning.text
    for row in audit.rows:
        assert row.asked == Asked("int8", "int8")
        integer = row.cell("onnxruntime").startswith("int8 ")
        assert integer == (row.layer not in floats), audit_table(audit)


def without_input_qdq(path: Path, layer: str, target: Path) -> Path:
    """The file with `layer`'s input quantizer taken out: its product reads the float tensor
    its QuantizeLinear read (the planted fault)."""
    model = onnx.load(str(path))
    nodes = {node.name: node for node in model.graph.node}
    quantize = nodes[f"model.{layer}.input_quantizer/Quantize"]
    dequantize = nodes[f"model.{layer}.input_quantizer/Dequantize"]
    for node in model.graph.node:
        node.input[:] = [quantize.input[0] if n == dequantize.output[0] else n for n in node.input]
    model.graph.node.remove(quantize)
    model.graph.node.remove(dequantize)
    onnx.save(model, str(target))
    return target


def test_a_layer_planted_without_its_input_quantizer_is_named_in_a_warning(
    int8_file, tmp_path: Path
) -> None:
    model, path = int8_file
    faulty = without_input_qdq(path, "3", tmp_path / "faulty.onnx")
    runs, session = ran("onnxruntime", faulty)
    audit = audit_export(model, faulty, runs)
    assert "3" in ort_float_layers(session.optimized, list(model.layers))
    assert "3" in warned(audit, "onnxruntime")
    (warning,) = [w for w in audit.warnings if w.layer == "3"]
    assert warning.text == (
        "warning: layer '3' asked int8 x int8 but onnxruntime ran it in float (f32 Conv): "
        "the file has no DequantizeLinear before its input"
    )


def openvino_integer(compiled) -> dict[str, bool]:  # noqa: ANN001
    """Layer -> whether OpenVINO's runtime model runs its product on an integer primitive
    (`primitiveType` such as brgconv_avx512_I8; _f32 or _bf16 otherwise), the product found by
    the layer's node among its original layers."""
    found = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("Convolution", "FullyConnected"):
            integer = info["primitiveType"].astype(str).lower().endswith("_i8")
            for original in info["originalLayersNames"].astype(str).split(","):
                found.setdefault(original.partition("/")[0], integer)
    return found


def test_openvino_s_own_runtime_model_names_the_planted_float_layer(
    int8_file, tmp_path: Path
) -> None:
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    if default_precision("openvino").startswith("unavailable"):
        pytest.skip("OpenVINO cannot run the export's layers on this processor")
    model, path = int8_file
    # Layer 3's input taken out of the file would not do: OpenVINO carries layer 0's quantized
    # output through the Relu and runs 3 on u8 all the same (its runtime model says so). Layer
    # 12 reads the average pooling of a float output: without its own quantizer, float.
    faulty = without_input_qdq(path, "12", tmp_path / "faulty.onnx")
    for file, planted in ((path, set()), (faulty, {"12"})):
        runs, opened = ran("openvino", file)
        audit = audit_export(model, file, runs)
        integer = openvino_integer(opened.compiled)
        floats = {layer for layer in model.layers if not integer[layer]}
        assert floats == planted == warned(audit, "openvino"), audit_table(audit)
        for row in audit.rows:
            assert row.cell("openvino").startswith(("u8 ", "i8 ")) == integer[row.layer], row


def test_a_runtime_reporting_float_for_one_layer_is_warned_of_by_name() -> None:
    """A runtime mocked to report f32 for one layer: the warning names it; a layer it reports
    no kernel for is 'not found', and a runtime without integer kernels (float_only) is a note,
    not a warning; the audit survives its JSON form."""
    from model_explorer.deployment.audit_render import notes, warning_lines

    asked = {"a": Asked("int8", "int8"), "b": Asked("int8", "int8"), "c": Asked("float", "int4")}
    integer, floats = RuntimeRun("fake"), RuntimeRun("tvm", float_only="it dequantizes")
    runs = {
        integer: [Kernel("a_token_1", "QLinearConv", "int8"), Kernel("b", "Conv", "f32")],
        floats: [Kernel(name, "conv2d", "f32") for name in asked],
    }
    audit = FidelityAudit.collect(asked, {}, runs)
    assert warning_lines(audit) == [
        "warning: layer 'b' asked int8 x int8 but fake ran it in float (f32 Conv)"
    ]
    assert notes(audit) == ["note: tvm runs every product in float: it dequantizes"]
    assert [row.cell("fake") for row in audit.rows] == ["int8 QLinearConv", "f32 Conv", "not found"]
    assert audit.rows[2].asked.text == "int4 weights"
    again = FidelityAudit.from_dict(audit.to_dict())
    assert audit_markdown(again) == audit_markdown(audit)
    assert "| `b` | int8 x int8 | f32 Conv | f32 conv2d |" in audit_markdown(audit)


def test_asked_precisions_follow_the_plan_in_effect(int8_file) -> None:
    from model_explorer.deployment.audit import asked_precisions
    from model_explorer.plan import apply_plan

    model, _ = int8_file
    layers = list(model.layers)
    apply_plan({layers[0]: {"weight_format": "int4_g16"}, layers[1]: {"input_bits": 6}}, model)
    model.layers[layers[2]].input_quantizer.enabled = False
    try:
        asked = asked_precisions(model)
        assert asked[layers[0]].text == "int8 x int4_g16"
        assert asked[layers[1]].text == "int6 x int8"
        assert asked[layers[2]].text == "int8 weights"
        assert asked[layers[3]].eight_bit_integer and not asked[layers[1]].eight_bit_integer
    finally:
        model.layers[layers[2]].input_quantizer.enabled = True
        apply_plan({layers[0]: {"weight_bits": 8}, layers[1]: {"input_bits": 8}}, model)
