"""The shipped inspectors, registered by name; `DEFAULT_ORDER` is the order `diagnose` runs them
in: cheap checks on the data and the graph first, the ones that evaluate the model many times
last. Each class documents what it checks and its thresholds; the README lists them in the same
words."""

from __future__ import annotations

from model_explorer.analysis.diagnose.inspectors.budget import Compression, Sensitivity
from model_explorer.analysis.diagnose.inspectors.clipping import Clipping
from model_explorer.analysis.diagnose.inspectors.graph import BatchNorm, ConcatenatedOutputs
from model_explorer.analysis.diagnose.inspectors.inputs import Image, Norm
from model_explorer.analysis.diagnose.inspectors.ranges import HighPrecision, channel_sqnr

DEFAULT_ORDER = (
    "Norm",
    "Image",
    "BatchNorm",
    "ConcatenatedOutputs",
    "Clipping",
    "Compression",
    "HighPrecision",
    "Sensitivity",
)

__all__ = [
    "DEFAULT_ORDER",
    "BatchNorm",
    "Clipping",
    "Compression",
    "ConcatenatedOutputs",
    "HighPrecision",
    "Image",
    "Norm",
    "Sensitivity",
    "channel_sqnr",
]
