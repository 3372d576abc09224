"""Quantization of products that do not run through a quantized layer's forward.

Some models hand a layer's weight to `F.linear`/`F.conv*` from another module's code
(torchvision's Swin attention calls `F.linear(x, self.qkv.weight, ...)`), and attention
multiplies activations with activations (`q @ k.transpose(...)`, `einsum`,
`scaled_dot_product_attention`) in plain functions. Module swaps see neither. A
TorchFunctionMode does: while it is active, such calls are answered with quantized operands —
the owning layer's input and weight quantizers for a layer's weight (or a view of it), and an
ActivationProduct's two quantizers for a product of activations.

The mode is active only inside "scopes": the modules found, on one forward pass over the
whole model (`Interceptor.discover`), to make such calls, plus the modules that have a fused
fast path (nn.TransformerEncoder(Layer)), which an active mode sends down their plain path.
Hooks on the scopes enter and leave it, so a model without such calls pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from model_explorer.modules import module_hooks
from model_explorer.quantization.attention import ActivationProduct, attention, product
from model_explorer.quantization.layers import FunctionalCall, inside_layer
from model_explorer.quantization.operands import OperandQuantizers, Reach, operand_kind

_WEIGHT_FUNCTIONS = {
    F.linear,
    F.conv1d,
    F.conv2d,
    F.conv3d,
    F.conv_transpose1d,
    F.conv_transpose2d,
    F.conv_transpose3d,
}
_MATMULS = {torch.matmul, Tensor.matmul, Tensor.__matmul__, torch.bmm, Tensor.bmm}


def _is_activation(value: Any) -> bool:
    """A tensor that is neither a parameter nor a view of one."""
    if not isinstance(value, Tensor) or isinstance(value, nn.Parameter):
        return False
    return not isinstance(value._base, nn.Parameter)


class Interceptor(TorchFunctionMode):
    """Answers calls on layers' weights and, with `make_product`, products of activations,
    with quantized operands; with `make_operands` (kind -> its OperandQuantizers) additions of
    activations and average poolings too. `weights` maps id(parameter) -> the quantized layer
    owning it."""

    def __init__(
        self,
        make_product: Callable[[], ActivationProduct] | None,
        make_operands: Callable[[str], OperandQuantizers] | None = None,
    ) -> None:
        super().__init__()
        self.weights: dict[int, nn.Module] = {}
        self.make_product = make_product
        self.make_operands = make_operands
        self.products: dict[tuple[str, int], tuple[str, ActivationProduct]] = {}
        # (scope, kind, index) -> (module name, its quantizers); see operands.py
        self.operands: dict[tuple[str, str, int], tuple[str, OperandQuantizers]] = {}
        self.operand_counts: dict[str, dict[str, int]] = {}
        self.reach: Reach | None = None
        self.scopes: list[str] = []  # innermost last
        self.counts: dict[str, int] = {}
        self.discovering: Any = None  # the ModuleTrace of a discovery pass
        self.found_scopes: dict[str, None] = {}
        self._depth = 0
        self._handles: list[Any] = []

    # -- entering and leaving ---------------------------------------------------------------
    def enter_scope(self, name: str) -> None:
        self.scopes.append(name)
        self.counts[name] = 0
        self.operand_counts[name] = {}
        if self._depth == 0:
            self.__enter__()
        self._depth += 1

    def leave_scope(self, name: str) -> None:
        if self.scopes and self.scopes[-1] == name:
            self.scopes.pop()
        self._depth -= 1
        if self._depth == 0:
            self.__exit__(None, None, None)

    def install(self, model: nn.Module, scopes: list[str]) -> None:
        """Hooks that enter the mode when a scope's forward starts and leave it when it ends."""
        self.remove()
        for name in scopes:
            module = model.get_submodule(name) if name else model
            self._handles.append(
                module.register_forward_pre_hook(lambda m, a, n=name: self.enter_scope(n))
            )
            self._handles.append(
                module.register_forward_hook(
                    lambda m, a, o, n=name: self.leave_scope(n), always_call=True
                )
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- the calls --------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if inside_layer():
            return func(*args, **kwargs)
        if self.reach is not None:
            return self._followed(func, args, kwargs)
        return self._answer(func, args, kwargs)

    def _answer(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self.make_operands is not None:
            kind = operand_kind(func, args)
            if kind is not None:
                found = self._operands(kind)
                return func(*args, **kwargs) if found is None else found.call(func, args, kwargs)
        if func in _WEIGHT_FUNCTIONS and len(args) > 1:
            layer = self._owner(args[1])
            if layer is not None:
                return self._weight_call(func, layer, args, kwargs)
        elif self.make_product is not None:
            if func in _MATMULS and all(_is_activation(a) for a in args[:2]):
                return self._product()(args[0], args[1])
            if func is torch.einsum and _two_operands(args):
                operands = args[1:] if len(args) == 3 else tuple(args[1])
                if all(_is_activation(a) for a in operands):
                    return self._product()(*operands, args[0])
            if func is F.scaled_dot_product_attention:
                return self._attention(*args, **kwargs)
        return func(*args, **kwargs)

    def _followed(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """A call of the discovery pass, answered as always, its outputs tagged with the
        operand sites its inputs come from (and with its own, where it is one); a product's
        inputs reach a quantized layer."""
        reach = self.reach
        sources = reach.of((args, kwargs))
        product = func in _MATMULS or func in (torch.einsum, F.scaled_dot_product_attention)
        if (product and self.make_product is not None) or (
            func in _WEIGHT_FUNCTIONS and len(args) > 1 and self._owner(args[1]) is not None
        ):
            reach.arrive(args)
        kind = operand_kind(func, args) if self.make_operands is not None else None
        scope = self._note_scope() if kind is not None else ""
        index = self.operand_counts.get(scope, {}).get(kind, 0) if kind else 0
        result = self._answer(func, args, kwargs)
        if kind is not None:
            sources = sources | {(scope, kind, index)}
        reach.tag(result, sources)
        return result

    def _operands(self, kind: str) -> OperandQuantizers | None:
        """The OperandQuantizers of the next `kind` call of the current scope (made while
        discovering), or None when none was kept there."""
        scope = (
            self._note_scope()
            if self.discovering is not None
            else (self.scopes[-1] if self.scopes else "")
        )
        counts = self.operand_counts.setdefault(scope, {})
        index = counts.get(kind, 0)
        counts[kind] = index + 1
        key = (scope, kind, index)
        if key not in self.operands and self.discovering is not None:
            name = f"{scope}.{kind}_{index}" if scope else f"{kind}_{index}"
            self.operands[key] = (name, self.make_operands(kind))
        found = self.operands.get(key)
        return None if found is None else found[1]

    def _owner(self, weight: Any) -> nn.Module | None:
        if not isinstance(weight, Tensor):
            return None
        layer = self.weights.get(id(weight))
        if layer is None and weight._base is not None:
            layer = self.weights.get(id(weight._base))
        return layer

    def _weight_call(self, func: Any, layer: nn.Module, args: tuple, kwargs: dict) -> Tensor:
        if self.discovering is not None:
            self._note_scope()
        # Called as the layer, so that its hooks (cost counts, analyses) see the call.
        return layer(args[0], functional=FunctionalCall(func, args[1], args[2:], kwargs))

    def _note_scope(self) -> str:
        current = self.discovering.current
        name = current[0] if current else ""
        if name not in self.found_scopes:
            self.found_scopes[name] = None
            self.counts.setdefault(name, 0)
        return name

    def _product(self) -> Callable[..., Tensor]:
        """The ActivationProduct for the next product of the current scope (made while
        discovering), or plain matmul/einsum when none was found there."""
        scope = (
            self._note_scope()
            if self.discovering is not None
            else (self.scopes[-1] if self.scopes else "")
        )
        index = self.counts.get(scope, 0)
        self.counts[scope] = index + 1
        key = (scope, index)
        if key not in self.products and self.discovering is not None:
            name = f"{scope}.matmul_{index}" if scope else f"matmul_{index}"
            self.products[key] = (name, self.make_product())
        found = self.products.get(key)
        return product if found is None else found[1]

    def _attention(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        if is_causal:
            length, source = query.shape[-2], key.shape[-2]
            causal = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
            attn_mask = causal if attn_mask is None else attn_mask & causal
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            repeat = query.shape[-3] // key.shape[-3]
            key = key.repeat_interleave(repeat, dim=-3)
            value = value.repeat_interleave(repeat, dim=-3)
        products = (self._product(), self._product())
        if any(p is product for p in products):
            products = None
        return attention(query, key, value, attn_mask, dropout_p, scale, products)[0]

    # -- discovery ----------------------------------------------------------------------------
    def discover(self, model: nn.Module, run: Callable[[], Any]) -> list[str]:
        """Run `run()` (one forward pass of `model`) with the mode active everywhere; return
        the scopes: modules whose own code handed a layer's weight to a function or multiplied
        activations."""
        self.remove()
        self.found_scopes = {}

        layers = {id(layer) for layer in self.weights.values()}

        def restart(name: str, module: nn.Module, args: Any) -> None:
            self.counts[name] = 0  # products are numbered within each call of a module
            self.operand_counts[name] = {}
            if self.reach is not None and id(module) in layers:
                self.reach.arrive(args)

        # Followed only where there are operand sites to keep or drop.
        self.reach = Reach() if self.make_operands is not None else None
        with module_hooks(model, restart, eval_mode=False) as trace:
            self.discovering = trace
            try:
                with self:
                    run()
            finally:
                self.discovering = None
                reached = self.reach.reached if self.reach is not None else set()
                self.reach = None
        for key in [key for key in self.operands if key not in reached]:
            del self.operands[key]  # what they produce reaches no quantized layer
        return list(self.found_scopes)


def _two_operands(args: tuple) -> bool:
    if len(args) == 3:
        return True
    return len(args) == 2 and isinstance(args[1], (list, tuple)) and len(args[1]) == 2
