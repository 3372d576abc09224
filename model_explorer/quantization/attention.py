"""Quantized attention: products of two activations, and nn.MultiheadAttention with its
projections as quantized layers.

`nn.MultiheadAttention` runs its projections inside one fused kernel (the "fast path") or
inside `F.multi_head_attention_forward`, never as modules, so swapping its `out_proj` alone
quantizes nothing. `QuantMultiheadAttention` computes the same attention in its own forward:
the packed input projection (`in_proj`; `q_proj`/`k_proj`/`v_proj` when keys and values have
other widths) and `out_proj` are quantized layers like any linear one, and the two products of
activations, Q·Kᵀ (`matmul_0`) and A·V (`matmul_1`), get quantizers when the workload asks for
them (`quantization.attention_matmuls`, as modelopt's BMM quantizers). With quantizers off it
equals torch's MultiheadAttention (tested against it). The products' quantizers write their
results over the operands made for them alone (a contiguous copy of an operand split by heads,
the softmax weights nobody asked for), where no hook could see those.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer.modules import rebuild, set_child
from model_explorer.quantization.layers import (
    FunctionalCall,
    TransformedLayer,
    TransformedLinear,
    layer_forward,
    place_quantizers,
)
from model_explorer.quantization.overwriting import hooked
from model_explorer.quantization.quantizer import TensorQuantizer

MakeQuantizers = Callable[[], tuple[TensorQuantizer, TensorQuantizer]]


def product(left: Tensor, right: Tensor, equation: str | None = None) -> Tensor:
    """`left @ right`, or `einsum(equation, left, right)`."""
    return torch.einsum(equation, left, right) if equation else torch.matmul(left, right)


class MatMul(nn.Module):
    """The float counterpart of an ActivationProduct: `left @ right` (or an einsum)."""

    def forward(self, left: Tensor, right: Tensor, equation: str | None = None) -> Tensor:
        return product(left, right, equation)


class ActivationProduct(nn.Module):
    """A product of two activations (Q·Kᵀ, A·V) with a quantizer on each operand. In a plan
    it is a layer like any other: `input_quantizer` holds the left operand's bits and
    `weight_quantizer` the right one's (both calibrated on data, as input quantizers are)."""

    float_type = MatMul
    weight = None
    # `left @ right` sums over left's last axis and right's second to last.
    input_block_axis, weight_block_axis = -1, -2

    def __init__(self, left: TensorQuantizer, right: TensorQuantizer) -> None:
        super().__init__()
        self.input_quantizer = left
        self.weight_quantizer = right
        place_quantizers(self)

    def forward(
        self,
        left: Tensor,
        right: Tensor,
        equation: str | None = None,
        fresh: tuple[bool, bool] = (False, False),
    ) -> Tensor:
        """`left @ right`, or `einsum(equation, left, right)`, of the quantized operands.
        `fresh`: whether each operand is a tensor made for this product alone (attention's
        copy of an operand split by heads, its softmax weights), which its quantizer then
        writes its result over where no hook could see the tensor."""
        with layer_forward():
            left = self._quantize(self.input_quantizer, left, fresh[0])
            right = self._quantize(self.weight_quantizer, right, fresh[1])
            return product(left, right, equation)

    def _quantize(self, quantizer: nn.Module, x: Tensor, fresh: bool) -> Tensor:
        if not fresh or type(quantizer) is not TensorQuantizer or quantizer.overwrites:
            return quantizer(x)
        if hooked(self, quantizer):  # a hook may keep the tensor it is handed
            return quantizer(x)
        quantizer.overwrites = True
        try:
            return quantizer(x)
        finally:
            quantizer.overwrites = False

    @staticmethod
    def product_macs(args: tuple[Any, ...], output: Tensor) -> int:
        """Multiply-accumulates of one call, over its whole operands."""
        left, right = args[0], args[1]
        if len(args) > 2 and args[2]:
            return einsum_macs(args[2], left, right)
        return output.numel() * left.shape[-1]


def einsum_macs(equation: str, left: Tensor, right: Tensor) -> int:
    """Multiply-accumulates of a two-operand einsum: the size of its whole index space."""
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for letters, tensor in zip(inputs, (left, right), strict=True):
        if "..." in letters:
            return 0
        sizes.update(zip(letters, tensor.shape, strict=True))
    return math.prod(sizes.values())


def _additive_mask(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A boolean mask (True: do not attend) as an additive float mask; a float mask as is."""
    if mask is None or mask.is_floating_point():
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        mask, float("-inf")
    )


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    products: tuple[ActivationProduct, ActivationProduct] | None = None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention of (..., L, D) queries over (..., S, D) keys and values
    with an additive or boolean (True: attend, as torch's SDPA) mask. Without products and
    weights to return this is torch's fused kernel; otherwise the two products are explicit,
    through the given ActivationProducts when there are any."""
    if mask is not None and not mask.is_floating_point():
        mask = _additive_mask(~mask, query.dtype)
    if products is None and not need_weights:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale
        )
        return out, None
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if not products:
        scores = torch.matmul(query, key.transpose(-2, -1)) * scale
        weights = _weights(scores, mask, dropout_p)
        return torch.matmul(weights, value), weights if need_weights else None
    # The operands split by heads are copied contiguous (torch.matmul would copy them after
    # their quantizers anyway): a copy, like the softmax weights nobody else reads, is the
    # product's alone, and its quantizer writes over it rather than into a new tensor.
    (query, own_query), (keys, own_keys) = _own(query), _own(key.transpose(-2, -1))
    scores = products[0](query, keys, fresh=(own_query, own_keys)) * scale
    weights = _weights(scores, mask, dropout_p)
    value, own_value = _own(value)
    out = products[1](weights, value, fresh=(not need_weights, own_value))
    return out, weights if need_weights else None


def _weights(scores: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """Attention weights from scaled scores: the mask added, softmax, dropout."""
    if mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1)
    return F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights


def _own(x: Tensor) -> tuple[Tensor, bool]:
    """`x` contiguous, and whether that is a copy (which nothing else reads)."""
    copy = x.contiguous()
    return copy, copy is not x


class QuantInProjection(TransformedLayer, nn.Linear):
    """An input projection of a MultiheadAttention (packed `in_proj_weight`, or one of
    `q/k/v_proj_weight`) as a transformed linear layer. It owns no parameter: `weight` and
    `bias` are the attention module's, so state dicts and checkpoints stay those of the float
    model."""

    float_type = nn.Linear

    def __init__(
        self,
        owner: nn.MultiheadAttention,
        weight_name: str,
        rows: slice | None,
    ) -> None:
        nn.Module.__init__(self)
        object.__setattr__(self, "_owner", owner)  # not a submodule: no cycle in the tree
        self.weight_name = weight_name
        self.rows = rows
        self.out_features, self.in_features = getattr(owner, weight_name).shape
        self.set_quantizers()
        self.set_sparsifier()

    @property
    def weight(self) -> Tensor:  # type: ignore[override]
        return getattr(self._owner, self.weight_name)

    @property
    def bias(self) -> Tensor | None:  # type: ignore[override]
        bias = self._owner.in_proj_bias
        return bias if bias is None or self.rows is None else bias[self.rows]

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight, self.bias)

    def project(self, x: Tensor, part: slice) -> Tensor:
        """One part (rows of the packed weight: queries, keys or values) of the projection,
        run as a call of this layer so that hooks and cost counts see it."""
        bias = self._owner.in_proj_bias
        call = FunctionalCall(F.linear, self.weight[part], (None if bias is None else bias[part],))
        return self(x, functional=call)

    def extra_repr(self) -> str:
        return (
            f"{self.weight_name}: in_features={self.in_features}, out_features={self.out_features}"
        )


class QuantMultiheadAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention computed in the open, its projections quantized (see the module
    docstring). Shares every parameter with the float module it was built from."""

    float_type = nn.MultiheadAttention

    @classmethod
    def from_float(
        cls,
        module: nn.MultiheadAttention,
        make: MakeQuantizers | None = None,
        product: Callable[[], ActivationProduct] | None = None,
    ) -> QuantMultiheadAttention:
        """The counterpart of `module`, quantized as `set_quantizers(make, product)` says."""
        layer = rebuild(module, cls)
        del layer._modules["out_proj"]  # added back after the input projections, in their order
        embed = module.embed_dim
        if module._qkv_same_embed_dim:
            layer.in_proj = QuantInProjection(module, "in_proj_weight", None)
        else:
            for index, part in enumerate("qkv"):
                rows = slice(index * embed, (index + 1) * embed)
                projection = QuantInProjection(module, f"{part}_proj_weight", rows)
                setattr(layer, f"{part}_proj", projection)
        layer.out_proj = TransformedLinear.from_float(module.out_proj)
        layer.set_quantizers(make, product)
        return layer

    def set_quantizers(
        self,
        make: MakeQuantizers | None = None,
        product: Callable[[], ActivationProduct] | None = None,
    ) -> None:
        """Quantize each projection with the (input, weight) quantizers `make()` gives (None:
        pass-throughs) and, with `product`, the two products of activations with the products
        it makes (None: float products)."""
        for projection in self.projections().values():
            projection.set_quantizers(*(make() if make is not None else ()))
        for name in ("matmul_0", "matmul_1"):
            if product is None:
                self._modules.pop(name, None)
            else:
                setattr(self, name, product())

    def projections(self) -> dict[str, TransformedLayer]:
        """The projections by their name below this module, in computation order."""
        names = ["in_proj"] if self._qkv_same_embed_dim else ["q_proj", "k_proj", "v_proj"]
        return {name: self._modules[name] for name in [*names, "out_proj"]}  # type: ignore[misc]

    def quantized_layers(self) -> dict[str, nn.Module]:
        """The quantized layers by their name below this module, in computation order."""
        names = ["in_proj"] if self._qkv_same_embed_dim else ["q_proj", "k_proj", "v_proj"]
        names += ["matmul_0", "matmul_1", "out_proj"]
        return {name: self._modules[name] for name in names if name in self._modules}

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        embed = self.embed_dim
        if not self._qkv_same_embed_dim:
            return tuple(
                getattr(self, f"{part}_proj")(x)
                for part, x in zip("qkv", (query, key, value), strict=True)
            )
        if query is key and key is value:
            return self.in_proj(query).chunk(3, dim=-1)
        parts = [slice(i * embed, (i + 1) * embed) for i in range(3)]
        if key is value:
            q = self.in_proj.project(query, parts[0])
            return (q, *self.in_proj.project(key, slice(embed, 3 * embed)).chunk(2, dim=-1))
        return tuple(
            self.in_proj.project(x, part)
            for x, part in zip((query, key, value), parts, strict=True)
        )

    def forward(  # noqa: PLR0913 - nn.MultiheadAttention's signature
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        batched = query.dim() == 3
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
        query, key, value = (self._batch_first(x, batched) for x in (query, key, value))
        if key_padding_mask is not None and not batched:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        batch, length, _ = query.shape
        q, k, v = self._project(query, key, value)
        k, v, attn_mask, key_padding_mask = self._extend(k, v, attn_mask, key_padding_mask)
        heads, head_dim = self.num_heads, self.head_dim
        q, k, v = (x.reshape(batch, x.shape[1], heads, head_dim).transpose(1, 2) for x in (q, k, v))
        mask = self._mask(attn_mask, key_padding_mask, batch, q.dtype)
        products = (self.matmul_0, self.matmul_1) if "matmul_0" in self._modules else None
        dropout = self.dropout if self.training else 0.0
        out, weights = attention(q, k, v, mask, dropout, None, products, need_weights)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, length, self.embed_dim))
        out = out if self.batch_first or not batched else out.transpose(0, 1)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out, weights = out.squeeze(0), None if weights is None else weights.squeeze(0)
        return out, weights

    def _batch_first(self, x: Tensor, batched: bool) -> Tensor:
        if not batched:
            return x.unsqueeze(0)
        return x if self.batch_first else x.transpose(0, 1)

    def _extend(
        self, k: Tensor, v: Tensor, attn_mask: Tensor | None, padding: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """Keys and values with `bias_k`/`bias_v` and a zero position appended, and the masks
        padded to match."""
        batch = k.shape[0]
        extra = []
        if self.bias_k is not None and self.bias_v is not None:
            extra.append((self.bias_k.reshape(1, 1, -1), self.bias_v.reshape(1, 1, -1)))
        if self.add_zero_attn:
            extra.append((k.new_zeros(1, 1, k.shape[-1]), v.new_zeros(1, 1, v.shape[-1])))
        for key_row, value_row in extra:
            k = torch.cat([k, key_row.expand(batch, 1, -1)], dim=1)
            v = torch.cat([v, value_row.expand(batch, 1, -1)], dim=1)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            padding = None if padding is None else F.pad(padding, (0, 1))
        return k, v, attn_mask, padding

    def _mask(
        self, attn_mask: Tensor | None, padding: Tensor | None, batch: int, dtype: torch.dtype
    ) -> Tensor | None:
        """One additive (batch, heads, L, S) mask from `attn_mask` ((L, S) or
        (batch * heads, L, S)) and `key_padding_mask` ((batch, S)); True means masked out."""
        mask = _additive_mask(attn_mask, dtype)
        if mask is not None and mask.dim() == 3:
            mask = mask.reshape(batch, self.num_heads, *mask.shape[1:])
        padding = _additive_mask(padding, dtype)
        if padding is not None:
            padding = padding.reshape(batch, 1, 1, -1)
            mask = padding if mask is None else mask + padding
        return mask


def open_attention(model: nn.Module) -> dict[str, nn.Module]:
    """Swap, in place, float nn.MultiheadAttention modules for QuantMultiheadAttention without
    quantizers: the same values, but the projections run as layers that sparsifiers, cost
    counts and energy rows can name (`<attention>.in_proj`, `<attention>.out_proj`), as in a
    QuantizedModel. Returns the replaced modules by name, to put back."""
    replaced = {}
    for name, module in list(model.named_modules()):
        if type(module) is nn.MultiheadAttention and name:
            set_child(model, name, QuantMultiheadAttention.from_float(module))
            replaced[name] = module
    return replaced
