"""The worker side of parallel evaluation: a problem built once per process, then only genomes.

A worker process (a local process or a Dask worker) receives a ProblemRecipe once: plain data
from which it builds the same Problem as the exploring process (model, data cache, calibration),
keyed by the recipe's hash. Tasks then carry that key and one genome; the model never travels.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from model_explorer.errors import UserError
from model_explorer.exploration.runners.recipe import ProblemRecipe, file_digest
from model_explorer.memory import keep_freed_memory
from model_explorer.problems.base import Evaluation, Problem
from model_explorer.schema.paths import resolve_path
from model_explorer.schema.registry import import_object

log = logging.getLogger(__name__)


# Per worker process: recipes installed by the parent, problems built from them on first use.
_RECIPES: dict[str, ProblemRecipe] = {}
_PROBLEMS: dict[str, Problem] = {}
# A Dask worker may run several tasks at once in threads; they share one model, so one at a time.
_LOCK = threading.Lock()


def install(recipe: ProblemRecipe, threads: int | None) -> None:
    """Per-worker setup: remember the recipe, keep freed memory for the next pass
    (memory.keep_freed_memory) and limit torch to this worker's share of cores."""
    keep_freed_memory()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    _RECIPES[recipe.key] = recipe


def uninstall(key: str) -> None:
    _RECIPES.pop(key, None)
    _PROBLEMS.pop(key, None)


def problem_for(key: str) -> Problem:
    """The problem of an installed recipe, built on first use in this process."""
    if key not in _PROBLEMS:
        recipe = _RECIPES.get(key)
        if recipe is None:
            raise RuntimeError(f"worker process {os.getpid()} has no problem {key} installed")
        _PROBLEMS[key] = problem_of(recipe)
    return _PROBLEMS[key]


def problem_of(recipe: ProblemRecipe) -> Problem:
    """The recipe's problem, built in this process by the function the recipe names (the
    exploring side's: operations/rebuild.recipe_problem builds it from the workload)."""
    for path, expected in recipe.files.items():
        resolved = resolve_path(path)
        if not resolved.is_file() or file_digest(resolved) != expected:
            raise UserError(
                f"worker process {os.getpid()}: '{resolved}' is missing or differs from the file "
                "the exploration started with; give every worker the same files at the same path"
            )
    log.debug("worker %d builds its problem with %s", os.getpid(), recipe.builder)
    where = f"worker process {os.getpid()}"
    return import_object(recipe.builder, where, "problem builder")(recipe)


def evaluate_genome(
    key: str, genome: Any, front: list[dict[str, float]] | None = None
) -> tuple[list[Any], Evaluation]:
    """One task: the decoded configuration and Evaluation of a genome (see Problem.evaluate
    for `front`)."""
    with _LOCK:
        return problem_for(key).evaluate(genome, front or ())


def cores_per_worker(cores: int | None, workers: int) -> int:
    """Torch threads per worker so that the workers of one machine share its cores."""
    return max(1, (cores or 1) // workers)
