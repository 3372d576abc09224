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
        self.individual = individual
        self.configuration = list(individual.configuration)
        self.where = where
        self.description = (
            f"{result.problem['name']} individual {individual.id}: {self.configuration}"
        )

    def build(self, model: nn.Module, example: Tensor) -> nn.Module:
        from model_explorer.operations.rebuild import individual_problem

        return individual_problem(self.context, self.result, self.individual, self.where).model


@ENVIRONMENTS.register_namespace("quantized", placeholder="RESULTS#ID")
def quantized_environment(reference: str, name: str, context: Any = None) -> Environment:
    from model_explorer.operations.reevaluate import check_same_model
    from model_explorer.results import load_individual

    where = f"--env {name}"
    if context is None:
        raise UserError(f"{where}: a quantized environment needs the workload of the result")
    result, individual = load_individual(reference, where)
    check_same_model(context.workload, result)
    return QuantizedEnvironment(name, context, result, individual, where)
