"""Quantization diagnostics: inspectors that look at a workload's model and data and print
[info], [warning] and [error] findings with recommended settings (`model-explorer diagnose`)."""

from model_explorer.analysis.diagnose import inspectors as _inspectors  # noqa: F401 - registers
from model_explorer.analysis.diagnose.base import (
    INSPECTORS,
    SEVERITIES,
    BaseInspector,
    DiagnosisContext,
    Finding,
    apply_recommendations,
    inspector,
    merged_recommendations,
    register_inspector,
    run_inspectors,
)
from model_explorer.quantization.sensitivity import (
    SensitivityTable,
    greedy_configurations,
    layer_sensitivity,
)

# The order `diagnose` runs them in by default: cheap checks on the data and the graph first,
# the ones that evaluate the model many times last.
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
    "INSPECTORS",
    "SEVERITIES",
    "BaseInspector",
    "DiagnosisContext",
    "Finding",
    "SensitivityTable",
    "apply_recommendations",
    "greedy_configurations",
    "inspector",
    "layer_sensitivity",
    "merged_recommendations",
    "register_inspector",
    "run_inspectors",
]
