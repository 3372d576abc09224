"""Operand quantizers (quantization.operand_quantizers): where they sit, what they compute
(torch's own fake quantization at the calibrated scale), and calibration files keeping them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model_explorer.errors import UserError
from model_explorer.models import create_model
from model_explorer.quantization import QuantizedModel
from model_explorer.quantization.spec import QuantizerSpec

BLOCKS = [f"layers.{index}" for index in range(9)]  # resnet20: three stages of three blocks


def resnet20(operands: bool, calibrate: bool = True) -> tuple[QuantizedModel, torch.Tensor]:
    """Untrained weights, the same every time; inputs `unsigned: auto` as the workload's
    default."""
    torch.manual_seed(0)
    model = QuantizedModel(
        create_model("resnet20").eval(),
        input=QuantizerSpec(unsigned="auto"),
        operand_quantizers=operands,
    )
    x = torch.randn(8, 3, 32, 32)
    if calibrate:
        model.calibrate([x], "max")
    return model, x


def test_every_residual_addition_and_the_average_pooling_get_operand_quantizers() -> None:
    model, _ = resnet20(True)
    expected = [f"{block}.add_0.operand_{side}" for block in BLOCKS for side in (0, 1)]
    assert sorted(model.operand_quantizers) == sorted([*expected, "pool.avg_pool_0.operand_0"])
    plain, _ = resnet20(False)
    assert plain.operand_quantizers == {}
    # Not layers: the search space, the plan's names and the genes are the same.
    assert list(model.layers) == list(plain.layers)
    assert model.explorable_modules == plain.explorable_modules


def test_an_operand_quantizer_computes_torchs_fake_quantization_at_its_scale() -> None:
    model, x = resnet20(True)
    seen = {}
    for name in ("layers.4.add_0.operand_0", "layers.4.add_0.operand_1"):
        quantizer = model.operand_quantizers[name]
        quantizer.register_forward_hook(
            lambda m, a, out, n=name: seen.update({n: (a[0].clone(), out)})
        )
    with torch.no_grad():
        model(x)
    # the residual branch (a batch norm's output) is signed, the shortcut (after ReLU) is not
    for name, (low, high) in (
        ("layers.4.add_0.operand_0", (-128, 127)),
        ("layers.4.add_0.operand_1", (0, 255)),
    ):
        operand, output = seen[name]
        scale = model.operand_quantizers[name].amax.item() / high
        expected = torch.fake_quantize_per_tensor_affine(operand, scale, 0, low, high)
        torch.testing.assert_close(output, expected, rtol=0, atol=scale * 1e-4)
        assert len(torch.unique(output)) > 16  # a grid, not a constant
    model.set_enabled(False)  # every quantizer off: the float model
    with torch.no_grad():
        torch.testing.assert_close(model(x), resnet20(False)[0].restore()(x))


class Tail(nn.Module):
    """A functional average pooling and an in-place addition, each once feeding a linear layer
    and once (`tail`) the output only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        head = y.clone()
        head.add_(x)  # read afterwards: in place
        pooled = F.avg_pool2d(head, 4).flatten(1)
        tail = self.conv(x) + x
        return self.linear(pooled), tail


def test_only_operators_that_feed_a_quantized_layer_get_quantizers() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 2, 4, 4)
    model = QuantizedModel(Tail(), operand_quantizers=True)
    model.calibrate([x], "max")
    assert sorted(model.operand_quantizers) == [
        "add_0.operand_0",
        "add_0.operand_1",
        "avg_pool_0.operand_0",
    ]
    quantizers = model.operand_quantizers
    model.set_enabled(False)
    model.set_enabled(True, list(quantizers))
    with torch.no_grad():
        head, tail = model(x)
        y = model.model.conv(x)
        summed = quantizers["add_0.operand_0"](y) + quantizers["add_0.operand_1"](x)
        pooled = F.avg_pool2d(quantizers["avg_pool_0.operand_0"](summed), 4).flatten(1)
    torch.testing.assert_close(head, model.model.linear(pooled))
    torch.testing.assert_close(tail, y + x)


def test_calibration_files_keep_operand_quantizers(tmp_path: Path) -> None:
    model, x = resnet20(True)
    path = model.save_calibration(tmp_path / "c.pt")
    fresh, _ = resnet20(True, calibrate=False)
    fresh.load_calibration(path)
    assert fresh.operand_quantizers.keys() == model.operand_quantizers.keys()
    for name, quantizer in model.operand_quantizers.items():
        loaded = fresh.operand_quantizers[name]
        assert (loaded.amax, loaded.unsigned) == (quantizer.amax, quantizer.unsigned)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), model(x))
    without, _ = resnet20(False, calibrate=False)
    with pytest.raises(UserError, match="operand_quantizers true and the workload sets false"):
        without.load_calibration(path)
