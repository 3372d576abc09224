"""Transformed layers: a quantized and sparse model computes, bit for bit, what fake-quantizing
each layer's input and weight by hand and sparsifying the product with the BlockSparsifier's
functions computes, whichever of QuantizedModel and SparseModel wraps first; the default slots
(pass-through quantizers, the dense product) hold no state and no hook sees them; restoring in
any order gives back the float model's own modules."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer.cost import analyze_cost
from model_explorer.errors import UserError
from model_explorer.formats.integer import fake_quantize
from model_explorer.models import create_model
from model_explorer.modules import module_hooks
from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.quantization import QuantizedModel, TensorQuantizer
from model_explorer.quantization.layers import TRANSFORMED_LAYERS, Dense, PassThrough
from model_explorer.sparsity import BlockSparsifier, SparseModel
from model_explorer.sparsity.sparsifier import col2out, padded_im2col

BLOCK = (4, 4)
BITS = [6, 4, 5, 3, 8, 5]  # per layer: input, weight
THRESHOLDS = [0.0, 0.2, 0.01]  # the first layer dense, the others sparse


def small_cnn() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 3 * 3, 10),
    ).eval()


def joint(model: nn.Module, quantized_first: bool) -> tuple[QuantizedModel, SparseModel]:
    """The model quantized (calibrated by max on one batch) and sparsified, in either order."""
    calibration = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    sparse = None if quantized_first else SparseModel(model, block_size=BLOCK)
    quantized = QuantizedModel(model)
    quantized.calibrate([calibration], method="max")
    sparse = sparse or SparseModel(model, block_size=BLOCK)
    return quantized, sparse


def reference(float_model: nn.Sequential, x: Tensor) -> tuple[Tensor, list[int]]:
    """The joint model's output computed by hand, and each layer's created blocks: inputs
    fake-quantized per tensor by the max |input| of the calibration batch, weights per output
    channel by their own max, the product dense unless a block was zeroed."""
    calibration = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    layers = [m for m in float_model if isinstance(m, (nn.Conv2d, nn.Linear))]
    amax, h = {}, calibration
    for module in float_model:
        if module in layers:
            amax[id(module)] = h.abs().amax()
        h = module(h)
    created = []
    for module in float_model:
        if module not in layers:
            x = module(x)
            continue
        index = layers.index(module)
        input_bits, weight_bits = BITS[2 * index : 2 * index + 2]
        xq = fake_quantize(x, amax[id(module)], input_bits)
        w = module.weight
        w_amax = w.abs().amax(dim=tuple(range(1, w.dim())))
        wq = fake_quantize(w, w_amax, weight_bits, axis=0)
        x, count = _sparse_product(module, xq, wq, THRESHOLDS[index])
        created.append(count)
    return x, created


def _sparse_product(module: nn.Module, x: Tensor, w: Tensor, threshold: float) -> tuple:
    sparsifier = BlockSparsifier(BLOCK)
    matrix, columns, rows, spatial = padded_im2col(module, x, BLOCK)
    means = sparsifier.block_means(matrix.abs())
    drop = means < threshold
    created = int((drop & (means != 0)).sum())
    if created == 0:
        if isinstance(module, nn.Linear):
            return F.linear(x, w, module.bias), 0
        out = F.conv2d(
            x, w, module.bias, module.stride, module.padding, module.dilation, module.groups
        )
        return out, 0
    sparse = sparsifier.zero_blocks(matrix, drop)[:, :, :columns, :rows]
    return col2out(module, sparse, w, module.bias, spatial), created


@pytest.mark.parametrize("fused", [False, True], ids=["torch path", "fused kernel"])
@pytest.mark.parametrize("quantized_first", [True, False], ids=["quantized first", "sparse first"])
def test_a_joint_model_equals_the_hand_made_reference(
    quantized_first: bool, fused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torch path's sparse product is the reference's, bit for bit; the fused kernel
    (sparsity/kernel.py) sums the same products in another order."""
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "1" if fused else "0")
    float_model = small_cnn()
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected, created = reference(float_model, x)
        quantized, sparse = joint(float_model, quantized_first)
        quantized.bit_widths = BITS
        sparse.thresholds = THRESHOLDS
        sparse.reset_stats()
        output = quantized(x)
    assert created[0] == 0 < min(created[1:])  # dense and sparse products
    assert [s["created_blocks"] for s in sparse.stats().values()] == created
    if fused:
        torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(output, expected)


def test_default_slots_hold_nothing_and_no_hook_sees_them() -> None:
    float_model = small_cnn()
    x = torch.randn(2, 1, 8, 8)
    keys = list(float_model.state_dict())
    with torch.no_grad():
        expected = float_model(x)
    names = [row.operator for row in analyze_cost(float_model, x).rows]
    originals = list(float_model)
    for index in (0, 2, 5):
        cls = TRANSFORMED_LAYERS[type(originals[index]).__name__]
        float_model[index] = cls.from_float(originals[index])
    layer = float_model[0]
    assert layer.transforms == {}
    assert isinstance(layer.input_quantizer, PassThrough)
    assert isinstance(layer.sparsifier, Dense)
    assert list(float_model.state_dict()) == keys  # no parameter or buffer in a default slot
    with torch.no_grad():
        assert torch.equal(float_model(x), expected)
    assert [row.operator for row in analyze_cost(float_model, x).rows] == names
    seen: list[str] = []
    with module_hooks(float_model, before=lambda name, module, args: seen.append(name)):
        float_model(x)
    assert seen == ["", *(str(index) for index in range(len(float_model)))]
    sparsifier = BlockSparsifier(BLOCK)
    layer.set_sparsifier(sparsifier)
    quantizers = TensorQuantizer(), TensorQuantizer(axis=0)
    layer.set_quantizers(*quantizers)
    assert layer.transforms == {
        "input_quantizer": quantizers[0],
        "weight_quantizer": quantizers[1],
        "sparsifier": sparsifier,
    }
    layer.set_quantizers()
    layer.set_sparsifier(None)
    assert layer.transforms == {}
    assert type(layer.to_float()) is nn.Conv2d


def _modules(model: nn.Module) -> dict[str, int]:
    return {name: id(module) for name, module in model.named_modules()}


@pytest.mark.parametrize(
    "quantized_first, quantized_restored_first",
    list(itertools.product([True, False], [True, False])),
)
def test_restore_in_any_order_gives_back_the_float_model(
    quantized_first: bool, quantized_restored_first: bool
) -> None:
    torch.manual_seed(0)
    model = create_model("digits_vit").eval()  # convolution, linear layers and attention
    x = torch.randn(4, 1, 8, 8)
    keys, modules = list(model.state_dict()), _modules(model)
    with torch.no_grad():
        expected = model(x)
        quantized, sparse = joint(model, quantized_first)
        sparse.thresholds = [0.3] * len(sparse.thresholds)
        quantized(x)
    assert "blocks.0.attention.in_proj" in set(quantized.layers) & set(sparse.sparsifiers)
    assert list(model.state_dict()) == keys
    first, second = (quantized, sparse) if quantized_restored_first else (sparse, quantized)
    first.restore()
    second.restore()
    assert _modules(model) == modules  # the float model's own modules, nothing added
    assert list(model.state_dict()) == keys
    with torch.no_grad():
        assert torch.equal(model(x), expected)


def test_either_order_of_wrapping_computes_the_same() -> None:
    torch.manual_seed(0)
    model = create_model("digits_vit").eval()
    x = torch.randn(4, 1, 8, 8)
    outputs = []
    for quantized_first in (True, False):
        with torch.no_grad():
            quantized, sparse = joint(model, quantized_first)
            quantized.bit_widths = [4] * len(quantized.bit_widths)
            sparse.thresholds = [0.3] * len(sparse.thresholds)
            outputs.append(quantized(x))
        assert any(s["created_blocks"] for s in sparse.stats().values())
        sparse.restore()
        quantized.restore()
    assert torch.equal(outputs[0], outputs[1])


def test_a_layer_another_model_transforms_is_left_to_it() -> None:
    model = small_cnn()
    sparse = SparseModel(model, block_size=BLOCK)
    with pytest.raises(UserError, match="no layer"):
        SparseModel(model)
    quantized = QuantizedModel(model)
    with pytest.raises(UserError, match="no layer"):
        QuantizedModel(model)
    assert set(sparse.sparsifiers) == set(quantized.layers) == {"0", "2", "5"}


def test_the_settings_name_every_swappable_layer_type() -> None:
    """The workload's `layer_types` (quantization/spec.py, written out so that the settings
    import no torch) are the types the swap has counterparts for, in its order."""
    from model_explorer.quantization.spec import QUANTIZABLE_LAYERS
    from model_explorer.quantization.swap import SWAPPABLE

    assert QUANTIZABLE_LAYERS == SWAPPABLE
