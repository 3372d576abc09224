"""The shipped inspectors, registered by name; `DEFAULT_ORDER` is the order `diagnose` runs them
in: Hailo's, by priority (highest first), ties by name; Sensitivity, which evaluates the model
many times, has none and runs last. Each class documents what it checks and its thresholds;
docs/diagnostics.md lists them in the same words."""

from __future__ import annotations

from model_explorer.analysis.diagnose.base import INSPECTORS
from model_explorer.analysis.diagnose.inspectors.activation import Activation
from model_explorer.analysis.diagnose.inspectors.algorithms import PostQuantAlgo, PreQuantAlgo
from model_explorer.analysis.diagnose.inspectors.budget import Compression, Coverage, Sensitivity
from model_explorer.analysis.diagnose.inspectors.clipping import Clipping
from model_explorer.analysis.diagnose.inspectors.graph import BatchNorm, ConcatenatedOutputs
from model_explorer.analysis.diagnose.inspectors.inputs import Image, Norm
from model_explorer.analysis.diagnose.inspectors.ranges import HighPrecision, channel_sqnr

# Every inspector registered by a module of this package (those a user registers elsewhere
# run only when `--order` names them).
SHIPPED = tuple(
    entry.builder
    for entry in INSPECTORS.entries()
    if entry.builder.__module__.startswith(f"{__name__}.")
)
DEFAULT_ORDER = tuple(c.name for c in sorted(SHIPPED, key=lambda c: (-c.priority, c.name)))

__all__ = [
    "DEFAULT_ORDER",
    "SHIPPED",
    "Activation",
    "PostQuantAlgo",
    "PreQuantAlgo",
    "BatchNorm",
    "Clipping",
    "Compression",
    "Coverage",
    "ConcatenatedOutputs",
    "HighPrecision",
    "Image",
    "Norm",
    "Sensitivity",
    "channel_sqnr",
]
