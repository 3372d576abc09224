"""`model-explorer debug RESULTS#ID`: why an individual of a result lost accuracy, layer by
layer (errors.py in PyTorch, exported.py in the runtimes, each layer restored to float), and
with `--target`, the cheapest raise of its quantizers that reaches a target (repair.py),
appended to the result as a new individual."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_explorer.analysis.debug.errors import layer_errors
from model_explorer.analysis.debug.repair import AlreadyMeets, Repair, Unreachable, repair
from model_explorer.errors import UserError
from model_explorer.metrics.functions import higher_is_better
from model_explorer.plan import layer_formats

if TYPE_CHECKING:
    from model_explorer.results import ExplorationResult, Individual
    from model_explorer.workload.context import WorkloadContext


@dataclass
class DebugReport:
    """Per layer in network order: its settings, its SQNR columns (errors.COLUMNS), each
    runtime's (`<runtime>_local_db`, `<runtime>_accumulated_db`), the individual's accuracy
    with that layer restored to float and what that gains (`gain`)."""

    individual: int
    accuracy: float
    float_accuracy: float | None
    rows: list[dict[str, Any]]
    runtimes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # runtime -> why it did not run
    samples: int = 0
    higher: bool = True

    @property
    def drop(self) -> float | None:
        if self.float_accuracy is None:
            return None
        return (self.float_accuracy - self.accuracy) * (1 if self.higher else -1)

    def explaining(self, count: int = 5) -> list[dict[str, Any]]:
        """The `count` layers whose restoration to float gains most (those that explain most
        of the drop), the lowest accumulated SQNR first among equal gains."""
        ranked = sorted(self.rows, key=lambda row: (-row["gain"], row["accumulated_db"]))
        return ranked[:count]


def _batches(problem: Any, samples: int | None) -> tuple[list[Any], int]:
    """The exploration batches up to `samples` samples (all when None), and how many."""
    chosen, seen = [], 0
    for batch in problem.batches:
        if samples is not None and seen >= samples:
            break
        inputs = batch[0]
        if samples is not None and seen + len(inputs) > samples:
            batch = (inputs[: samples - seen], *batch[1:])
        chosen.append(batch)
        seen += len(batch[0])
    return chosen, seen


def _accuracy(problem: Any) -> float:
    accuracies = problem.score().accuracies
    return sum(accuracies) / len(accuracies)


def _calibrated(context: Any, result: Any, individual: Any, where: str) -> Any:
    """The individual's calibrated problem; a result whose genes set no quantizer (a sparsity
    search) refused in one sentence first."""
    from model_explorer.operations.rebuild import calibrated_problem
    from model_explorer.plan import QUANTIZERS

    if not any(name.endswith(tuple(QUANTIZERS)) for name in result.variable_names):
        raise UserError(
            f"{where}: debug explains quantized individuals, and this "
            f"{result.problem.get('name', '')} result's genes set no quantizer"
        )
    return calibrated_problem(context, result, individual, where)


def restored_accuracies(problem: Any) -> dict[str, float]:
    """Layer -> the individual's accuracy with that layer's quantizers off."""
    model, found = problem.model, {}
    for name in model.layers:
        with model.preserved_settings():
            model.set_enabled(False, [f"{name}.input_quantizer", f"{name}.weight_quantizer"])
            found[name] = _accuracy(problem)
    return found


def debug_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    runtimes: list[str] | tuple[str, ...] = ("onnxruntime",),
    samples: int | None = 256,
    where: str = "RESULTS#ID",
) -> DebugReport:
    """The DebugReport of an individual: SQNRs on the first `samples` exploration samples (all
    when None), accuracies on the whole exploration data, the runtimes on the exported file."""
    problem = _calibrated(context, result, individual, where)
    higher = higher_is_better(problem.metric)
    batches, seen = _batches(problem, samples)
    accuracy = _accuracy(problem)
    restored = restored_accuracies(problem)
    errors = layer_errors(problem.model, batches)
    sign = 1 if higher else -1
    formats = layer_formats(result.plan_of(individual))
    rows = [
        {
            "layer": name,
            "input": formats.get(name, {}).get("input", "float"),
            "weight": formats.get(name, {}).get("weight", "float"),
            **errors[name],
            "restored_accuracy": restored[name],
            "gain": sign * (restored[name] - accuracy),
        }
        for name in problem.model.layers
    ]
    report = DebugReport(
        individual.id, accuracy, (result.baseline or [None])[0], rows, samples=seen, higher=higher
    )
    for runtime in runtimes:
        _runtime_columns(report, context, result, individual, runtime, batches, where)
    return report


def _runtime_columns(
    report: DebugReport,
    context: Any,
    result: Any,
    individual: Any,
    runtime: str,
    batches: list[Any],
    where: str,
) -> None:
    from model_explorer.analysis.debug.exported import runtime_errors
    from model_explorer.deployment.runtimes import RuntimeUnavailable
    from model_explorer.operations.deployment_check import export_individual

    with tempfile.TemporaryDirectory(prefix="model_explorer_debug_") as folder:
        path = Path(folder) / "individual.onnx"
        try:  # a format without a QDQ form, a runtime not installed: that runtime's columns go
            model, _ = export_individual(context, result, individual, path, where=where)
            errors = runtime_errors(model, batches, path, runtime)
        except (RuntimeUnavailable, UserError) as error:
            report.skipped[runtime] = str(error)
            return
    report.runtimes.append(runtime)
    label = runtime.replace(":", "_")
    for row in report.rows:
        measured = errors.get(row["layer"], {})
        row[f"{label}_local_db"] = measured.get("local_db", float("nan"))
        row[f"{label}_accumulated_db"] = measured.get("accumulated_db", float("nan"))


def _cost_name(result: ExplorationResult, known: dict[str, float]) -> str:
    """The result's first cost objective known without the model (the one the repair keeps
    low), else weighted bits."""
    for name, _ in result.objectives:
        if name in known:
            return name
    return "weighted_bits"


def target_of(
    result: ExplorationResult, target: float | None, drop: float | None, higher: bool
) -> float:
    """The accuracy to reach: `target` as given, or the float model's less `drop`; refused in
    one sentence where the float model does not reach it."""
    base = (result.baseline or [None])[0]
    if target is None:
        if base is None:
            raise UserError("--drop: the result records no float accuracy; give --target")
        target = base - drop if higher else base + drop
    if base is not None and (target > base if higher else target < base):
        raise UserError(
            f"--target {target:.4f} is beyond the float model's accuracy ({base:.4f}); "
            "no quantization reaches it: give a target the float model meets"
        )
    return float(target)


def repair_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    target: float,
    where: str = "RESULTS#ID",
) -> tuple[Repair, dict[str, Any], str]:
    """The repair of `individual` to `target` on the exploration data, the record of the
    repaired individual to append to the result, and the cost objective it kept low."""
    problem = _calibrated(context, result, individual, where)
    if not all(variable.integer for variable in problem.variables):
        raise UserError(
            f"{where}: the repair raises bit widths and formats, and this result's genes "
            "include sparsity thresholds; repair individuals of a quantization problem"
        )
    higher = higher_is_better(problem.metric)
    parent = [int(round(g)) for g in individual.genome]
    upper = [int(v.upper) for v in problem.variables]
    cost_name = _cost_name(result, problem.known_values(problem.configuration(parent)))

    measure = assured_accuracy(problem, result, higher)

    def cost(genome: tuple[int, ...]) -> float:
        values = problem.known_values(problem.configuration(list(genome)))
        return values.get(cost_name, float(sum(genome)))

    try:
        found = repair(measure, cost, parent, upper, target, higher)
    except AlreadyMeets as met:
        raise UserError(
            f"{where}: individual {individual.id} already reaches {met.accuracy:.4f} (as far as "
            f"its samples assure it) against the target {target:.4f}; nothing to repair, the "
            "result is unchanged"
        ) from None
    except Unreachable as short:
        raise UserError(
            f"{where}: even with every quantizer at the widest choice the search allows, "
            f"individual {individual.id} reaches {short.accuracy:.4f} as far as its samples "
            "assure it (paired with the float model), short of the target "
            f"{target:.4f}; `model-explorer debug` names the layers to keep in float"
        ) from None
    record = _record(problem, result, individual, found, target)
    if context.has_dataset("reevaluate"):  # judged on data the repair did not select on
        record["extra"]["reevaluation"] = {
            "parent": _held_out(context, problem, problem.configuration(parent)),
            "repaired": _held_out(context, problem, problem.configuration(list(found.genome))),
        }
    return found, record, cost_name


def assured_accuracy(problem: Any, result: ExplorationResult, higher: bool) -> Any:
    """What the repair decides its target on: a genome's accuracy as far as its samples assure
    it, paired with the float model on the same samples (results/statistics.py): the float
    model's accuracy plus the end of the paired difference's 95% interval towards worse. A
    handful of samples that happen to flip the right way do not reach a target, as they would
    not hold on other data. Where the result keeps no per-sample outcomes of the float model
    (a file from before), or the metric none, the accuracy as measured."""
    from model_explorer.results.confidence import Outcomes

    baseline = Outcomes.of(result.stats.get("baseline_outcomes"))
    float_accuracy = baseline.accuracy() if baseline is not None else None

    def measure(genome: tuple[int, ...]) -> float:
        evaluation = problem.measure(problem.configuration(list(genome)))
        accuracy = float(evaluation.values["accuracy"])
        outcomes = Outcomes.of(evaluation.extra.get("outcomes"))
        test = outcomes.against(baseline) if outcomes is not None else None
        if test is None or float_accuracy is None:
            return accuracy
        return float_accuracy.value + (test.low if higher else test.high)

    return measure


def _held_out(context: Any, problem: Any, configuration: list[Any]) -> float:
    """A configuration's accuracy on the workload's reevaluation data."""
    problem.apply(configuration)
    accuracy = context.evaluate(problem.model, "reevaluate")
    return sum(accuracy) / len(accuracy) if isinstance(accuracy, list) else float(accuracy)


def _record(problem: Any, result: Any, individual: Any, found: Repair, target: float) -> dict:
    """The repaired individual as the result records it (its id left to the caller), marked
    with its parent, the target and what was raised from what to what."""
    from model_explorer.problems.base import Constraint

    configuration = problem.configuration(list(found.genome))
    evaluation = problem.measure(configuration)
    constraints = [Constraint(**c) for c in result.problem.get("constraints", [])]
    values = evaluation.values
    return {
        "generation": individual.generation,
        "index": 0,
        "genome": [float(g) for g in found.genome],
        "configuration": list(configuration),
        "values": values,
        "accuracies": list(evaluation.accuracies),
        "feasible": all(c.violation(values.get(c.name, 0.0)) <= 0 for c in constraints),
        "complete": True,
        "seconds": 0.0,
        "extra": {
            "repaired_from": individual.id,
            "target": target,
            "raised": {
                result.variable_names[i]: [individual.configuration[i], configuration[i]]
                for i in found.raised
            },
            "samples": int(evaluation.extra.get("samples", 0)),
        },
        "plan": evaluation.plan,
    }
