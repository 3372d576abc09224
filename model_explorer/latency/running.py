"""Graphs run for timing: random inputs of a graph's types, a function running an activated
runtime on them once (and whether its product ran on integers), the graph that only takes a
segment's inputs (the cost of a call), and whole configurations exported and timed."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from model_explorer.deployment.export import export_qdq
from model_explorer.deployment.runtimes import Runtime
from model_explorer.latency.timing import Timing, interleaved
from model_explorer.plan import apply_plan, current_plan


def call_model(segment: onnx.ModelProto) -> onnx.ModelProto:
    """A graph with the segment's inputs passed through unchanged: what calling the runtime
    on the segment costs without its work (the call, the inputs' handling), subtracted from
    the segment's time, since the whole graph pays it once, not once per layer."""
    graph = segment.graph
    nodes = [
        onnx.helper.make_node("Identity", [value.name], [f"{value.name}_passed"])
        for value in graph.input
    ]
    outputs = []
    for value in graph.input:
        passed = onnx.ValueInfoProto()
        passed.CopyFrom(value)
        passed.name = f"{value.name}_passed"
        outputs.append(passed)
    made = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, "call", list(graph.input), outputs),
        opset_imports=list(segment.opset_import),
    )
    made.ir_version = segment.ir_version
    return made


def input_feeds(graph: onnx.GraphProto, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of a graph's types and shapes (a free axis takes `batch`)."""
    generator = np.random.default_rng(seed)
    feeds = {}
    for value in graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else batch for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            feeds[value.name] = generator.integers(info.min, info.max, shape, endpoint=True).astype(
                dtype
            )
        else:
            feeds[value.name] = generator.standard_normal(shape).astype(dtype)
    return feeds


def runner(runtime: Runtime, path: Path, batch: int) -> tuple[Callable[[], object], bool]:
    """A function running the graph at `path` once in `runtime` (activated on it), and whether
    its product ran on integers."""
    runtime.activate(path)
    feeds = input_feeds(onnx.load(str(path), load_external_data=False).graph, batch)
    integer = any(kernel.integer for kernel in runtime.kernels())
    return (lambda: runtime.infer_feeds(feeds)), integer


def time_plans(
    model: Any,
    example: torch.Tensor,
    plans: list[dict[str, dict[str, Any]]],
    make_runtime: Callable[[], Runtime],
    batch: int = 1,
    repeats: int = 15,
) -> list[Timing]:
    """Each plan's whole exported graph (as `export` writes it) timed in a runtime made by
    `make_runtime`, the plans interleaved."""
    saved = current_plan(model)
    example = example[:1].detach().to("cpu", torch.float32)
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="model_explorer_latency_") as folder,
        ExitStack() as held,  # every runtime deactivated at the end, however it ends
    ):
        try:
            for index, plan in enumerate(plans):
                apply_plan(plan, model)
                path = Path(folder) / f"plan_{index}.onnx"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    export_qdq(model.cpu().eval(), example, path)
                runtime = held.enter_context(make_runtime())
                runs.append(runner(runtime, path, batch)[0])
        finally:
            apply_plan(saved, model)
        return interleaved(runs, repeats)
