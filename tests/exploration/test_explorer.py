"""The Explorer on a cheap synthetic problem: recording, cache, Pareto front, resume."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from model_explorer.errors import UserError
from model_explorer.exploration import Explorer
from model_explorer.exploration.spec import NSGASpec
from model_explorer.problems import Problem
from model_explorer.results import ExplorationResult
from tests_support import Synthetic, without_times

NSGA = NSGASpec(pop_size=12, offsprings=8, generations=6)


def run(
    problem: Problem,
    path: Path | None = None,
    resume_from: ExplorationResult | None = None,
    stop_after: int | None = None,
) -> ExplorationResult:
    explorer = Explorer(
        problem, NSGA, seed=3, result_path=path, workload={"workload": {"name": "synthetic"}}
    )
    if resume_from is not None:
        explorer.restore(resume_from)
    if stop_after is not None:

        def stop(generation, result):
            if generation == stop_after:
                raise KeyboardInterrupt

        explorer.on_generation = stop
    return explorer.run()


def test_every_evaluation_is_recorded_once() -> None:
    problem = Synthetic()
    result = run(problem)
    stats = result.stats
    asked = sum(1 for _ in result.generations)  # one record per generation
    assert asked == NSGA.generations + 1
    # Every configuration was measured exactly once and every measurement is in the result.
    assert all(count == 1 for count in problem.calls.values())
    assert sorted(tuple(r["configuration"]) for r in result.records) == sorted(problem.calls)
    assert stats["evaluations"] == len(result) == len(problem.calls)
    # pymoo asked for pop_size + generations x offsprings genomes; the cache answered the rest.
    assert (
        stats["evaluations"] + stats["cache_hits"]
        == NSGA.pop_size + NSGA.generations * NSGA.offsprings
    )
    # Records carry their generation; survivors of each generation are recorded individuals.
    ids = {r["id"] for r in result.records}
    assert all(
        set(g["population"]) <= ids and len(g["population"]) == NSGA.pop_size
        for g in result.generations
    )
    assert [r["id"] for r in result.records] == list(range(len(result)))


class Counted(Synthetic):
    """Synthetic with its accuracy counted in 20 samples, as a metric over a data set counts:
    equal accuracies, and equal constraint violations, are common."""

    def measure(self, configuration):  # noqa: ANN001, ANN201
        evaluation = super().measure(configuration)
        counted = round(evaluation.values["accuracy"] * 20) / 20
        evaluation.values["accuracy"], evaluation.accuracies = counted, [counted]
        return evaluation


def ties_reversed(argsort):  # noqa: ANN001, ANN201
    """numpy's argsort leaving equal keys in the other order wherever their order is the
    implementation's (every kind but stable), as another processor's vectorised quicksort
    may."""

    def reversed_ties(a, axis=-1, kind=None, order=None):  # noqa: ANN001, ANN202
        if kind == "stable":
            return argsort(a, axis=axis, kind=kind, order=order)
        a = np.asarray(a)
        if axis is None:
            a, axis = a.ravel(), 0
        backwards = argsort(np.flip(a, axis=axis), axis=axis, kind="stable", order=order)
        return a.shape[axis] - 1 - backwards

    return reversed_ties


def test_the_path_does_not_depend_on_how_quicksort_orders_ties(monkeypatch) -> None:
    """pymoo breaks ties with argsort's quicksort, whose order of equal keys differs between
    numpy's AVX-512, AVX2 and scalar sorts: the same seed must keep the same survivors."""
    plain = without_times(run(Counted()))
    monkeypatch.setattr(np, "argsort", ties_reversed(np.argsort))
    assert np.argsort(np.zeros(3)).tolist() == [2, 1, 0]  # the plant holds
    assert without_times(run(Counted())) == plain


def test_pareto_front_is_the_non_dominated_set() -> None:
    result = run(Synthetic())
    feasible = result.feasible()
    matrix = result.objective_matrix(feasible)
    first_front = NonDominatedSorting().do(matrix, only_non_dominated_front=True)
    expected = sorted(feasible[i].id for i in first_front)
    assert sorted(i.id for i in result.pareto_front()) == expected
    # No member of the front is dominated by any evaluated feasible individual.
    front = result.objective_matrix(result.pareto_front())
    for row in front:
        assert not np.any(np.all(matrix <= row, axis=1) & np.any(matrix < row, axis=1))


def test_non_finite_outputs_are_infeasible_not_a_crash() -> None:
    result = run(Synthetic())
    planted = [i for i in result.individuals if i.configuration[0] <= 3]
    assert planted, "the search never tried the planted configuration"
    assert all(not i.feasible and i.values["outputs_finite"] == 0.0 for i in planted)


@pytest.mark.parametrize("stop_after", [0, 2, 5])
def test_resumed_run_equals_uninterrupted_run(tmp_path: Path, stop_after: int) -> None:
    uninterrupted = run(Synthetic())
    path = tmp_path / "result.pkl"
    with pytest.raises(KeyboardInterrupt):
        run(Synthetic(), path, stop_after=stop_after)
    checkpoint = ExplorationResult.load(path)
    assert not checkpoint.complete and len(checkpoint.generations) == stop_after + 1
    second = Synthetic()
    resumed = run(second, path, resume_from=checkpoint)
    assert resumed.complete
    assert without_times(resumed) == without_times(uninterrupted)
    assert without_times(ExplorationResult.load(path)) == without_times(uninterrupted)
    # The resumed run measured only what the checkpoint did not hold.
    recorded = {tuple(r["configuration"]) for r in checkpoint.records}
    assert not recorded & set(second.calls)


def test_interrupt_inside_a_generation_keeps_finished_evaluations(tmp_path: Path) -> None:
    uninterrupted = run(Synthetic())
    path = tmp_path / "result.pkl"
    first = Synthetic(fail_after=30)  # dies in the middle of a generation
    with pytest.raises(KeyboardInterrupt):
        run(first, path)
    checkpoint = ExplorationResult.load(path)
    assert len(checkpoint) + len(checkpoint.partial) == 30
    assert checkpoint.partial  # evaluations of the unfinished generation are kept
    second = Synthetic()
    resumed = run(second, path, resume_from=checkpoint)
    assert without_times(resumed) == without_times(uninterrupted)
    assert sum(first.calls.values()) + sum(second.calls.values()) == len(uninterrupted)


def test_resume_refuses_another_problem(tmp_path: Path) -> None:
    path = tmp_path / "result.pkl"
    with pytest.raises(KeyboardInterrupt):
        run(Synthetic(), path, stop_after=1)
    with pytest.raises(ValueError, match="another problem"):
        run(Synthetic(genes=5), path, resume_from=ExplorationResult.load(path))


def test_resume_refuses_another_seed(tmp_path: Path) -> None:
    """A replay from another seed would ask for other genomes than the checkpoint holds: the
    same problem's checkpoint is refused by an Explorer of another seed, taken by its own."""
    path = tmp_path / "result.pkl"
    with pytest.raises(KeyboardInterrupt):
        run(Synthetic(), path, stop_after=1)
    checkpoint = ExplorationResult.load(path)
    assert checkpoint.seed == 3
    other = Explorer(Synthetic(), NSGA, seed=4, workload={"workload": {"name": "synthetic"}})
    with pytest.raises(ValueError, match="the checkpoint belongs to another problem or seed"):
        other.restore(checkpoint)
    same = Explorer(Synthetic(), NSGA, seed=3, workload={"workload": {"name": "synthetic"}})
    same.restore(checkpoint)
    assert same.result.baseline == checkpoint.baseline


def test_result_file_is_plain_data_and_loads_without_torch(tmp_path: Path) -> None:
    path = tmp_path / "result.pkl"
    run(Synthetic(), path)
    code = (
        "import sys; from model_explorer.results import ExplorationResult; "
        f"r = ExplorationResult.load({str(path)!r}); "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "print(len(r), len(r.pareto_front()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = ExplorationResult.load(path)
    assert done.stdout.split() == [str(len(result)), str(len(result.pareto_front()))]
    frame = result.to_dataframe()
    assert len(frame) == len(result)
    assert {"accuracy", "bits", "g0", "g5", "feasible", "generation"} <= set(frame.columns)


class Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.parametrize(
    "payload", [Payload(), {"format": "model_explorer.result", "x": Counter()}]
)
def test_loading_refuses_anything_but_plain_data(tmp_path: Path, payload, capsys) -> None:
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(payload))
    with pytest.raises(UserError, match="plain data only"):
        ExplorationResult.load(path)
    assert "must never run" not in capsys.readouterr().out


def test_hypervolume_matches_a_hand_computed_front() -> None:
    result = ExplorationResult(
        {},
        {
            "objectives": [
                {"name": "accuracy", "maximize": True},
                {"name": "bits", "maximize": False},
            ],
            "variables": [],
        },
        individuals=[
            {
                "id": i,
                "generation": 0,
                "index": i,
                "genome": [],
                "configuration": [],
                "values": v,
                "accuracies": [],
                "feasible": True,
                "complete": True,
                "seconds": 0.0,
                "extra": {},
            }
            for i, v in enumerate(
                [
                    {"accuracy": 0.9, "bits": 10.0},
                    {"accuracy": 0.8, "bits": 5.0},
                    {"accuracy": 0.7, "bits": 8.0},
                ]
            )
        ],
    )
    assert [i.id for i in result.pareto_front()] == [0, 1]
    # Reference (accuracy 0.5, bits 12): rectangles 0.4 x 2 and (0.3 x 5) beyond it.
    assert result.hypervolume({"accuracy": 0.5, "bits": 12.0}) == pytest.approx(0.4 * 2 + 0.3 * 5)


def test_a_result_stored_with_every_calibration_option_is_the_same_search() -> None:
    from model_explorer.operations.result_file import SearchDefinition
    from model_explorer.workload.file import Workload

    body = {"model": {"type": "lenet5"}, "calibration": {"method": "mse"}}
    definition = SearchDefinition.of(Workload.from_dict({"workload": body}, check_paths=False))
    # Results written before calibrators were a registry stored percentile and num_bins,
    # with their defaults, whatever the method.
    older = copy.deepcopy(definition.stored)
    older["workload"]["calibration"].update(percentile=99.99, num_bins=2048)
    assert definition.matches(older)
    older["workload"]["calibration"]["num_bins"] = 1024  # mse's own option, changed
    assert not definition.matches(older)
