"""A workload's latency table: loaded where one was measured for this model, search space and
machine, refused with one sentence where it was measured elsewhere, else measured and saved;
and a problem's genes as the table prices them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_explorer.deployment.runtimes import runtime_setting
from model_explorer.errors import UserError
from model_explorer.latency.table import LatencyTable
from model_explorer.latency.timing import cpu_model
from model_explorer.operations.pipeline import weights_fingerprint

if TYPE_CHECKING:
    from model_explorer.problems.options import LatencySettings
    from model_explorer.workload.context import WorkloadContext


def gene_choices(problem: Any) -> dict[str, list[Any]]:
    """Each gene of a quantization problem and the choices it can take: its bit widths, or the
    formats it chooses among."""
    allowed = getattr(problem, "allowed", None)
    if allowed is not None:
        return {v.name: list(a) for v, a in zip(problem.variables, allowed, strict=True)}
    return {v.name: list(range(int(v.lower), int(v.upper) + 1)) for v in problem.variables}


def table_path(context: WorkloadContext, settings: LatencySettings) -> Path:
    if settings.table is not None:
        return context.workload.resolve(settings.table)
    runtime = settings.runtime.replace(":", "_")
    source = context.workload.source
    stem = source.stem if source is not None else "workload"
    return context.workload.results_folder / f"{stem}_latency_{runtime}.json"


def leave_out(problem: Any, table: LatencyTable, where: str) -> list[str]:
    """Leave out of each gene the choices the table could not price (the export has no form
    for them, or the runtime refused their form): a format dropped from the gene's list, a
    bit-width range narrowed to the widths kept (one sentence where they are not a range, or
    none is kept). Returns what was left out, one entry per gene."""
    from model_explorer.problems.base import Variable

    said = []
    choices = gene_choices(problem)
    for index, variable in enumerate(problem.variables):
        priced = table.genes.get(variable.name, {})
        kept = [c for c in choices[variable.name] if str(c) in priced]
        dropped = [str(c) for c in choices[variable.name] if str(c) not in priced]
        if not dropped:
            continue
        if not kept:
            raise UserError(
                f"{where}: no choice of '{variable.name}' can be exported and run in the runtime "
                f"({', '.join(dropped)}); narrow its choices with problem.layer_bounds"
            )
        if problem.allowed is not None:
            problem.allowed[index] = kept
            problem.variables[index] = Variable(variable.name, 0, len(kept) - 1)
        elif kept != list(range(kept[0], kept[-1] + 1)):
            raise UserError(
                f"{where}: '{variable.name}' cannot be exported or run at "
                f"{', '.join(dropped)} bits, inside its range; narrow it with problem.layer_bounds"
            )
        else:
            problem.variables[index] = Variable(variable.name, kept[0], kept[-1])
        said.append(f"{variable.name}: {', '.join(dropped)}")
    return said


def machine_of(settings: LatencySettings, where: str) -> tuple[dict[str, Any], Any]:
    """What a table is measured on (the runtime as named, its version, threads, processor)
    and a function making the runtime (a RuntimeUnavailable where it is not installed)."""
    runtime, setting = runtime_setting(settings.runtime, where)
    probe = runtime(setting, settings.threads)
    if probe.reads != "onnx":
        raise UserError(
            f"{where}: runtime {runtime.name} converts PyTorch models, so a latency table, "
            "timed on the exported graph's segments, cannot be measured in it; use a runtime "
            "that opens ONNX files (onnxruntime, openvino, tvm)"
        )
    machine = {
        "runtime": probe.label,
        "version": probe.version,
        # a runtime whose thread pool cannot be sized here runs as it chooses
        "threads": settings.threads if probe.takes_threads else "its own",
        "cpu": cpu_model(),
        "gpu": None,
    }
    return machine, lambda: runtime(setting, settings.threads)


def workload_key(
    context: WorkloadContext, model: Any, genes: dict[str, list[Any]], batch: int
) -> dict:
    """What a table is measured for: the model (by its type and weights), the search space
    (each gene's choices) and the batch timed."""
    return {
        "model": context.workload.model.type,
        "weights": weights_fingerprint(model.model),
        "genes": {gene: [str(c) for c in choices] for gene, choices in genes.items()},
        "batch": batch,
    }


def latency_table(
    context: WorkloadContext,
    problem: Any,
    settings: LatencySettings,
    where: str,
    remeasure: bool = False,
) -> tuple[LatencyTable, Path, bool]:
    """The table of `problem` (a quantization problem) in the runtime `settings` name: the
    saved one where it matches, else measured and saved. Returns it, its path, and whether it
    was measured now."""
    from model_explorer.latency.measure import measure_table

    path = table_path(context, settings)
    machine, make_runtime = machine_of(settings, where)
    genes = gene_choices(problem)
    key = workload_key(context, problem.model, genes, settings.batch)
    if path.exists() and not remeasure:
        table = LatencyTable.load(path, where)
        table.refuse_other(machine, key, f"{where} ({path})")
        return table, path, False
    example = next(iter(context.batches("exploration")))[0]
    table = measure_table(
        problem.model,
        example,
        genes,
        make_runtime,
        machine,
        key,
        batch=settings.batch,
        repeats=settings.repeats,
        seed=context.workload.seed,
    )
    problem.model.to(context.device)
    return table, table.save(path), True


def check_front(context: WorkloadContext, problem: Any, result: Any) -> dict[str, Any] | None:
    """Time every feasible member of the result's front whole in the table's runtime, exported
    as `export` writes it, and record its predicted and measured time side by side
    (`extra["latency"]` of each, the errors in `stats["latency_check"]`); None where the
    problem holds no table."""
    settings = getattr(problem.options, "latency_settings", None)
    if getattr(problem, "latency", None) is None or settings is None:
        return None
    members = [m for m in result.pareto_front() if m.plan is not None and m.feasible]
    if not members:
        return None
    # only now: a search without the objective needs neither onnx nor a runtime
    from model_explorer.latency.running import time_plans

    _, make_runtime = machine_of(settings, problem.options.key("latency"))
    example = next(iter(context.batches("exploration")))[0]
    timings = time_plans(
        problem.model,
        example,
        [m.plan for m in members],
        make_runtime,
        settings.batch,
        settings.repeats,
    )
    problem.model.to(context.device)
    errors, pairs = [], []
    for member, timing in zip(members, timings, strict=True):
        predicted = problem.latency.predict(member.plan)
        member.extra["latency"] = {"predicted_ms": predicted, **timing.to_dict()}
        errors.append(abs(predicted - timing.median) / timing.median)
        pairs.append((predicted, timing))
    check = {
        "runtime": settings.runtime,
        "members": len(members),
        "mean_abs_error": float(sum(errors) / len(errors)),
        "worst_abs_error": float(max(errors)),
        **_separation(pairs),
    }
    result.stats["latency_check"] = check
    return check


def _separation(pairs: list[tuple[float, Any]]) -> dict[str, float | int]:
    """Whether the measured times tell the front's members apart: the front's span (slowest
    over fastest measured median, less one), the timings' own spread (the median
    interquartile range over its median), and the pairs measured in the other order than
    predicted, of all pairs."""
    medians = [timing.median for _, timing in pairs]
    spreads = sorted((timing.high - timing.low) / timing.median for _, timing in pairs)
    reversed_pairs = sum(
        (a[0] - b[0]) * (a[1].median - b[1].median) < 0
        for index, a in enumerate(pairs)
        for b in pairs[index + 1 :]
    )
    return {
        "span": max(medians) / min(medians) - 1,
        "spread": spreads[len(spreads) // 2],
        "reversed_pairs": int(reversed_pairs),
        "pairs": len(pairs) * (len(pairs) - 1) // 2,
    }
