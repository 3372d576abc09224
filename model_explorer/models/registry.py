"""The model registry, the workload's `model:` settings, and models built by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError
from torch import nn

from model_explorer.errors import UserError, did_you_mean
from model_explorer.registry import Registry
from model_explorer.schema import PositiveInt, Spec


@dataclass(frozen=True)
class ModelInfo:
    """What a built-in model expects: the shape of one input sample (C, H, W)."""

    input_shape: tuple[int, ...]


MODELS: Registry[Callable[..., nn.Module]] = Registry("model", imports="model factory")


def register_model(name: str, input_shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """Register a model factory `f(num_classes=..., **kwargs) -> nn.Module` under `name`."""
    return MODELS.register(name, info=ModelInfo(tuple(input_shape)))


class ModelSpec(Spec):
    """`type` is a registered name, `torchvision:<name>`, or `package.module:factory`."""

    type: str
    weights: str | None = None
    num_classes: PositiveInt | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    # Fold batch norms into the convolutions before them once the weights are loaded.
    fold_batchnorm: bool = False

    @field_validator("type")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if MODELS.accepts(value):
            return value
        names = MODELS.names()
        raise PydanticCustomError(
            "unknown_model",
            "unknown model '{name}'{hint}; use one of {known}, 'torchvision:<name>' or "
            "'package.module:factory'",
            {"name": value, "hint": did_you_mean(value, names), "known": ", ".join(names)},
        )


def create_model(
    name: str, num_classes: int | None = None, where: str = "model", **kwargs: Any
) -> nn.Module:
    """A freshly initialised model by name; `num_classes` is passed on when given."""
    factory = MODELS.resolve(name, f"{where}.type")
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as error:
        raise UserError(
            f"{where}.kwargs: model '{name}' does not accept these arguments ({error})"
        ) from None
    except ValueError:
        pass  # a builtin without an inspectable signature: let the call decide
    model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise UserError(
            f"{where}.type: '{name}' returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model
