"""What a runtime opens an exported file as: a Session that runs a float32 batch and lists its
products as Kernels (with the precision each runs in); and the sentence for a runtime whose
package is absent. Apart from runtimes.py so that a runtime in a module of its own
(tvm_relax.py) and the registry that lists it import the same base without a circle."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model_explorer.errors import UserError


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


class Session:
    """An opened file: `run` a float32 batch, list its `kernels`. A runtime opens it under one
    of its `settings` (name -> what it means), "default" being what its user gets without
    choosing; `version` is the runtime's."""

    name = ""
    settings: dict[str, str] = {"default": "the runtime's defaults"}
    setting = "default"
    version = ""

    @property
    def label(self) -> str:
        """How the runtime and setting are named on the command line: `onnxruntime`,
        `onnxruntime:basic`."""
        return self.name if self.setting == "default" else f"{self.name}:{self.setting}"

    def described(self) -> str:
        """The runtime, its version and what its setting means, in words."""
        return f"{self.name} {self.version}, {self.settings[self.setting]}"

    def run(self, inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def kernels(self) -> list[Kernel]:
        raise NotImplementedError


def missing_package(where: str, extra: str) -> UserError:
    """The one sentence for a runtime whose package is absent (`where`: "runtime tvm")."""
    return UserError(
        f"{where}: the package is not installed; install it with "
        f"pip install 'model_explorer[{extra}]'"
    )
