"""Per-operation cost tables: parameters, MACs, memory traffic, storage, inference memory, time.

Collect, aggregate, render: `analyze_cost` runs the model once and records one row per executed
operation, a `CostReport` totals and groups them, the CLI renders. Two collection levels:

- operations (default): every ATen operation seen by a TorchDispatchMode, attributed to the
  innermost module running it, so functional code (`x + y` in residual blocks, `torch.matmul`,
  `scaled_dot_product_attention`, pooling, flatten) is counted, not only modules;
- leaf modules: forward hooks on modules without children (the convention of module-hook
  tools and of the seed "DNN analyzer"), which miss functional operations. To reproduce the
  seed's published totals this level skips modules that are identities at inference (Dropout,
  Identity: no data moves in a deployed network) and does not count the bias of a convolution or
  linear layer as a read stream (it initialises the accumulator, as in accelerator cost models
  whose data spaces are weights, inputs and outputs); storage holds every parameter.

Conventions (stated in `CostReport.conventions`): MACs count multiply-accumulates of
convolution, linear and matmul only (torchinfo, ptflops' aten backend, calflops; FLOPs = 2 x
MACs), by torch's own formulas (`torch.utils.flop_counter`), so `macs` equals torch's FLOP
counter / 2 on the CPU; `attention_macs` counts the two products (Q·Kᵀ, A·V) inside fused
scaled-dot-product-attention kernels, which that counter leaves out on the CPU (attention
written as plain matmuls is in `macs`). Attention modules run unfused while a table is made
(`unfused_attention`): the fused fast path of nn.MultiheadAttention is one ATen operation
without a formula, which would hide its projections. `other_ops` counts the elements produced
by every other operation; memory read = inputs + parameters, write = outputs, storage =
parameters, inference memory = outputs, in bytes (4 per element, or a layer's bit widths when a
plan gives them); MiB = 2**20 bytes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from model_explorer.cost.layers import WEIGHT_LAYERS, layer_macs
from model_explorer.modules import ModuleTrace, module_hooks, tensors_in, unfused_attention
from model_explorer.plan import INPUT_BITS, WEIGHT_BITS

CONVENTIONS = {
    "params": "parameter elements used by the operation",
    "macs": "multiply-accumulates of convolution/linear/matmul, torch.utils.flop_counter's "
    "formulas (FLOPs = 2 x MACs)",
    "attention_macs": "multiply-accumulates of Q·Kᵀ and A·V inside fused attention kernels",
    "other_ops": "elements produced by every other operation",
    "read_bytes": "bytes read: inputs + parameters",
    "write_bytes": "bytes written: outputs",
    "storage_bytes": "bytes of parameters",
    "inference_bytes": "bytes of outputs held for inference",
    "seconds": "measured time of the operation in this run",
}

_IDENTITIES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.Identity)
_ACCUMULATING = WEIGHT_LAYERS  # their bias initialises the accumulator
_VIEWS = {
    "t",
    "view",
    "_unsafe_view",
    "reshape",
    "alias",
    "detach",
    "expand",
    "permute",
    "transpose",
}
# Fused scaled-dot-product-attention kernels (torch's counter has formulas for the CUDA ones).
_ATTENTION = {
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
}


@dataclass
class CostRow:
    """One executed operation (or leaf module call)."""

    name: str  # module path ("" for the model itself)
    module_type: str
    operation: str
    params: int = 0
    macs: int = 0
    attention_macs: int = 0
    other_ops: int = 0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    storage_bytes: float = 0.0
    inference_bytes: float = 0.0
    seconds: float = 0.0


@dataclass
class CostReport:
    rows: list[CostRow]
    level: str
    input_shape: tuple[int, ...]
    conventions: dict[str, str] = field(default_factory=lambda: dict(CONVENTIONS))
    unique_params: int = 0
    unique_storage_bytes: float = 0.0

    @property
    def totals(self) -> dict[str, float]:
        """Sums over rows; `params` and `storage_bytes` count every parameter once however
        often it is used."""
        totals: dict[str, float] = {key: 0 for key in CONVENTIONS}
        for row in self.rows:
            for key in CONVENTIONS:
                totals[key] += getattr(row, key)
        totals["params"] = self.unique_params
        totals["storage_bytes"] = self.unique_storage_bytes
        return totals

    def to_dataframe(self, depth: int | None = None):  # noqa: ANN201 - pandas imported lazily
        """One row per operation, or per module path cut at `depth` (summed)."""
        import pandas as pd

        frame = pd.DataFrame([asdict(r) for r in self.rows])
        if frame.empty:
            return frame
        total = frame["seconds"].sum()
        frame["duration_share"] = frame["seconds"] / total if total else 0.0
        if depth is not None:
            frame["name"] = frame["name"].map(lambda n: ".".join(n.split(".")[:depth]) if n else n)
            numeric = [c for c in frame.columns if c not in ("name", "module_type", "operation")]
            grouped = frame.groupby("name", sort=False)
            frame = grouped[numeric].sum().reset_index()
            frame.insert(1, "operations", grouped.size().values)
        return frame


def _attention_macs(args: Sequence[Any], out: Any) -> int:
    """q @ k^T and weights @ v of scaled dot-product attention."""
    query, key, value = args[:3]
    *batch, length, embed = query.shape
    source = key.shape[-2]
    heads = 1
    for size in batch:
        heads *= size
    return heads * length * source * (embed + value.shape[-1])


Plan = Mapping[str, Mapping[str, Any]]


def _bytes(plan: Plan, name: str) -> tuple[float, float]:
    """Bytes per input element and per weight element of layer `name` (4 unless the plan
    gives its bit widths)."""
    settings = plan.get(name, {})
    return settings.get(INPUT_BITS, 32) / 8, settings.get(WEIGHT_BITS, 32) / 8


class _Collector(TorchDispatchMode):
    """One row per ATen operation, attributed to the innermost module running it."""

    def __init__(
        self, trace: ModuleTrace, parameters: dict[int, nn.Parameter], plan: Plan, sync: Any
    ) -> None:
        super().__init__()
        self.trace = trace
        self.parameters = parameters
        self.plan = plan
        self.sync = sync
        self.rows: list[CostRow] = []
        self.storage: dict[int, float] = {}  # parameter id -> bytes, at its first use
        self.alive: list[Tensor] = []  # views of parameters, kept so that their ids stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        self.sync()
        started = time.perf_counter()
        out = func(*args, **kwargs)
        self.sync()
        seconds = time.perf_counter() - started
        inputs = tensors_in((args, kwargs))
        if inputs:  # factory functions allocate; they read nothing
            self.rows.append(self._row(func, args, kwargs, inputs, out, seconds))
        return out

    def _row(self, func: Any, args: Any, kwargs: dict, inputs: list, out: Any, seconds: float):  # noqa: ANN202
        current = self.trace.current
        name, module_type = (current[0], type(current[1]).__name__) if current else ("", "model")
        operation = func.overloadpacket.__name__
        outputs = tensors_in(out)
        view = func.is_view or operation in _VIEWS
        params = [self.parameters[id(t)] for t in inputs if id(t) in self.parameters]
        activations = [t for t in inputs if id(t) not in self.parameters]
        if view and params:
            # A view of a parameter (a linear layer's transposed weight) is that parameter.
            for output in outputs:
                self.parameters[id(output)] = params[0]
                self.alive.append(output)
            params = []
        in_bytes, weight_bytes = _bytes(self.plan, name)
        macs = attention = 0
        if operation in _ATTENTION:
            attention = _attention_macs(args, out)
        elif func.overloadpacket in flop_registry:
            macs = int(flop_registry[func.overloadpacket](*args, **kwargs, out_val=out)) // 2
        param_elements = sum(p.numel() for p in params)
        for parameter in params:
            self.storage.setdefault(id(parameter), parameter.numel() * weight_bytes)
        produced = 0.0 if view else sum(o.numel() for o in outputs) * 4.0
        return CostRow(
            name=name,
            module_type=module_type,
            operation=operation,
            params=param_elements,
            macs=macs,
            attention_macs=attention,
            other_ops=0 if macs or attention or view else sum(o.numel() for o in outputs),
            read_bytes=0.0
            if view
            else sum(t.numel() for t in activations) * in_bytes + param_elements * weight_bytes,
            write_bytes=produced,
            storage_bytes=param_elements * weight_bytes,
            inference_bytes=produced,
            seconds=seconds,
        )


def _example(model: nn.Module, example: Tensor | Sequence[int]) -> Tensor:
    if isinstance(example, Tensor):
        return example
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return torch.zeros(*example, device=device)


def analyze_cost(
    model: nn.Module,
    example: Tensor | Sequence[int],
    plan: Plan | None = None,
    leaf_modules_only: bool = False,
) -> CostReport:
    """Run `model` once on `example` (a batch, or an input shape such as (1, 3, 224, 224)) and
    return its cost table. With a per-layer `plan` (plan.py, e.g. a Pareto individual's), the
    inputs and parameters of the layers it gives bit widths are counted at those widths."""
    x = _example(model, example)
    plan = plan or {}
    parameters = {id(p): p for p in model.parameters()}
    unique_params = sum(p.numel() for p in parameters.values())
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    if leaf_modules_only:
        rows = _leaf_rows(model, x, plan, sync)
        storage = sum(r.storage_bytes for r in _first_calls(rows))
    else:
        with module_hooks(model) as trace, torch.no_grad(), unfused_attention():
            collector = _Collector(trace, parameters, plan, sync)
            with collector:
                model(x)
        rows = collector.rows
        storage = sum(collector.storage.values())
    level = "leaf modules" if leaf_modules_only else "operations"
    return CostReport(
        rows, level, tuple(x.shape), unique_params=unique_params, unique_storage_bytes=storage
    )


def _first_calls(rows: list[CostRow]) -> list[CostRow]:
    """One row per module: a module called twice stores its parameters once."""
    seen: set[str] = set()
    first = []
    for row in rows:
        if row.name not in seen:
            seen.add(row.name)
            first.append(row)
    return first


def _leaf_rows(model: nn.Module, x: Tensor, plan: Plan, sync: Any) -> list[CostRow]:
    rows: list[CostRow] = []
    started: dict[int, float] = {}

    def enter(name: str, module: nn.Module, args: Any) -> None:
        sync()
        started[id(module)] = time.perf_counter()

    def leave(name: str, module: nn.Module, args: Any, output: Any) -> None:
        sync()
        seconds = time.perf_counter() - started.pop(id(module))
        rows.append(_leaf_row(name, module, args, output, plan, seconds))

    leaves = [
        (name, module)
        for name, module in model.named_modules()
        if next(module.children(), None) is None and not isinstance(module, _IDENTITIES)
    ]
    with module_hooks(model, enter, leave, leaves), torch.no_grad(), unfused_attention():
        model(x)
    return rows


def _leaf_row(
    name: str, module: nn.Module, args: Any, output: Any, plan: Plan, seconds: float
) -> CostRow:
    inputs, outputs = tensors_in(args), tensors_in(output)
    param_elements = sum(p.numel() for p in module.parameters(recurse=False))
    bias = getattr(module, "bias", None)
    accumulated = isinstance(module, _ACCUMULATING) and isinstance(bias, Tensor)
    read_params = param_elements - (bias.numel() if accumulated else 0)
    try:
        macs = layer_macs(module, args[0], outputs[0]) * args[0].shape[0]
    except TypeError:
        macs = 0
    in_bytes, weight_bytes = _bytes(plan, name)
    return CostRow(
        name=name,
        module_type=type(module).__name__,
        operation=type(module).__name__,
        params=param_elements,
        macs=macs,
        other_ops=0 if macs else sum(o.numel() for o in outputs),
        read_bytes=sum(t.numel() for t in inputs) * in_bytes + read_params * weight_bytes,
        write_bytes=sum(o.numel() for o in outputs) * 4.0,
        storage_bytes=param_elements * weight_bytes,
        inference_bytes=sum(o.numel() for o in outputs) * 4.0,
        seconds=seconds,
    )
