"""How a runtime runs 8-bit integer products on this processor, asked of the runtime itself.

A runtime's INT8 kernels depend on the processor: with VNNI (x86's AVX512_VNNI, AVX_VNNI or
AMX) a product of unsigned 8-bit activations and signed 8-bit weights accumulates in 32 bits;
without it (AVX2 and AVX-512 processors before it, emulated with ONEDNN_MAX_CPU_ISA) oneDNN, and
with it OpenVINO, sums pairs of such products in 16 bits with saturation, so full-range
weights give outputs tens of levels off; below AVX2, OpenVINO has no kernel for a Linear with
INT4 weights at all. Tests that compare a runtime's integer kernels with the fake-quantized
model ask `integer_products(runtime)` what to expect here, instead of assuming the processor
they were written on.
"""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np

EXACT = "exact"  # every output within one level of the QDQ graph evaluated in float
SATURATING = "saturating"  # more: the 16-bit pair sums overflow


def _probe_file(path: Path) -> np.ndarray:
    """A convolution and a linear layer in QDQ form, both with full-range INT8 weights and
    full-range UINT8 activations (the worst case for 16-bit pair sums), then a linear layer with
    INT4 weights; writes it to `path` and returns an input."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    channels, classes = 32, 16
    weights = {
        "conv_w": rng.integers(-127, 128, size=(16, channels, 3, 3)).astype(np.int8),
        "fc_w": rng.integers(-127, 128, size=(classes, 16 * 8 * 8)).astype(np.int8),
    }
    scalars = {"x_s": 0.02, "h_s": 0.5, "hq_s": 0.1, "y_s": 0.5}
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    initializers += [
        numpy_helper.from_array(np.array(v, np.float32), k) for k, v in scalars.items()
    ]
    initializers += [
        numpy_helper.from_array(np.array(0, np.uint8), "u_zero"),
        numpy_helper.from_array(np.array(0, np.int8), "s_zero"),
        numpy_helper.from_array(np.full(16, 0.01, np.float32), "conv_s"),
        numpy_helper.from_array(np.full(classes, 0.001, np.float32), "fc_s"),
        numpy_helper.from_array(np.zeros(16, np.int8), "conv_z"),
        numpy_helper.from_array(np.zeros(classes, np.int8), "fc_z"),
        numpy_helper.from_array(np.full(classes, 0.01, np.float32), "head_s"),
        helper.make_tensor("head_z", TensorProto.INT4, [classes], [0] * classes),
        helper.make_tensor(
            "head_w",
            TensorProto.INT4,
            [classes, classes],
            rng.integers(-7, 8, size=classes * classes).tolist(),
        ),
    ]

    def qdq(name: str, scale: str, zero: str) -> list:
        return [
            helper.make_node("QuantizeLinear", [name, scale, zero], [f"{name}_q"]),
            helper.make_node("DequantizeLinear", [f"{name}_q", scale, zero], [f"{name}_d"]),
        ]

    nodes = [
        *qdq("input", "x_s", "u_zero"),
        helper.make_node("DequantizeLinear", ["conv_w", "conv_s", "conv_z"], ["cw"], axis=0),
        helper.make_node("Conv", ["input_d", "cw"], ["h"], pads=[1, 1, 1, 1]),
        *qdq("h", "h_s", "s_zero"),
        helper.make_node("Relu", ["h_d"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        *qdq("f", "hq_s", "u_zero"),
        helper.make_node("DequantizeLinear", ["fc_w", "fc_s", "fc_z"], ["fw"], axis=0),
        helper.make_node("Gemm", ["f_d", "fw"], ["y"], transB=1),
        *qdq("y", "y_s", "s_zero"),
        # a linear layer with INT4 weights (as the export stores those of up to 4 bits), which
        # OpenVINO runs by decompressing them
        helper.make_node("Relu", ["y_d"], ["z"]),
        helper.make_node("DequantizeLinear", ["head_w", "head_s", "head_z"], ["hw"], axis=0),
        helper.make_node("Gemm", ["z", "hw"], ["output"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "integer_products",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, channels, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path.write_bytes(model.SerializeToString())
    return (rng.random((8, channels, 8, 8)) * 5.1).astype(np.float32)


@cache
def integer_products(runtime: str) -> str:
    """EXACT, SATURATING, or 'unavailable: <the runtime's sentence>' for `runtime` (a name of
    model_explorer.deployment.runtimes.RUNTIMES) on this processor, against onnx's reference
    evaluator of the same file."""
    from onnx.reference import ReferenceEvaluator

    from model_explorer.deployment.runtimes import open_runtime
    from model_explorer.errors import UserError

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.onnx"
        inputs = _probe_file(path)
        expected = ReferenceEvaluator(str(path)).run(None, {"input": inputs})[0]
        try:  # OpenVINO's integer kernels, its float parts at float32 whatever its default
            actual = open_runtime(f"{runtime}:f32" if runtime == "openvino" else runtime, path)
            actual = actual.run(inputs)
        except UserError as error:
            return f"unavailable: {error}"
    # one level of y is 0.5, which the float head scales by at most 16 x 7 x 0.01
    levels_apart = np.abs(actual - expected).max() / (0.5 * 16 * 7 * 0.01)
    return EXACT if levels_apart <= 1.5 else SATURATING


@cache
def default_precision(runtime: str) -> str:
    """The precision a runtime runs a file's float operations in at its default settings on
    this processor ('unavailable: <its sentence>' where it cannot run the probe file so): the
    CPU plugin of OpenVINO picks bf16 where the processor has it (AVX512_BF16, AMX), f32
    elsewhere; the others f32. Under ONEDNN_MAX_CPU_ISA below the processor's own, OpenVINO
    still picks bf16 but oneDNN has no bf16 kernels left: unavailable."""
    if runtime != "openvino":
        return "f32"
    if integer_products(runtime).startswith("unavailable"):
        # below AVX2 (ONEDNN_MAX_CPU_ISA=AVX on a bf16 processor) its bf16 compile does not
        # fail but crashes the process: not tried where f32 cannot run already
        return integer_products(runtime)
    from model_explorer.deployment.runtimes import open_runtime
    from model_explorer.errors import UserError

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.onnx"
        inputs = _probe_file(path)
        try:
            session = open_runtime(runtime, path)
            session.run(inputs)
        except UserError as error:
            return f"unavailable: {error}"
    return session.precision  # type: ignore[attr-defined]
