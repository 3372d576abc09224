"""Input shapes a user gives (`energy_evaluation.input_shape`, `cost --input-shape`, an HDF5
record, a sample file) checked where they are read: the model runs once on zeros of that shape,
and what it raises becomes one sentence naming the key, the shape given and what the layer that
refused it expects ("layer '0' (Conv2d) expects 1 input channel in 4 dimensions, N x C x H x
W"), instead of a traceback from inside the model."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError, first_line

_CONVOLUTIONS = {1: "N x C x L", 2: "N x C x H x W", 3: "N x C x D x H x W"}


def layer_expects(module: nn.Module) -> str | None:
    """What a layer takes, in words, for the layers whose weights fix it; None for others."""
    if isinstance(module, nn.modules.conv._ConvNd):
        dims = len(module.kernel_size)
        channels = module.in_channels
        plural = "" if channels == 1 else "s"
        return (
            f"expects {channels} input channel{plural} in {dims + 2} dimensions, "
            f"{_CONVOLUTIONS.get(dims, 'N x C x ...')}"
        )
    if isinstance(module, nn.Linear):
        return f"expects inputs whose last dimension is {module.in_features}"
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
        return f"expects {module.num_features} channels on dimension 1"
    if isinstance(module, nn.LayerNorm):
        return f"expects inputs ending in {list(module.normalized_shape)}"
    return None


def first_layer(model: nn.Module) -> tuple[str, nn.Module] | None:
    """The first layer (in definition order) whose weights fix the input it takes."""
    for name, module in model.named_modules():
        if layer_expects(module) is not None:
            return name, module
    return None


def first_layer_expects(model: nn.Module) -> str | None:
    """`layer 'NAME' (Type) expects ...` of the model's first shape-fixing layer, or None."""
    first = first_layer(model)
    return _described(first) if first is not None else None


def first_layer_channels(model: nn.Module) -> int | None:
    """The channels the model's first shape-fixing layer takes on dimension 1 (a 2-D
    convolution's `in_channels`, a BatchNorm2d's `num_features`); None for other layers."""
    first = first_layer(model)
    module = first[1] if first is not None else None
    if isinstance(module, nn.modules.conv._ConvNd) and len(module.kernel_size) == 2:
        return module.in_channels
    if isinstance(module, nn.BatchNorm2d):
        return module.num_features
    return None


def checked_samples(
    model: nn.Module, samples: Iterable[Sequence[Tensor]], key: str
) -> Iterator[Sequence[Tensor]]:
    """`samples` (tuples of model inputs) with the first one run through `model` before it is
    passed on: a file of the wrong shape is one sentence before any analysis starts."""
    iterator = iter(samples)
    first = next(iterator, None)
    if first is None:
        return
    run_on_inputs(model, tuple(first), key, "write samples in the shape")
    yield first
    yield from iterator


def _described(candidate: tuple[str, nn.Module]) -> str:
    name, module = candidate
    return f"layer '{name}' ({type(module).__name__}) {layer_expects(module)}"


def suggested(model: nn.Module, shape: Sequence[int]) -> list[int] | None:
    """A shape the model's first convolution takes, made from `shape`: the channels set, or
    a batch axis added; None where neither helps (the mistake lies elsewhere)."""
    first = first_layer(model)
    if first is None or not isinstance(first[1], nn.modules.conv._ConvNd):
        return None
    rank = len(first[1].kernel_size) + 2
    fixed = list(shape) if len(shape) == rank else [1, *shape] if len(shape) == rank - 1 else None
    if fixed is None:
        return None
    fixed[1] = first[1].in_channels
    return fixed if fixed != list(shape) else None


def _wrong_rank(module: nn.Module, shape: Sequence[int]) -> bool:
    return isinstance(module, nn.modules.conv._ConvNd) and len(shape) != len(module.kernel_size) + 2


def run_on_shape(
    model: nn.Module, shape: Sequence[int], key: str, device: torch.device | str | None = None
) -> Tensor:
    """Zeros of `shape` on which `model` has run once (in eval mode, state restored); a
    UserError naming `key`, the shape and what the model expects when it cannot."""
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    inputs = torch.zeros(*shape, device=device)
    run_on_inputs(model, (inputs,), key)
    return inputs


@torch.no_grad()
def run_on_inputs(
    model: nn.Module, inputs: Sequence[Tensor], key: str, advice: str = "give the shape"
) -> Any:
    """`model(*inputs)` once (eval mode, state restored), or a UserError naming `key`, the
    shapes given and what the layer that refused them expects."""
    shapes = [list(x.shape) for x in inputs]
    shown = shapes[0] if len(shapes) == 1 else shapes
    running: list[tuple[str, nn.Module]] = []  # the shape-fixing layers entered, not left

    def leave(*_: object) -> None:
        running.pop()

    hooks = []
    for name, module in model.named_modules():
        if layer_expects(module) is not None:
            hooks.append(
                module.register_forward_pre_hook(
                    lambda module, _, name=name: running.append((name, module))
                )
            )
            hooks.append(module.register_forward_hook(leave))
    training = model.training
    try:
        return model.eval()(*inputs)
    except Exception as error:  # whatever the model raises on a shape it cannot take
        reason = refusal(model, shapes[0], running[-1] if running else None, error)
        example = suggested(model, shapes[0])
        raise UserError(
            f"{key}: the model cannot take an input of shape {shown}: {reason}; {advice} of "
            "one batch the model takes" + (f", e.g. {example}" if example else "")
        ) from None
    finally:
        for hook in hooks:
            hook.remove()
        model.train(training)


def refusal(
    model: nn.Module,
    shape: Sequence[int],
    failed: tuple[str, nn.Module] | None,
    error: BaseException,
) -> str:
    """Why `model` refused an input of `shape`, in words: its first convolution when the rank
    is not the one it takes (a convolution also takes one sample without N, so the error
    comes later), else the layer that raised, else the model's error and its first layer."""
    first = first_layer(model)
    if first is not None and _wrong_rank(first[1], shape):
        return _described(first)
    if failed is not None:
        return _described(failed)
    return f"the model failed with: {first_line(error)}" + (
        f"; its first {_described(first)}" if first is not None else ""
    )
