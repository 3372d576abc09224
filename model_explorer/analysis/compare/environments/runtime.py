"""Environments of a runtime (deployment/runtimes/): the float model in each registered
runtime, named after it and run under the setting compare uses for it (`onnxruntime`,
`openvino`: float32, `tvm`: opt_level 3, `litert`), or as `NAME:SETTING` under another (`tvm:0`,
`tvm:3:cuda`, `onnxruntime:basic`). Their intermediates are every module's output as the
runtime computes it (the runtime's `tap`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
)
from model_explorer.deployment.runtimes import RUNTIMES, Runtime, RuntimeUnavailable, as_input
from model_explorer.errors import UserError


def made(runtime: type[Runtime], setting: str) -> Runtime:
    """The runtime under `setting`, or EnvironmentSkipped where it cannot run here."""
    try:
        return runtime(setting)
    except RuntimeUnavailable as error:
        raise EnvironmentSkipped(str(error)) from None


class RuntimeEnvironment(Environment):
    """The float model given to `prepare` activated in `runtime` under `setting`."""

    exposes_intermediates = True

    def __init__(self, name: str, runtime: type[Runtime], setting: str) -> None:
        super().__init__(name)
        self.runtime_class, self.setting = runtime, setting
        self.runtime: Runtime | None = None
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.source: tuple[nn.Module, Tensor] | None = None
        self.tapped: Any = None

    @property
    def description(self) -> str:  # type: ignore[override]
        described = self.runtime_class.description.partition(";")[0]
        return f"{described}, {self.runtime_class.settings[self.setting.partition(':')[0]]}"

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        self.runtime = made(self.runtime_class, self.setting)
        self.folder = tempfile.TemporaryDirectory(prefix=f"model_explorer_{self.runtime.name}_")
        self.source = (model.eval(), example)
        try:
            self.runtime.activate_model(model, example, Path(self.folder.name))
        except RuntimeUnavailable as error:
            raise EnvironmentSkipped(str(error)) from None

    def run(self, inputs: Tensor) -> Tensor:
        assert self.runtime is not None
        return logits(torch.from_numpy(self.runtime.run(as_input(inputs))), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as the runtime computes it, by the tracer's names; the
        tapped model is made on first use."""
        assert self.runtime is not None and self.source is not None and self.folder is not None
        if self.tapped is None:
            taps = Path(self.folder.name) / "taps"
            taps.mkdir()
            self.tapped = self.runtime.tap(*self.source, taps)
        infer, names = self.tapped
        values = infer(as_input(inputs))
        return {name: torch.from_numpy(values[output]).to(torch.float64) for output, name in names}

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.deactivate()
        self.runtime = self.tapped = self.source = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def register_runtime_environments() -> None:
    """`NAME` and `NAME:SETTING` for every registered runtime not yet among the environments
    (runs at import; again after a runtime registered later)."""
    for entry in RUNTIMES.entries():
        runtime = entry.builder
        if runtime.name in ENVIRONMENTS:
            continue
        ENVIRONMENTS.register(runtime.name)(
            lambda name, context, runtime=runtime: RuntimeEnvironment(
                name, runtime, runtime.compare_setting
            )
        )
        ENVIRONMENTS.register_namespace(runtime.name, placeholder="SETTING")(
            lambda item, name, context=None, runtime=runtime: RuntimeEnvironment(
                name, runtime, setting_of(runtime, item, f"--env {name}")
            )
        )


def setting_of(runtime: type[Runtime], item: str, where: str) -> str:
    """The setting `NAME:ITEM` names; an empty one is refused (`NAME` alone runs compare's)."""
    if not item:
        raise UserError(
            f"{where}: name a setting after the colon ({', '.join(runtime.settings)}), or "
            f"leave it out for compare's {runtime.name} ({runtime.compare_setting})"
        )
    return runtime.parse_setting(item, where)


register_runtime_environments()
