"""Search algorithms (`exploration.algorithm`): driven by the Explorer, each asks for exactly the
genomes pymoo's own `minimize` evaluates with the same algorithm built here from pymoo's public
API (random search: the genomes its specification draws from numpy); each resumes to the
uninterrupted result, with every strategy; a bad setting is one line with exit status 2."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest
from bad_input_support import run_cli, write
from pymoo.core.callback import Callback
from pymoo.core.problem import ElementwiseProblem
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM
from pymoo.operators.repair.rounding import RoundingRepair
from pymoo.operators.sampling.rnd import IntegerRandomSampling
from pymoo.optimize import minimize

from model_explorer.errors import UserError
from model_explorer.exploration import Explorer
from model_explorer.exploration.algorithms import AlgorithmSpec, ties_in_seeded_order
from model_explorer.exploration.spec import NSGASpec
from model_explorer.exploration.strategies import StrategySpec, build_strategy
from model_explorer.operations.result_file import SearchDefinition
from model_explorer.problems import Constraint, Evaluation, Objective, Problem, Variable
from model_explorer.results import ExplorationResult
from model_explorer.workload.file import Workload
from tests_support import without_times

# The algorithms docs/exploration.md documents (tests/test_registries.py checks the registry).
ALGORITHMS = ["nsga2", "nsga3", "smsemoa", "agemoea", "agemoea2", "random"]
NEEDS_NUMBA = {"agemoea", "agemoea2"}
NSGA = NSGASpec(pop_size=8, offsprings=6, generations=5, mutation_eta=10, crossover_eta=5)
GENES, LOW, HIGH, MINIMUM = 6, 2, 8, 0.6


def available(name: str) -> str:
    if name in NEEDS_NUMBA:
        pytest.importorskip("numba", reason="the agemoea extra (numba) is not installed")
    return name


def quantities(configuration) -> tuple[float, float, float]:  # noqa: ANN001
    """accuracy (falls with fewer bits, faster for early genes), bits, and a product cost."""
    c = np.asarray(configuration, dtype=float)
    accuracy = 1.0 - float(np.sum(np.linspace(2.0, 0.5, len(c)) * (HIGH - c) ** 2)) / 200.0
    return accuracy, float(np.sum(c)), float(np.sum(c[:-1] * c[1:]))


class Analytic(Problem):
    """Two or three objectives over six bit widths, accuracy at least MINIMUM."""

    name = "analytic"

    def __init__(self, objectives: int = 2) -> None:
        self.variables = [Variable(f"g{i}", LOW, HIGH) for i in range(GENES)]
        names = [("accuracy", True), ("bits", False), ("products", False)][:objectives]
        self.objectives = [Objective(name, maximize) for name, maximize in names]
        self.constraints = [Constraint("accuracy", minimum=MINIMUM)]
        self.calls = 0

    def measure(self, configuration):  # noqa: ANN001, ANN201
        self.calls += 1
        accuracy, bits, products = quantities(configuration)
        values = {"accuracy": accuracy, "bits": bits, "products": products}
        return Evaluation(values, [accuracy])


def explore(name: str, objectives: int = 2, strategy: str = "nsga2", **kw) -> Explorer:  # noqa: ANN003
    return Explorer(
        Analytic(objectives),
        NSGA,
        seed=kw.pop("seed", 7),
        algorithm=AlgorithmSpec.model_validate(name),
        strategy=build_strategy(StrategySpec.model_validate(strategy)),
        **kw,
    )


# -- the oracle: pymoo's own loop, with the algorithm built here ----------------------------------


class Reference(ElementwiseProblem):
    """The same problem written for pymoo; logs every genome pymoo evaluates, by generation."""

    def __init__(self, objectives: int) -> None:
        super().__init__(n_var=GENES, n_obj=objectives, n_ieq_constr=2, xl=LOW, xu=HIGH, vtype=int)
        self.generation = 0
        self.log: list[tuple[int, tuple[float, ...]]] = []

    def _evaluate(self, x, out, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        self.log.append((self.generation, tuple(float(v) for v in x)))
        accuracy, bits, products = quantities(np.round(x))
        out["F"] = [-accuracy, bits, products][: self.n_obj]
        out["G"] = [MINIMUM - accuracy, 0.0]  # the accuracy minimum; outputs are always finite


class Survivors(Callback):
    """Each generation's population; moves the problem's log on to the next generation."""

    def __init__(self, problem: Reference) -> None:
        super().__init__()
        self.problem = problem
        self.populations: list[list[tuple[float, ...]]] = []

    def notify(self, algorithm) -> None:  # noqa: ANN001
        self.populations.append([tuple(float(v) for v in x) for x in algorithm.pop.get("X")])
        self.problem.generation += 1


def pymoo_algorithm(name: str, objectives: int):  # noqa: ANN201
    """The workload's operators as pymoo's documentation spells them (NSGA settings above)."""
    from pymoo.util.ref_dirs import get_reference_directions

    rounding = RoundingRepair()
    operators = {
        "pop_size": 8,
        "n_offsprings": 6,
        "sampling": IntegerRandomSampling(),
        "crossover": SBX(prob=1.0, eta=5.0, vtype=float, repair=rounding),
        "mutation": PM(prob=1.0, eta=10.0, vtype=float, repair=rounding),
        "eliminate_duplicates": True,
    }
    if name == "nsga2":
        from pymoo.algorithms.moo.nsga2 import NSGA2

        return NSGA2(**operators)
    if name == "nsga3":
        from pymoo.algorithms.moo.nsga3 import NSGA3

        # The most partitions with at most 8 directions: 7 (8 points) for two objectives,
        # 2 (6 points) for three.
        partitions = 7 if objectives == 2 else 2
        directions = get_reference_directions("das-dennis", objectives, n_partitions=partitions)
        return NSGA3(directions, **operators)
    if name == "smsemoa":
        from pymoo.algorithms.moo.sms import SMSEMOA

        return SMSEMOA(**operators)
    if name == "agemoea":
        from pymoo.algorithms.moo.age import AGEMOEA

        return AGEMOEA(**operators)
    from pymoo.algorithms.moo.age2 import AGEMOEA2

    return AGEMOEA2(**operators)


def pymoo_run(name: str, objectives: int, seed: int) -> tuple[list, list]:
    """(generation, genome) of every evaluation pymoo's minimize makes, and the populations;
    its ties broken in the seeded order, as our loop breaks them (ties_in_seeded_order)."""
    problem = Reference(objectives)
    survivors = Survivors(problem)
    termination = ("n_gen", NSGA.generations + 1)
    algorithm = pymoo_algorithm(name, objectives)
    with ties_in_seeded_order():
        minimize(problem, algorithm, termination, seed=seed, callback=survivors)
    return problem.log, survivors.populations


def random_search_run(seed: int) -> list[tuple[int, tuple[float, ...]]]:
    """Random search as its docstring specifies it: 8 genomes drawn with pymoo's integer
    sampling from numpy's generator of the seed (repeats dropped), then per generation batches
    of 6 until 6 configurations never seen before are found."""
    rng = np.random.default_rng(seed)
    space = ElementwiseProblem(n_var=GENES, n_obj=1, xl=LOW, xu=HIGH, vtype=int)
    sampling, seen, log = IntegerRandomSampling(), set(), []

    def draw(count: int, generation: int, wanted: int) -> None:
        found = 0
        for x in sampling.do(space, count, random_state=rng).get("X"):
            genome = tuple(float(v) for v in x)
            if genome not in seen and found < wanted:
                seen.add(genome)
                log.append((generation, genome))
                found += 1

    draw(8, 0, 8)
    for generation in range(1, NSGA.generations + 1):
        before = len(log)
        for _ in range(100):
            draw(6, generation, 6 - (len(log) - before))
            if len(log) - before == 6:
                break
    return log


def first_occurrences(log: list) -> list:
    """Each configuration once, where it was first evaluated (our Explorer's cache)."""
    seen, kept = set(), []
    for generation, genome in log:
        if genome not in seen:
            seen.add(genome)
            kept.append((generation, genome))
    return kept


@pytest.mark.parametrize("objectives", [2, 3])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_our_loop_asks_for_what_pymoo_evaluates(name: str, objectives: int) -> None:
    result = explore(available(name), objectives).run()
    ours = [(r["generation"], tuple(r["genome"])) for r in result.records]
    if name == "random":
        assert ours == random_search_run(seed=7)
        assert result.stats["cache_hits"] == 0  # it never asks for a configuration twice
        return
    log, populations = pymoo_run(name, objectives, seed=7)
    assert ours == first_occurrences(log)
    assert result.stats["evaluations"] + result.stats["cache_hits"] == len(log)
    ids = {tuple(r["genome"]): r["id"] for r in result.records}
    assert [g["population"] for g in result.generations] == [
        sorted(ids[genome] for genome in population) for population in populations
    ]


def interrupt(explorer: Explorer, after: int) -> ExplorationResult:
    """Run `explorer` until generation `after` is saved, as Ctrl-C would stop it; its file."""

    def stop(generation: int, result: ExplorationResult) -> None:
        if generation == after:
            raise KeyboardInterrupt

    explorer.on_generation = stop
    with pytest.raises(KeyboardInterrupt):
        explorer.run()
    return ExplorationResult.load(explorer.result_path)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_algorithm_resumes_to_the_uninterrupted_result(tmp_path, name: str) -> None:
    whole = explore(available(name), 3).run()
    checkpoint = interrupt(explore(name, 3, result_path=tmp_path / "checkpoint.pkl"), after=2)
    assert len(checkpoint.generations) == 3 and not checkpoint.complete
    resumed = explore(name, 3)
    resumed.restore(checkpoint)
    result = resumed.run()
    assert without_times(result) == without_times(whole)
    assert len(result.generations) == NSGA.generations + 1
    # The replay answered the checkpoint's evaluations without measuring them again.
    assert resumed.problem.calls == len(result) - len(checkpoint)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_the_surrogate_screens_the_offspring_of_every_algorithm(tmp_path, name: str) -> None:
    """The surrogate strategy sets how many offspring are proposed (64) and evaluated (4): a
    steady-state-like SMS-EMOA then removes as many by hypervolume contribution as it gains,
    random search draws 64 fresh configurations to pick 4; each resumes exactly."""
    whole = explore(available(name), strategy="surrogate").run()
    per_generation = [sum(r["generation"] == g for r in whole.records) for g in range(6)]
    assert per_generation[0] == NSGA.pop_size
    assert all(0 < count <= 4 for count in per_generation[1:]), per_generation
    if name != "random":  # random search's kept population is its ranking of all it evaluated
        assert all(len(g["population"]) == NSGA.pop_size for g in whole.generations)
    path = tmp_path / "checkpoint.pkl"
    checkpoint = interrupt(explore(name, strategy="surrogate", result_path=path), after=3)
    resumed = explore(name, strategy="surrogate")
    resumed.restore(checkpoint)
    assert without_times(resumed.run()) == without_times(whole)


def test_random_search_stops_when_the_space_is_spent() -> None:
    class Tiny(Analytic):
        def __init__(self) -> None:
            super().__init__()
            self.variables = [Variable("g0", 2, 8), Variable("g1", 2, 3)]  # 14 configurations

        def measure(self, configuration):  # noqa: ANN001, ANN201
            return super().measure([*configuration, 8, 8, 8, 8])

    explorer = Explorer(Tiny(), NSGA, seed=1, algorithm=AlgorithmSpec(type="random"))
    result = explorer.run()
    assert result.complete and len(result) == 14 and result.stats["cache_hits"] == 0
    assert len(result.generations) == 3  # 8 + 6 in two generations, then nothing is left


@pytest.mark.parametrize("name", ["nsga3", "smsemoa", "agemoea", "agemoea2"])
def test_algorithms_that_rank_several_objectives_refuse_one(name: str) -> None:
    problem = Analytic(1)
    with pytest.raises(UserError, match=f"exploration.algorithm: {available(name)} ranks"):
        Explorer(problem, NSGA, algorithm=AlgorithmSpec(type=name))
    assert problem.calls == 0


def test_nsga3_refuses_more_reference_directions_than_the_population() -> None:
    spec = AlgorithmSpec.model_validate({"type": "nsga3", "partitions": 3})  # 10 for 3 objectives
    with pytest.raises(UserError, match=r"exploration.algorithm.partitions: 3 partitions give 10"):
        Explorer(Analytic(3), NSGA, algorithm=spec)
    assert len(Explorer(Analytic(3), NSGA, algorithm=AlgorithmSpec(type="nsga3")).run()) > 8


# -- the workload key ----------------------------------------------------------------------------

BAD_ALGORITHMS = {
    "unknown name": (
        "nsga33",
        "workload.exploration.algorithm.type: must be one of agemoea, agemoea2, nsga2, nsga3, "
        "random, smsemoa, got unknown search algorithm type 'nsga33' (did you mean 'nsga3'?)",
    ),
    "unknown name in a mapping": (
        {"type": "sms-emoa"},
        "got unknown search algorithm type 'sms-emoa' (did you mean 'smsemoa'?)",
    ),
    "option of another algorithm": (
        {"type": "smsemoa", "partitions": 4},
        "workload.exploration.algorithm.partitions: only the nsga3 search algorithm takes "
        "'partitions'; set 'type: nsga3' or remove 'partitions'",
    ),
    "bad option value": (
        {"type": "nsga3", "partitions": 0},
        "workload.exploration.algorithm.partitions: must be a positive integer",
    ),
    "not a name": (3, "workload.exploration.algorithm"),
}


@pytest.mark.parametrize("case", BAD_ALGORITHMS)
def test_a_bad_algorithm_is_one_line_at_validate(case: str, tiny, tmp_path, capsys) -> None:
    value, words = BAD_ALGORITHMS[case]
    tiny["workload"]["exploration"]["algorithm"] = value
    path = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "validate", path).one_error(f"{path}: ", words)


def test_one_objective_with_a_multi_objective_algorithm_is_refused_at_validate(
    tiny, tmp_path, capsys
) -> None:
    tiny["workload"]["exploration"].update(algorithm="smsemoa", objectives=["weighted_bits"])
    path = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "validate", path).one_error(
        "workload.exploration.algorithm: smsemoa ranks candidates among several objectives"
    )


def test_a_missing_numba_is_one_sentence_naming_the_extra(
    tiny, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # as if it were not installed
    tiny["workload"]["exploration"]["algorithm"] = "agemoea2"
    path = write(tiny, tmp_path / "w.yaml")
    assert run_cli(capsys, "validate", path).status == 0  # a valid file, run where numba is
    output = tmp_path / "r.pkl"
    run_cli(capsys, "explore", path, "--output", output).one_error(
        "exploration.algorithm: agemoea2 needs numba, which is not installed; install the "
        "'agemoea' extra"
    )
    assert not output.exists()


def test_nsga3_partitions_beyond_the_population_end_explore_before_any_evaluation(
    tiny, tmp_path, capsys
) -> None:
    tiny["workload"]["exploration"]["algorithm"] = {"type": "nsga3", "partitions": 12}
    path = write(tiny, tmp_path / "w.yaml")
    output = tmp_path / "r.pkl"
    run_cli(capsys, "explore", path, "--output", output, "--skip-baseline").one_error(
        "exploration.algorithm.partitions: 12 partitions give 13 reference directions for 2 "
        "objectives, more than exploration.nsga.pop_size (4)"
    )
    assert not output.exists()


def test_another_algorithm_is_recorded_and_named_in_the_cost_line(tiny, tmp_path, capsys) -> None:
    tiny["workload"]["exploration"].update(algorithm="smsemoa", strategy="nsga2")
    path = write(tiny, tmp_path / "w.yaml")
    output = tmp_path / "r.pkl"
    outcome = run_cli(capsys, "explore", path, "--output", output, "--skip-baseline")
    assert outcome.status == 0, outcome.errors
    assert "(strategy nsga2, algorithm smsemoa)" in outcome.out
    stored = ExplorationResult.load(output).workload
    assert stored["workload"]["exploration"]["algorithm"] == {"type": "smsemoa"}
    # A result stored before the key existed is the same search as the default algorithm's.
    tiny["workload"]["exploration"]["algorithm"] = "nsga2"
    definition = SearchDefinition.of(Workload.from_dict(tiny, check_paths=False))
    older = copy.deepcopy(definition.stored)
    del older["workload"]["exploration"]["algorithm"]
    assert definition.matches(older)
    assert not definition.matches(stored)
