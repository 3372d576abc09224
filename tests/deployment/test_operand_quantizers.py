"""Residual networks exported with operand quantizers (quantization.operand_quantizers):
onnxruntime's own optimised graph says every product runs on integers (and, without them,
names the convolutions before additions as float), and onnx's reference evaluator computes
what the fake-quantized model computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
torchvision = pytest.importorskip("torchvision")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from model_explorer.deployment.export import export_qdq  # noqa: E402
from model_explorer.deployment.runtimes import describe_kernels, open_runtime  # noqa: E402
from model_explorer.models import create_model  # noqa: E402
from model_explorer.quantization import QuantizedModel  # noqa: E402
from model_explorer.quantization.spec import QuantizerSpec  # noqa: E402


def calibrated(model: torch.nn.Module, x: torch.Tensor, operands: bool) -> QuantizedModel:
    quantized = QuantizedModel(
        model.eval(), input=QuantizerSpec(unsigned="auto"), operand_quantizers=operands
    )
    quantized.calibrate([x], "max")
    return quantized


def test_onnxruntime_runs_every_product_of_resnet18_on_integers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 3, 32, 32)
    found = {}
    for operands in (False, True):
        torch.manual_seed(1)
        model = calibrated(torchvision.models.resnet18(), x, operands)
        path = tmp_path / f"{operands}.onnx"
        export_qdq(model, x[:1], path)
        session = open_runtime("onnxruntime", path)
        found[operands] = describe_kernels(session.kernels(), model.layers)
        optimised = onnx.load(str(session.optimized)).graph.node  # what kernels() reads
        found[operands]["operators"] = {node.op_type for node in optimised}
    with_operands = found[True]
    assert with_operands["float"] == []
    assert len(with_operands["integer"]) == 21  # 20 convolutions and the linear layer
    assert "QLinearAdd" in with_operands["operators"]  # the additions too
    # The planted contrast: without them, what additions read stays float.
    before_additions = [f"layer{stage}.{block}.conv2" for stage in (1, 2, 3, 4) for block in (0, 1)]
    shortcuts = [f"layer{stage}.0.downsample.0" for stage in (2, 3, 4)]
    assert set(before_additions + shortcuts) <= set(found[False]["float"])


def test_the_reference_evaluator_computes_what_the_fake_quantized_resnet20_does(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32)
    model = calibrated(create_model("resnet20"), x, True)
    path = tmp_path / "resnet20.onnx"
    summary = export_qdq(model, x[:1], path)
    assert summary.quantizers == 2 * len(model.layers) + len(model.operand_quantizers)
    # every convolution and every addition: the linear layer's output is the model's
    assert summary.quantized_outputs == 21 + 9
    with torch.no_grad():
        expected = model(x).numpy()
    actual = ReferenceEvaluator(str(path)).run(None, {"input": x.numpy()})[0]
    # INT32 biases of 8-bit products move each bias by half its scale at most (see
    # test_export.py): the logits agree closely and rank alike.
    np.testing.assert_array_equal(actual.argmax(1), expected.argmax(1))
    np.testing.assert_allclose(actual, expected, atol=0.05 * np.abs(expected).max())
