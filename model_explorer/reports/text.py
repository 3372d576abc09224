"""Text tables of results for the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_explorer.exploration.initialization import auto_takes_the_start
from model_explorer.fileio import atomic_path
from model_explorer.plan import FORMAT_OF, layer_formats
from model_explorer.results import ExplorationResult
from model_explorer.results.confidence import front_confidence, indistinct_pairs


def front_along(result: ExplorationResult, objectives: list[str] | None = None) -> list[Any]:
    """The Pareto front's individuals along the front: by the first cost objective, else by the
    last objective."""
    names = [name for name, _ in result.judged]
    cost = next(
        (name for name, maximize in result.judged if not maximize and name != "accuracy"),
        names[-1],
    )
    return sorted(result.pareto_front(objectives), key=lambda individual: individual.values[cost])


def pareto_table(result: ExplorationResult, objectives: list[str] | None = None) -> str:
    """The Pareto front, one row per individual, sorted by the first cost objective."""
    front = front_along(result, objectives)
    if not front:
        return "(no individuals)"
    names = [name for name, _ in result.objectives]
    columns = ["id", "generation", *names]
    if "accuracy" not in names:
        columns.append("accuracy")
    # each member's intervals from its per-sample outcomes (results/confidence.py)
    confidence = dict(zip([i.id for i in front], front_confidence(result, front), strict=True))
    intervals = any(figures.accuracy is not None for figures in confidence.values())
    if intervals:
        columns.insert(columns.index("accuracy") + 1, "interval")
    # the front's latency as timed whole after the search (operations/latency.check_front)
    timed = any("latency" in individual.extra for individual in front)
    if timed:
        columns.append("measured_latency")
    # the front scored on the held-out reevaluation data (operations/held_out.py)
    held = any("held_out" in individual.extra for individual in front)
    if held:
        columns.append("held_out")
        if any(figures.held_out is not None for figures in confidence.values()):
            columns.append("held_out_interval")
    columns.append("feasible")
    rows = []
    for individual in front:
        figures = confidence[individual.id]
        row = {
            "id": individual.id,
            "generation": individual.generation,
            "feasible": individual.feasible,
            "interval": _interval(figures.accuracy),
            "held_out_interval": _interval(figures.held_out),
        }
        if timed:
            row["measured_latency"] = individual.extra.get("latency", {}).get("median_ms")
        if held:
            row["held_out"] = individual.extra.get("held_out")
        row.update(
            {name: individual.values.get(name) for name in columns if name in individual.values}
        )
        rows.append(row)
    widths = {c: max(len(c), *(len(_cell(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    lines += ["  ".join(_cell(r[c]).rjust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _interval(estimate: Any) -> str:
    return "-" if estimate is None else f"[{estimate.low:.4f},{estimate.high:.4f}]"


def confidence_lines(result: ExplorationResult) -> list[str]:
    """What the per-sample outcomes say of the front: the level of its intervals, and each
    member its samples cannot tell apart from the cheaper one before it, with the samples
    that would."""
    front = [i for i in front_along(result) if i.feasible]
    confidence = front_confidence(result, front)
    if not any(figures.accuracy is not None for figures in confidence):
        return []
    metric = result.problem.get("metric", "accuracy")
    ranked = (
        f"the front is ranked by the KL divergence from the float model (selection: "
        f"{result.selection}), {metric} is reported"
        if result.selection != "accuracy"
        else f"the front is ranked by {metric}"
    )
    lines = [f"intervals: 95%, from each member's per-sample outcomes; {ranked}"]
    cost = next((n for n, m in result.judged if not m and n != "accuracy"), None)
    return lines + indistinct_pairs(front, confidence, metric, cost)


def front_command(workload: str | Path = "WORKLOAD", result: str | Path = "RESULT") -> str:
    """The command that scores a result's front on its workload's reevaluation data."""
    return f"model-explorer evaluate-individual {workload} {result} --front"


def selection_note(result: ExplorationResult, command: str | None = None) -> str | None:
    """A sentence where feasible front members score better than the float model on the data
    the search selected them on (the exploration data): the best of many candidates scored on
    the same samples is an optimistic figure of how it does elsewhere. `command` is the one
    that scores the front on the workload's reevaluation data; None otherwise."""
    senses = dict(result.judged)
    if not result.baseline or "accuracy" not in senses:
        return None
    baseline, maximize = result.baseline[0], senses["accuracy"]
    front = [individual for individual in front_along(result) if individual.feasible]
    scores = [individual.values["accuracy"] for individual in front]
    better = [score for score in scores if (score > baseline if maximize else score < baseline)]
    if not better:
        return None
    best = max(better) if maximize else min(better)
    metric = result.problem.get("metric", "accuracy")
    command = command or front_command()
    held = result.stats.get("held_out")
    elsewhere = (
        f"the held_out column scores them on data the search did not see, where the float "
        f"model scores {held['baseline']:.4f}"
        if held
        else f"`{command}` scores the front on the workload's reevaluation data"
    )
    return (
        f"{len(better)} of {len(front)} feasible front members score "
        f"{'above' if maximize else 'below'} the float model's {metric} on the exploration "
        f"data they were selected on ({best:.4f} against {baseline:.4f}): the best of many "
        f"candidates scored on the same samples is optimistic; {elsewhere}"
    )


def front_judged(result: ExplorationResult, command: str | None = None) -> list[str]:
    """The lines a search prints below its front: the front on held-out data, the selection
    note (`command`: see `selection_note`), the front's latency timed whole."""
    lines = list(confidence_lines(result))
    held = held_out_summary(result)
    if held is not None:
        lines.append(f"held-out data: {held}")
    note = selection_note(result, command)
    if note is not None:
        lines.append(f"note: {note}")
    check = result.stats.get("latency_check")
    if check:
        lines.append(
            f"latency: the {check['members']} feasible front members timed whole in "
            f"{check['runtime']}: predicted {check['mean_abs_error']:.1%} off the measured "
            f"time on average, {check['worst_abs_error']:.1%} at worst" + _separated(check)
        )
    return lines


def _separated(check: dict[str, Any]) -> str:
    """What the measured times can tell apart, where the check recorded it."""
    if "span" not in check:
        return ""
    said = f"; the front spans {check['span']:.1%} of the measured time"
    if check["span"] <= 2 * check["spread"]:
        said += (
            f", within twice the timings' own spread ({check['spread']:.1%} interquartile): "
            "latency does not tell these members apart here"
        )
    if check["reversed_pairs"]:
        said += (
            f"; {check['reversed_pairs']} of {check['pairs']} pairs measured in the other "
            "order than predicted"
        )
    return said


def held_out_summary(result: ExplorationResult) -> str | None:
    """The held-out data the front was scored on and the float model's score there, beside
    its score on the exploration data; None where the front was not scored so."""
    held = result.stats.get("held_out")
    if not held:
        return None
    searched = f" ({result.baseline[0]:.4f} on the exploration data)" if result.baseline else ""
    return (
        f"{held['data']}, {held['samples']} samples: the float model {held['baseline']:.4f}"
        f"{searched}; the front's {held['members']} feasible members in the held_out column"
    )


def formats_table(result: ExplorationResult) -> str | None:
    """The formats of every layer's input and weight (`input/weight`) for each member of the
    Pareto front, in the order of `pareto_table`; None when the search chose no formats."""
    plans = {individual.id: result.plan_of(individual) for individual in front_along(result)}
    if not any(
        f in s for plan in plans.values() for s in plan.values() for f in FORMAT_OF.values()
    ):
        return None
    formats = {id_: layer_formats(plan) for id_, plan in plans.items()}
    layers = list(next(iter(formats.values())))
    header = "| id | " + " | ".join(f"`{layer}`" for layer in layers) + " |"
    lines = [header, "|" + "---|" * (len(layers) + 1)]
    for id_ in formats:
        cells = [
            "/".join(formats[id_].get(layer, {}).get(role, "-") for role in ("input", "weight"))
            for layer in layers
        ]
        lines.append(f"| {id_} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cost_summary(result: ExplorationResult) -> str:
    """What the search cost: samples forwarded through the model (in all, for the sensitivity
    seeds, and per evaluation), seconds spent evaluating, and the strategy (and algorithm, when
    not NSGA-II) that spent them."""
    evaluations = len(result)
    seeding = result.stats.get("sensitivity_forwards", 0)
    forwards = result.stats.get("sample_forwards", result.sample_forwards() + seeding)
    seconds = result.stats.get("seconds", sum(r["seconds"] for r in result.records))
    exploration = result.workload.get("workload", {}).get("exploration") or {}
    seeds = [f"{seeding:,} for the sensitivity seeds"] if seeding else []
    parts = seeds or _unseeded(result, exploration)
    if evaluations:
        parts.append(f"{(forwards - seeding) / evaluations:.0f} per evaluation")
    per = f" ({', '.join(parts)})" if parts else ""
    strategy = _entry_name(exploration.get("strategy")) or "nsga2"
    algorithm = _entry_name(exploration.get("algorithm")) or "nsga2"
    searched = f"strategy {strategy}" + (f", algorithm {algorithm}" if algorithm != "nsga2" else "")
    return f"{forwards:,} sample-forwards{per}, {seconds:.1f} s evaluating ({searched})"


def _unseeded(result: ExplorationResult, exploration: dict[str, Any]) -> list[str]:
    """Why `auto` took no sensitivity start where the problem could have taken one (a reader
    of the cost line would otherwise wonder where the seeds went)."""
    if exploration.get("initialization", "auto") != "auto" or result.stats.get("sensitivity"):
        return []
    if result.problem.get("name") not in ("quantization_problem", "energy_aware_quant_problem"):
        return []
    genes = len(result.problem.get("variables", []))
    members = (exploration.get("nsga") or {}).get("pop_size")
    if members is None or auto_takes_the_start(genes, members):
        return []
    return [f"auto: no sensitivity start with {genes} genes and {members} first members"]


def coverage_summary(result: ExplorationResult) -> str:
    """The share of the weight MACs the search's model ran on quantized weights and the
    layers left in float (quantization/coverage.py), as the result recorded it."""
    from model_explorer.quantization.coverage import Coverage

    coverage = result.problem.get("coverage")
    if coverage is None:
        return "not recorded (a result written before it was)"
    return Coverage.from_dict(coverage).statement()


def hypervolume_summary(result: ExplorationResult) -> str:
    """The normalised hypervolume with its reference point, as explore prints it."""
    reference = result.default_reference()
    point = ", ".join(f"{k} {v:.6g}" for k, v in reference.items())
    return f"{result.normalised_hypervolume(reference):.4f} (reference point {point})"


def _entry_name(setting: Any) -> str | None:
    """The entry a typed setting names, as a result stores it (a name or `{type: ...}`)."""
    return setting.get("type") if isinstance(setting, dict) else setting


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.6g}"
    return str(value)


def _markdown_table(result: ExplorationResult) -> str:
    text = pareto_table(result)
    lines = text.splitlines()
    if len(lines) < 2:
        return text
    cells = [line.split() for line in lines]
    header = "| " + " | ".join(cells[0]) + " |"
    rule = "|" + "---|" * len(cells[0])
    body = ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join([header, rule, *body])


def front_heading(result: ExplorationResult) -> str:
    """ "Pareto front", or what the shown front is when no individual is feasible (the front of
    the infeasible ones, which tells how far the search got)."""
    if result.individuals and not result.feasible():
        return (
            "No feasible individual: none meets the constraints; the front of the infeasible ones"
        )
    return "Pareto front"


def write_report(
    result: ExplorationResult, out: str | Path, source: str | Path | None = None
) -> list[Path]:
    """Plots (PNG), pgfplots files of the front and a `report.md` summarising a run (with the
    deployment audits recorded beside the result file `source`, where there are any); returns
    every file written, report.md last."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = _write_figures(result, out)
    lines = [*_summary(result, source), "", f"## {front_heading(result)}", ""]
    lines += [_markdown_table(result), ""]
    said = confidence_lines(result)
    lines += [f"- {line[0].upper()}{line[1:]}." for line in said] + ([""] if said else [])
    note = selection_note(result, front_command(result=source if source is not None else "RESULT"))
    if note is not None:
        lines += [f"Note: {note}.", ""]
    formats = formats_table(result)
    if formats is not None:
        lines += ["## Formats on the front (input/weight per layer)", "", formats, ""]
    if source is not None:
        from model_explorer.deployment.audit_render import audits_section

        lines += audits_section(source)
    lines += ["## Figures", ""]
    for name, caption in (
        ("front.png", f"{result.problem.get('metric', 'accuracy')} against cost"),
        ("layers.png", "per-layer settings: the median member of the front, its range as whiskers"),
        ("convergence.png", "hypervolume per generation"),
        ("efficiency.png", "hypervolume against sample-forwards"),
        ("dram_energy.png", "DRAM energy per layer"),
    ):
        if (out / name) in written:
            lines += [f"![{caption}]({name})", ""]
    lines += ["Files: " + ", ".join(f"`{p.name}`" for p in written), ""]
    report = out / "report.md"
    with atomic_path(report) as temporary:
        temporary.write_text("\n".join(lines))
    written.append(report)
    return written


def _write_figures(result: ExplorationResult, out: Path) -> list[Path]:
    """The front, per-layer and convergence plots, the front as pgfplots, and the DRAM energy
    per layer when the result's workload names an energy CSV that exists."""
    from model_explorer.reports import plots as plotting

    figures = {
        "front.png": plotting.plot_front(result),
        "layers.png": plotting.plot_layers(result),
        "convergence.png": plotting.plot_convergence(result),
        "efficiency.png": plotting.plot_efficiency(result),
    }
    written = [plotting.save(figure, out / name) for name, figure in figures.items()]
    written.extend(plotting.front_to_pgfplots(result, out / "front"))
    workload = result.workload.get("workload", {})
    # Results written before the problem owned its settings kept it in `exploration:`.
    energy = workload.get("energy_evaluation") or (workload.get("exploration") or {}).get(
        "energy_evaluation"
    )
    energy_file = (energy or {}).get("dram_analysis_file")
    if energy_file and Path(energy_file).is_file():
        from model_explorer.operations.energy import read_energy_csv

        rows = read_energy_csv(energy_file)
        written.append(plotting.save(plotting.plot_dram_energy(rows), out / "dram_energy.png"))
    return written


def _summary(result: ExplorationResult, source: str | Path | None) -> list[str]:
    """The report's title and its list of facts about the run."""
    workload = result.workload.get("workload", {})
    reference = result.default_reference()
    hypervolume = result.normalised_hypervolume(reference)
    stats = result.stats
    evaluations = len(result)
    feasible = len(result.feasible())
    datasets = (workload.get("exploration") or {}).get("datasets", {})
    data = datasets.get("exploration", {})
    data_text = ", ".join(f"{k}={v}" for k, v in data.items() if k != "type")
    objectives = ", ".join(f"{n} ({'max' if m else 'min'})" for n, m in result.objectives)
    baseline = ", ".join(f"{a:.4f}" for a in result.baseline) if result.baseline else "not measured"
    share = f" ({feasible / evaluations:.0%})" if evaluations else ""
    point = ", ".join(f"{k}={v:.6g}" for k, v in reference.items())
    ideal = ", ".join(f"{n}={1 if m else 0}" for n, m in result._senses(list(reference)))
    state = "complete" if result.complete else "unfinished (resume with --resume)"
    return [
        f"# Exploration report: {workload.get('name', 'workload')}",
        "",
        f"- result file: `{source}`" if source else "- result file: (in memory)",
        f"- model: `{workload.get('model', {}).get('type')}`, problem: `{result.problem['name']}`, "
        f"objectives: {objectives}",
        f"- exploration data: `{data.get('type')}` ({data_text})",
        f"- genes: {len(result.variable_names)}; seed {result.seed}; {state}",
        f"- baseline {result.problem.get('metric', 'accuracy')}: {baseline}",
        f"- evaluations: {evaluations}, feasible: {feasible}{share}",
        f"- genomes answered by the cache: {stats.get('cache_hits', 0)}; "
        f"rejected early: {stats.get('early_rejected', 0)}; "
        f"stopped at the front: {stats.get('rejected_dominated', 0)}",
        f"- cost: {cost_summary(result)}",
        f"- quantization coverage: {coverage_summary(result)}",
        f"- hypervolume (normalised): {hypervolume:.4f} (reference point {point}; ideal {ideal})",
        *([f"- held-out data: {held}"] if (held := held_out_summary(result)) else []),
    ]
