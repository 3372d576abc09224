"""Explorer: a pymoo search algorithm (NSGA-II by default) over any Problem through pymoo's
ask/tell loop.

Every evaluation is recorded (not only survivors); a configuration is never evaluated twice
(the cache is keyed by the decoded configuration, each genome decoded once by its Problem);
the result file is rewritten atomically after every generation and doubles as the checkpoint.

Resuming replays the search from its seed: every algorithm of `exploration.algorithm` is
deterministic given its seed and the objective values it is told, so the replay asks for exactly
the genomes of the interrupted run, answers them from the recorded evaluations without touching
the model, and carries on evaluating where the record ends. A resumed run therefore ends with
the same result as an uninterrupted one, and the checkpoint holds only plain data, never
pickled pymoo objects.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pymoo.core.algorithm import Algorithm
from pymoo.core.evaluator import Evaluator
from pymoo.core.problem import Problem as PymooProblem
from pymoo.problems.static import StaticProblem
from tqdm.auto import tqdm

from model_explorer.exploration.algorithms import (
    AlgorithmSpec,
    build_algorithm,
    ties_in_seeded_order,
)
from model_explorer.exploration.operators import make_operators
from model_explorer.exploration.runners.base import Runner
from model_explorer.exploration.runners.serial import SerialRunner
from model_explorer.exploration.spec import NSGASpec
from model_explorer.exploration.strategies import Strategy
from model_explorer.problems.base import Evaluation, Problem
from model_explorer.results import ExplorationResult, samples_of
from model_explorer.results.front import dominated

log = logging.getLogger(__name__)


class Bounds(PymooProblem):
    """pymoo's view of a Problem: only its size and bounds; evaluation happens in the Explorer."""

    def __init__(self, problem: Problem) -> None:
        integer = all(v.integer for v in problem.variables)
        super().__init__(
            n_var=len(problem.variables),
            n_obj=len(problem.objectives),
            n_ieq_constr=len(problem.all_constraints),
            xl=np.array([v.lower for v in problem.variables], dtype=float),
            xu=np.array([v.upper for v in problem.variables], dtype=float),
            vtype=int if integer else float,
        )


def make_algorithm(
    problem: Problem,
    nsga: NSGASpec,
    strategy: Strategy | None = None,
    seed: int = 0,
    algorithm: AlgorithmSpec | None = None,
) -> Algorithm:
    """The workload's search algorithm (`exploration.algorithm`, NSGA-II by default) built
    from its operators (see exploration/operators.py)."""
    operators = make_operators(problem, nsga, strategy, seed)
    return build_algorithm(algorithm or AlgorithmSpec(), operators)


def configuration_key(configuration: list[Any]) -> str:
    return json.dumps(configuration)


class Explorer:
    """Runs a search algorithm (default NSGA-II) over a Problem through pymoo's ask/tell loop;
    `run()` returns the ExplorationResult, `restore(previous)` resumes an interrupted one.

    Args:
        problem: the Problem to search (any: a model's, or an analytic one).
        nsga: the population and operator settings (`exploration.nsga`: pop_size, offsprings,
            generations, SBX and polynomial mutation eta and probability).
        seed: seeds the algorithm, the spread start and the surrogate.
        result_path: where the result is written after every generation (the checkpoint);
            none written when None.
        workload: the workload as results store it (`SearchDefinition.stored`), kept in the
            result.
        baseline: the float model's accuracies, kept in the result.
        runner: where candidates are evaluated; in this process when None.
        progress: show progress bars.
        strategy: how evaluations are spent (`exploration.strategy`); plain NSGA-II when None.
        algorithm: the pymoo algorithm (`exploration.algorithm`); NSGA-II when None.
    """

    def __init__(
        self,
        problem: Problem,
        nsga: NSGASpec,
        seed: int = 0,
        result_path: str | os.PathLike[str] | None = None,
        workload: dict[str, Any] | None = None,
        baseline: list[float] | None = None,
        runner: Runner | None = None,
        progress: bool = False,
        strategy: Strategy | None = None,
        algorithm: AlgorithmSpec | None = None,
    ) -> None:
        self.problem = problem
        self.strategy = strategy or Strategy()
        self.algorithm = algorithm or AlgorithmSpec()
        # Built once now, so that settings the algorithm refuses (nsga3's partitions, a single
        # objective) fail before any evaluation; `run` builds it afresh.
        make_algorithm(problem, nsga, self.strategy, seed, self.algorithm)
        self.nsga = nsga
        self.seed = seed
        self.result_path = Path(result_path) if result_path is not None else None
        self.runner = runner or SerialRunner()
        self.progress = progress
        self.result = ExplorationResult(workload or {}, problem.describe(), baseline, seed=seed)
        self._cache: dict[str, dict[str, Any]] = {}
        self._restored: dict[str, dict[str, Any]] = {}
        self.on_generation: Callable[[int, ExplorationResult], None] | None = None

    def restore(self, previous: ExplorationResult) -> None:
        """Take over the evaluations of an interrupted run (same problem, seed and settings)."""
        if previous.problem != self.result.problem or previous.seed != self.seed:
            raise ValueError("the checkpoint belongs to another problem or seed")
        for record in [*previous.records, *previous.partial]:
            data = {k: v for k, v in record.items() if k not in ("id", "generation", "index")}
            self._restored[configuration_key(record["configuration"])] = data
        self.result.baseline = previous.baseline

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> ExplorationResult:
        """Run (or resume) the search to its last generation; the result, saved after each."""
        algorithm = make_algorithm(
            self.problem, self.nsga, self.strategy, self.seed, self.algorithm
        )
        from model_explorer.exploration.surrogate import Fits

        self._fits = Fits()  # the surrogates' kernels, kept from generation to generation
        bounds = Bounds(self.problem)
        generations = self.nsga.generations
        algorithm.setup(
            bounds, termination=("n_gen", generations + 1), seed=self.seed, verbose=False
        )
        if self.strategy.screens:
            algorithm.n_offsprings = self.strategy.candidates  # proposals; the surrogate picks
        bar = tqdm(total=generations + 1, desc="generations", unit="gen", disable=not self.progress)
        generation = 0
        try:
            while algorithm.has_next():
                with ties_in_seeded_order():
                    population = algorithm.ask()
                if population is None or len(population) == 0:
                    break  # no configuration left that was not evaluated: the space is spent
                if generation > 0 and self.strategy.screens:
                    with ties_in_seeded_order():
                        population = population[self._screen(population.get("X"))]
                genomes = population.get("X")
                records = self._evaluate_generation(generation, genomes)
                objectives = np.array([self.problem.objective_vector(r["values"]) for r in records])
                constraints = np.array(
                    [self.problem.constraint_vector(r["values"]) for r in records]
                )
                Evaluator().eval(StaticProblem(bounds, F=objectives, G=constraints), population)
                with ties_in_seeded_order():
                    algorithm.tell(infills=population)
                self._close_generation(generation, algorithm)
                generation += 1
                bar.update(1)
            self.result.complete = True
        finally:
            bar.close()
            self.save()
        return self.result

    def _screen(self, genomes: np.ndarray) -> list[int]:
        """The proposed offspring the surrogate finds most promising; configurations already
        evaluated cost nothing and are told to the algorithm as they are, besides."""
        from model_explorer.exploration.surrogate import select

        configurations = [self.problem.configuration(g) for g in genomes]
        keys = [configuration_key(c) for c in configurations]
        seen = [i for i, key in enumerate(keys) if key in self._cache]
        new = [i for i, key in enumerate(keys) if key not in self._cache]
        complete = [r for r in self.result.records if r["complete"]]
        picked = select(
            self.problem,
            complete,
            genomes[new],
            [configurations[i] for i in new],
            self.strategy.evaluations,
            self.seed,
            self.strategy.optimism,
            self._fits,
        )
        return sorted(seen + [new[i] for i in picked])

    def _front(self) -> list[dict[str, float]]:
        """Values of the feasible, fully scored front so far (`strategy.reject_dominated`)."""
        if not self.strategy.reject_dominated:
            return []
        front = self.result.pareto_front()
        return [dict(i.values) for i in front if i.feasible and i.complete]

    def _evaluate_generation(self, generation: int, genomes: np.ndarray) -> list[dict[str, Any]]:
        """Records for the genomes asked, evaluating only configurations never seen before.

        New records join the result in the order pymoo asked for them, whatever order the
        runner finishes them in, so serial, parallel and resumed runs record alike."""
        configurations = [self.problem.configuration(genome) for genome in genomes]
        keys = [configuration_key(c) for c in configurations]
        fresh: dict[str, dict[str, Any]] = {}  # key -> evaluation data new in this generation
        pending: list[int] = []
        pending_keys: set[str] = set()
        for index, key in enumerate(keys):
            if key in self._cache or key in fresh or key in pending_keys:
                continue  # seen before, or twice in this generation
            if key in self._restored:
                fresh[key] = self._restored.pop(key)
            else:
                pending.append(index)
                pending_keys.add(key)
        if pending:
            bar = tqdm(
                total=len(pending),
                desc=f"generation {generation}",
                unit="eval",
                leave=False,
                disable=not self.progress,
            )

            def done(position: int, configuration: list[Any], evaluation: Evaluation) -> None:
                index = pending[position]
                fresh[keys[index]] = self._evaluation_data(
                    genomes[index], configuration, evaluation
                )
                self.result.partial.append(fresh[keys[index]])
                bar.update(1)

            try:
                self.runner.evaluate(
                    self.problem, [genomes[i] for i in pending], done, self._front()
                )
            finally:
                bar.close()
        self.result.partial = []
        records = []
        for index, key in enumerate(keys):
            if key in fresh:
                self._append(generation, index, key, fresh.pop(key))
            else:
                self.result.stats["cache_hits"] += 1
            records.append(self._cache[key])
        return records

    def _append(self, generation: int, index: int, key: str, data: dict[str, Any]) -> None:
        record = {"id": len(self.result.records), "generation": generation, "index": index, **data}
        self._cache[key] = record
        self.result.records.append(record)
        stats = self.result.stats
        stats["evaluations"] += 1
        stats["sample_forwards"] = stats.get("sample_forwards", 0) + samples_of(record)
        stats["seconds"] = stats.get("seconds", 0.0) + record["seconds"]
        if record["extra"].get("dominated"):
            stats["rejected_dominated"] = stats.get("rejected_dominated", 0) + 1
        elif not record["complete"] and record["extra"].get("finite", True):
            stats["early_rejected"] += 1

    def _evaluation_data(
        self, genome: np.ndarray, configuration: list[Any], evaluation: Evaluation
    ) -> dict[str, Any]:
        # A candidate that stopped early but meets the constraints with its best reachable
        # accuracy stopped because it could not join the front: not known to be feasible.
        meets = self.problem.feasible(evaluation.values)
        dominated = meets and not evaluation.complete
        extra = {**evaluation.extra, "finite": evaluation.finite}
        if dominated:
            extra["dominated"] = True
        data = {
            "genome": [float(g) for g in genome],
            "configuration": configuration,
            "values": {k: float(v) for k, v in evaluation.values.items()},
            "accuracies": [float(a) for a in evaluation.accuracies],
            "feasible": meets and not dominated,
            "complete": evaluation.complete,
            "seconds": evaluation.seconds,
            "extra": extra,
        }
        plan = evaluation.plan if evaluation.plan is not None else self.problem.plan(configuration)
        if plan is not None:
            data["plan"] = plan
        return data

    def _keep_front_outcomes(self) -> None:
        """Per-sample outcomes (`extra["outcomes"]`, for intervals and paired tests) stay
        only with the feasible individuals no feasible one dominates: the front, which is what
        reports compare; a dominated individual never rejoins it, so dropping them loses
        nothing a later generation needs and keeps the file small."""
        feasible = [r for r in self.result.records if r["feasible"]]
        holding = [r for r in self.result.records if "outcomes" in (r.get("extra") or {})]
        if not holding:
            return
        rows = [self.problem.objective_vector(r["values"]) for r in feasible]
        everyone = np.array(rows, dtype=float).reshape(len(rows), len(self.problem.objectives))
        for record in holding:
            row = self.problem.objective_vector(record["values"])
            if not record["feasible"] or dominated(everyone, row):
                del record["extra"]["outcomes"]

    def _close_generation(self, generation: int, algorithm: Algorithm) -> None:
        self._keep_front_outcomes()
        population = algorithm.pop.get("X")
        survivors = {configuration_key(self.problem.configuration(x)) for x in population}
        self.result.generations.append(
            {
                "generation": generation,
                "population": sorted(self._cache[key]["id"] for key in survivors),
                "evaluations": self.result.stats["evaluations"],
            }
        )
        self.save()
        if self.on_generation is not None:
            self.on_generation(generation, self.result)

    def save(self) -> None:
        """Write the result file (when the explorer has one)."""
        if self.result_path is not None:
            self.result.save(self.result_path)
