"""`explore`: from a workload to a result file (baseline, problem, search, resume)."""

from __future__ import annotations

import logging
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from model_explorer.errors import UserError
from model_explorer.exploration.algorithms import check_available
from model_explorer.exploration.explorer import Explorer
from model_explorer.exploration.initialization import auto_takes_the_start
from model_explorer.exploration.runners import ProblemRecipe, Runner, build_runner
from model_explorer.exploration.runners.recipe import model_files
from model_explorer.exploration.spec import ExplorationSpec
from model_explorer.exploration.strategies import build_strategy
from model_explorer.metrics.functions import higher_is_better
from model_explorer.operations.held_out import baseline_outcomes, judge_front
from model_explorer.operations.rebuild import RECIPE_BUILDER, build_problem
from model_explorer.operations.result_file import (
    SearchDefinition,
    check_writable,
    claim,
    hold,
    release_if_empty,
    saved,
    saved_evaluations,
    this_process,
    unfinished_results,
    warn_stopped_runs,
)
from model_explorer.problems import Problem
from model_explorer.problems.options import ProblemOptions
from model_explorer.results import ExplorationResult
from model_explorer.schema.paths import resolve_path
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload, dataset_spec

log = logging.getLogger(__name__)


@dataclass
class ExploreOptions:
    skip_baseline: bool = False
    resume: bool = False
    output: str | None = None
    progress: bool = False


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def default_result_stem(workload: Workload) -> str:
    """`expl_<problem>_<model>_<dataset>`: the prefix of the result files of a workload."""
    spec, _ = dataset_spec(workload, "exploration")
    return "_".join(
        ["expl", workload.problem.problem_function, _slug(workload.model.type), _slug(spec.type)]
    )


def result_path(workload: Workload, output: str | None) -> Path:
    if output is not None:
        return resolve_path(output)
    if workload.problem.results_file is not None:
        return workload.problem.resolve(workload.problem.results_file)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return workload.results_folder / f"{default_result_stem(workload)}_{stamp}.pkl"


def find_checkpoint(workload: Workload, output: str | None, definition: SearchDefinition) -> Path:
    """The file to resume: the named one, or the newest unfinished result of this search."""
    if output is not None or workload.problem.results_file is not None:
        path = result_path(workload, output)
        if not path.is_file():
            raise UserError(f"--resume: '{path}' does not exist; there is nothing to resume")
        return path
    stem = default_result_stem(workload)
    folder = workload.results_folder
    candidates = sorted(folder.glob(f"{stem}_*.pkl"), key=lambda p: p.stat().st_mtime)
    for path, _ in unfinished_results(reversed(candidates), definition):
        return path
    raise UserError(
        f"--resume: no unfinished result of this workload in {folder}/ ({stem}_*.pkl); "
        "name one with --output"
    )


def minimum_accuracy(
    options: ProblemOptions, baseline: list[float] | None, higher: bool = True
) -> list[float] | None:
    """The accuracy each output must keep: `allowable_accuracy_drop` (a fraction of the
    baseline; it wins when both are given) or `minimum_accuracy`, else no constraint. For a
    metric where lower is better (kl), the limit is `maximum_divergence`, a maximum."""
    if not higher:
        return divergence_limit(options)
    if options.maximum_divergence is not None:
        raise UserError(
            f"{options.key('maximum_divergence')} bounds a metric where lower is better (kl); "
            "this metric is higher-is-better: bound it with minimum_accuracy or "
            "allowable_accuracy_drop"
        )
    if options.allowable_accuracy_drop is not None:
        if baseline is None:
            raise UserError(
                f"{options.key('allowable_accuracy_drop')} needs the baseline accuracy; do not "
                "pass --skip-baseline, or set minimum_accuracy instead"
            )
        return [a * (1.0 - options.allowable_accuracy_drop) for a in baseline]
    if options.minimum_accuracy is None:
        return None
    if isinstance(options.minimum_accuracy, list):
        return list(options.minimum_accuracy)
    return [options.minimum_accuracy]


def _warn_unreachable(
    workload: Workload, baseline: list[float] | None, minimum: list[float] | None
) -> None:
    """Say at the start when the float model itself misses the minimum: compressing it will
    hardly do better, so the search will most likely find nothing feasible."""
    if baseline is None or minimum is None or not higher_is_better(workload.metric):
        return
    short = [(b, m) for b, m in zip(baseline, minimum, strict=False) if b < m]
    if short:
        b, m = short[0]
        log.warning(
            "the float baseline's %s is %.4f, below the minimum %.4f that an individual must "
            "keep: the search will most likely find no feasible individual; lower %s or check "
            "the model's weights (workload.model.weights)",
            workload.metric.type,
            b,
            m,
            workload.problem.options.key("minimum_accuracy"),
        )


def divergence_limit(options: ProblemOptions) -> list[float] | None:
    for key in ("minimum_accuracy", "allowable_accuracy_drop"):
        if getattr(options, key) is not None:
            raise UserError(
                f"{options.key(key)} bounds a metric where higher is better; the metric (kl) is "
                "lower-is-better: bound it with maximum_divergence"
            )
    return None if options.maximum_divergence is None else [options.maximum_divergence]


def measure_baseline(context: WorkloadContext) -> list[float]:
    accuracy = context.evaluate(context.build_model(), "baseline")
    return accuracy if isinstance(accuracy, list) else [accuracy]


def explore(
    workload: Workload,
    options: ExploreOptions | None = None,
    runner: Runner | None = None,
    context: WorkloadContext | None = None,
) -> tuple[ExplorationResult, Path]:
    """Run the workload's exploration and write its result file (also after every generation);
    the result and its path.

    Args:
        workload: the validated Workload (its `problem:` and `exploration:` sections).
        options: `skip_baseline`, `resume`, `output` (the result file), `progress`.
        runner: where candidates are evaluated; built from `exploration.runner` when None
            (and closed at the end).
        context: the WorkloadContext to reuse (its cached data); a new one when None.
    """
    options = options or ExploreOptions()
    spec: ExplorationSpec = workload.require("exploration")
    definition = SearchDefinition.of(workload)
    context = context or WorkloadContext(workload)
    claimed = not options.resume
    if options.resume:
        path, previous = _checkpoint(workload, definition, options.output)
    else:
        path, previous = _claim_result_file(workload, definition, options.output), None
    release = hold(path, "--resume" if options.resume else "--output")
    owned = runner is None
    try:
        runner = runner or build_runner(spec.runner)  # first, so that a bad runner fails at once
        check_available(spec.algorithm)  # and an algorithm whose package is missing
        if previous is not None:
            baseline = previous.baseline
        elif options.skip_baseline:
            baseline = None
        else:
            baseline = measure_baseline(context)
            where = dataset_spec(workload, "baseline")[1]
            log.info("baseline accuracy on %s: %s", where, baseline)
        return _search(workload, definition, context, path, previous, baseline, runner, options)
    except BaseException:
        if claimed:
            release_if_empty(path)  # a file that received nothing is not left behind
        raise
    finally:
        release()
        if owned and runner is not None:
            runner.close()


def _checkpoint(
    workload: Workload, definition: SearchDefinition, output: str | None
) -> tuple[Path, ExplorationResult | None]:
    """The result file `--resume` continues, and what it holds (None: nothing saved yet)."""
    path = find_checkpoint(workload, output, definition)
    previous = ExplorationResult.load(path)
    if not definition.matches(previous.workload):
        differing = definition.differences(previous.workload)
        raise UserError(
            f"--resume: '{path}' was written for a different workload ("
            + "; ".join(differing[:6])
            + (f"; and {len(differing) - 6} more" if len(differing) > 6 else "")
            + "); resume with the same workload file and --set settings, or start afresh "
            "without --resume"
        )
    if previous.complete:
        raise UserError(f"--resume: '{path}' is already complete")
    check_writable(path, "--resume")
    if saved(previous) == 0 and "sensitivity" in previous.stats:
        log.info("resuming %s: its sensitivity start's measurements are kept", path)
        return path, previous
    if saved(previous) == 0:
        log.warning(
            "%s: the run that wrote it stopped before its first save; nothing was saved, "
            "so the search starts from its first generation",
            path,
        )
        return path, None
    log.info("resuming %s: %d evaluations recorded", path, saved(previous))
    return path, previous


def _claim_result_file(
    workload: Workload, definition: SearchDefinition, output: str | None
) -> Path:
    """The new run's result file, created now: before the first evaluation, so that an
    unwritable path fails at once; a default name is made unique."""
    if output is not None:
        where = "--output"
    elif workload.problem.results_file is not None:
        where = "workload.problem.results_file"
    else:
        where = f"the default result file in {workload.results_folder}/"
        stem = default_result_stem(workload)
        warn_stopped_runs(sorted(workload.results_folder.glob(f"{stem}_*.pkl")), definition)
    numbered = output is None and workload.problem.results_file is None
    return claim(result_path(workload, output), definition.stored, where, numbered)


def sensitivity_start(problem: Problem, workload: Workload, initialization: str = "") -> bool:
    """Whether the search starts from sensitivity seeds (`initialization`, by default the
    workload's: `sensitivity`, or `auto` where the genes are bit widths or formats, the
    algorithm is not `random` and `auto_takes_the_start`); a `sensitivity` the problem cannot
    take is one sentence, before anything runs."""
    spec = workload.exploration
    initialization = initialization or spec.initialization
    if initialization == "random":
        return False
    refusal = getattr(
        problem,
        "sensitivity_refusal",
        "exploration.initialization: 'sensitivity' seeds bit widths or formats and applies to "
        "quantization_problem and energy_aware_quant_problem, not "
        f"{workload.problem.problem_function}; use 'random'",
    )
    if initialization == "auto":
        many_genes = auto_takes_the_start(len(problem.variables), spec.nsga.pop_size)
        return refusal is None and spec.algorithm.type != "random" and many_genes
    if refusal is not None:
        raise UserError(refusal)
    return True


def _seed_from_sensitivity(
    problem: Problem,
    workload: Workload,
    result: ExplorationResult,
    path: Path,
    previous: ExplorationResult | None,
) -> None:
    """Only the exploring process asks for genomes, so only it measures the sensitivity table
    (never a worker or a re-evaluation); what the table and the seeds' bisection forwarded
    counts in the result's sample-forwards, before the first evaluation's. Each table and the
    seeds are saved in the result file as they exist (`stats["sensitivity"]`), and a resumed
    run takes them from there instead of measuring again."""

    def keep(record: dict) -> None:
        result.stats["sensitivity"] = record
        result.save(path)

    saved = previous.stats.get("sensitivity") if previous is not None else None
    spent = problem.seed_from_sensitivity(workload.exploration.nsga.pop_size // 2, saved, keep)
    if saved is not None:
        result.stats.setdefault("sensitivity", saved)  # taken whole: nothing new was kept
    result.stats["sensitivity_forwards"] = spent
    result.stats["sample_forwards"] = result.stats.get("sample_forwards", 0) + spent


def _search(
    workload: Workload,
    definition: SearchDefinition,
    context: WorkloadContext,
    path: Path,
    previous: ExplorationResult | None,
    baseline: list[float] | None,
    runner: Runner,
    options: ExploreOptions,
) -> tuple[ExplorationResult, Path]:
    spec: ExplorationSpec = workload.exploration
    minimum = minimum_accuracy(
        workload.problem.options, baseline, higher_is_better(workload.metric)
    )
    _warn_unreachable(workload, baseline, minimum)
    built = build_problem(context, minimum)
    recipe = ProblemRecipe(
        definition.stored,
        minimum,
        model_files(workload),
        str(workload.resolve(".")),
        RECIPE_BUILDER,
    )
    runner.attach(recipe)
    explorer = Explorer(
        built,
        spec.nsga,
        seed=workload.seed,
        result_path=path,
        workload=definition.stored,
        baseline=baseline,
        runner=runner,
        progress=options.progress,
        strategy=build_strategy(spec.strategy),
        algorithm=spec.algorithm,
    )
    explorer.result.owner = this_process()
    if baseline is not None:  # the float model's outcomes, to pair the front's with
        explorer.result.stats.update(baseline_outcomes(context, built))
    seeded = sensitivity_start(built, workload)  # after the Explorer has checked its algorithm
    try:
        if seeded:
            _seed_from_sensitivity(built, workload, explorer.result, path, previous)
        if previous is not None:
            explorer.restore(previous)
        result = explorer.run()
    except KeyboardInterrupt:
        held = _saved_text(path, "sensitivity" in explorer.result.stats)
        raise Interrupted(path, held, resume_hint(workload, path)) from None
    except Exception:
        _say_saved(path, workload, "sensitivity" in explorer.result.stats)
        raise
    if judge_front(context, built, result):
        result.save(path)
    return result, path


def resume_hint(workload: Workload, path: Path) -> str:
    """How to continue the run writing `path`: the command with the workload file and every
    `--set` it was started with, or for a search started from Python the same call with
    `resume=True`."""
    if workload.source is None:
        return f"resume with the same call and output='{path}', resume=True"
    command = ["model-explorer", "explore", str(workload.source)]
    for override in workload.overrides:
        command += ["--set", override]
    return f"resume with `{shlex.join([*command, '--resume', '--output', str(path)])}`"


def _saved_text(path: Path, kept: bool) -> str | None:
    """What a stopped run's file holds, in words (None: nothing to resume from)."""
    saved = saved_evaluations(path)  # what the file holds, not what was meant to be saved
    if saved:
        return f"{saved} evaluations are saved in {path}"
    if kept:
        return f"the sensitivity start's measurements are saved in {path}"
    return None


def _say_saved(path: Path, workload: Workload, kept: bool) -> None:
    held = _saved_text(path, kept)
    if held is None:
        log.error("an evaluation failed before any evaluation was saved in %s", path)
    else:
        hint = resume_hint(workload, path)
        log.error("an evaluation failed; %s; once the cause is fixed, %s", held, hint)


class Interrupted(Exception):
    """The search was interrupted (Ctrl-C); what was evaluated is saved at `path`."""

    def __init__(self, path: Path, held: str | None, hint: str) -> None:
        super().__init__(
            f"interrupted; {held}; {hint}"
            if held
            else "interrupted before any evaluation was saved; nothing to resume"
        )
        self.path = path
