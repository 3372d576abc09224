"""What `model_explorer.search` returns: the result (every individual, the front) with the
objects it was searched on, so that an individual becomes a model of the caller's again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_explorer.results import ExplorationResult, Individual

if TYPE_CHECKING:
    from model_explorer.api.context import ObjectContext


class Search:
    """A finished (or interrupted) search: `result` is the ExplorationResult the command line
    writes (also at `path`), `front` its feasible non-dominated individuals."""

    def __init__(self, result: ExplorationResult, path: Path, context: ObjectContext) -> None:
        self.result, self.path, self.context = result, Path(path), context

    @property
    def front(self) -> list[Individual]:
        """The feasible individuals no other feasible one beats in every objective, as the
        search ranked them (by their divergence from the float model where it says so): the
        choices to pick from, each with `values` (accuracy, costs), `plan` and `extra`
        (intervals, the held-out scores)."""
        return self.result.pareto_front()

    @property
    def individuals(self) -> list[Individual]:
        """Every individual the search evaluated, in the order it evaluated them (early
        stopped ones included, `complete` False, their accuracy a bound)."""
        return self.result.individuals

    def _individual(self, individual: Individual | int) -> Individual:
        if isinstance(individual, Individual):
            return individual
        return self.result.individual(int(individual), "individual")

    def plan(self, individual: Individual | int) -> dict[str, dict[str, Any]]:
        """The per-layer plan (plan.py) of an individual or id."""
        return self.result.plan_of(self._individual(individual))

    def model(self, individual: Individual | int) -> Any:
        """A fresh QuantizedModel of the caller's model, calibrated as the search was, with
        the individual's plan in effect: ready for the caller's evaluation or fine-tuning."""
        from model_explorer.operations.rebuild import calibrated_individual

        model = calibrated_individual(
            self.context, self.result, self._individual(individual), "individual"
        )
        return model.eval()

    def export(self, individual: Individual | int, path: str | Path, pack: bool = True) -> Path:
        """The individual as a QDQ ONNX file, as `model-explorer export` writes it."""
        from model_explorer.errors import extras_said

        with extras_said("Search.export"):
            from model_explorer.operations.deployment_check import export_individual

            export_individual(self.context, self.result, self._individual(individual), path, pack)
        return Path(path)

    def save(self, path: str | Path) -> Path:
        """The result file (as `explore` writes it: `report`, notebooks and `--resume` read it)."""
        return self.result.save(path)

    def __repr__(self) -> str:
        return (
            f"Search({len(self.result)} individuals, {len(self.front)} on the front, {self.path})"
        )
