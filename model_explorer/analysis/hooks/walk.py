"""What both operator walks share (HookRunner calls hooks as operators run; Recorder records a
forward pass for `--dalgona`): the modules named as in the model a QuantizedModel or
SparseModel wraps, the module running now, and forward hooks with attention unfused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from model_explorer.modules import ModuleTrace, module_hooks, unfused_attention
from model_explorer.quantization.layers import QuantLayer
from model_explorer.quantization.quantizer import TensorQuantizer


class OperatorWalk:
    """Base of the operator walks. `root` is the model whose names operators carry; `trace`
    holds the running modules while `watching` is active; `_left` runs after every module's
    forward (a subclass's reaction to quantizers)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        # Operators of a QuantizedModel or SparseModel are named as in the model it wraps.
        self.root = model.model if isinstance(getattr(model, "model", None), nn.Module) else model
        self.names = {id(m): n for n, m in self.root.named_modules()}
        self.trace = ModuleTrace()

    def inside_quantizer(self) -> bool:
        current = self.trace.current
        return current is not None and isinstance(current[1], TensorQuantizer)

    def current_module(self) -> str:
        return self.trace.current[0] if self.trace.current is not None else ""

    def current_layer(self) -> QuantLayer | None:
        current = self.trace.current
        return current[1] if current is not None and isinstance(current[1], QuantLayer) else None

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Module hooks over every module (named by `names`) for the block, with attention
        unfused so that its projections and products are operators."""
        modules = [(self.names.get(id(m), ""), m) for m in self.model.modules()]
        with (
            module_hooks(self.model, after=self._left, modules=modules) as self.trace,
            unfused_attention(),
        ):
            yield

    def _left(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        """After a module's forward; nothing by default."""
