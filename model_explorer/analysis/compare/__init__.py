"""Cross-environment comparison (`model-explorer compare`): the same model and inputs in several
environments, their agreement pair by pair, and where a disagreeing pair starts to diverge."""

from __future__ import annotations

from model_explorer.analysis.compare.comparison import (
    DEFAULT_TOLERANCE,
    Comparison,
    compare,
    localise,
    workload_samples,
)
from model_explorer.analysis.compare.environments import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    environment,
    register_environment,
)
from model_explorer.analysis.compare.render import table, to_dict, write_comparison
from model_explorer.analysis.compare.runs import Run, pair_metrics

__all__ = [
    "DEFAULT_TOLERANCE",
    "ENVIRONMENTS",
    "Comparison",
    "Environment",
    "EnvironmentSkipped",
    "Run",
    "compare",
    "environment",
    "localise",
    "pair_metrics",
    "register_environment",
    "table",
    "to_dict",
    "workload_samples",
    "write_comparison",
]
