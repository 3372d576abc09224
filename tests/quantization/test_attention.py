"""Quantized attention against torch's own: QuantMultiheadAttention with its quantizers off
computes what nn.MultiheadAttention computes, in every configuration torch offers; products of
activations get quantizers when asked, in MultiheadAttention, in torchvision's Swin (plain
matmuls) and MaxViT (einsum), and in scaled_dot_product_attention; calibration files bring all
of it back."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from model_explorer.quantization import QuantizedModel
from model_explorer.quantization.attention import ActivationProduct, QuantMultiheadAttention

CONFIGS = {
    "self, batch first": dict(batch_first=True),
    "self, sequence first": dict(),
    "bias_kv and zero attention": dict(batch_first=True, add_bias_kv=True, add_zero_attn=True),
    "other key widths": dict(batch_first=True, kdim=12, vdim=20),
    "no bias": dict(batch_first=True, bias=False),
}


def _inputs(config: dict, cross: bool, batch: int = 3) -> tuple[torch.Tensor, ...]:
    shape = (batch, 5) if config.get("batch_first") else (5, batch)
    query = torch.randn(*shape, 16)
    if not cross and "kdim" not in config:
        return query, query, query
    key_shape = (batch, 7) if config.get("batch_first") else (7, batch)
    key = torch.randn(*key_shape, config.get("kdim", 16))
    value = key if "kdim" not in config else torch.randn(*key_shape, config["vdim"])
    return query, key, value


def _quantized_copy(module: nn.MultiheadAttention, products: bool = False) -> nn.Module:
    model = nn.Sequential(copy.deepcopy(module))
    quantized = QuantizedModel(model, attention_matmuls=products)
    quantized.set_enabled(False)
    return quantized.model[0]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("products", [False, True], ids=["fused", "products"])
def test_equals_torchs_multihead_attention(
    name: str, cross: bool, need_weights: bool, products: bool
) -> None:
    """Torch's outputs, and its attention weights only where asked for, with the attention
    fused or its two products explicit (their quantizers off)."""
    torch.manual_seed(0)
    config = CONFIGS[name]
    module = nn.MultiheadAttention(16, 4, **config).eval()
    ours = _quantized_copy(module, products)
    assert isinstance(ours, QuantMultiheadAttention)
    query, key, value = _inputs(config, cross)
    length, source = 5, key.shape[1 if config.get("batch_first") else 0]
    padding = torch.zeros(3, source, dtype=torch.bool)
    padding[0, -2:] = True
    causal = torch.ones(length, source, dtype=torch.bool).triu(1)
    for kwargs in (
        {},
        {"key_padding_mask": padding},
        {"attn_mask": causal},
        {"attn_mask": torch.randn(3 * 4, length, source)},
        {"attn_mask": causal, "key_padding_mask": padding, "average_attn_weights": False},
    ):
        with torch.no_grad():
            expected = module(query, key, value, need_weights=need_weights, **kwargs)
            found = ours(query, key, value, need_weights=need_weights, **kwargs)
        torch.testing.assert_close(found[0], expected[0], rtol=1e-5, atol=1e-5)
        if need_weights:
            torch.testing.assert_close(found[1], expected[1], rtol=1e-5, atol=1e-5)
        else:
            assert found[1] is None


def test_unbatched_inputs_and_the_fast_path_model_agree() -> None:
    torch.manual_seed(0)
    module = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = _quantized_copy(module)
    x = torch.randn(5, 16)
    with torch.no_grad():  # eval, no grad, batched: torch takes its fused fast path here
        torch.testing.assert_close(ours(x, x, x)[0], module(x, x, x)[0], rtol=1e-5, atol=1e-5)
        batched = torch.randn(2, 5, 16)
        expected = module(batched, batched, batched, need_weights=False)[0]
        torch.testing.assert_close(
            ours(batched, batched, batched)[0], expected, rtol=1e-5, atol=1e-5
        )


def test_projections_are_layers_that_own_no_parameter() -> None:
    model = nn.Sequential(nn.MultiheadAttention(16, 4, batch_first=True))
    keys = set(model.state_dict())
    quantized = QuantizedModel(model)
    assert list(quantized.layers) == ["0.in_proj", "0.out_proj"]
    assert set(model.state_dict()) == keys  # checkpoints stay the float model's
    assert quantized.layers["0.in_proj"].weight is model[0].in_proj_weight
    separate = QuantizedModel(nn.Sequential(nn.MultiheadAttention(16, 4, kdim=8, vdim=8)))
    assert list(separate.layers) == ["0.q_proj", "0.k_proj", "0.v_proj", "0.out_proj"]
    assert quantized.restore()[0].__class__ is nn.MultiheadAttention


def _fake(x: torch.Tensor, bits: int, amax: float) -> torch.Tensor:
    """The quantizer formula by hand (per tensor, signed)."""
    bound = 2 ** (bits - 1) - 1
    return torch.clamp(torch.round(x * bound / amax), -bound - 1, bound) * amax / bound


class SelfAttention(nn.Module):
    def __init__(self, module: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attention = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False)[0]


def test_attention_products_quantize_q_k_probabilities_and_v() -> None:
    """With only the products' quantizers on, the output equals attention computed by hand
    with the quantizer formula applied to Q, K, the softmax probabilities and V."""
    torch.manual_seed(0)
    module = nn.MultiheadAttention(16, 2, batch_first=True, bias=False).eval()
    quantized = QuantizedModel(SelfAttention(module), attention_matmuls=True)
    expected_layers = ["in_proj", "matmul_0", "matmul_1", "out_proj"]
    assert list(quantized.layers) == [f"attention.{name}" for name in expected_layers]
    x = torch.randn(2, 5, 16)
    quantized.calibrate([x], method="max")
    quantized.set_enabled(False)
    names = [
        f"attention.matmul_{i}.{role}_quantizer" for i in (0, 1) for role in ("input", "weight")
    ]
    quantized.set_enabled(True, names)
    for name in names:
        quantized.quantizers[name].num_bits = 4
    amax = [float(quantized.quantizers[n].amax) for n in names]
    w = module.in_proj_weight.detach()
    q, k, v = (F.linear(x, part).view(2, 5, 2, 8).transpose(1, 2) for part in w.chunk(3))
    scores = _fake(q, 4, amax[0]) @ _fake(k, 4, amax[1]).transpose(-2, -1) / 8**0.5
    probabilities = _fake(torch.softmax(scores, -1), 4, amax[2])
    out = (probabilities @ _fake(v, 4, amax[3])).transpose(1, 2).reshape(2, 5, 16)
    expected = F.linear(out, module.out_proj.weight.detach())
    with torch.no_grad():
        torch.testing.assert_close(quantized(x), expected, rtol=1e-4, atol=1e-5)
    # Calibration saw the float probabilities (max calibration: their largest value).
    with torch.no_grad():
        float_probabilities = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, -1)
    assert amax[2] == pytest.approx(float(float_probabilities.max()), rel=1e-5)


class SdpaBlock(nn.Module):
    """Attention written as Hugging Face models write it: linear modules and
    F.scaled_dot_product_attention."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(2, 5, 16))


def _vit() -> nn.Module:
    model = torchvision.models.vit_b_16(image_size=32, num_classes=10)
    nn.init.normal_(model.heads.head.weight, std=0.02)  # zero-initialised: outputs all 0
    return model


@pytest.mark.parametrize(
    ("builder", "shape", "sites"),
    [
        (SdpaBlock, (2, 5, 16), 2),
        (lambda: torchvision.models.swin_t(num_classes=10), (1, 3, 64, 64), 2 * 12),
        (_vit, (1, 3, 32, 32), 2 * 12),
    ],
    ids=["sdpa", "swin_t", "vit_b_16"],
)
def test_products_of_activations_are_found_and_calibrated(builder, shape, sites) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = builder().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        reference = model(x)
    quantized = QuantizedModel(model, attention_matmuls=True)
    quantized.calibrate([x], method="max")
    products = [n for n, layer in quantized.layers.items() if isinstance(layer, ActivationProduct)]
    assert len(products) == sites
    assert all(quantized.layers[n].weight_quantizer.amax is not None for n in products)
    quantized.bit_widths = [16] * len(quantized.bit_widths)
    with torch.no_grad():
        found = quantized(x)
    assert float((found - reference).norm()) <= 1e-3 * float(reference.norm()) + 1e-6
    quantized.set_enabled(False)
    quantized.set_enabled(True, [f"{products[0]}.input_quantizer"])
    quantized.quantizers[f"{products[0]}.input_quantizer"].num_bits = 2
    with torch.no_grad():
        assert not torch.equal(quantized(x), reference)


class WindowAttention(nn.Module):
    """Attention written as torchvision's Swin writes it: its linear layers' weights handed to
    F.linear, plain matmuls between activations."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = F.linear(x, self.qkv.weight, self.qkv.bias)
        q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in qkv.chunk(3, -1))
        attention = (q.matmul(k.transpose(-2, -1)) / 8**0.5).softmax(-1)
        out = attention.matmul(v).transpose(1, 2).reshape(2, 5, 16)
        return F.linear(out, self.proj.weight, self.proj.bias)


def test_calibration_files_bring_back_discovered_products(tmp_path) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = nn.Sequential(WindowAttention(), nn.ReLU(), WindowAttention()).eval()
    x = torch.randn(2, 5, 16)
    quantized = QuantizedModel(copy.deepcopy(model), attention_matmuls=True)
    quantized.calibrate([x], method="max")
    quantized.save_calibration(tmp_path / "calibration.pt")
    fresh = QuantizedModel(copy.deepcopy(model), attention_matmuls=True)
    fresh.load_calibration(tmp_path / "calibration.pt")
    assert list(fresh.layers) == list(quantized.layers)
    assert fresh.scopes == quantized.scopes == ["0", "2"]
    assert len(fresh.layers) == 8  # per block: qkv, proj and two products
    for bits in (8, 3):
        quantized.bit_widths = fresh.bit_widths = [bits] * len(quantized.bit_widths)
        with torch.no_grad():
            torch.testing.assert_close(fresh(x), quantized(x))


def test_sparsity_reaches_attention_projections() -> None:
    """A SparseModel on a float model opens its MultiheadAttention so that the projections,
    which torch runs inside one kernel, get sparsifiers like every linear layer."""
    from model_explorer.models import create_model
    from model_explorer.sparsity import SparseModel

    torch.manual_seed(0)
    model = create_model("digits_vit").eval()
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        reference = model(x)
    sparse = SparseModel(model, (4, 4))
    assert {"blocks.0.attention.in_proj", "blocks.0.attention.out_proj"} <= set(sparse.sparsifiers)
    with torch.no_grad():
        torch.testing.assert_close(sparse(x), reference, rtol=1e-5, atol=1e-5)
    sparse.thresholds = [0.5] * len(sparse.thresholds)
    sparse.reset_stats()
    with torch.no_grad():
        sparse(x)
    stats = sparse.stats()["blocks.0.attention.in_proj"]
    # in_proj's input: 4 samples x 17 tokens x 32 features in 4x4 blocks (rows padded to 20)
    assert stats["total_blocks"] == 4 * 5 * 8 and stats["created_blocks"] > 0
    assert type(sparse.restore().blocks[0].attention) is nn.MultiheadAttention
