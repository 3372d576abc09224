"""Results of a search as plain data: every evaluated individual, fronts, several runs."""

from __future__ import annotations

from model_explorer.results.front import non_dominated
from model_explorer.results.locate import latest_result
from model_explorer.results.result import (
    FORMAT,
    VERSION,
    ExplorationResult,
    Individual,
    load_individual,
    load_plain,
    samples_of,
    save_plain,
)
from model_explorer.results.runs import compare_results, merge_results
from model_explorer.results.units import with_unit

__all__ = [
    "FORMAT",
    "VERSION",
    "ExplorationResult",
    "Individual",
    "compare_results",
    "latest_result",
    "load_individual",
    "load_plain",
    "merge_results",
    "non_dominated",
    "samples_of",
    "with_unit",
    "save_plain",
]
