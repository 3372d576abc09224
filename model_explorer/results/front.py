"""Pareto fronts over objective matrices, and a result's hypervolume as its search went on."""

from __future__ import annotations

from typing import Any

import numpy as np


def dominated(matrix: np.ndarray, row: np.ndarray) -> bool:
    """Whether some row of `matrix` dominates `row` (all objectives minimised): no worse in
    every objective and better in one; an equal row does not."""
    no_worse = np.all(matrix <= row, axis=1)
    return bool(np.any(no_worse & np.any(matrix < row, axis=1)))


def non_dominated(matrix: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows no other row dominates (all objectives minimised). Duplicate
    rows do not dominate each other, so both stay."""
    return np.array([not dominated(matrix, row) for row in matrix], dtype=bool).reshape(len(matrix))


def indicator(senses: list[tuple[str, bool]], point: Any) -> Any:
    """pymoo's HV indicator for a reference point in natural units (a mapping by objective or
    values in the order of `senses`), turned to all-minimised as the objective matrices are."""
    from pymoo.indicators.hv import HV

    values = [point[name] for name, _ in senses] if isinstance(point, dict) else list(point)
    signed = [-v if maximize else v for v, (_, maximize) in zip(values, senses, strict=True)]
    return HV(ref_point=np.array(signed))


def ideal_box(senses: list[tuple[str, bool]], reference: dict[str, float]) -> float:
    """The volume between `reference` and the ideal point (1 for what is maximised, an
    accuracy; 0 for what is minimised, a cost): what normalised hypervolumes divide by."""
    box = 1.0
    for name, maximize in senses:
        box *= abs((1.0 if maximize else 0.0) - reference[name])
    return box


def by_generation(result: Any, reference: dict[str, float], normalised: bool) -> list:
    """(generation, hypervolume of the front of every feasible individual evaluated up to it,
    chosen as the result ranks: `ExplorationResult.ranking`)."""
    senses = result._senses(list(reference))
    names = [name for name, _ in senses]
    ranking = result.ranking(names)
    measure = indicator(senses, reference)
    scale = (result.hypervolume_box(reference) if normalised else 1.0) or 1.0
    history = []
    # what the search found: individuals repaired after it (debug --target) left out
    found = [i for i in result.individuals if "repaired_from" not in i.extra]
    for generation in sorted({i.generation for i in found}):
        chosen = [i for i in found if i.generation <= generation and i.feasible]
        if chosen and ranking != names:
            kept = non_dominated(result.objective_matrix(chosen, ranking))
            chosen = [i for i, keep in zip(chosen, kept, strict=True) if keep]
        value = float(measure(result.objective_matrix(chosen, names))) if chosen else 0.0
        history.append((generation, value / scale))
    return history


def by_samples(
    result: Any, reference: dict[str, float], normalised: bool, individual: Any, samples_of: Any
) -> list:
    """(sample-forwards spent, hypervolume of the feasible front found with them) after every
    evaluation, in the order they were recorded (`individual` builds one from a record,
    `samples_of` counts a record's sample-forwards)."""
    senses = result._senses(list(reference))
    names = [n for n, _ in senses]
    ranking = result.ranking(names)
    measure = indicator(senses, reference)
    scale = (result.hypervolume_box(reference) if normalised else 1.0) or 1.0
    # what the search spent before its first evaluation (a sensitivity table) counts first
    spent = result.stats.get("sensitivity_forwards", 0)
    # the front as the result ranks it (its rows in those quantities) and at the measured ones
    history = []
    ranked, front = np.empty((0, len(senses))), np.empty((0, len(senses)))
    for record in result.records:
        if "repaired_from" in (record.get("extra") or {}):
            continue  # repaired after the search (debug --target): not what it bought
        spent += samples_of(record)
        if record["feasible"]:
            member = individual(**record)
            ranked = np.vstack([ranked, result.objective_matrix([member], ranking)])
            front = np.vstack([front, result.objective_matrix([member], names)])
            kept = non_dominated(ranked)
            ranked, front = ranked[kept], front[kept]
        history.append((spent, float(measure(front)) / scale if len(front) else 0.0))
    return history
