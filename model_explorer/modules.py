"""Helpers over modules and tensors shared by the layer swaps, cost analysis, hooks and
diagnostics: swapping a submodule, rebuilding a module as another class, choosing modules by
name, tensors of a structure, and forward hooks over a module tree."""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten


def set_child(root: nn.Module, name: str, child: nn.Module) -> None:
    """Replace the submodule at dotted path `name` of `root` with `child`."""
    parent_name, _, attribute = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attribute, child)


def rebuild(module: nn.Module, cls: type[nn.Module]) -> Any:
    """An instance of `cls` with `module`'s state: parameters and buffers shared (the same
    tensors), their containers copied, so that changing one module's children or parameters
    leaves the other's alone."""
    rebuilt = cls.__new__(cls)
    rebuilt.__dict__.update(
        {
            key: copy.copy(value) if isinstance(value, dict) else value
            for key, value in module.__dict__.items()
        }
    )
    return rebuilt


class Inline:
    """Mixin of modules that are a step of the module calling them, not modules of the network
    (a transformed layer's pass-through and dense defaults): `module_hooks` never hooks them, so
    that no analysis sees them run and the tracer names their work as the caller's."""


def selected(name: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether a module name matches an `include` pattern and no `exclude` pattern."""
    return any(fnmatch.fnmatchcase(name, p) for p in include) and not any(
        fnmatch.fnmatchcase(name, p) for p in exclude
    )


def tensors_in(value: Any) -> list[Tensor]:
    """Every tensor in a (nested) structure of arguments or outputs: tuples, lists and dicts
    walked here (what ATen calls take and return, in microseconds), other containers torch
    knows (a dataclass registered as a pytree node) by torch's own flattening."""
    found: list[Tensor] = []
    _collect(value, found)
    return found


def _collect(value: Any, found: list[Tensor]) -> None:
    if isinstance(value, Tensor):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _collect(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)
    elif type(value) in SUPPORTED_NODES:
        found.extend(v for v in tree_flatten(value)[0] if isinstance(v, Tensor))


@dataclass
class ModuleTrace:
    """What `module_hooks` knows while a forward pass runs: the modules whose forward is running
    (outermost first), by name."""

    stack: list[tuple[str, nn.Module]] = field(default_factory=list)

    @property
    def current(self) -> tuple[str, nn.Module] | None:
        return self.stack[-1] if self.stack else None


def _hookable(
    model: nn.Module, modules: Iterable[tuple[str, nn.Module]] | None
) -> list[tuple[str, nn.Module]]:
    """The modules to hook: those given (default every module of `model`), never Inline ones."""
    candidates = modules if modules is not None else model.named_modules()
    return [(name, module) for name, module in candidates if not isinstance(module, Inline)]


Before = Callable[[str, nn.Module, tuple[Any, ...]], None]
After = Callable[[str, nn.Module, tuple[Any, ...], Any], None]


@contextmanager
def module_hooks(
    model: nn.Module,
    before: Before | None = None,
    after: After | None = None,
    modules: Iterable[tuple[str, nn.Module]] | None = None,
    eval_mode: bool = True,
) -> Iterator[ModuleTrace]:
    """Forward hooks over a module tree for the duration of the block.

    `before(name, module, args)` runs as a module's forward starts and `after(name, module,
    args, output)` as it ends, for `modules` ((name, module) pairs; default every module of
    `model` as `named_modules` names it), `Inline` ones left out. The model is in eval mode
    (unless `eval_mode` is False); on leaving, hooks are removed and the train/eval mode is
    restored, whatever happened. An exception raised inside a forward pass carries a note naming
    the innermost module that was running (as torchinfo's "executed layers up to")."""
    trace = ModuleTrace()
    chosen = _hookable(model, modules)
    handles = []
    training = model.training

    def enter(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            trace.stack.append((name, module))
            if before is not None:
                before(name, module, args)

        return hook

    def leave(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            # Pop up to this module: entries above it are modules whose forward raised an
            # exception that the model's own code caught.
            for index in range(len(trace.stack) - 1, -1, -1):
                if trace.stack[index][1] is module:
                    del trace.stack[index:]
                    break
            if after is not None:
                after(name, module, args, output)

        return hook

    try:
        for name, module in chosen:
            handles.append(module.register_forward_pre_hook(enter(name)))
            handles.append(module.register_forward_hook(leave(name)))
        if eval_mode:
            model.eval()
        yield trace
    except Exception as error:
        if trace.current is not None and hasattr(error, "add_note"):
            name, module = trace.current
            error.add_note(
                f"model_explorer: raised while module '{name or '(the model)'}' "
                f"({type(module).__name__}) was running"
            )
        raise
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)


@contextmanager
def unfused_attention() -> Iterator[None]:
    """Within the block, nn.MultiheadAttention and nn.TransformerEncoder(Layer) take their
    plain path instead of the fused "fast path" kernel, so that analyses see (and count) the
    projections and the attention as separate operations."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def run_on(model: Any, inputs: Any) -> Any:
    """`model` on a batch's inputs: a tuple or list of tensors is a model's several
    arguments (as a DataLoader over a TensorDataset of several tensors yields them)."""
    return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


def leading(inputs: Any, count: int = 1) -> Any:
    """The first `count` samples of a batch's inputs (of each tensor of a tuple)."""
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(value[:count] for value in inputs)
    return inputs[:count]


def sample_count(inputs: Any) -> int:
    """The samples in a batch's inputs (the first tensor's of a tuple)."""
    return len(inputs[0] if isinstance(inputs, (tuple, list)) else inputs)


def to_device(value: Any, device: Any) -> Any:
    """Move a tensor, or a tuple/list of tensors, to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    return type(value)(to_device(item, device) for item in value)
