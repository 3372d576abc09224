"""The `tvm` environments: the model captured by torch.export, imported by TVM's Relax frontend
for exported programs, compiled by TVM for a target and run by Relax's virtual machine, as
DeltaNN runs its models (it used Relay, which TVM 0.27 no longer has).

`tvm` compiles for `llvm` (this CPU) at optimisation level 3; `tvm:LEVEL` and
`tvm:LEVEL:TARGET` (`tvm:0`, `tvm:3:cuda`, `tvm:3:{"kind": "llvm", "mcpu": "skylake-avx512"}`:
TVM 0.27 takes a target's options in its JSON form only) choose both.
What the levels change is measured in benchmarks/bench_tvm_levels.py (fusion at 1 and above;
the same logits and time)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
    register_environment,
)
from model_explorer.errors import UserError, first_line


class TvmEnvironment(Environment):
    """The model as TVM compiles it for `target` at `opt_level`, with a free batch axis."""

    exposes_intermediates = True

    def __init__(self, name: str, opt_level: int = 3, target: str = "llvm") -> None:
        super().__init__(name)
        self.opt_level, self.target = opt_level, target
        self.description = f"Apache TVM (Relax from torch.export), {target}, opt_level {opt_level}"
        self.run_all: Any = None
        self.tapped: Any = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        from model_explorer.deployment.tvm_relax import compile_relax, import_tvm

        try:
            import_tvm(f"--env {self.name}")
        except UserError as error:
            raise EnvironmentSkipped(str(error)) from None
        from tvm.relax.frontend.torch import from_exported_program

        from model_explorer.analysis.compare.environments.taps import TappedModel

        program = _exported(model, example, self.name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = from_exported_program(program, keep_params_as_input=False)
        try:
            self.run_all = compile_relax(module, self.target, self.opt_level)
        except Exception as error:  # TVM's own errors for a target it cannot build or run
            raise EnvironmentSkipped(
                f"TVM cannot compile for '{self.target}' here: {first_line(error)}"
            ) from None
        self.tapped = TappedModel(model, example, self._tapped_runner)

    def run(self, inputs: Tensor) -> Tensor:
        output = self.run_all(inputs.detach().to("cpu", torch.float32).numpy())[0]
        return logits(torch.from_numpy(output), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as TVM computes it, by the tracer's names: the marked ONNX
        export (environments/taps.py) through TVM's ONNX frontend, for the same target."""
        return self.tapped.intermediates(inputs)  # type: ignore[union-attr]

    def _tapped_runner(self, path: Path) -> Any:
        import onnx

        from model_explorer.deployment.tvm_relax import compile_relax, onnx_module

        names = [output.name for output in onnx.load(str(path)).graph.output]
        run = compile_relax(onnx_module(path, f"--env {self.name}"), self.target, self.opt_level)
        return lambda array: dict(zip(names, run(array), strict=True))

    def close(self) -> None:
        self.run_all = None
        if self.tapped is not None:
            self.tapped.close()
            self.tapped = None


def _exported(model: nn.Module, example: Tensor, name: str) -> Any:
    """`model` captured by torch.export with the batch axis free (an example of one sample is
    repeated: torch.export specialises an axis of size 1)."""
    if len(example) < 2:
        example = example.repeat(2, *[1] * (example.dim() - 1))
    batch = torch.export.Dim("batch", min=1)
    try:
        with torch.no_grad():
            return torch.export.export(model.eval(), (example,), dynamic_shapes=({0: batch},))
    except Exception as error:  # torch.export raises many kinds for what it cannot capture
        raise EnvironmentSkipped(
            f"torch.export cannot capture the model for TVM: {first_line(error)}"
        ) from None


def parse_options(item: str, name: str) -> tuple[int, str]:
    """`LEVEL` or `LEVEL:TARGET` -> (opt_level, target)."""
    level, _, target = item.partition(":")
    if not level.isdigit() or int(level) > 4:
        raise UserError(
            f"--env {name}: the optimisation level must be 0 to 4 (tvm:LEVEL or "
            f"tvm:LEVEL:TARGET, e.g. tvm:3:llvm), not '{level}'"
        )
    return int(level), target.strip() or "llvm"


register_environment("tvm")(lambda name, context: TvmEnvironment(name))


@ENVIRONMENTS.register_namespace("tvm", placeholder="LEVEL[:TARGET]")
def tvm_environment(item: str, name: str, context: Any = None) -> Environment:
    return TvmEnvironment(name, *parse_options(item, name))
