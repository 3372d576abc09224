"""Search strategies: what a search forwards is what it records, fronts hold only fully scored
individuals, stopping at the front is exact, and every strategy resumes to the same result."""

from __future__ import annotations

import numpy as np
import pytest

from model_explorer.exploration import Explorer
from model_explorer.exploration.spec import NSGASpec
from model_explorer.exploration.strategies import StrategySpec, build_strategy, spread_genomes
from model_explorer.problems.base import ModelProblem, Objective
from model_explorer.problems.options import QuantizationOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from model_explorer.results import ExplorationResult
from tests_support import Synthetic, calibrated_digits, without_times

NSGA = NSGASpec(pop_size=8, offsprings=8, generations=4)
STRATEGIES = ["nsga2", "spread", "multifidelity", "surrogate"]


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):
    """The calibrated digits model, its exploration data (360 samples in batches of 40) and
    the minimum accuracy of the default workload."""
    context, model = calibrated_digits(trained_digits, tmp_path_factory.mktemp("cal"))
    baseline = context.evaluate(context.build_model(), "baseline")
    return context, model, [0.98 * baseline]


def digits_problem(digits) -> LayerwiseQuantizationProblem:
    context, model, minimum = digits
    options = QuantizationOptions(num_bits_lower_limit=2, num_bits_upper_limit=8)
    return LayerwiseQuantizationProblem(
        model, context.batches("exploration"), options=options, minimum_accuracy=minimum
    )


def strategy(name: str, **options):  # noqa: ANN201
    return build_strategy(StrategySpec.model_validate({"type": name, **options}))


def search(problem, name: str, seed: int = 0, **options) -> ExplorationResult:  # noqa: ANN001
    return Explorer(problem, NSGA, seed=seed, strategy=strategy(name, **options)).run()


@pytest.mark.parametrize("name", ["nsga2", "multifidelity", "surrogate"])
def test_recorded_sample_forwards_are_what_the_model_forwarded(digits, name: str) -> None:
    problem = digits_problem(digits)
    forwarded = []
    hook = problem.model.register_forward_pre_hook(
        lambda module, inputs: forwarded.append(len(inputs[0]))
    )
    try:
        result = search(problem, name)
    finally:
        hook.remove()
    assert result.stats["sample_forwards"] == sum(forwarded) == result.sample_forwards()
    assert sum(r["extra"]["samples"] for r in result.records) == sum(forwarded)
    assert result.stats["seconds"] == pytest.approx(sum(r["seconds"] for r in result.records))
    if name != "nsga2":  # strategies that stop at the front forward less than the full subset
        assert any(r["extra"]["samples"] < 360 and r["extra"]["finite"] for r in result.records)


def test_the_front_holds_only_individuals_scored_on_the_full_subset(digits) -> None:
    problem = digits_problem(digits)
    result = search(problem, "surrogate", seed=1)
    front = result.pareto_front()
    assert front and all(i.feasible and i.complete for i in front)
    assert all(i.extra["samples"] == 360 for i in front)
    reference = digits_problem(digits)  # scores afresh, with no front to stop at
    for individual in front:
        _, evaluation = reference.evaluate(individual.genome)
        assert evaluation.complete
        assert evaluation.values["accuracy"] == pytest.approx(individual.values["accuracy"])


def test_stopping_at_the_front_loses_nothing_the_front_would_gain(digits) -> None:
    """Every candidate stopped because it could not join the front, scored in full afterwards,
    is indeed no better than the final front: weakly dominated by one of its members."""
    problem = digits_problem(digits)
    result = search(problem, "multifidelity", seed=2)
    stopped = [r for r in result.records if r["extra"].get("dominated")]
    assert stopped, "the search stopped no candidate at the front"
    members = result.pareto_front()
    assert all(i.complete and i.extra["samples"] == 360 for i in members)
    front = [(i.values["accuracy"], i.values["weighted_bits"]) for i in members]
    reference = digits_problem(digits)
    for record in stopped:
        assert not record["feasible"] and not record["complete"]
        _, evaluation = reference.evaluate(record["genome"])
        accuracy, cost = evaluation.values["accuracy"], evaluation.values["weighted_bits"]
        assert accuracy <= record["values"]["accuracy"] + 1e-12  # the bound was an upper bound
        assert any(a >= accuracy and c <= cost for a, c in front), (accuracy, cost)


def interrupted(explorer: Explorer, generation: int) -> None:
    """Run `explorer` until it has saved `generation`, then stop it as Ctrl-C would."""

    def stop(done: int, result: ExplorationResult) -> None:
        if done == generation:
            raise KeyboardInterrupt

    explorer.on_generation = stop
    with pytest.raises(KeyboardInterrupt):
        explorer.run()


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_strategy_resumes_to_the_uninterrupted_result(tmp_path, name: str) -> None:
    whole = Explorer(Synthetic(), NSGA, seed=4, strategy=strategy(name)).run()
    path = tmp_path / "checkpoint.pkl"
    interrupted(Explorer(Synthetic(), NSGA, seed=4, result_path=path, strategy=strategy(name)), 2)
    problem = Synthetic()
    resumed = Explorer(problem, NSGA, seed=4, strategy=strategy(name))
    resumed.restore(ExplorationResult.load(path))
    result = resumed.run()
    assert without_times(result) == without_times(whole)
    # The replay answered the recorded generations without evaluating them again.
    assert sum(problem.calls.values()) == len(result) - len(ExplorationResult.load(path))


def test_the_surrogate_evaluates_its_share_of_the_offspring() -> None:
    problem = Synthetic()
    result = Explorer(
        problem, NSGA, seed=0, strategy=strategy("surrogate", candidates=32, evaluations=3)
    ).run()
    per_generation = [sum(r["generation"] == g for r in result.records) for g in range(5)]
    assert per_generation[0] == NSGA.pop_size
    assert all(count <= 3 for count in per_generation[1:]) and sum(per_generation[1:]) > 0
    # NSGA-II keeps a full population of evaluated individuals.
    ids = {r["id"] for r in result.records}
    assert all(len(g["population"]) == NSGA.pop_size for g in result.generations)
    assert all(set(g["population"]) <= ids for g in result.generations)


def test_spread_genomes_cover_the_range_from_the_top() -> None:
    lower, upper = np.array([2.0, 2.0, 0.0]), np.array([8.0, 6.0, 1.0])
    integer = np.array([True, True, False])
    genomes = np.array(spread_genomes(lower, upper, integer, 7, seed=0))
    assert genomes.shape == (7, 3)
    assert np.all(genomes >= lower) and np.all(genomes <= upper)
    assert np.all(genomes[:, :2] == np.round(genomes[:, :2]))
    # Level k of 7 sits at upper - k/6 of the range, each gene moved by at most one step.
    levels = lower + np.linspace(1, 0, 7)[:, None] * (upper - lower)
    assert np.all(np.abs(genomes[:, :2] - levels[:, :2]) <= 1.5)
    assert np.all(np.abs(genomes[:, 2] - levels[:, 2]) <= 1.0 / 7 + 1e-12)
    assert genomes[0, 0] >= 7 and genomes[-1, 0] <= 3
    assert spread_genomes(lower, upper, integer, 7, seed=0) == genomes.tolist()


def test_entry_minimum_by_hand() -> None:
    class Costs(ModelProblem):
        objectives = [Objective("accuracy", maximize=True), Objective("bits")]

        def measure(self, configuration):  # noqa: ANN001, ANN202
            raise NotImplementedError

    problem = Costs()
    problem.front = [
        {"accuracy": 0.9, "bits": 20.0},
        {"accuracy": 0.95, "bits": 30.0},
        {"accuracy": 0.99, "bits": 40.0},
    ]
    # At 35 bits the members at 20 and 30 bits are no costlier: it must beat 0.95.
    assert problem.entry_limits([0.6], {"bits": 35.0}) == ([0.95], None)
    assert problem.entry_limits([0.6], {"bits": 40.0}) == ([0.99], None)
    assert problem.entry_limits([0.6], {"bits": 10.0}) == ([0.6], None)  # cheaper than all
    assert problem.entry_limits([0.97], {"bits": 25.0}) == ([0.97], None)  # constraint higher
    assert problem.entry_limits([0.6], {}) == ([0.6], None)  # its cost is not known


def test_entry_ceiling_of_a_problem_ranked_by_divergence_by_hand() -> None:
    """Ranked by divergence, a candidate must come at or below the lowest divergence of a
    member at most as costly; the accuracy keeps only its constraint."""

    class Costs(ModelProblem):
        objectives = [Objective("accuracy", maximize=True), Objective("bits")]

        def measure(self, configuration):  # noqa: ANN001, ANN202
            raise NotImplementedError

    problem = Costs()
    problem.rank_by_divergence(lambda: None)
    assert [o.name for o in problem.objectives] == ["kl", "bits"]
    problem.front = [
        {"accuracy": 0.9, "kl": 0.03, "bits": 20.0},
        {"accuracy": 0.99, "kl": 0.02, "bits": 30.0},  # a higher accuracy does not matter
        {"accuracy": 0.95, "kl": 0.01, "bits": 40.0},
    ]
    assert problem.entry_limits([0.6], {"bits": 35.0}) == ([0.6], 0.02)
    assert problem.entry_limits([0.6], {"bits": 45.0}) == ([0.6], 0.01)
    assert problem.entry_limits([0.6], {"bits": 10.0}) == ([0.6], None)


def test_hypervolume_by_samples_by_hand() -> None:
    records = []
    for index, (accuracy, bits, feasible, samples) in enumerate(
        [(0.9, 8.0, True, 100), (0.5, 2.0, False, 40), (0.8, 4.0, True, 100)]
    ):
        records.append(
            {
                "id": index,
                "generation": 0,
                "index": index,
                "genome": [bits],
                "configuration": [int(bits)],
                "values": {"accuracy": accuracy, "bits": bits},
                "accuracies": [accuracy],
                "feasible": feasible,
                "extra": {"samples": samples},
            }
        )
    problem = {
        "variables": [{"name": "g0"}],
        "objectives": [
            {"name": "accuracy", "maximize": True},
            {"name": "bits", "maximize": False},
        ],
    }
    result = ExplorationResult({}, problem, individuals=records)
    history = result.hypervolume_by_samples({"accuracy": 0.7, "bits": 10.0})
    # (0.9 - 0.7) x (10 - 8) = 0.4; the infeasible one adds nothing; (0.8, 4) adds
    # (0.8 - 0.7) x (8 - 4) = 0.4.
    assert history == [
        (100, pytest.approx(0.4)),
        (140, pytest.approx(0.4)),
        (240, pytest.approx(0.8)),
    ]
    assert result.sample_forwards() == 240


def test_a_result_without_the_new_counts_still_loads_and_reports(tmp_path) -> None:
    result = Explorer(Synthetic(), NSGA, seed=0, strategy=strategy("nsga2")).run()
    data = result.to_data()
    data["stats"] = {k: data["stats"][k] for k in ("evaluations", "cache_hits", "early_rejected")}
    for record in data["individuals"]:
        record["extra"].pop("samples", None)
    from model_explorer.results import save_plain

    path = save_plain(data, tmp_path / "old.pkl")
    old = ExplorationResult.load(path)
    assert old.sample_forwards() == 0
    from model_explorer.reports.text import write_report

    written = write_report(old, tmp_path / "report")
    assert (tmp_path / "report" / "report.md") in written


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hypervolume_gains_in_closed_form_match_pymoo(seed: int) -> None:
    """The surrogate's two-objective gains against pymoo's indicator, point by point: random
    fronts (duplicates, members beyond the reference) and points inside, on and beyond it."""
    from pymoo.indicators.hv import HV

    from model_explorer.exploration.surrogate import hypervolume_gains
    from model_explorer.results.front import non_dominated

    rng = np.random.default_rng(seed)
    reference = np.array([1.1, 1.1])
    front = np.vstack([rng.random((12, 2)) * 1.2, [[0.5, 0.5], [0.5, 0.5]]])
    front = front[non_dominated(front)]
    points = np.vstack([rng.random((40, 2)) * 1.2, front[:3], [[1.1, 0.2], [0.3, 1.1]]])
    indicator = HV(ref_point=reference)
    inside = front[np.all(front < reference, axis=1)]
    base = indicator(inside) if len(inside) else 0.0
    expected = [
        indicator(np.vstack([inside, p[None]])) - base if np.all(p < reference) else 0.0
        for p in points
    ]
    assert hypervolume_gains(front, points, reference) == pytest.approx(expected, abs=1e-12)
    assert hypervolume_gains(front[:0], points[:2], reference) == pytest.approx(
        [np.prod(reference - p) if np.all(p < reference) else 0.0 for p in points[:2]]
    )


def test_a_surrogate_with_a_window_and_kept_kernels_resumes_to_the_same_result(
    tmp_path, monkeypatch
) -> None:
    """With a window smaller than the record (so that the fits learn from some of it) and the
    kernels optimised again only as the record grows, a search stopped midway resumes to the
    uninterrupted result: both depend only on the records, which the replay rebuilds."""
    from model_explorer.exploration import surrogate

    monkeypatch.setattr(surrogate, "WINDOW", 12)
    monkeypatch.setattr(surrogate, "REOPTIMISE", 1.5)
    nsga = NSGASpec(pop_size=10, offsprings=10, generations=6)
    chosen = strategy("surrogate", candidates=24, evaluations=3)
    fitted: list[int] = []
    real_fit = surrogate.Surrogate.fit

    def counting(self, records, names, fits=None):  # noqa: ANN001, ANN202
        fitted.append(len(surrogate.window(self.problem, records)))
        return real_fit(self, records, names, fits)

    monkeypatch.setattr(surrogate.Surrogate, "fit", counting)
    whole = Explorer(Synthetic(), nsga, seed=2, strategy=chosen).run()
    assert max(fitted) == 12 and len(whole) > 12  # the window bound
    path = tmp_path / "checkpoint.pkl"
    interrupted(Explorer(Synthetic(), nsga, seed=2, result_path=path, strategy=chosen), 3)
    resumed = Explorer(Synthetic(), nsga, seed=2, strategy=chosen)
    resumed.restore(ExplorationResult.load(path))
    assert without_times(resumed.run()) == without_times(whole)


def _judged(values: dict[str, float]) -> dict[str, float]:
    from model_explorer.problems.base import FINITE

    return {FINITE: 1.0, **values}


def test_the_surrogate_judges_gains_against_the_feasible_front_only() -> None:
    """An early-stopped record's accuracy is an upper bound and it is infeasible: it is not
    part of the front a candidate's expected gain is measured against (by hand: the one
    feasible record, accuracy 0.95 at 40 bits, in pymoo's minimisation form)."""
    from model_explorer.exploration.surrogate import front_matrix, judged_vector

    problem = Synthetic(genes=2, minimum=0.6)
    records = [
        {"feasible": True, "values": {"accuracy": 0.95, "bits": 40.0}},
        {"feasible": False, "values": {"accuracy": 0.99, "bits": 20.0}},  # a bound, stopped
        {"feasible": True, "values": {"accuracy": 0.90, "bits": 45.0}},  # dominated
    ]
    front = front_matrix(problem, records, judged_vector(problem))
    assert front.tolist() == [[-0.95, 40.0]]


def test_a_surrogate_pick_joins_the_front_the_next_is_judged_against() -> None:
    """Three candidates, their predictions certain: the first adds the most volume, the
    second is a near-copy of it (dominated by it once it is picked), the third adds volume
    elsewhere. Picking two, the surrogate takes the first and the third, never the copy."""
    from model_explorer.exploration.surrogate import _greedy, judged_vector

    problem = Synthetic(genes=2, minimum=0.6)
    vector = judged_vector(problem)
    front = np.array(
        [vector({"accuracy": 0.9, "bits": 40.0}), vector({"accuracy": 0.7, "bits": 20.0})]
    )
    means = [
        {"accuracy": 0.85, "bits": 25.0},
        {"accuracy": 0.849, "bits": 25.1},  # dominated by the first
        {"accuracy": 0.95, "bits": 45.0},
    ]
    believed = [_judged(m) for m in means]
    outcomes = [[b] * 8 for b in believed]  # every quantile at the mean
    assert _greedy(problem, front, outcomes, believed, 1, vector) == [0]
    assert _greedy(problem, front, outcomes, believed, 2, vector) == [0, 2]


def test_the_surrogates_optimism_raises_what_is_maximised_and_lowers_what_is_minimised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each candidate is judged at eight quantiles of its prediction: at the upper ones (the
    optimistic outcomes) its accuracy is above the predicted mean and its cost below, by the
    quantile times the predicted spread (a predictor of known means and spreads planted)."""
    from model_explorer.exploration import surrogate

    problem = Synthetic(genes=2, minimum=0.6)
    means = {"accuracy": np.array([0.8, 0.9, 0.7]), "bits": np.array([10.0, 12.0, 9.0])}
    spreads = {"accuracy": np.array([0.01, 0.02, 0.03]), "bits": np.array([1.0, 2.0, 3.0])}
    monkeypatch.setattr(surrogate.Surrogate, "fit", lambda self, *args: True)
    monkeypatch.setattr(
        surrogate.Surrogate,
        "predict",
        lambda self, genomes: {n: (means[n], spreads[n]) for n in means},
    )
    monkeypatch.setattr(surrogate, "_unknown_quantities", lambda problem, known: list(means))
    seen = {}

    def greedy(problem, front, outcomes, believed, count, vector):  # noqa: ANN001, ANN202
        seen.update(outcomes=outcomes, believed=believed)
        return [0]

    monkeypatch.setattr(surrogate, "_greedy", greedy)
    genomes = np.zeros((3, 2))
    surrogate.select(problem, [], genomes, [[2, 2]] * 3, 1, seed=0)
    top = surrogate.QUANTILES[-1]
    assert top > 0
    for index in range(3):
        optimistic = seen["outcomes"][index][-1]
        accuracy, bits = means["accuracy"][index], means["bits"][index]
        assert optimistic["accuracy"] == pytest.approx(accuracy + top * spreads["accuracy"][index])
        assert optimistic["bits"] == pytest.approx(bits - top * spreads["bits"][index])
        assert seen["believed"][index]["accuracy"] == pytest.approx(accuracy)


def test_the_surrogate_tells_the_algorithm_every_offspring_it_has_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Genomes are continuous and configurations discrete, so offspring often decode to a
    configuration evaluated before: the surrogate passes every such one on (told to NSGA-II
    from the cache, at no cost) beside its picks, and no configuration is measured twice."""
    from model_explorer.exploration.explorer import configuration_key

    problem = Synthetic(genes=2)  # 49 configurations: repeats are common
    original = Explorer._screen
    screened = []

    def recording(self, genomes):  # noqa: ANN001, ANN202
        seen = {
            i
            for i, genome in enumerate(genomes)
            if configuration_key(self.problem.configuration(genome)) in self._cache
        }
        kept = original(self, genomes)
        screened.append((seen, set(kept)))
        return kept

    monkeypatch.setattr(Explorer, "_screen", recording)
    surrogate = strategy("surrogate", candidates=32, evaluations=3)
    result = Explorer(problem, NSGA, seed=0, strategy=surrogate).run()
    assert sum(len(seen) for seen, _ in screened) > 0
    assert all(seen <= kept for seen, kept in screened)
    assert result.stats["cache_hits"] >= sum(len(seen) for seen, _ in screened)
    assert max(problem.calls.values()) == 1
