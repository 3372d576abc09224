"""`quantized:RESULTS#ID`: one individual of an exploration result, built and configured as
`evaluate-individual` does."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import ENVIRONMENTS, Environment
from model_explorer.analysis.compare.environments.eager import TorchEnvironment
from model_explorer.errors import UserError


class QuantizedEnvironment(TorchEnvironment):
    """One individual of an exploration result: the workload's model built and configured by
    the result's problem (calibrated from the workload's calibration file), as
    `evaluate-individual` does."""

    def __init__(self, name: str, context: Any, result: Any, individual: Any, where: str) -> None:
        super().__init__(name)
        self.context = context
        self.result = result
        self.configuration = list(individual.configuration)
        self.where = where
        self.description = (
            f"{result.problem['name']} individual {individual.id}: {self.configuration}"
        )

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        from model_explorer.problems import PROBLEMS

        problem = PROBLEMS.get(self.result.problem["name"], self.where).builder(self.context, None)
        if [v.name for v in problem.variables] != self.result.variable_names:
            raise UserError(
                f"{self.where}: the result's variables do not match this workload's model"
            )
        problem.apply(self.configuration)
        return problem.model


@ENVIRONMENTS.register_namespace("quantized", placeholder="RESULTS#ID")
def quantized_environment(reference: str, name: str, context: Any = None) -> Environment:
    from model_explorer.exploration.reevaluate import check_same_model
    from model_explorer.results import ExplorationResult

    where = f"--env {name}"
    path, _, identifier = reference.rpartition("#")
    if not path or not identifier.isdigit():
        raise UserError(f"{where}: write quantized:RESULTS#ID, e.g. quantized:results/x.pkl#12")
    if context is None:
        raise UserError(f"{where}: a quantized environment needs the workload of the result")
    result = ExplorationResult.load(path)
    check_same_model(context.workload, result)
    found = [i for i in result.individuals if i.id == int(identifier)]
    if not found:
        raise UserError(f"{where}: {path} has no individual {identifier} (ids 0-{len(result) - 1})")
    return QuantizedEnvironment(name, context, result, found[0], where)
