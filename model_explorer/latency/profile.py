"""Layer times inside whole graphs, from a runtime's own profile of its nodes (OpenVINO's
PERF_COUNT), as nn-Meter reads kernels: the runtime's nodes, named after the exported ones
with its own suffixes, counted to the segments (latency/segments.py) that hold those."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from model_explorer.deployment.runtimes import Runtime, layer_of
from model_explorer.latency.running import input_feeds


def in_graph_times(
    wholes: list[tuple[dict, Path]],
    whole_keys: list[dict[str, str]],
    owners: list[dict[str, str]],
    make_runtime: Callable[[], Runtime],
    batch: int,
    runs: int = 10,
) -> dict[tuple[str, str], float]:
    """Where the runtime profiles its own nodes: each layer's time inside the whole graphs
    (`wholes`: plan and file; `whole_keys`: each layer's combination in it; `owners`: the
    segment each exported node belongs to), per combination the median over the whole graphs
    that met it; else nothing."""
    if not make_runtime().profiles:
        return {}
    found: dict[tuple[str, str], list[float]] = {}
    for (_, path), keys, owner in zip(wholes, whole_keys, owners, strict=True):
        with make_runtime() as runtime:
            runtime.profiling = True
            runtime.activate(path)
            feeds = input_feeds(onnx.load(str(path), load_external_data=False).graph, batch)
            per_layer = attribute(runtime.profile(feeds, runs), owner, list(keys))
        for layer, key in keys.items():
            found.setdefault((layer, key), []).append(per_layer.get(layer, 0.0))
    return {key: float(np.median(times)) for key, times in found.items()}


def attribute(profile: dict[str, float], owner: dict[str, str], layers: list[str]) -> dict:
    """Layer -> the time of the runtime's nodes that belong to its segment: a node named as an
    exported node, or after one with the runtime's suffix (`conv/WithoutBiases`, a reorder
    `<node>_<layouts>_<next node>` counted to the node it leaves), or after the layer."""
    names = sorted(owner, key=len, reverse=True)
    totals: dict[str, float] = {}
    for node, milliseconds in profile.items():
        layer = owner.get(node)
        if layer is None:
            layer = next(
                (
                    owner[n]
                    for n in names
                    if node.startswith(n) and node[len(n) : len(n) + 1] in "/_"
                ),
                None,
            )
        if layer is None:
            matched = layer_of(node, layers)
            layer = matched if matched in layers else None
        if layer is not None:
            totals[layer] = totals.get(layer, 0.0) + milliseconds
    return totals
