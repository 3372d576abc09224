"""Per-operation cost tables: parameters, MACs, memory traffic, storage, inference memory, time.

Collect, aggregate, render: `analyze_cost` runs the model once and records one row per executed
operation, a `CostReport` totals and groups them, the CLI renders. Two collection levels:

- operations (default): every operator of the network as the tracer (tracing/) sorts and names
  them, attributed to the innermost module running it, so functional code (`x + y` in residual
  blocks, `torch.matmul`, `scaled_dot_product_attention`, pooling, flatten) is counted, not only
  modules; each row carries the operator's name in the analysis hooks (`operator`). Calls that
  are no operator (a tensor under another identity, a view of a weight, a fake quantizer's
  inner work) have no row;
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
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.flop_counter import flop_registry

from model_explorer.cost.bits import element_bits
from model_explorer.cost.layers import WEIGHT_LAYERS, layer_macs
from model_explorer.modules import module_hooks, tensors_in, unfused_attention
from model_explorer.plan import INPUT_BITS, WEIGHT_BITS
from model_explorer.tracing import Consumer, OperatorCall, Tracer

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
    "seconds": "measured time of the operation: median over the timed runs, after a warm-up",
}

_IDENTITIES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.Identity)
_ACCUMULATING = WEIGHT_LAYERS  # their bias initialises the accumulator
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
    operation: str  # the ATen operator
    operator: str = ""  # its name in the analysis hooks, `<module>/<Opcode>#<n>`
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
            text = ("name", "module_type", "operation", "operator")
            numeric = [c for c in frame.columns if c not in text]
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
    gives its bit widths or formats: bits per element, scales counted)."""
    settings = plan.get(name, {})
    input_bits, weight_bits = (
        element_bits(settings, INPUT_BITS),
        element_bits(settings, WEIGHT_BITS),
    )
    return (input_bits or 32) / 8, (weight_bits or 32) / 8


class _Collector(Consumer):
    """One row per operator of the network (tracing/), attributed to the innermost module
    running it and named as the analysis hooks name it."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rows: list[CostRow] = []
        self.storage: dict[int, float] = {}  # parameter id -> bytes, at its first use

    def after(self, call: OperatorCall) -> None:
        tracer = self.tracer
        params, activations = [], []
        for tensor in call.inputs:
            parameter = tracer.parameter(tensor)
            if parameter is not None:
                params.append(parameter)
            else:
                activations.append(tensor)
        self.rows.append(self._row(call, params, activations))

    def _row(self, call: OperatorCall, params: list, activations: list) -> CostRow:
        owner, view, outputs = call.owner, call.view, call.outputs
        in_bytes, weight_bytes = _bytes(self.plan, call.module)
        macs = attention = 0
        if call.packet in _ATTENTION:
            attention = _attention_macs(call.args, call.out)
        elif call.func.overloadpacket in flop_registry:
            formula = flop_registry[call.func.overloadpacket]
            macs = int(formula(*call.args, **call.kwargs, out_val=call.out)) // 2
        param_elements = sum(p.numel() for p in params)
        for parameter in params:
            self.storage.setdefault(id(parameter), parameter.numel() * weight_bytes)
        produced = 0.0 if view else sum(o.numel() for o in outputs) * 4.0
        return CostRow(
            name=call.module,
            module_type=type(owner).__name__ if owner is not None else "model",
            operation=call.packet,
            operator=call.name,
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
            seconds=call.seconds,
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
    repeats: int = 1,
) -> CostReport:
    """Run `model` on `example` and return its cost table: one run by default (its times
    include the first call's set-up); with `repeats` > 1 one untimed warm-up and then
    `repeats` timed runs, each operation's time their median (`cost` uses 5).

    Args:
        model: the model (float; a QuantizedModel's operators are named as in the model it
            wraps).
        example: a batch, or an input shape such as (1, 3, 224, 224) for a batch of zeros.
        plan: a per-layer plan (plan.py, e.g. a Pareto individual's): the inputs and
            parameters of the layers it gives bit widths are counted at those widths, the rest
            at 32 bits.
        leaf_modules_only: one row per leaf module call (the seed's convention, missing
            functional operations) instead of one per operator.
        repeats: timed runs; above 1 a warm-up runs first (the first call of a kernel pays for
            its set-up: 0.67 of a digits_cnn forward in its first convolution).
    """
    x = _example(model, example)
    plan = plan or {}
    unique_params = sum(p.numel() for p in model.parameters())
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    runs = []
    for _ in range(repeats + 1 if repeats > 1 else 1):
        if leaf_modules_only:
            rows = _leaf_rows(model, x, plan, sync)
            storage = sum(r.storage_bytes for r in _first_calls(rows))
        else:
            collector = _Collector(plan)
            tracer = Tracer(model, [collector], timed=True, sync=sync)
            with tracer.watching():
                tracer.run(x)
            rows = collector.rows
            storage = sum(collector.storage.values())
        runs.append(rows)
    rows = _median_seconds(runs[1:] if len(runs) > 1 else runs)
    level = "leaf modules" if leaf_modules_only else "operations"
    return CostReport(
        rows, level, tuple(x.shape), unique_params=unique_params, unique_storage_bytes=storage
    )


def _median_seconds(runs: list[list[CostRow]]) -> list[CostRow]:
    """The first run's rows with each operation's seconds the median over the runs (runs of
    different operations, a model with data-dependent control flow, keep the first's)."""
    first = runs[0]
    if any(len(rows) != len(first) for rows in runs):
        return first
    return [
        replace(row, seconds=float(np.median([rows[i].seconds for rows in runs])))
        for i, row in enumerate(first)
    ]


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
        macs = layer_macs(module, args[0], outputs[0])
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
