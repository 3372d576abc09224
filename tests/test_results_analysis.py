"""Result analysis: fronts and hypervolumes by hand, merging, comparison, layer statistics."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from pymoo.indicators.hv import HV

from model_explorer.errors import UserError
from model_explorer.exploration import Explorer
from model_explorer.exploration.spec import NSGASpec
from model_explorer.results import ExplorationResult, compare_results, merge_results
from tests_support import Synthetic


def synthetic_result(
    points: list[dict[str, float]], objectives: list[tuple[str, bool]]
) -> ExplorationResult:
    return ExplorationResult(
        {},
        {
            "name": "hand",
            "objectives": [{"name": n, "maximize": m} for n, m in objectives],
            "variables": [{"name": "g0"}, {"name": "g1"}],
            "constraints": [],
        },
        individuals=[
            {
                "id": i,
                "generation": i // 2,
                "index": i % 2,
                "genome": [float(i), 0.0],
                "configuration": [i, 0],
                "values": values,
                "accuracies": [],
                "feasible": True,
                "complete": True,
                "seconds": 0.0,
                "extra": {},
            }
            for i, values in enumerate(points)
        ],
    )


def test_two_objective_front_and_hypervolume_by_hand() -> None:
    points = [
        {"accuracy": 0.9, "bits": 10.0},
        {"accuracy": 0.8, "bits": 5.0},
        {"accuracy": 0.7, "bits": 8.0},  # dominated by the second
        {"accuracy": 0.95, "bits": 20.0},
        {"accuracy": 0.6, "bits": 4.0},
    ]
    result = synthetic_result(points, [("accuracy", True), ("bits", False)])
    assert sorted(i.id for i in result.pareto_front()) == [0, 1, 3, 4]
    reference = {"accuracy": 0.5, "bits": 25.0}
    # Dominated area between the front and the reference, summed as strips along bits.
    expected = (5 - 4) * 0.1 + (10 - 5) * 0.3 + (20 - 10) * 0.4 + (25 - 20) * 0.45
    assert result.hypervolume(reference) == pytest.approx(expected)
    # The same through pymoo's indicator on the minimisation form.
    front = np.array([[-p["accuracy"], p["bits"]] for p in points])
    assert result.hypervolume(reference) == pytest.approx(
        HV(ref_point=np.array([-0.5, 25.0]))(front)
    )


def brute_force_front(points: list[dict[str, float]], senses: list[tuple[str, bool]]) -> set[int]:
    """The points no other point dominates, in natural units: no worse in every objective
    (higher where maximised, lower where minimised) and better in one."""

    def no_worse(p: dict[str, float], q: dict[str, float], name: str, maximize: bool) -> bool:
        return p[name] >= q[name] if maximize else p[name] <= q[name]

    def dominates(p: dict[str, float], q: dict[str, float]) -> bool:
        return all(no_worse(p, q, n, m) for n, m in senses) and any(p[n] != q[n] for n, _ in senses)

    return {i for i, q in enumerate(points) if not any(dominates(p, q) for p in points)}


def test_front_with_ties_by_hand_and_by_brute_force() -> None:
    """Accuracies in steps of 1/360 and integer costs tie often: a point equal to another in
    one objective and worse in the other is dominated; two equal points both stay."""
    points = [
        {"accuracy": 180 / 360, "bits": 3.0},
        {"accuracy": 180 / 360, "bits": 4.0},  # the first's accuracy, more bits: dominated
        {"accuracy": 181 / 360, "bits": 4.0},
        {"accuracy": 181 / 360, "bits": 4.0},  # the third again: both stay
        {"accuracy": 179 / 360, "bits": 3.0},  # the first's bits, lower accuracy: dominated
    ]
    senses = [("accuracy", True), ("bits", False)]
    assert sorted(i.id for i in synthetic_result(points, senses).pareto_front()) == [0, 2, 3]
    rng = np.random.default_rng(0)
    for objectives in (senses, [*senses, ("bops", False)]):
        grid = [
            {"accuracy": float(a) / 360, "bits": float(b), "bops": float(c)}
            for a, b, c in zip(
                rng.integers(300, 306, 60),
                rng.integers(2, 8, 60),
                rng.integers(0, 3, 60),
                strict=True,
            )
        ]
        result = synthetic_result(grid, objectives)
        front = {i.id for i in result.pareto_front()}
        assert front == brute_force_front(grid, objectives)
        assert len(front) < len(grid)


def box_union_volume(boxes: list[np.ndarray], reference: np.ndarray) -> float:
    """Inclusion-exclusion over the boxes [point, reference] (minimisation)."""
    total = 0.0
    for size in range(1, len(boxes) + 1):
        for subset in itertools.combinations(boxes, size):
            corner = np.max(subset, axis=0)
            total += (-1) ** (size + 1) * float(np.prod(np.clip(reference - corner, 0, None)))
    return total


def test_three_objective_front_and_hypervolume_by_hand() -> None:
    rng = np.random.default_rng(0)
    points = [
        {"accuracy": float(a), "bits": float(b), "bops": float(c)}
        for a, b, c in rng.uniform(0, 1, (7, 3))
    ]
    result = synthetic_result(points, [("accuracy", True), ("bits", False), ("bops", False)])
    matrix = np.array([[-p["accuracy"], p["bits"], p["bops"]] for p in points])
    dominated = [
        i
        for i in range(7)
        if any(np.all(matrix[j] <= matrix[i]) and np.any(matrix[j] < matrix[i]) for j in range(7))
    ]
    front = result.pareto_front()
    assert sorted(i.id for i in front) == sorted(set(range(7)) - set(dominated))
    reference = {"accuracy": 0.0, "bits": 1.0, "bops": 1.0}
    expected = box_union_volume([matrix[i] for i in range(7)], np.array([0.0, 1.0, 1.0]))
    assert result.hypervolume(reference) == pytest.approx(expected)
    # Fronts over any two of the objectives.
    pair = result.pareto_front(["bits", "bops"])
    assert all(
        not any(
            o.values["bits"] <= i.values["bits"] and o.values["bops"] < i.values["bops"]
            for o in result.individuals
        )
        for i in pair
    )


def run(seed: int, path: Path) -> ExplorationResult:
    return Explorer(
        Synthetic(),
        NSGASpec(pop_size=10, offsprings=8, generations=3),
        seed=seed,
        result_path=path,
        workload={"workload": {"name": "s"}},
    ).run()


def test_merging_keeps_every_individual_once(tmp_path: Path) -> None:
    first, second = run(1, tmp_path / "a.pkl"), run(2, tmp_path / "b.pkl")
    merged = merge_results(
        [ExplorationResult.load(tmp_path / "a.pkl"), ExplorationResult.load(tmp_path / "b.pkl")]
    )
    union = {tuple(r["configuration"]) for r in first.records} | {
        tuple(r["configuration"]) for r in second.records
    }
    configurations = [tuple(r["configuration"]) for r in merged.records]
    assert sorted(configurations) == sorted(union) and len(configurations) == len(
        set(configurations)
    )
    assert [r["id"] for r in merged.records] == list(range(len(merged)))
    assert {r["extra"]["run"] for r in merged.records} == {0, 1}
    # a run's own record (a sensitivity start's tables) is not added up, its counts are
    loaded = [ExplorationResult.load(tmp_path / name) for name in ("a.pkl", "b.pkl")]
    for result in loaded:
        result.stats["sensitivity"] = {"tables": {"bits": [[0.1]]}, "seeds": [[8]]}
    merged = merge_results(loaded)
    assert "sensitivity" not in merged.stats
    assert merged.stats["cache_hits"] == sum(r.stats["cache_hits"] for r in loaded)
    other = ExplorationResult.load(tmp_path / "a.pkl")
    other.workload = {"workload": {"name": "other"}}
    with pytest.raises(UserError, match="different workloads"):
        merge_results([first, other])


def test_runs_of_one_search_with_other_seeds_merge(tmp_path: Path) -> None:
    """Runs differ in their seed, where they keep their ranges (a Python search writes them
    beside its result) and the folder they ran in (the stored absolute root: two clones), and
    still merge; another model or dataset is refused."""
    first, second = run(1, tmp_path / "a.pkl"), run(2, tmp_path / "b.pkl")
    for result, seed in ((first, 1), (second, 2)):
        result.workload = {
            "workload": {
                "seed": seed,
                "root": f"/home/someone/clone{seed}",
                "model": {"type": "digits_cnn"},
                "calibration": {"file": f"results/seed{seed}_calibration.pt"},
            }
        }
    assert {r["extra"]["run"] for r in merge_results([first, second]).records} == {0, 1}
    second.workload["workload"]["model"] = {"type": "resnet20_digits"}
    with pytest.raises(UserError, match="different workloads"):
        merge_results([first, second])


def test_comparison_and_convergence(tmp_path: Path) -> None:
    first, second = run(1, tmp_path / "a.pkl"), run(2, tmp_path / "b.pkl")
    reference = first.default_reference()
    table = compare_results({"seed 1": first, "seed 2": second}, reference)
    assert list(table["run"]) == ["seed 1", "seed 2"]
    assert table.loc[0, "hypervolume"] == pytest.approx(first.hypervolume(reference))
    assert table.loc[1, "evaluations"] == len(second)
    history = first.hypervolume_by_generation(reference)
    assert [g for g, _ in history] == [0, 1, 2, 3]
    values = [h for _, h in history]
    assert values == sorted(values)  # never shrinks: later generations only add points
    assert values[-1] == pytest.approx(first.hypervolume(reference))


def test_the_convergence_curve_counts_feasible_individuals_only() -> None:
    """Candidates stopped early carry upper-bound accuracies, above the limit (0.8 here): the
    curve is the hypervolume of the feasible individuals found up to each generation, by
    hand as strips along bits, whatever the infeasible ones claim."""
    points = [
        {"accuracy": 0.85, "bits": 10.0},  # generation 0, feasible
        {"accuracy": 0.95, "bits": 4.0},  # generation 0, stopped early: a bound
        {"accuracy": 0.90, "bits": 12.0},  # generation 1, feasible
        {"accuracy": 0.99, "bits": 2.0},  # generation 1, stopped early: a bound
        {"accuracy": 0.82, "bits": 6.0},  # generation 2, feasible
    ]
    result = synthetic_result(points, [("accuracy", True), ("bits", False)])
    for record in result.records:
        record["generation"] = record["id"] // 2
        if record["id"] in (1, 3):
            record["feasible"] = record["complete"] = False
    reference = {"accuracy": 0.8, "bits": 20.0}
    expected = [
        (0, (20 - 10) * 0.05),
        (1, (12 - 10) * 0.05 + (20 - 12) * 0.10),
        (2, (10 - 6) * 0.02 + (12 - 10) * 0.05 + (20 - 12) * 0.10),
    ]
    history = result.hypervolume_by_generation(reference)
    assert [g for g, _ in history] == [g for g, _ in expected]
    assert [h for _, h in history] == pytest.approx([h for _, h in expected])
    box = (1 - 0.8) * (20 - 0)  # from the reference to accuracy 1 at no cost
    normalised = result.hypervolume_by_generation(reference, normalised=True)
    assert [h for _, h in normalised] == pytest.approx([h / box for _, h in expected])


def test_layer_statistics_split_input_and_weight() -> None:
    result = synthetic_result(
        [{"accuracy": 0.9, "bits": 1.0}], [("accuracy", True), ("bits", False)]
    )
    result.problem["variables"] = [
        {"name": "conv1.input_quantizer"},
        {"name": "conv1.weight_quantizer"},
    ]
    result.records[0]["configuration"] = [8, 4]
    table = result.layer_statistics()
    assert list(table["layer"]) == ["conv1", "conv1"] and list(table["kind"]) == ["input", "weight"]
    assert list(table["mean"]) == [8.0, 4.0]
