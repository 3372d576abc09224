"""`package.module:factory`: an environment of the user's own (see UserEnvironment)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentBuilder,
    logits,
)
from model_explorer.analysis.compare.environments.eager import TorchEnvironment
from model_explorer.errors import UserError


class CallableEnvironment(Environment):
    """A user's callable batch -> logits; it exposes no intermediates."""

    description = "user-defined callable"

    def __init__(self, name: str, function: Callable[[Tensor], Any]) -> None:
        super().__init__(name)
        self.function = function

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        pass

    def run(self, inputs: Tensor) -> Tensor:
        with torch.no_grad():
            return logits(self.function(inputs), self.name)


class UserEnvironment(TorchEnvironment):
    """`package.module:factory`: `factory(model, example)` gets a copy of the float model and
    an example batch and returns an nn.Module (run eagerly in float32, with intermediates),
    an Environment, or any callable batch -> logits (no intermediates)."""

    def __init__(self, name: str, factory: Callable[..., Any]) -> None:
        super().__init__(name)
        self.factory = factory
        self.description = f"user-defined ({name})"
        self.delegate: Environment | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        made = self.factory(model, example)
        if isinstance(made, nn.Module):
            self.module = made.to(self.device).eval()
        elif isinstance(made, Environment):
            self.delegate = made
            made.prepare(model, example)
        elif callable(made):
            self.delegate = CallableEnvironment(self.name, made)
        else:
            raise UserError(
                f"--env {self.name}: the factory returned {type(made).__name__}; return an "
                "nn.Module, an Environment or a callable batch -> logits"
            )

    @property
    def exposes_intermediates(self) -> bool:  # type: ignore[override]
        return self.delegate.exposes_intermediates if self.delegate else True

    def run(self, inputs: Tensor) -> Tensor:
        return self.delegate.run(inputs) if self.delegate else super().run(inputs)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        return (
            self.delegate.intermediates(inputs) if self.delegate else super().intermediates(inputs)
        )

    def close(self) -> None:
        if self.delegate is not None:
            self.delegate.close()


@ENVIRONMENTS.adapt_imports
def user_environment(factory: Callable[..., Any]) -> EnvironmentBuilder:
    """`package.module:factory` names: the imported factory wrapped as a UserEnvironment."""
    return lambda name, context: UserEnvironment(name, factory)
