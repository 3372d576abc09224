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
from model_explorer.analysis.hooks.inputs import (
    RECORD_LAYOUTS,
    DalgonaFile,
    choose_layout,
    dalgona_file,
    dataset_samples,
    file_samples,
    random_samples,
)
from model_explorer.analysis.hooks.operators import quantparam
from model_explorer.analysis.hooks.runner import HookError, HookRunner, StopAnalysis
from model_explorer.tracing.operators import OPERATORS, Operator

__all__ = [
    "ANALYSES",
    "RECORD_LAYOUTS",
    "DalgonaFile",
    "DalgonaRunner",
    "OPERATORS",
    "HookError",
    "HookRunner",
    "Operator",
    "StopAnalysis",
    "analysis_path",
    "choose_layout",
    "dalgona_file",
    "dataset_samples",
    "file_samples",
    "load_analysis",
    "quantparam",
    "random_samples",
    "template_text",
]
