"""In-place additions traced back to the sums they compute: the Expand a TorchScript trace
writes for `copy_` would stand between a sum and the quantizers integer kernels need."""

from __future__ import annotations

from model_explorer.deployment.graph import QDQGraph


def drop_copy_backs(graph: QDQGraph) -> int:
    """An in-place addition of quantized operands (`a += b`, answered as `a.copy_(Q(a) +
    Q(b))`, quantization/operands.py) is traced as Expand(sum, Shape(a)): the sum itself,
    whose shape every operand broadcasts to. Its readers read the sum instead."""
    dropped = 0
    for expand in [node for node in graph.graph.node if node.op_type == "Expand"]:
        shape, add = graph.producer(expand.input[1]), graph.producer(expand.input[0])
        if shape is None or add is None or (shape.op_type, add.op_type) != ("Shape", "Add"):
            continue
        sources = {_source(graph, name) for name in add.input}
        if shape.input[0] not in sources or graph.is_output(expand.output[0]):
            continue
        for node in graph.consumers(expand.output[0]):
            node.input[:] = [expand.input[0] if n == expand.output[0] else n for n in node.input]
        graph.graph.node.remove(expand)
        if not graph.consumers(shape.output[0]):
            graph.graph.node.remove(shape)
        dropped += 1
    return dropped


def _source(graph: QDQGraph, name: str) -> str:
    """What an activation quantizer's output quantizes (`name` itself for any other)."""
    site = graph.sites.get(name)
    return name if site is None or site.weight else site.nodes[0].input[0]
