"""Environments of `compare`: named ways to run the same model on the same inputs.

An Environment is prepared once from a copy of the float model (eval mode, CPU, float32) and an
example batch; `run(inputs)` then returns the logits as float64 on the CPU, whatever precision or
device it computed in. `intermediates(inputs)` returns every operator's output by name, in
execution order, where the backend exposes them (eager PyTorch in any precision, quantized
models, user modules), and None where it does not (torch.compile, onnxruntime): localisation
then uses the eager float32 model in its place. An environment that cannot run here raises
EnvironmentSkipped with the reason when it is prepared.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError, did_you_mean
from model_explorer.modules import tensors_in
from model_explorer.registry import Registry


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


def operator_outputs(model: nn.Module, inputs: Tensor) -> dict[str, Tensor]:
    """Every operator's output of one forward of `model`, by the operator hooks' names
    (`<module path>/<Opcode>#<n>`; a QuantizedModel's as in the model it wraps), as float64
    copies on the CPU, in execution order."""
    from model_explorer.analysis.hooks import HookRunner

    class Recorder(HookRunner):
        def __init__(self) -> None:
            super().__init__(model, None)
            self.outputs: dict[str, Tensor] = {}

        def call_pre(self, name: str, operator: Any, args: tuple) -> None:
            pass

        def call_post(self, name: str, operator: Any, args: tuple, out: Any) -> None:
            found = tensors_in(out)
            if found and found[0].is_floating_point():
                # A copy: a later in-place operator (ReLU(inplace=True)) must not change it.
                self.outputs[name] = found[0].detach().to("cpu", torch.float64, copy=True)

    recorder = Recorder()
    recorder.run([(inputs,)])
    return recorder.outputs


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


def _compiler() -> str | None:
    for candidate in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


class CompileEnvironment(TorchEnvironment):
    """torch.compile with the inductor backend; compiled graphs expose no intermediates."""

    exposes_intermediates = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.description = "torch.compile (inductor), float32, cpu"

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        if _compiler() is None:
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
            raise EnvironmentSkipped(
                f"torch.compile failed ({type(error).__name__}: {str(error).splitlines()[0]})"
            ) from error

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        return None


class OnnxRuntimeEnvironment(Environment):
    """The model exported to ONNX (opset 13, batch norms folded) and run by onnxruntime's CPU
    execution provider."""

    description = "ONNX export run by onnxruntime (CPUExecutionProvider), float32"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.session: Any = None
        self.folder: tempfile.TemporaryDirectory[str] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import onnx  # noqa: F401 - the exporter needs it
            import onnxruntime
        except ImportError:
            raise EnvironmentSkipped(
                "onnx and onnxruntime are needed and not installed; install the onnx extra: "
                "pip install 'model_explorer[onnx]'"
            ) from None
        from model_explorer.onnx_export import INPUT_NAME, export_onnx

        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_onnx_")
        path = export_onnx(model, example, Path(self.folder.name) / "model.onnx", True)
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input_name = INPUT_NAME

    def run(self, inputs: Tensor) -> Tensor:
        array = inputs.detach().to("cpu", torch.float32).numpy()
        output = self.session.run(None, {self.input_name: array})[0]
        return logits(torch.from_numpy(output), self.name)

    def close(self) -> None:
        self.session = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


class QuantizedEnvironment(TorchEnvironment):
    """One individual of an exploration result: the workload's model built and configured by
    the result's problem (calibrated from the workload's calibration file), as
    `evaluate-individual` does."""

    def __init__(self, name: str, context: Any, result: Any, individual: Any, where: str) -> None:
        super().__init__(name)
        self.context = context
        self.result = result
        self.configuration = list(individual.configuration)
        self.where = where
        self.description = (
            f"{result.problem['name']} individual {individual.id}: {self.configuration}"
        )

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        from model_explorer.problems import PROBLEMS

        problem = PROBLEMS.get(self.result.problem["name"], self.where).builder(self.context, None)
        if [v.name for v in problem.variables] != self.result.variable_names:
            raise UserError(
                f"{self.where}: the result's variables do not match this workload's model"
            )
        problem.apply(self.configuration)
        return problem.model


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


# name -> builder(name, context) of the environments named without an argument.
ENVIRONMENTS: Registry[Callable[[str, Any], Environment]] = Registry("environment")


def register_environment(name: str) -> Callable[[Any], Any]:
    """Register `builder(name, context) -> Environment` under a fixed name."""
    return ENVIRONMENTS.register(name)


ENVIRONMENTS.register("eager")(lambda name, context: TorchEnvironment(name))
ENVIRONMENTS.register("eager-fp64")(lambda name, context: TorchEnvironment(name, torch.float64))
ENVIRONMENTS.register("half")(lambda name, context: TorchEnvironment(name, torch.float16))
ENVIRONMENTS.register("bfloat16")(lambda name, context: TorchEnvironment(name, torch.bfloat16))
ENVIRONMENTS.register("compile")(lambda name, context: CompileEnvironment(name))
ENVIRONMENTS.register("onnxruntime")(lambda name, context: OnnxRuntimeEnvironment(name))
ENVIRONMENTS.register("cuda")(lambda name, context: CudaEnvironment(name))

PARAMETRIZED = ("threads=N", "quantized:RESULTS#ID", "package.module:factory")


def known_environments() -> list[str]:
    return ENVIRONMENTS.names() + list(PARAMETRIZED)


def _threads(spec: str) -> Environment:
    count = spec.partition("=")[2]
    if not count.isdigit() or int(count) < 1:
        raise UserError(f"--env {spec}: threads=N takes a positive number of threads")
    return ThreadsEnvironment(spec, int(count))


def _quantized(spec: str, context: Any) -> Environment:
    from model_explorer.exploration.reevaluate import check_same_model
    from model_explorer.results import ExplorationResult

    where = f"--env {spec}"
    path, _, identifier = spec.removeprefix("quantized:").rpartition("#")
    if not path or not identifier.isdigit():
        raise UserError(f"{where}: write quantized:RESULTS#ID, e.g. quantized:results/x.pkl#12")
    if context is None:
        raise UserError(f"{where}: a quantized environment needs the workload of the result")
    result = ExplorationResult.load(path)
    check_same_model(context.workload, result)
    found = [i for i in result.individuals if i.id == int(identifier)]
    if not found:
        raise UserError(f"{where}: {path} has no individual {identifier} (ids 0-{len(result) - 1})")
    return QuantizedEnvironment(spec, context, result, found[0], where)


def environment(spec: str, context: Any = None) -> Environment:
    """The Environment named by `spec`; `context` (a WorkloadContext) is needed by quantized
    environments."""
    if spec in ENVIRONMENTS:
        return ENVIRONMENTS.get(spec).builder(spec, context)
    if spec.startswith("threads="):
        return _threads(spec)
    if spec.startswith("quantized:"):
        return _quantized(spec, context)
    if ":" in spec:
        from model_explorer.models.registry import _import_factory

        factory = _import_factory(spec, f"--env {spec}", "environment factory")
        return UserEnvironment(spec, factory)
    raise UserError(
        f"--env: unknown environment '{spec}'{did_you_mean(spec, known_environments())}; "
        f"valid: {', '.join(known_environments())}"
    )
