"""Operator-level analysis hooks (`model-explorer analyze`): user code called before and after
every operator of a forward pass; the shipped analyses; the samples they run on."""

from __future__ import annotations

from model_explorer.analysis.hooks.analyses import (
    ANALYSES,
    analysis_path,
    load_analysis,
    template_text,
)
from model_explorer.analysis.hooks.dalgona import DalgonaRunner
from model_explorer.analysis.hooks.inputs import dataset_samples, file_samples
from model_explorer.analysis.hooks.operators import quantparam
from model_explorer.analysis.hooks.runner import HookError, HookRunner, StopAnalysis
from model_explorer.tracing.operators import OPERATORS, Operator

__all__ = [
    "ANALYSES",
    "DalgonaRunner",
    "OPERATORS",
    "HookError",
    "HookRunner",
    "Operator",
    "StopAnalysis",
    "analysis_path",
    "dataset_samples",
    "file_samples",
    "load_analysis",
    "quantparam",
    "template_text",
]
