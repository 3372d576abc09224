"""Which quantizers may write their result over their input: those after an activation call
that elision.py skips, where the call's input is a tensor the forward pass made (a transformed
layer's product, a batch norm's, a sum: never the model's input, a parameter or a view of
another tensor) and the call alone reads it, and one layer, called once, reads the call's output.
Skipped, the call hands that layer a tensor nothing else will read, and its input quantizer
writes over it (TensorQuantizer.overwrites): no new activation to allocate and fill. Read from
the same torch.fx trace as the skipping, checked by the same first pass; not where a hook on
the modules that make, pass or read the tensor could keep it."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from model_explorer.quantization.layers import TransformedLayer

# What makes a new tensor, which nothing but the graph's later nodes can read: a transformed
# layer's product, a batch norm, a sum.
_FRESH_MODULES = (TransformedLayer, nn.modules.batchnorm._BatchNorm)
_FRESH_FUNCTIONS = (operator.add, torch.add)


def sole_reader(model: nn.Module, node: Any) -> tuple[TransformedLayer, nn.Module | None] | None:
    """The transformed layer that is the one reader of an activation call's output, where the
    call's input is a fresh tensor (`_FRESH_MODULES`, `_FRESH_FUNCTIONS`: not the model's input,
    a parameter or a view of another tensor) that the call alone reads, with the module that
    made it (None for a sum): skipped, the call hands it that layer as is, and its input
    quantizer may write over it. None otherwise."""
    source = node.args[0] if len(node.args) == 1 and not node.kwargs else None
    if not hasattr(source, "users") or len(source.users) != 1 or len(node.users) != 1:
        return None
    maker = model.get_submodule(source.target) if source.op == "call_module" else None
    if maker is not None:
        fresh = isinstance(maker, _FRESH_MODULES)
    else:
        fresh = source.op == "call_function" and source.target in _FRESH_FUNCTIONS
        fresh = fresh and not source.kwargs  # no `out=`
    (user,) = node.users
    if not fresh or user.op != "call_module" or user.args != (node,) or user.kwargs:
        return None
    layer = model.get_submodule(user.target)
    return (layer, maker) if isinstance(layer, TransformedLayer) else None


def hooked(*modules: nn.Module | None) -> bool:
    """Whether a hook may see (and keep) a tensor these modules make or take: one of their own,
    or a global one."""
    if _global_forward_hooks or _global_forward_pre_hooks:
        return True
    return any(
        module is not None and (module._forward_hooks or module._forward_pre_hooks)
        for module in modules
    )
