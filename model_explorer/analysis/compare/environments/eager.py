"""Environments that run the PyTorch model eagerly: a dtype, a device, a thread count, and
torch.compile (whose compiled graphs expose no intermediates)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
    operator_outputs,
    register_environment,
)
from model_explorer.errors import UserError


class TorchEnvironment(Environment):
    """The PyTorch model run eagerly in a dtype on a device (CPU unless told)."""

    exposes_intermediates = True

    def __init__(self, name: str, dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        super().__init__(name)
        self.dtype = dtype
        self.device = torch.device(device)
        self.module: nn.Module | None = None
        self.description = f"eager PyTorch, {str(dtype).removeprefix('torch.')}, {device}"

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        return model

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        self.module = self.build(model, example).to(self.device, self.dtype).eval()

    def _inputs(self, inputs: Tensor) -> Tensor:
        return inputs.to(self.device, self.dtype)

    def run(self, inputs: Tensor) -> Tensor:
        with torch.no_grad():
            return logits(self.module(self._inputs(inputs)), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        return operator_outputs(self.module, self._inputs(inputs))


class ThreadsEnvironment(TorchEnvironment):
    """Eager float32 with torch's intra-op thread count set to N while it runs."""

    def __init__(self, name: str, threads: int) -> None:
        super().__init__(name)
        self.threads = threads
        self.description = f"eager PyTorch, float32, cpu, {threads} threads"

    def _with_threads(self, function: Callable[[Tensor], Any], inputs: Tensor) -> Any:
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return function(inputs)
        finally:
            torch.set_num_threads(before)

    def run(self, inputs: Tensor) -> Tensor:
        return self._with_threads(super().run, inputs)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        return self._with_threads(super().intermediates, inputs)


class CudaEnvironment(TorchEnvironment):
    def __init__(self, name: str) -> None:
        super().__init__(name, device="cuda")

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        if not torch.cuda.is_available():
            raise EnvironmentSkipped("no CUDA device is available (torch.cuda.is_available())")
        super().prepare(model, example)


def compiler() -> str | None:
    for candidate in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def _cause(error: BaseException) -> str:
    """The failing step's exception and first line: inductor's BackendCompilerFailed says only
    "backend='inductor' raised:" on its first line; the error it wraps names the cause."""
    error = getattr(error, "inner_exception", None) or error
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200] if lines else 'no message'}"


class CompileEnvironment(TorchEnvironment):
    """torch.compile with the inductor backend; compiled graphs expose no intermediates."""

    exposes_intermediates = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.description = "torch.compile (inductor), float32, cpu"

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        if compiler() is None:
            raise EnvironmentSkipped(
                "torch.compile (inductor) needs a C++ compiler on the CPU and none was found "
                "(g++, clang++, c++ or $CXX)"
            )
        return torch.compile(model, backend="inductor")

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        super().prepare(model, example)
        try:
            self.run(example)  # compiles now, so that compiling is not timed as running
        except Exception as error:
            raise EnvironmentSkipped(f"torch.compile failed ({_cause(error)})") from error

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        return None


register_environment("eager")(lambda name, context: TorchEnvironment(name))
register_environment("eager-fp64")(lambda name, context: TorchEnvironment(name, torch.float64))
register_environment("half")(lambda name, context: TorchEnvironment(name, torch.float16))
register_environment("bfloat16")(lambda name, context: TorchEnvironment(name, torch.bfloat16))
register_environment("compile")(lambda name, context: CompileEnvironment(name))
register_environment("cuda")(lambda name, context: CudaEnvironment(name))


@ENVIRONMENTS.register_namespace("threads", separator="=", placeholder="N")
def threads_environment(count: str, name: str, context: Any = None) -> Environment:
    if not count.isdigit() or int(count) < 1:
        raise UserError(f"--env {name}: threads=N takes a positive number of threads")
    return ThreadsEnvironment(name, int(count))
