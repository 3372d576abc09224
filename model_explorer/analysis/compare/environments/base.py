"""Environments of `compare`: named ways to run the same model on the same inputs.

An Environment is prepared once from a copy of the float model (eval mode, CPU, float32) and an
example batch; `run(inputs)` then returns the logits as float64 on the CPU, whatever precision or
device it computed in. `intermediates(inputs)` returns every operator's output by name, in
execution order, where the backend exposes them (eager PyTorch in any precision, quantized
models, user modules; every runtime of deployment/runtimes/ every module's output, its `tap`),
and None where it does not (torch.compile, exported individuals): localisation then uses the
eager float32 model (or the environment's `stand_in`) in its place. An environment that cannot
run here raises EnvironmentSkipped with the reason when it is prepared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError
from model_explorer.schema.registry import Registry
from model_explorer.tracing import operator_outputs  # noqa: F401 - environments take it from here


class EnvironmentSkipped(Exception):
    """The environment cannot run on this machine; the message says why and what would help."""


class Environment:
    """A named way to run a model; subclasses define `prepare`, `run` and (optionally)
    `intermediates`."""

    description = ""
    exposes_intermediates = False

    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        raise NotImplementedError

    def run(self, inputs: Tensor) -> Tensor:
        raise NotImplementedError

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Operator outputs by name in execution order (float64, CPU), or None."""
        return None

    def stand_in(self) -> Environment | None:
        """A prepared environment whose intermediates stand for this one's where it exposes
        none (an exported model: the model it was exported from); None: the eager float32
        model stands in."""
        return None

    def close(self) -> None:
        """Release what `prepare` built (sessions, temporary files)."""


def logits(output: Any, where: str = "compare") -> Tensor:
    """A model's output as float64 CPU logits with classes on the last axis: (N, C) stays,
    (N, C, ...) becomes one row per position."""
    if not isinstance(output, Tensor):
        raise UserError(
            f"{where}: the model returns {type(output).__name__}; compare needs one tensor of "
            "logits (N, C)"
        )
    output = output.detach().to("cpu", torch.float64)
    if output.dim() > 2:
        output = output.movedim(1, -1).reshape(-1, output.shape[1])
    return output.reshape(len(output), -1)


EnvironmentBuilder = Callable[[str, Any], Environment]
# name -> builder(name, context): fixed names (`eager`), namespaces whose builder gets the item
# first (`threads=N`, `quantized:RESULTS#ID`) and `package.module:factory` of user code.
ENVIRONMENTS: Registry[EnvironmentBuilder] = Registry("environment", imports="environment factory")


def register_environment(name: str) -> Callable[[EnvironmentBuilder], EnvironmentBuilder]:
    """Register `builder(name, context) -> Environment` under a fixed name."""
    return ENVIRONMENTS.register(name)


def environment(spec: str, context: Any = None) -> Environment:
    """The Environment named by `spec`; `context` (a WorkloadContext) is needed by quantized
    environments."""
    if not ENVIRONMENTS.accepts(spec):
        ENVIRONMENTS.get(spec, "--env")  # raises: unknown, with the closest name
    return ENVIRONMENTS.resolve(spec, f"--env {spec}")(spec, context)
