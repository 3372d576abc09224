"""Quantization diagnostics: inspectors that look at a workload's model and data and print
[info], [warning] and [error] findings with recommended settings (`model-explorer diagnose`)."""

from __future__ import annotations

from model_explorer.analysis.diagnose.base import (
    INSPECTORS,
    SEVERITIES,
    BaseInspector,
    DiagnosisContext,
    Finding,
    inspector,
    register_inspector,
    run_inspectors,
)
from model_explorer.analysis.diagnose.diagnosis import default_out_dir, diagnose
from model_explorer.analysis.diagnose.inspectors import DEFAULT_ORDER
from model_explorer.analysis.diagnose.recommendations import (
    apply_recommendations,
    merged_recommendations,
)
from model_explorer.quantization.sensitivity import (
    SensitivityTable,
    allocation_path,
    layer_sensitivity,
)

__all__ = [
    "DEFAULT_ORDER",
    "INSPECTORS",
    "SEVERITIES",
    "BaseInspector",
    "DiagnosisContext",
    "Finding",
    "SensitivityTable",
    "allocation_path",
    "apply_recommendations",
    "default_out_dir",
    "diagnose",
    "inspector",
    "layer_sensitivity",
    "merged_recommendations",
    "register_inspector",
    "run_inspectors",
]
