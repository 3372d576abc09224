"""Text tables of results for the command line."""

from __future__ import annotations

from model_explorer.results import ExplorationResult


def pareto_table(result: ExplorationResult, objectives: list[str] | None = None) -> str:
    """The Pareto front, one row per individual, sorted by the first cost objective."""
    front = result.pareto_front(objectives)
    if not front:
        return "(no individuals)"
    names = [name for name, _ in result.objectives]
    columns = ["id", "generation", *names]
    if "accuracy" not in names:
        columns.append("accuracy")
    columns.append("feasible")
    rows = []
    for individual in front:
        row = {
            "id": individual.id,
            "generation": individual.generation,
            "feasible": individual.feasible,
        }
        row.update(
            {name: individual.values.get(name) for name in columns if name in individual.values}
        )
        rows.append(row)
    # Sorted along the front: by the first cost objective, else by the last objective.
    cost = next((name for name, maximize in result.objectives if not maximize), None)
    if cost is not None:
        rows.sort(key=lambda row: row[cost])
    else:
        rows.sort(key=lambda row: row[names[-1]])
    widths = {c: max(len(c), *(len(_cell(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    lines += ["  ".join(_cell(r[c]).rjust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.6g}"
    return str(value)
