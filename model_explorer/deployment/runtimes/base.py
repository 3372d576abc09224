"""What every runtime is: a Runtime class per backend, opened under one of its settings,
activated on an ONNX file or a PyTorch model, asked to infer, deactivated; the registry of them
(RUNTIMES) and the kernels a runtime says it runs.

As Polygraphy's runners: one class per backend that every tool uses. `compare` runs a float
model in it (`activate_model`), the deployment check and `deployed-NAME:` run an exported
individual (`activate` on the QDQ file, or `activate_model` on the model with PyTorch's
quantize/dequantize operators where the runtime reads PyTorch), and localisation reads every
module's output from it (`tap`). A new backend is one module with its Runtime class, registered
in RUNTIMES (runtimes/__init__.py names the shipped modules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from model_explorer.errors import UserError, did_you_mean
from model_explorer.schema.registry import Registry


@dataclass(frozen=True)
class Kernel:
    """One product as a runtime executes it: its node, the operator or layer type, and whether
    it runs on integers (`precision`: int8, i4, f32...)."""

    node: str
    operator: str
    precision: str

    @property
    def integer(self) -> bool:
        return self.precision.startswith(("i", "u"))


class RuntimeUnavailable(UserError):
    """The runtime cannot run here or cannot take this model: its package is absent, or its
    converter or compiler refuses the model (compare skips such an environment)."""


def missing_package(where: str, extra: str) -> RuntimeUnavailable:
    """The one sentence for a runtime whose package is absent (`where`: "runtime tvm")."""
    return RuntimeUnavailable(
        f"{where}: the package is not installed; install it with "
        f"pip install 'model_explorer[{extra}]'"
    )


def as_input(inputs: Any) -> np.ndarray:
    """A batch (a tensor) as a runtime takes it: on the CPU, floats as float32, token ids as
    they are."""
    batch = inputs.detach().cpu()
    return (batch.float() if batch.is_floating_point() else batch).numpy()


Outputs = Callable[[np.ndarray], dict[str, np.ndarray]]


class Runtime:
    """One backend under one of its `settings` (name -> what it means; "default" is what its
    user gets without choosing). Made with a setting (its package imported then: a missing one
    is a RuntimeUnavailable), then activated once: `activate(path)` on an ONNX file, or
    `activate_model(model, example, folder)` on a PyTorch model (by default exported to ONNX in
    `folder`); `infer` maps a batch to every output by name, `run` to the first; `kernels` lists
    the products with the precision each runs in; `deactivate` lets go of what it holds.

    `reads` says what the runtime takes a deployed individual as: "onnx" (the QDQ file) or
    "pytorch" (the model with quantize/dequantize operators). `compare_setting` is the setting
    compare runs a float model under. `float_only` and `quantized_output_for` say what the
    runtime needs to run a product on integers (the deployment audit reads them)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    settings: ClassVar[dict[str, str]] = {"default": "the runtime's defaults"}
    reads: ClassVar[str] = "onnx"
    compare_setting: ClassVar[str] = "default"
    # Why the runtime runs every product of a QDQ file in float, where it does (it has no
    # integer kernels for one); empty: it runs 8-bit products on integer kernels.
    float_only: ClassVar[str] = ""
    # The file's product operators whose integer kernel also needs the product's output
    # quantized (a QuantizeLinear after it): without one the runtime cannot fuse them.
    quantized_output_for: ClassVar[tuple[str, ...]] = ()

    # Whether `threads` reaches the runtime (its own thread pool's size, set when activated).
    takes_threads: ClassVar[bool] = False

    def __init__(self, setting: str = "default", threads: int | None = None) -> None:
        self.setting = setting
        self.version = ""
        # None: the runtime's own choice (usually one thread per core)
        self.threads = threads
        self.require()

    def require(self) -> None:
        """Import the runtime's package (setting `version`), or raise missing_package."""

    @classmethod
    def parse_setting(cls, text: str, where: str) -> str:
        """The setting `text` names (empty: the default); an unknown one is one sentence."""
        setting = text or "default"
        if setting not in cls.settings:
            raise UserError(
                f"{where}: runtime {cls.name} has no setting '{setting}'"
                f"{did_you_mean(setting, cls.settings)}; its settings: " + ", ".join(cls.settings)
            )
        return setting

    def setting_description(self) -> str:
        return self.settings[self.setting]

    @property
    def label(self) -> str:
        """How the runtime and setting are named on the command line: `onnxruntime`,
        `onnxruntime:basic`."""
        return self.name if self.setting == "default" else f"{self.name}:{self.setting}"

    def described(self) -> str:
        """The runtime, its version and what its setting means, in words."""
        return f"{self.name} {self.version}, {self.setting_description()}"

    def activate(self, path: Path) -> None:
        raise UserError(
            f"runtime {self.name} converts a PyTorch model and cannot open the ONNX file "
            f"'{path}'; run an individual in it with compare --env deployed-{self.name}:RESULTS#ID"
        )

    def activate_model(self, model: Any, example: Any, folder: Path) -> None:
        """Take a float32 PyTorch model in eval mode (with `example`, a batch, for tracing):
        by default its ONNX export (opset 13, batch norms folded), activated."""
        from model_explorer.tracing.onnx_export import export_onnx

        self.activate(export_onnx(model, example, folder / "model.onnx", True))

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def run(self, inputs: np.ndarray) -> np.ndarray:
        """The first output for a batch."""
        return next(iter(self.infer(inputs).values()))

    # Whether `profile` reads the runtime's own time per executed node (set `profiling`
    # before activating).
    profiles: ClassVar[bool] = False
    profiling: bool = False

    def profile(self, feeds: dict[str, np.ndarray], runs: int) -> dict[str, float]:
        """The runtime's own time per executed node (ms, the median over `runs` runs), by
        the name it gives the node; only where `profiles`."""
        raise UserError(f"runtime {self.name} reports no time per node")

    def infer_feeds(self, feeds: dict[str, np.ndarray]) -> Any:
        """Run a graph of several inputs, given by name (a segment of a graph, timed by
        latency/); what it returns is the runtime's own."""
        raise UserError(f"runtime {self.name} runs graphs of one input only")

    def kernels(self) -> list[Kernel]:
        return []

    def deactivate(self) -> None:
        """Let go of sessions and compiled modules."""

    def __enter__(self) -> Runtime:
        """`with open_runtime(name, path) as runtime:` deactivates it when the block ends,
        however it ends."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.deactivate()

    def tap(self, model: Any, example: Any, folder: Path) -> tuple[Outputs, list[tuple[str, str]]]:
        """Every module's output of `model` as this runtime computes it: a function from a
        batch to the outputs by name, and (output, tracer name) pairs in execution order. By
        default the export with every module's output marked (runtimes/taps.py), activated in
        a second instance under the same setting."""
        from model_explorer.deployment.runtimes.taps import tapped_export

        names = tapped_export(model, example, folder / "tapped.onnx")
        tapped = self.fresh()
        tapped.activate(folder / "tapped.onnx")
        return tapped.infer, names

    def fresh(self) -> Runtime:
        """Another instance under the same setting."""
        return type(self)(self.setting, self.threads)


# name -> Runtime class; `NAME:SETTING` resolves through runtime_setting.
RUNTIMES: Registry[type[Runtime]] = Registry("runtime")


def register_runtime(runtime: type[Runtime]) -> type[Runtime]:
    """Register a Runtime class under its name; `model-explorer list runtimes` shows its
    settings beside its description."""
    runtime.description += "; settings: " + ", ".join(runtime.settings)
    RUNTIMES.register(runtime.name)(runtime)
    RUNTIMES.register_namespace(runtime.name, placeholder="SETTING")(
        lambda setting, runtime=runtime: runtime(setting)
    )
    return runtime


def runtime_setting(name: str, where: str = "--runtime") -> tuple[type[Runtime], str]:
    """The Runtime class and setting a runtime's name stands for: `onnxruntime` (its default
    setting) or `onnxruntime:basic`; an unknown runtime or setting is one sentence."""
    runtime, _, setting = name.partition(":")
    found = RUNTIMES.get(runtime, where).builder
    return found, found.parse_setting(setting, where)


def file_runtimes(names: Iterable[str], where: str) -> None:
    """Each name a runtime that runs an exported ONNX file (`NAME` or `NAME:SETTING`), checked
    before anything is exported: an unknown one, or one that converts a PyTorch model instead,
    is one sentence."""
    for name in names:
        runtime, _ = runtime_setting(name, where)
        if runtime.reads != "onnx":
            raise UserError(
                f"{where} {name}: runtime {runtime.name} converts a PyTorch model and cannot run "
                f"the exported ONNX file; compare the individual in it with --env "
                f"deployed-{runtime.name}:RESULTS#ID"
            )


def open_runtime(name: str, path: Path, where: str = "--runtime") -> Runtime:
    """The ONNX file at `path` activated in the runtime named `name` (`NAME` or
    `NAME:SETTING`)."""
    runtime, setting = runtime_setting(name, where)
    opened = runtime(setting)
    opened.activate(path)
    return opened


def layer_of(node: str, layers: Iterable[str]) -> str:
    """The layer a runtime's product node belongs to: the export names each product after its
    layer, and runtimes add to the name when they fuse (`3_token_22`, `3/WithoutBiases`); the
    node's own name where no layer matches."""
    matches = [
        layer
        for layer in layers
        if node == layer or (node.startswith(layer) and node[len(layer)] in "/_")
    ]
    return max(matches, key=len) if matches else node


def describe_kernels(kernels: list[Kernel], layers: Iterable[str]) -> dict[str, list[str]]:
    """{'integer': [layers], 'float': [layers]} of a runtime's products."""
    layers = list(layers)
    return {
        "integer": [layer_of(k.node, layers) for k in kernels if k.integer],
        "float": [layer_of(k.node, layers) for k in kernels if not k.integer],
    }
