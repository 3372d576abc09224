"""Graphs run for timing: random inputs of a graph's types, a function running an activated
runtime on them once (and whether its product ran on integers), and the graph that only takes
a segment's inputs (the cost of a call)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from model_explorer.runtimes import Runtime


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
