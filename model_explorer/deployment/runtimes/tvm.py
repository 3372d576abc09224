"""Apache TVM as a runtime: a Relax module (imported from an ONNX file or from torch.export, as
DeltaNN runs its models: it used Relay, which TVM 0.27 no longer has) compiled with the target's
default Relax pipeline and run by Relax's virtual machine.

TVM 0.27 has only Relax (Relay is gone). Its default CPU pipeline (`relax.get_default_pipeline`
for an `llvm` target: legalise the operators to TensorIR, fold constants, fuse operators, lower
to the VM) uses the PassContext's `opt_level` for operator fusion: level 0 fuses nothing
(resnet18: 32 kernels, as `tvm.compile`'s own unfused default), levels 1-4 fuse (27 kernels);
the logits are bit-identical at every level and the time the same, since the untuned
convolutions dominate (benchmarks/bench_tvm_levels.py, docs/performance-runtimes.md).

TVM's ONNX frontend reads QuantizeLinear/DequantizeLinear (per tensor and per channel, not
blocked) and computes every product in float after dequantizing: a QDQ export runs with the
quantization's values but no integer kernels, which `kernels()` reports as it finds them in
the imported module.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.deployment.runtimes.base import (
    Kernel,
    Runtime,
    RuntimeUnavailable,
    missing_package,
    register_runtime,
)
from model_explorer.errors import UserError, first_line

DEFAULT_TARGET = "llvm"
DEFAULT_OPT_LEVEL = 3
# Relax operators that compute a product (what `kernels()` reports).
_PRODUCTS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.matmul")

Executor = Callable[[np.ndarray], list[np.ndarray]]


def import_tvm(where: str) -> Any:
    """The tvm package, or a UserError saying which extra installs it."""
    try:
        import tvm
        from tvm import relax  # noqa: F401 - the Relax frontends and VM live there
    except ImportError:
        raise missing_package(where, "tvm") from None
    return tvm


def compile_relax(
    module: Any, target: str = DEFAULT_TARGET, opt_level: int | None = DEFAULT_OPT_LEVEL
) -> Executor:
    """`module` (a Relax IRModule with one `main`) compiled for `target` (a kind, `llvm`, `cuda`,
    or TVM's JSON form, `{"kind": "llvm", "mcpu": "skylake-avx512"}`) with the target's default
    Relax pipeline under `opt_level` (None: TVM's own default); returns a function from float32
    arrays to the outputs."""
    import tvm
    from tvm import relax

    compiled_for = tvm.target.Target(json.loads(target) if target.startswith("{") else target)
    # opt_level None: the PassContext a user's own tvm.compile runs in (opt_level 2)
    context = (
        contextlib.nullcontext() if opt_level is None else tvm.transform.PassContext(opt_level)
    )
    with context:
        executable = tvm.compile(
            module, target=compiled_for, relax_pipeline=relax.get_default_pipeline(compiled_for)
        )
    kind = compiled_for.kind.name
    device = tvm.cpu(0) if kind in ("llvm", "c") else tvm.device(kind, 0)
    machine = relax.VirtualMachine(executable, device)

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        arguments = [tvm.runtime.tensor(np.ascontiguousarray(array), device) for array in inputs]
        return _arrays(machine["main"](*arguments))

    return run


def _arrays(value: Any) -> list[np.ndarray]:
    """A VM result (one tensor or a nested tuple of them) as a flat list of numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in _arrays(item)]


def products(module: Any) -> list[tuple[str, str]]:
    """(operator, input dtype) of every product in `module`'s main, in order."""
    from tvm import relax

    found: list[tuple[str, str]] = []

    @relax.expr_functor.visitor
    class _Products(relax.PyExprVisitor):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> None:
            name = getattr(call.op, "name", "")
            if name in _PRODUCTS:
                found.append((name.rpartition(".")[2], _dtype(call.args[0])))
            super().visit_call_(call)

    _Products().visit_expr(module["main"])
    return found


def _dtype(expression: Any) -> str:
    """The element type of a Relax tensor expression (`ty` in TVM 0.27, `struct_info` before)."""
    found = getattr(expression, "ty", None) or getattr(expression, "struct_info", None)
    return str(getattr(found, "dtype", "unknown"))


def onnx_module(path: Path, where: str) -> Any:
    """The ONNX file at `path` imported by TVM's Relax frontend (weights as constants; INT4
    and UINT4 tensors, which the frontend cannot read, widened to INT8 and UINT8: the same
    integers, so the same dequantized values)."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with warnings.catch_warnings():  # its checker's notes on value_info it does not need
            warnings.simplefilter("ignore")
            return from_onnx(_widened(onnx.load(str(path))), keep_params_in_input=False)
    except Exception as error:  # the frontend raises many kinds for what it cannot read
        raise UserError(
            f"{where}: TVM's ONNX frontend cannot read '{path}': {first_line(error)}"
        ) from None


def _widened(model: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    wider = {onnx.TensorProto.INT4: np.int8, onnx.TensorProto.UINT4: np.uint8}
    for tensor in model.graph.initializer:
        if tensor.data_type in wider:
            values = numpy_helper.to_array(tensor).astype(wider[tensor.data_type])
            tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    return model


@register_runtime
class Tvm(Runtime):
    """Settings `default` (tvm.compile as a user calls it) and `O0`..`O4` (the PassContext's
    opt_level), each for `llvm` or, as `O3:TARGET`, another target (`O3:cuda`,
    `O3:{"kind": "llvm", "mcpu": "skylake-avx512"}`: TVM 0.27 takes a target's options in its
    JSON form only); `3` and `3:TARGET` name the levels too."""

    name = "tvm"
    description = (
        "Apache TVM (Relax, ONNX frontend or torch.export), llvm on the CPU or tvm:SETTING:TARGET "
        "(extra: tvm)"
    )
    extra = "tvm"
    settings = {
        "default": "tvm.compile for llvm as a user calls it (the default Relax pipeline, "
        "PassContext opt_level 2)",
        **{f"O{level}": f"PassContext opt_level {level}" for level in range(5)},
    }
    compare_setting = f"O{DEFAULT_OPT_LEVEL}"
    float_only = "its ONNX frontend dequantizes before every product"

    def require(self) -> None:
        self.version = import_tvm(f"runtime {self.name}").__version__
        level, _, target = self.setting.partition(":")
        self.opt_level = None if level == "default" else int(level[1:])
        self.target = target or DEFAULT_TARGET

    @classmethod
    def parse_setting(cls, text: str, where: str) -> str:
        level, colon, target = text.partition(":")
        if re.fullmatch(r"[0-4]", level):
            level = f"O{level}"
        if level and level not in cls.settings:
            raise UserError(
                f"{where}: the optimisation level must be 0 to 4 (tvm:LEVEL or tvm:LEVEL:TARGET, "
                f"e.g. tvm:3:llvm; O3 for 3 too; or tvm:default), not '{level}'"
            )
        level = level or "default"
        return f"{level}:{target.strip()}" if colon and target.strip() else level

    def setting_description(self) -> str:
        level = self.setting.partition(":")[0]
        return f"{self.settings[level]}, target {self.target}"

    def activate(self, path: Path) -> None:
        self.module = onnx_module(path, f"runtime {self.name}")
        self.run_all = self._compiled(self.module)
        self.nodes, self.outputs = _graph_names(path)

    def activate_model(self, model: Any, example: Any, folder: Path) -> None:
        """The model captured by torch.export (the batch axis free) and imported by Relax's
        frontend for exported programs."""
        from tvm.relax.frontend.torch import from_exported_program

        program = _exported(model, example)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.module = from_exported_program(program, keep_params_as_input=False)
        self.run_all = self._compiled(self.module)
        self.nodes, self.outputs = [], []

    def tap(self, model: Any, example: Any, folder: Path) -> tuple[Any, list[tuple[str, str]]]:
        """Every module's output through torch.export, the path compare's `tvm` runs the model
        on (the ONNX frontend refuses many exports: a Pad computed from the input's shape)."""
        from model_explorer.deployment.runtimes.taps import tapped_module

        wrapper, names = tapped_module(model, example)
        tapped = self.fresh()
        tapped.activate_model(wrapper, example, folder)
        return tapped.infer, [(str(index), name) for index, name in enumerate(names, 1)]

    def _compiled(self, module: Any) -> Executor:
        try:
            return compile_relax(module, self.target, self.opt_level)
        except Exception as error:  # TVM's own errors for a target it cannot build or run
            raise RuntimeUnavailable(
                f"runtime {self.name}: TVM cannot compile for '{self.target}' here: "
                f"{first_line(error)}"
            ) from None

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        """The outputs by the file's names (by position for a model from torch.export)."""
        values = self.run_all(inputs)
        names = self.outputs or [str(index) for index in range(len(values))]
        return dict(zip(names, values, strict=True))

    def run(self, inputs: np.ndarray) -> np.ndarray:
        return self.run_all(inputs)[0]

    def infer_feeds(self, feeds: dict[str, np.ndarray]) -> Any:
        # the frontend keeps the file's inputs in order, as the feeds are given
        return self.run_all(*feeds.values())

    def kernels(self) -> list[Kernel]:
        """The products of the imported module with the dtype they read, named after the ONNX
        nodes they came from (the frontend converts nodes in the file's order)."""
        found = products(self.module)
        names = self.nodes if len(self.nodes) == len(found) else [op for op, _ in found]
        return [
            Kernel(name, operator, "f32" if dtype.startswith("float") else dtype)
            for name, (operator, dtype) in zip(names, found, strict=True)
        ]

    def deactivate(self) -> None:
        self.run_all = self.module = None


def _exported(model: Any, example: Any) -> Any:
    """`model` captured by torch.export with the batch axis free (an example of one sample is
    repeated: torch.export specialises an axis of size 1)."""
    import torch

    if len(example) < 2:
        example = example.repeat(2, *[1] * (example.dim() - 1))
    batch = torch.export.Dim("batch", min=1)
    try:
        with torch.no_grad():
            return torch.export.export(model.eval(), (example,), dynamic_shapes=({0: batch},))
    except Exception as error:  # torch.export raises many kinds for what it cannot capture
        raise RuntimeUnavailable(
            f"torch.export cannot capture the model for TVM: {first_line(error)}"
        ) from None


def _graph_names(path: Path) -> tuple[list[str], list[str]]:
    """The file's product nodes (what `kernels` names) and its outputs, in order (the
    frontend keeps both orders)."""
    import onnx

    graph = onnx.load(str(path)).graph
    kinds = {"Conv", "MatMul", "Gemm"}
    products = [node.name for node in graph.node if node.op_type in kinds]
    return products, [output.name for output in graph.output]
