"""`model_explorer.search(model, data=loader, ...)`: the search a workload file describes,
started from objects a caller holds. The arguments become the workload's settings under the
YAML's names (anything else through `settings=`, laid out as under `workload:`), the model and
the data stay objects (api/context.py), and the same calibration and `explore` as the
command line's run on them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from model_explorer.api.arguments import check_batches, check_bits, check_search
from model_explorer.api.context import ObjectContext, check_module
from model_explorer.api.result import Search
from model_explorer.errors import UserError

# What the workload's model and data sections say of objects given in Python: `python:` names,
# which the registries accept and which no file can resolve.
MODEL, DATA = "python:model", "python:data"


def _merged(base: dict[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` (as under `workload:`) over `base`, mappings merged key by key."""
    merged = copy.deepcopy(base)
    for key, value in settings.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _metric(score: str | Callable[..., Any], maximize: bool | None) -> str:
    if isinstance(score, str):
        if maximize is not None:
            raise UserError("maximize: a metric of the project knows its direction; leave it out")
        return score
    if not callable(score):
        raise UserError(f"score: a metric's name or a function, got {type(score).__name__}")
    from model_explorer.api.scores import metric_name

    return metric_name(score, True if maximize is None else maximize)


# The accuracy a feasible candidate keeps unless `settings` give a constraint of their own:
# 98% of the float model's, what every shipped workload keeps.
DEFAULT_DROP = 0.02
CONSTRAINTS = ("minimum_accuracy", "allowable_accuracy_drop", "maximum_divergence")


def _constrained(settings: Mapping[str, Any] | None) -> bool:
    problem = (settings or {}).get("problem")
    return isinstance(problem, Mapping) and any(key in problem for key in CONSTRAINTS)


def _higher_is_better(metric: str) -> bool:
    from model_explorer.metrics.functions import higher_is_better

    try:
        return higher_is_better(metric)
    except Exception:  # noqa: BLE001 - a name the workload's validation reports in one sentence
        return False


def workload_data(
    model: nn.Module,
    score: str | Callable[..., Any],
    maximize: bool | None,
    objectives: Sequence[str],
    bits: tuple[int, int] | None,
    formats: Sequence[str] | None,
    seed: int,
    settings: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The workload (as under `workload:`) the arguments describe (`bits` None where
    `formats` choose)."""
    problem: dict[str, Any] = {
        "problem_function": "quantization_problem",
        "objectives": list(objectives),
    }
    if bits is not None:
        problem["num_bits_lower_limit"], problem["num_bits_upper_limit"] = bits
    if formats is not None:
        problem["choices"] = list(formats)
    metric = _metric(score, maximize)
    if _higher_is_better(metric) and not _constrained(settings):
        problem["allowable_accuracy_drop"] = DEFAULT_DROP  # as the shipped workloads keep
    base = {
        "seed": seed,
        "metric": metric,
        "problem": problem,
        "model": {"type": MODEL, "pretrained": False},
        "calibration": {"datasets": {"calibrate": {"type": DATA}}},
        "exploration": {"datasets": {"exploration": {"type": DATA}}},
    }
    return _merged(base, settings or {})


def search(
    model: nn.Module,
    data: Iterable[Any],
    calibration: Iterable[Any] | None = None,
    held_out: Iterable[Any] | None = None,
    score: str | Callable[..., Any] = "top1",
    maximize: bool | None = None,
    objectives: Sequence[str] = ("accuracy", "weighted_bits"),
    bits: tuple[int, int] | None = None,
    formats: Sequence[str] | None = None,
    budget: Mapping[str, float] | None = None,
    seed: int = 0,
    output: str | Path | None = None,
    settings: Mapping[str, Any] | None = None,
    resume: bool = False,
    progress: bool | None = None,
    forward_step: Callable[[nn.Module, Any], Any] | None = None,
) -> Search:
    """Search per-quantizer bit widths (or formats) of `model` with NSGA-II, as `explore` does
    for a workload file, and return the front with every individual.

    Args:
        model: any nn.Module (not compiled, without forward hooks), copied, never changed.
        data: the exploration data, e.g. a DataLoader: batches of `(inputs, targets)` or of
            inputs alone (a fidelity metric, a function of the model), inputs being a tensor, a
            tuple of tensors (the arguments) or a dict (Hugging Face's, `labels` the targets);
            it scores every candidate and the float baseline.
        calibration: batches (inputs alone or `(inputs, targets)`) to calibrate the
            quantizers' ranges on; `data` when None.
        held_out: batches the search never selects on: when it ends, the front's feasible
            members (`extra["held_out"]`) and the float model are scored on them.
        score: a metric of the project by name (`top1`, `cosine`, `model-explorer list
            metrics`), or a function: `fn(model) -> float` (the whole score of a candidate)
            or `fn(outputs, targets) -> float` (a batch's mean, averaged over samples).
        maximize: for a function, whether higher is better (default True; False for a loss).
        objectives: as `problem.objectives`.
        seed: the workload's seed (data subsets, the search).
        bits: each quantizer's bit widths (lowest, highest), `problem.num_bits_lower_limit`/
            `upper_limit`; (2, 8) unless `formats` are given.
        formats: formats to choose among instead of bit widths, as `problem.choices`.
        budget: upper limits on costs known without the model, as `problem.budget`.
        output: the result file (default `results/expl_..._<time>.pkl`); its calibration is
            written beside it (`<result>_calibration.pt`), so `export` can use it later.
        settings: any other workload setting, laid out as under `workload:` in a file, e.g.
            `{"exploration": {"nsga": {"generations": 5}}, "problem": {"layer_bounds": ...}}`.
        resume: continue the unfinished result at `output`.
        progress: show progress bars; None: where someone watches (a terminal, a notebook).
        forward_step: `forward_step(model, batch) -> outputs` where the model is not called
            as `model(inputs)` (or `model(**batch)` for a dict), e.g. pooling a Hugging Face
            encoder's hidden states; it returns a tensor or a tuple of tensors.
    """
    check_module(model)
    check_search(locals())
    chosen = check_bits("search", bits, formats)
    body = workload_data(model, score, maximize, objectives, chosen, formats, seed, settings)
    body = _with(body, budget, held_out is not None)
    workload, path = _placed(body, output, resume)
    roles = _roles(data, calibration, held_out)
    context = ObjectContext(workload, model, roles, forward_step=forward_step)
    return _run(workload, path, context, resume, watched() if progress is None else progress)


def _with(body: dict[str, Any], budget: Mapping[str, float] | None, held: bool) -> dict[str, Any]:
    """`body` with the problem's `budget` and, where the caller gives held-out data, the
    reevaluation data that stands for it, as a file would name them."""
    body["problem"].update({} if budget is None else {"budget": dict(budget)})
    if held:
        body["reevaluation"] = {"datasets": {"reevaluate": {"type": DATA}}}
    return body


def watched() -> bool:
    """Whether someone watches this process: its standard error a terminal, or a notebook's
    kernel running it (a search of a real network is minutes without a word otherwise)."""
    import sys

    interactive = getattr(sys.stderr, "isatty", lambda: False)()
    return bool(interactive) or "ipykernel" in sys.modules


def _roles(data: Any, calibration: Any, held_out: Any) -> dict[str, Any]:
    """The workload's dataset roles the caller's data arguments stand for."""
    roles = {"exploration": data, "calibrate": data if calibration is None else calibration}
    return roles if held_out is None else {**roles, "reevaluate": held_out}


def load(
    path: str | Path,
    model: nn.Module,
    data: Iterable[Any],
    calibration: Iterable[Any] | None = None,
    held_out: Iterable[Any] | None = None,
    forward_step: Callable[[nn.Module, Any], Any] | None = None,
) -> Search:
    """A result `search` wrote, back with the objects it was searched on, as `search`
    returned it: `found.front`, `found.model(i)`, `found.export(i, path)`.

    Args:
        path: the result file (`search`'s `output`, or `found.path`).
        model: the model given to `search`, with the same layers and weights (its
            calibration file, written beside the result, must be of these weights).
        data: the batches given to `search` as `data`.
        calibration: the batches given as `calibration`, if any.
        held_out: the batches given as `held_out`, if any.
        forward_step: the `forward_step` given to `search`, if any.
    """
    from model_explorer.results import ExplorationResult
    from model_explorer.workload.file import Workload

    check_module(model)
    check_batches("load", "data", data)
    check_batches("load", "calibration", calibration, optional=True)
    check_batches("load", "held_out", held_out, optional=True)
    result = ExplorationResult.load(Path(path))
    workload = Workload.from_dict(result.workload, source=f"the workload stored in {path}")
    if workload.model.type != MODEL:
        raise UserError(
            f"load('{path}'): this result was searched from a workload file, not from Python; "
            f"use model-explorer's commands on it, or ExplorationResult.load for its records"
        )
    context = ObjectContext(workload, model, _roles(data, calibration, held_out), forward_step)
    return Search(result, Path(path), context)


def _run(workload: Any, path: Path, context: ObjectContext, resume: bool, progress: bool) -> Search:
    """Calibrate where the result's calibration is missing, then explore."""
    from model_explorer.operations.explore import ExploreOptions, explore
    from model_explorer.operations.pipeline import calibrate_workload

    options = ExploreOptions(output=str(path), resume=resume, progress=progress)
    try:
        calibrate_workload(context, if_missing=True)
        return Search(*explore(workload, options, context=context), context)
    except UserError as error:  # the command line's advice, said as a caller of search does it
        from model_explorer.quantization.spec import RECALIBRATE

        if RECALIBRATE not in str(error):
            raise
        calibration = workload.calibration.resolve(workload.calibration.file)
        said = str(error).replace(RECALIBRATE, f"search() after deleting '{calibration}'")
        raise UserError(said) from None


def _calibration_beside(path: Path) -> Path:
    """Where a search of objects keeps its calibration: `<result>_calibration.pt`."""
    return path.with_name(f"{path.stem}_calibration.pt")


def _free(path: Path) -> Path:
    """`path`, or the first of `<stem>-2`, `<stem>-3`, ... that neither a result nor its
    calibration file takes (`claim` then creates it, or the next, exclusively)."""
    from model_explorer.operations.result_file import numbered_names

    return next(
        name
        for name in numbered_names(path)
        if not name.exists() and not _calibration_beside(name).exists()
    )


def _placed(body: dict[str, Any], output: str | Path | None, resume: bool) -> tuple[Any, Path]:
    """The validated workload and its result file, its calibration file beside it (unless
    `calibration.file` is set); a runner in other processes, or an existing result file
    without `resume`, refused."""
    from model_explorer.operations.explore import result_path
    from model_explorer.workload.file import Workload

    source = "model_explorer.search(...)"
    workload = Workload.from_dict({"workload": body}, source=source)
    if workload.require("exploration").runner.type != "serial":
        raise UserError(
            "exploration.runner: a model given in Python is evaluated in this process; "
            "other processes cannot rebuild it, so leave the runner serial"
        )
    path = result_path(workload, None if output is None else str(output))
    if output is None and not resume:  # a default name: the next free one (two calls a second)
        path = _free(path)
    if resume and path.exists():
        from model_explorer.results import ExplorationResult

        if ExplorationResult.load(path).complete:
            raise UserError(
                f"search(resume=True): '{path}' is already complete; "
                "model_explorer.load(path, model, data) gives it back with your objects"
            )
    if path.exists() and not resume:
        raise UserError(
            f"output: '{path}' exists; choose another path, or pass resume=True to continue it"
        )
    body.setdefault("calibration", {}).setdefault("file", str(_calibration_beside(path)))
    return Workload.from_dict({"workload": body}, source=source), path
