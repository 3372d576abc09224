"""Helper module of TensorLog.py, imported from beside it as dalgona allows."""

import json
from collections import Counter


def summary(
    name, opcode, inputs, outputs, padding=None, stride=None, dilation=None, fused_act=None
):
    return {
        "name": name,
        "opcode": opcode,
        "inputs": list(inputs),
        "outputs": list(outputs),
        "padding": padding,
        "stride": stride,
        "dilation": dilation,
        "fused_act": fused_act,
    }


def write_counts(path, ops):
    counts = Counter(f"{op['opcode']}:{op['fused_act']}" for op in ops)
    with open(path, "w") as file:
        json.dump(dict(counts), file)
