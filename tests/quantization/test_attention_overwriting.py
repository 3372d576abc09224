"""Attention's products write their quantized operands over the tensors made for them alone
(the copies of the operands split by heads, the softmax weights nobody else reads), with the
values they give written into new tensors; never over a tensor the caller holds, the weights
the caller asked for, or a tensor a hook can see."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model_explorer.quantization import QuantizedModel
from model_explorer.quantization import quantizer as quantizer_module
from model_explorer.quantization.attention import ActivationProduct


@pytest.fixture(autouse=True)
def integer_kernel_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer kernel takes tensors of every size here (searches leave those below
    kernels.INTEGER_SMALLEST values to the eager steps): these tests are about the kernel."""
    from model_explorer.formats import kernels as _kernels

    monkeypatch.setattr(_kernels, "INTEGER_SMALLEST", 0)


PRODUCT_OPERANDS = [f"attention.matmul_{i}.{role}" for i in (0, 1) for role in ("input", "weight")]


class SelfAttention(nn.Module):
    def __init__(self, need_weights: bool = False) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.need_weights = need_weights
        self.weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, self.weights = self.attention(x, x, x, need_weights=self.need_weights)
        return out


def _quantized(model: nn.Module, x: torch.Tensor) -> QuantizedModel:
    quantized = QuantizedModel(model, attention_matmuls=True)
    quantized.calibrate([x], method="max")
    quantized.bit_widths = [4] * len(quantized.bit_widths)
    return quantized


@pytest.fixture
def written_over(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each integer quantizer call, in turn: whether its result lies in its input's memory."""
    calls: list[bool] = []
    original = quantizer_module.apply_quantization

    def recorded(x: torch.Tensor, *args: object) -> torch.Tensor:
        address = x.data_ptr()
        out = original(x, *args)
        calls.append(out.data_ptr() == address)
        return out

    monkeypatch.setattr(quantizer_module, "apply_quantization", recorded)
    return calls


def _products(quantized: QuantizedModel) -> list[ActivationProduct]:
    return [m for m in quantized.modules() if isinstance(m, ActivationProduct)]


@pytest.mark.kernels
def test_products_write_over_their_own_operands_with_the_same_outputs(written_over) -> None:  # noqa: ANN001
    """Q, Kᵀ, V (copies of the packed projection's slices) and the softmax weights are written
    over, the layers' inputs not; the outputs are those of the same model with a hook on each
    product, which keeps every quantizer writing into a new tensor."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    quantized = _quantized(SelfAttention().eval(), x)
    hooked = copy.deepcopy(quantized)
    for product in _products(hooked):
        product.register_forward_hook(lambda module, args, out: None)
    with torch.no_grad():
        quantized(x), hooked(x)  # the weights quantized and kept
        written_over.clear()
        found = quantized(x)
        in_place = list(written_over)
        written_over.clear()
        expected = hooked(x)
    order = ["in_proj", *PRODUCT_OPERANDS, "out_proj"]
    assert len(in_place) == len(order)
    assert dict(zip(order, in_place, strict=True)) == {
        "in_proj": False,
        **dict.fromkeys(PRODUCT_OPERANDS, True),
        "out_proj": False,
    }
    assert not any(written_over)
    assert torch.equal(found, expected)


@pytest.mark.kernels
def test_a_hook_sees_the_operand_as_it_was(written_over) -> None:  # noqa: ANN001
    """A hook on a product's quantizer keeps that quantizer from writing over its input: the
    tensor the hook was handed still holds the softmax weights after the call."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    quantized = _quantized(SelfAttention().eval(), x)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    quantizer = quantized.quantizers["attention.matmul_1.input_quantizer"]
    quantizer.register_forward_pre_hook(lambda module, args: seen.append((args[0], args[0] + 0)))
    with torch.no_grad():
        quantized(x)
    ((tensor, before),) = seen
    assert torch.equal(tensor, before)
    assert torch.allclose(tensor.sum(-1), torch.ones(()))  # softmax weights, not quantized
    assert written_over.count(True) == 3  # Q, Kᵀ, V still written over


def test_the_weights_asked_for_are_not_written_over() -> None:
    """With need_weights the softmax weights go back to the caller: they stay the float
    probabilities (rows summing to 1), the quantizer writing its values elsewhere."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    quantized = _quantized(SelfAttention(need_weights=True).eval(), x)
    with torch.no_grad():
        quantized(x)
    weights = quantized.model.weights
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    quantizer = quantized.quantizers["attention.matmul_1.input_quantizer"]
    with torch.no_grad():
        assert not torch.equal(quantizer(weights), weights)  # 4 bits would have changed them


class ContiguousSdpa(nn.Module):
    """Attention through F.scaled_dot_product_attention on contiguous tensors the module keeps
    (as a cache of keys and values would): nothing to copy, so nothing of the caller's is
    written over."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.kept: tuple[torch.Tensor, ...] = ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.qkv(x).chunk(3, -1)
        q, k, v = (t.reshape(2, 5, 2, 8).transpose(1, 2).contiguous() for t in parts)
        self.kept = (q, k, v)
        return F.scaled_dot_product_attention(q, k, v)


def test_the_callers_contiguous_operands_are_left_as_they_were() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    quantized = _quantized(ContiguousSdpa().eval(), x)
    assert len(_products(quantized)) == 2
    with torch.no_grad():
        quantized(x)
        q, k, v = quantized.model.kept
        parts = quantized.model.qkv(x).chunk(3, -1)
        expected = [t.reshape(2, 5, 2, 8).transpose(1, 2) for t in parts]
    for kept, made in zip((q, k, v), expected, strict=True):
        assert torch.equal(kept, made)


@pytest.mark.kernels
def test_torchvisions_vision_transformer_gives_the_same_outputs_written_over(written_over) -> None:  # noqa: ANN001
    """Material of torchvision's: ViT-B/16's twelve attentions with their products quantized
    write over their operands, with the outputs of the same model with hooks on the products."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(image_size=32, num_classes=10).eval()
    nn.init.normal_(model.heads.head.weight, std=0.02)  # zero-initialised: outputs all 0
    x = torch.randn(2, 3, 32, 32)
    quantized = _quantized(model, x)
    hooked = copy.deepcopy(quantized)
    for product in _products(hooked):
        product.register_forward_hook(lambda module, args, out: None)
    with torch.no_grad():
        quantized(x), hooked(x)  # the weights quantized and kept
        written_over.clear()
        found = quantized(x)
        assert written_over.count(True) == 4 * 12
        expected = hooked(x)
    assert torch.equal(found, expected)
