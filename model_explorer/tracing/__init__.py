"""Capturing what a forward pass does: one tracer of forward passes for every analysis (ATen
operators sorted once, tracing/operators.py, and told to consumers, tracing/tracer.py), and the
ONNX export every exported file goes through (tracing/onnx_export.py)."""

from model_explorer.tracing.operators import Operator, operator_of
from model_explorer.tracing.outputs import operator_outputs
from model_explorer.tracing.tracer import (
    Consumer,
    Opaque,
    OperatorCall,
    Tracer,
    Wrapper,
    root_of,
    trace,
)

__all__ = [
    "Consumer",
    "Opaque",
    "Operator",
    "OperatorCall",
    "Tracer",
    "Wrapper",
    "operator_of",
    "operator_outputs",
    "root_of",
    "trace",
]
