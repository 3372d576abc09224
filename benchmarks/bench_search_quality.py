"""Search quality against search cost on one workload: hypervolume of the feasible accuracy /
cost front against the samples forwarded through the model to find it, for every search
strategy (exploration.strategy), the one-shot integer program over the one-at-a-time
accuracy-drop table (what AIMET/HAWQ-style tools do), random search and uniform bit widths.

    python benchmarks/bench_search_quality.py [WORKLOAD] [--budget N] [--seeds S]
        [--strategies nsga2,surrogate,surrogate+random] [--generations G] [--no-baselines]
        [--without integer,uniform,random]
        [--peers aimet,modelopt] [--aimet-candidates 4,9,25]
        [--aimet-schemes min_max,tf_enhanced] [--aimet-results DIR] [--budgets 0.375,0.4375,0.5]
        [--effective-bits] [--json PATH] [--set KEY=VALUE ...]
    python benchmarks/bench_search_quality.py --summarise RUNS.json [MORE.json ...]

A strategy runs with the workload's `exploration.initialization` (`auto`: the sensitivity
seeds where the genes are bit widths or formats, their table's and bisection's sample-forwards
counted first), or with the one its suffix names (`surrogate+random`, `nsga2+sensitivity`).

The peers are the established toolkits' own mixed-precision searches, run through their public
APIs where installed (the `peers` extra; benchmarks/peer_aimet.py, peer_modelopt.py): AIMET's
Automatic Mixed Precision and modelopt's AutoQuantize, on the same weights, calibration samples
and exploration subset; every configuration they propose is re-scored through this project's
evaluation, after what they spent themselves, and kept beside that as the peer's own quantizers
scored it (a second row, "its own quantizer"; on the held-out data too). AIMET runs with each
of its encoding schemes asked for; with `--aimet-results DIR` each of its runs keeps its cache
and counts in a folder of DIR and continues from them when run again (a run of hours cut short
loses only its current evaluation, and a pickle of AIMET's cache cut short is computed again;
one folder per workload setting, since the cache does not know the settings). A peer that
does not import is one line.

All methods share one problem (the workload's, with its minimum accuracy) and one reference
point (the minimum accuracy, and the cost of every quantizer at its upper bound); hypervolumes
are normalised by the box between it and (accuracy 1, cost 0), so they compare directly and
across workloads. `nsga2`, `spread` and `multifidelity` evaluate `--budget` candidates
(`(budget - pop_size) / offsprings` generations); `surrogate` runs the workload's generations
(or `--generations`). For each method: evaluations and sample-forwards spent, the final
hypervolume, the hypervolume reached within a third of NSGA-II's mean sample-forwards, and the
sample-forwards it needed to reach NSGA-II's mean final hypervolume (mean and standard
deviation over the seeds; "never" counts as missing). The workload's checkpoint and
calibration are made if missing.

Where the workload has reevaluation data (`reevaluation.datasets.reevaluate`, which no method
selects on), every run's front, as its method selected it on the exploration data, is scored
there too: the hypervolume of the front at its held-out accuracies (a member short of the
accuracy limit there counts for nothing) beside the one where it was selected, and per cost
budget the held-out accuracy of the member the method would pick (its best where selected),
with every seed's value. `--effective-bits` prints every table again with the costs counted
as AutoQuantize's constraint counts them (the fronts judged again in that cost).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from peer_result import Scoring
from prepared import prepared_context

from model_explorer.exploration.explorer import Explorer
from model_explorer.exploration.strategies import STRATEGIES, StrategySpec, build_strategy
from model_explorer.metrics.functions import higher_is_better
from model_explorer.operations.explore import (
    measure_baseline,
    minimum_accuracy,
    sensitivity_start,
)
from model_explorer.operations.rebuild import build_problem
from model_explorer.quantization.sensitivity import layer_sensitivity
from model_explorer.results.front import ideal_box, indicator
from model_explorer.results.statistics import pack_values, unpack_values


@dataclass
class Run:
    """One method's evaluations in order: (sample-forwards so far, accuracy, cost, feasible),
    the genome of each (None for what was spent without a configuration), and, once judged,
    its front on the held-out data: (cost, accuracy where selected, held-out accuracy).
    `scored_held_out`: the held-out accuracy of each genome where someone else (a peer's own
    quantizer) measured it; judging then takes these instead of this project's evaluation."""

    points: list[tuple[int, float, float, bool]] = field(default_factory=list)
    genomes: list[tuple[int, ...] | None] = field(default_factory=list)
    # the front as selected: (cost, accuracy where selected, held-out accuracy, what ranked
    # it or None, genome)
    held_out: list[tuple] = field(default_factory=list)
    scored_held_out: dict[tuple[int, ...], float | None] | None = None
    # what ranked each point where the method chose its front by something else than the
    # accuracy (lower is better: the divergence from the float model); None elsewhere
    ranks: list[float | None] = field(default_factory=list)

    def add(
        self,
        samples: int,
        accuracy: float,
        cost: float,
        feasible: bool,
        genome: tuple[int, ...] | None = None,
        rank: float | None = None,
    ) -> None:
        spent = (self.points[-1][0] if self.points else 0) + samples
        self.points.append((spent, accuracy, cost, feasible))
        self.genomes.append(genome)
        self.ranks.append(rank)

    @property
    def ranked(self) -> bool:
        return any(rank is not None for rank in self.ranks)

    def chosen(self, count: int | None = None, higher: bool = True) -> list[int]:
        """The positions of the front the method chose among its first `count` points (all by
        default): the feasible ones no other beats in cost and in what ranked them (the
        divergence where the run is ranked, else the accuracy)."""
        sign = 1.0 if higher else -1.0
        ranks = self.ranks or [None] * len(self.points)
        keys = []
        for index, ((_, accuracy, cost, ok), rank) in enumerate(
            zip(self.points[:count], ranks, strict=False)
        ):
            if ok:
                keys.append((cost, rank if self.ranked else -sign * accuracy, index))
        front, best = [], None
        for _cost, key, index in sorted(keys):
            if best is None or key < best:
                front.append(index)
                best = key
        return front

    @property
    def forwards(self) -> int:
        return self.points[-1][0] if self.points else 0


class Reference(NamedTuple):
    """The hypervolumes' reference point: the accuracy limit (a minimum, or for a metric
    where lower is better, kl, a maximum) and the cost of every quantizer at its upper bound."""

    accuracy: float
    cost: float
    higher: bool = True


def hypervolume(points, reference: Reference) -> float:  # noqa: ANN001
    """Hypervolume of the feasible (accuracy better, cost down) points, normalised by the box
    between the reference point and (accuracy 1, or 0 where lower is better; cost 0)."""
    sign = -1.0 if reference.higher else 1.0
    feasible = np.array([(sign * a, c) for _, a, c, ok in points if ok], dtype=float)
    feasible = feasible.reshape(-1, 2)
    if not len(feasible):
        return 0.0
    senses = [("accuracy", reference.higher), ("cost", False)]
    point = {"accuracy": reference[0], "cost": reference[1]}
    return float(indicator(senses, point)(feasible)) / ideal_box(senses, point)


def run_hypervolume(run: Run, reference: Reference, count: int | None = None) -> float:
    """Hypervolume of the front the run chose among its first `count` points, at their
    accuracies where selected (for a run ranked by accuracy: of every feasible point)."""
    return hypervolume([run.points[i] for i in run.chosen(count, reference.higher)], reference)


def within(run: Run, forwards: float, reference: Reference) -> float:
    """Hypervolume of what the run found with at most `forwards` sample-forwards."""
    return run_hypervolume(run, reference, sum(1 for p in run.points if p[0] <= forwards))


def judged_problem(workload, context):  # noqa: ANN001, ANN201
    """The workload's problem at its minimum accuracy (measured on the float model), its cost
    objective, and the hypervolumes' reference point: that minimum, and the cost of every
    quantizer at its upper bound."""
    higher = higher_is_better(workload.metric)
    minimum = minimum_accuracy(workload.problem.options, measure_baseline(context), higher)
    problem = build_problem(context, minimum)
    cost = next(o.name for o in problem.objectives if o.name not in ("accuracy", "kl"))
    top = problem.known_values([int(v.upper) for v in problem.variables])[cost]
    limit = min(minimum) if higher else max(minimum)
    return problem, cost, Reference(limit, top, higher)


def forwards_to_reach(run: Run, target: float, reference: Reference) -> float | None:
    """The sample-forwards after which the run's hypervolume first reaches `target`."""
    for count in range(1, len(run.points) + 1):
        if run_hypervolume(run, reference, count) >= target - 1e-12:
            return run.points[count - 1][0]
    return None


class Scorer:
    """Evaluates genomes of the problem on the full subset, recording each into a Run (with
    its divergence as what ranks it where `ranked`; a peer's or a baseline's proposals are
    chosen by their accuracy, as the peer or the baseline chooses)."""

    def __init__(self, problem, cost: str, ranked: bool = False) -> None:  # noqa: ANN001
        self.problem, self.cost, self.run, self.ranked = problem, cost, Run(), ranked

    def __call__(self, genome) -> None:  # noqa: ANN001
        _, evaluation = self.problem.evaluate(np.asarray(genome, dtype=float))
        values = evaluation.values
        feasible = self.problem.feasible(values) and evaluation.complete
        samples, accuracy = evaluation.extra["samples"], values["accuracy"]
        rank = values.get("kl") if self.ranked else None
        self.run.add(samples, accuracy, values[self.cost], feasible, as_genome(genome), rank)


def search(  # noqa: ANN201
    problem,  # noqa: ANN001
    nsga,  # noqa: ANN001
    strategy,  # noqa: ANN001
    seed: int,
    cost: str,
    algorithm=None,  # noqa: ANN001
    sensitivity: bool = False,
) -> Run:
    """One seeded search of `strategy` (a name or a StrategySpec) and `algorithm` (None:
    NSGA-II), its evaluations in order. `sensitivity`: half the first population seeded from
    the one-at-a-time table (`exploration.initialization: sensitivity`), what the table and
    the seeds' bisection forwarded counted first."""
    run = Run()
    problem.seeds = []
    if sensitivity:
        spent = problem.seed_from_sensitivity(nsga.pop_size // 2)
        run.add(spent, 0.0, 0.0, False)
    built = build_strategy(StrategySpec.model_validate(strategy))
    result = Explorer(problem, nsga, seed=seed, strategy=built, algorithm=algorithm).run()
    problem.seeds = []
    ranked = getattr(problem, "selection", "accuracy") == "kl"
    for record in result.records:
        values, genome = record["values"], as_genome(record["genome"])
        samples, accuracy, feasible = (
            record["extra"]["samples"],
            values["accuracy"],
            record["feasible"],
        )
        rank = values.get("kl") if ranked else None
        run.add(samples, accuracy, values[cost], feasible, genome, rank)
    return run


def as_genome(genome) -> tuple[int, ...]:  # noqa: ANN001
    return tuple(int(round(float(g))) for g in genome)


def front_members(
    run: Run, higher: bool
) -> list[tuple[float, float, tuple[int, ...], float | None]]:
    """The run's feasible front where it was selected (cost up, what ranked it, the accuracy
    or the divergence, strictly better than every cheaper member's): (cost, accuracy, genome,
    rank)."""
    ranks = run.ranks or [None] * len(run.points)
    return [
        (run.points[i][2], run.points[i][1], run.genomes[i], ranks[i])
        for i in run.chosen(None, higher)
        if run.genomes[i] is not None
    ]


def judge_fronts(runs: dict[str, list[Run]], score: Callable, higher: bool) -> None:
    """Each run's front (as selected) with each member's held-out accuracy: `score(genome)`,
    or where the run carries its own (`scored_held_out`), that one; a member without one is
    left out."""
    for group in runs.values():
        for run in group:
            run.held_out = []
            for cost, accuracy, genome, rank in front_members(run, higher):
                if run.scored_held_out is not None:
                    held = run.scored_held_out.get(genome)
                else:
                    held = score(genome)
                if held is not None:
                    run.held_out.append((cost, accuracy, held, rank, genome))


def judge_held_out(  # noqa: ANN201
    runs: dict[str, list[Run]],
    problem,  # noqa: ANN001
    context,  # noqa: ANN001
    higher: bool,
    scores: dict[tuple[int, ...], float] | None = None,
):
    """Every run's front scored on the workload's reevaluation data, which no search selects
    on (each distinct configuration once, across calls sharing `scores`); returns the float
    model's score there."""
    from model_explorer.metrics.functions import score as scored

    scores = {} if scores is None else scores
    batches, metric = context.batches("reevaluate"), context.workload.metric

    def score(genome: tuple[int, ...]) -> float:
        if genome not in scores:
            problem.apply(problem.configuration(np.asarray(genome, dtype=float)))
            outcome = scored(problem.model, batches, metric, keep_outcomes=True)
            scores[genome] = float(np.mean(outcome.accuracies))
            if outcome.outcomes and outcome.outcomes[0] is not None:
                HITS[genome] = outcome.outcomes[0].numpy()  # hits, or per-sample values
        return scores[genome]

    judge_fronts(runs, score, higher)
    print(f"held-out data: {len(scores)} distinct front configurations scored")
    return float(context.evaluate(context.build_model(), "reevaluate"))


# Each configuration's per-sample outcomes on the held-out data, as this project scored it:
# what the picks of two methods are paired on (`paired_picks`)
HITS: dict[tuple[int, ...], np.ndarray] = {}


def integer_program(problem, cost: str, minimum: float, steps: int = 8) -> Run:  # noqa: ANN001
    """The one-shot baseline: the accuracy drop of each quantizer alone at each bit width
    below its upper bound (the others in float; the upper bound counts as no drop), then for
    `steps` drop budgets up to the allowed one, the cheapest configuration whose summed drops
    stay within the budget (scipy's milp), each distinct one evaluated."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    bounds = [(int(v.lower), int(v.upper)) for v in problem.variables]
    samples = problem.batches.num_samples
    tables = {
        bits: layer_sensitivity(problem.model, problem.batches, problem.metric, bits)
        for bits in range(min(b for b, _ in bounds), max(h for _, h in bounds))
    }
    run = Run()
    baseline = next(iter(tables.values())).baseline
    run.add(samples, baseline, 0.0, False)  # the float model: forwarded, not a configuration
    options, drops, costs = [], [], []
    top = [high for _, high in bounds]
    top_cost = problem.known_values(top)[cost]
    for index, (low, high) in enumerate(bounds):
        for bits in range(low, high + 1):
            drop = 0.0 if bits == high else max(0.0, tables[bits].rows[index].drop)
            if bits < high:
                run.add(samples, baseline - drop, 0.0, False)  # a table entry
            genome = top.copy()
            genome[index] = bits
            options.append((index, bits))
            drops.append(drop)
            costs.append(problem.known_values(genome)[cost] - top_cost)
    one_each = np.zeros((len(bounds), len(options)))
    for column, (index, _) in enumerate(options):
        one_each[index, column] = 1.0
    scorer, seen = Scorer(problem, cost), set()
    scorer.run = run
    for budget in np.linspace(0.0, baseline - minimum, steps):
        found = milp(
            np.array(costs),
            constraints=[
                LinearConstraint(one_each, 1.0, 1.0),
                LinearConstraint(np.array([drops]), -np.inf, budget),
            ],
            integrality=np.ones(len(options)),
            bounds=Bounds(0, 1),
        )
        if found.x is None:
            continue
        genome = top.copy()
        for column in np.flatnonzero(found.x > 0.5):
            index, bits = options[column]
            genome[index] = bits
        if tuple(genome) not in seen:
            seen.add(tuple(genome))
            scorer(genome)
    return run


# The peers' searches, each run through its own public API (benchmarks/peer_*.py), and what
# each is asked for: modelopt's AutoQuantize an effective-bits budget per configuration,
# AIMET's AMP (activation bits, parameter bits) candidates; both score with the workload's
# metric (peer_result.Scoring: labelled or, as cosine, against the float model's outputs).
PEERS = ("aimet", "modelopt")
# Cost budgets of the best-accuracy table, as fractions of the reference cost (every quantizer
# at its upper bound): with bits 2-8, 0.375 is 3 bits per quantizer on average, 0.5 is 4.
BUDGETS = (0.375, 0.4375, 0.5)
BASELINES = ("integer", "uniform", "random")


def peer_runs(  # noqa: ANN201
    names: list[str],
    context,
    problem,
    cost: str,
    aimet_sets: list[int],  # noqa: ANN001
    reference: Reference,
    aimet_schemes: tuple[str, ...] = ("min_max",),
    aimet_results: str | None = None,
):
    """Each installed peer's proposals re-scored through this project's evaluation: a Run that
    starts with what the peer spent (its calibration, sensitivity and own evaluations) and
    adds each distinct configuration it proposes as this project evaluates it; beside it, the
    same proposals as the peer's own quantizers scored them, on the evaluation data and on the
    held-out data (`own_run`). A peer that is not installed is skipped with one line."""
    import importlib

    installed = []
    for name in names:
        peer = importlib.import_module(f"peer_{name}")
        missing = peer.available()
        if missing is None:
            installed.append((name, peer))
        else:
            print(f"{name}: skipped ({missing})")
    if not installed:
        return {}
    genes = genes_of(problem)
    calibration = list(context.batches("calibrate"))
    evaluation = list(problem.batches)
    held_out = list(context.batches("reevaluate")) if context.has_dataset("reevaluate") else None
    scoring = Scoring(context.workload.metric)
    low, high = min(g[2] for g in genes), max(g[3] for g in genes)
    runs: dict[str, list[Run]] = {}
    for name, peer in installed:
        model = context.build_model()
        if name == "modelopt":
            found = peer.propose(
                model,
                calibration,
                evaluation,
                genes,
                autoquantize_budgets(low, high),
                0,
                scoring=scoring,
                held_out=held_out,
            )
            label = "modelopt AutoQuantize"
            runs[f"{label} (re-scored here)"] = [rescored(found, label, problem, cost)]
            runs[f"{label} (its own quantizer)"] = [own_run(found, problem, cost, reference)]
            continue
        inputs = [batch[0] for batch in calibration]  # AIMET calibrates on inputs alone
        for size, scheme in itertools.product(aimet_sets, aimet_schemes):
            candidates = peer.candidates(size, low, high)
            folder = None
            if aimet_results is not None:
                folder = f"{aimet_results}/{context.workload.name}-{size}-{scheme}"
            found = peer.propose(
                model,
                inputs,
                evaluation,
                genes,
                candidates,
                0,
                scoring,
                quant_scheme=scheme,
                held_out=held_out,
                results_dir=folder,
                resume=folder is not None,
            )
            label = f"AIMET AMP, {len(candidates)} candidates, {scheme}"
            runs[f"{label} (re-scored here)"] = [rescored(found, label, problem, cost)]
            runs[f"{label} (its own quantizer)"] = [own_run(found, problem, cost, reference)]
    return runs


def own_run(found, problem, cost: str, reference: Reference) -> Run:  # noqa: ANN001
    """A peer's proposals as its own quantizers scored them (`PeerResult.own`): each distinct
    configuration at this project's cost and the peer's score, feasible where that meets the
    accuracy limit, its held-out score taken as measured by the peer's quantizers."""
    run = Run(scored_held_out={})
    run.add(found.forwards, 0.0, 0.0, False)  # what the peer spent on its own
    for genome, (score, held) in zip(found.genomes, found.own, strict=True):
        configuration = as_genome(genome)
        if configuration in run.scored_held_out:
            continue
        run.scored_held_out[configuration] = held
        meets = score >= reference.accuracy if reference.higher else score <= reference.accuracy
        spent = problem.known_values(list(configuration))[cost]
        run.add(0, score, spent, meets, configuration)
    return run


def autoquantize_budgets(low: int, high: int) -> list[float]:
    """AutoQuantize's effective-bits constraints: the genes' bit range by quarter bits."""
    return [b / 4 for b in range(4 * low, 4 * high + 1)]


def rescored(found, label: str, problem, cost: str) -> Run:  # noqa: ANN001
    """A peer's proposals as a Run: what it spent, then each distinct configuration."""
    print(f"{label}: {found.forwards:,} sample-forwards, {found.seconds:.0f} s; {found.notes}")
    scorer = Scorer(problem, cost)
    scorer.run.add(found.forwards, 0.0, 0.0, False)  # what the peer spent on its own
    for genome in dict.fromkeys(tuple(g) for g in found.genomes):
        scorer(list(genome))
    return scorer.run


def variable_bounds(variable) -> tuple[int, int]:  # noqa: ANN001
    return int(variable.lower), int(variable.upper)


def genes_of(problem) -> list[tuple[str, str, int, int]]:  # noqa: ANN001
    """The genome's genes as the peers take them: (layer, 'input' or 'weight', low, high)."""
    genes = []
    for variable in problem.variables:
        layer, _, quantizer = variable.name.rpartition(".")
        genes.append((layer, quantizer.removesuffix("_quantizer"), *variable_bounds(variable)))
    return genes


def in_effective_bits(runs: dict[str, list[Run]], model, genes) -> dict[str, list[Run]]:  # noqa: ANN001
    """The runs with every configuration's cost in AutoQuantize's effective bits (its layers'
    mean of input and weight bits, averaged weighted by their weight elements; the
    constraint it optimises), what each method found unchanged; their fronts to be judged
    again, since the cheapest members differ in this cost."""
    from peer_modelopt import effective_bits

    costs: dict[tuple[int, ...], float] = {}
    converted: dict[str, list[Run]] = {}
    for name, group in runs.items():
        converted[name] = []
        for run in group:
            again = Run(scored_held_out=run.scored_held_out)
            for point, genome in zip(run.points, run.genomes, strict=True):
                cost = point[2]
                if genome is not None:
                    if genome not in costs:
                        costs[genome] = effective_bits(model, genes, genome)
                    cost = costs[genome]
                again.points.append((point[0], point[1], cost, point[3]))
                again.genomes.append(genome)
            again.ranks = list(run.ranks)
            converted[name].append(again)
    return converted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--budget", type=int, default=160, help="evaluations of NSGA-II")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of every search")
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES.names()),
        help="search strategies, each with the workload's initialization or a suffix naming "
        "one: surrogate+random, nsga2+sensitivity",
    )
    parser.add_argument("--generations", type=int, help="generations of `surrogate`")
    parser.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--without",
        default="",
        help="baselines to leave out (comma-separated): integer, uniform, random",
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="peer searches to run where installed (the `peers` extra): aimet, modelopt",
    )
    parser.add_argument(
        "--aimet-candidates",
        default="4,9",
        help="AIMET AMP's candidate sets to run, by size: 4, 9, 25 (peer_aimet.candidates)",
    )
    parser.add_argument(
        "--aimet-schemes",
        default="min_max,tf_enhanced",
        help="AIMET's encodings to run each candidate set with: min_max, tf_enhanced "
        "(peer_aimet.SCHEMES)",
    )
    parser.add_argument(
        "--aimet-results",
        metavar="DIR",
        help="keep each AIMET run's cache and counts in a folder of DIR, and continue a run "
        "from them when run again",
    )
    parser.add_argument(
        "--budgets",
        default=",".join(map(str, BUDGETS)),
        help="cost budgets of the best-accuracy table, as fractions of the reference cost",
    )
    parser.add_argument(
        "--effective-bits",
        action="store_true",
        help="print every table a second time with costs in AutoQuantize's effective bits "
        "(the cost its constraint counts: bits weighted by weight elements)",
    )
    parser.add_argument("--json", help="write every run's points here")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a workload setting, as the CLI's --set (e.g. "
        "problem.num_bits_lower_limit=4)",
    )
    parser.add_argument(
        "--summarise",
        nargs="+",
        metavar="JSON",
        help="run nothing: print the tables of runs saved with --json (several files: their "
        "runs together, at the first file's reference point)",
    )
    args = parser.parse_args()
    fractions = [float(f) for f in args.budgets.split(",")]
    if args.summarise:
        runs, reference, baseline = saved_runs(args.summarise)
        summarise(runs, reference, fractions, baseline)
        return

    workload, context = prepared_context(args.workload, args.set)
    problem, cost, reference = judged_problem(workload, context)
    higher = reference.higher
    bounds = [(int(v.lower), int(v.upper)) for v in problem.variables]
    high = max(upper for _, upper in bounds)
    peers = [n for n in args.peers.split(",") if n]
    sets = [int(n) for n in args.aimet_candidates.split(",") if n]
    schemes = tuple(n for n in args.aimet_schemes.split(",") if n)
    # first: the likelier to fail
    proposed = peer_runs(
        peers, context, problem, cost, sets, reference, schemes, args.aimet_results
    )
    runs = collect(args, workload, problem, cost, reference, bounds)
    runs.update(proposed)
    metric = getattr(workload.metric, "type", workload.metric)
    print(
        f"{workload.name}: {len(bounds)} quantizers, bits {bounds[0][0]}-{bounds[0][1]}, "
        f"{metric} / {cost}, reference point {reference[0]:.4f}, {cost} "
        f"{reference[1]:.0f}, {problem.batches.num_samples} samples per evaluation; "
        f"{args.seeds} seeds"
    )
    held_baseline, scores = None, {}
    if context.has_dataset("reevaluate"):
        held_baseline = judge_held_out(runs, problem, context, higher, scores)
    summarise(runs, reference, fractions, held_baseline)
    if args.effective_bits:
        converted = in_effective_bits(runs, context.build_model(), genes_of(problem))
        print(f"\nThe same runs with costs in AutoQuantize's effective bits (reference {high}):")
        if held_baseline is not None:
            judge_held_out(converted, problem, context, higher, scores)
        summarise(converted, reference._replace(cost=float(high)), fractions, held_baseline)
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(
                {
                    "reference": reference,
                    "runs": {k: [r.points for r in v] for k, v in runs.items()},
                    "ranks": {k: [r.ranks for r in v] for k, v in runs.items()},
                    "genomes": {k: [r.genomes for r in v] for k, v in runs.items()},
                    "held_out": {k: [r.held_out for r in v] for k, v in runs.items()},
                    "held_out_baseline": held_baseline,
                    "held_out_outcomes": {
                        ",".join(map(str, genome)): pack_values(hits.astype(float))
                        for genome, hits in HITS.items()
                    },
                },
                stream,
            )


def _entry(saved: list) -> tuple:
    """A held-out entry as a file saved it (older files: without rank and genome)."""
    cost, accuracy, held, *rest = saved
    rank = rest[0] if rest else None
    genome = tuple(rest[1]) if len(rest) > 1 and rest[1] is not None else None
    return (cost, accuracy, held, rank, genome)


def saved_runs(paths: list[str]) -> tuple[dict[str, list[Run]], Reference, float | None]:
    """The runs of files written with --json, the first file's reference point, and the
    float model's held-out score where the files judged the fronts on held-out data."""
    runs: dict[str, list[Run]] = {}
    reference, baseline = None, None
    for path in paths:
        with open(path) as stream:
            saved = json.load(stream)
        reference = reference or Reference(*saved["reference"])
        baseline = baseline if baseline is not None else saved.get("held_out_baseline")
        for key, packed in saved.get("held_out_outcomes", {}).items():
            values = unpack_values(packed)
            is_hits = set(np.unique(values)) <= {0.0, 1.0}
            HITS[tuple(int(g) for g in key.split(","))] = values.astype(bool) if is_hits else values
        held = saved.get("held_out", {})
        for name, group in saved["runs"].items():
            judged = held.get(name, [[] for _ in group])
            ranks = saved.get("ranks", {}).get(name, [[] for _ in group])
            runs.setdefault(name, []).extend(
                Run(
                    [tuple(p) for p in points],
                    [None] * len(points),
                    [_entry(h) for h in front],
                    ranks=list(ranked),
                )
                for points, front, ranked in zip(group, judged, ranks, strict=True)
            )
    return runs, reference, baseline


def collect(args, workload, problem, cost, reference, bounds) -> dict[str, list[Run]]:  # noqa: ANN001
    """Every method's runs, by name."""
    spec = workload.exploration
    pop, offsprings = spec.nsga.pop_size, spec.nsga.offsprings or spec.nsga.pop_size
    budget_generations = max(1, (args.budget - pop) // offsprings)
    runs: dict[str, list[Run]] = {}
    for method in filter(None, args.strategies.split(",")):
        # e.g. surrogate+random: the strategy with that first population (without a suffix,
        # the workload's exploration.initialization, `auto` by default)
        name, _, start = method.partition("+")
        seeded = sensitivity_start(problem, workload, start)
        generations = budget_generations
        if name == "surrogate":
            generations = args.generations or spec.nsga.generations
        nsga = spec.nsga.model_copy(update={"generations": generations})
        runs[method] = [
            search(problem, nsga, name, workload.seed + s, cost, sensitivity=seeded)
            for s in range(args.seeds)
        ]
    without = set(filter(None, args.without.split(","))) if args.baselines else set(BASELINES)
    if without - set(BASELINES):
        raise SystemExit(f"--without: baselines are {', '.join(BASELINES)}")
    if "integer" not in without:
        if reference.higher:  # its table is of accuracy drops
            runs["integer program (one-shot)"] = [integer_program(problem, cost, reference[0])]
        else:
            print("integer program: skipped (its table is of drops of a higher-is-better metric)")
    if "uniform" not in without:
        low, high = min(b for b, _ in bounds), max(h for _, h in bounds)
        uniform = Scorer(problem, cost)
        for bits in range(low, high + 1):
            uniform([min(max(bits, lo), hi) for lo, hi in bounds])
        runs["uniform bit widths"] = [uniform.run]
    if "random" not in without:
        runs["random search"] = []
        for s in range(args.seeds):
            rng, random = np.random.default_rng(workload.seed + s), Scorer(problem, cost)
            for _ in range(args.budget):
                random([rng.integers(lo, hi + 1) for lo, hi in bounds])
            runs["random search"].append(random.run)
    return runs


def mean_sd(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "never" if not values else "none"
    spread = statistics.stdev(found) if len(found) > 1 else 0.0
    missing = "" if len(found) == len(values) else f" ({len(found)}/{len(values)})"
    return f"{statistics.mean(found):.4f} +- {spread:.4f}{missing}"


def each_seed(values: list[float | None]) -> str:
    """One cell's value of every seed, "none" where a seed found nothing."""
    return ", ".join("none" if v is None else f"{v:.4f}" for v in values)


def held_out_hypervolume(run: Run, reference: Reference) -> float:
    """The hypervolume of the run's front (as selected) at its held-out accuracies: a member
    that falls short of the accuracy limit there counts for nothing."""
    higher = reference.higher
    points = [
        (0, h, c, h >= reference.accuracy if higher else h <= reference.accuracy)
        for c, _, h, *_ in run.held_out
    ]
    return hypervolume(points, reference)


def picked_within(run: Run, budget: float, higher: bool) -> float | None:
    """The held-out accuracy of the member a user of the method would pick within `budget`:
    the one best where it was selected (in what ranked it: the divergence, where it did)."""
    member = picked_member(run, budget, higher)
    return None if member is None else member[2]


def picked_member(run: Run, budget: float, higher: bool) -> tuple | None:
    """The held-out entry (cost, accuracy, held-out accuracy, rank, genome) of the member a
    user of the method would pick within `budget` (see `picked_within`)."""
    inside = [member for member in run.held_out if member[0] <= budget]
    if not inside:
        return None
    if any(member[3] is not None for member in inside):
        return min(inside, key=lambda member: member[3])
    key = lambda member: member[1:3]  # noqa: E731
    return max(inside, key=key) if higher else min(inside, key=key)


def paired_picks(runs: dict[str, list[Run]], budgets: list[float], higher: bool) -> list[str]:
    """Per method with several seeds and per budget, its picks paired on the held-out samples
    with the best single-run peer's pick there (the highest held-out pick of the rows re-scored
    here): the mean difference in samples, and the seeds a paired test (McNemar's exact test on
    the samples only one of the two gets right) finds distinctly behind or ahead."""
    from model_explorer.results.statistics import mcnemar, paired_means

    peers = {name: group[0] for name, group in runs.items() if "re-scored" in name}
    lines = []
    for name, group in runs.items():
        if len(group) < 2 or not peers:
            continue
        for budget in budgets:
            held = {p: picked_member(run, budget, higher) for p, run in peers.items()}
            held = {p: m for p, m in held.items() if m is not None and m[4] in HITS}
            if not held:
                continue
            best = (max if higher else min)(held, key=lambda p: held[p][2])
            theirs = HITS[held[best][4]]
            tests = []
            for run in group:
                mine = picked_member(run, budget, higher)
                if mine is not None and mine[4] in HITS:
                    compare = mcnemar if theirs.dtype == bool else paired_means
                    tests.append(compare(HITS[mine[4]], theirs))
            if not tests:
                continue
            samples = [t.difference * t.samples for t in tests]
            behind = sum(t.distinct and t.difference < 0 for t in tests)
            ahead = sum(t.distinct and t.difference > 0 for t in tests)
            lines.append(
                f"| {name} | {budget:g} | {best} | {np.mean(samples):+.1f} "
                f"({', '.join(f'{d:+.0f}' for d in samples)}) | {behind} | {ahead} | "
                f"{min(t.p_value for t in tests):.2g} |"
            )
    return lines


def summarise(
    runs: dict[str, list[Run]],
    reference: Reference,
    fractions: list[float],
    held_baseline: float | None = None,
) -> None:
    nsga = runs.get("nsga2")
    target = statistics.mean(run_hypervolume(r, reference) for r in nsga) if nsga else None
    third = statistics.mean(r.forwards for r in nsga) / 3 if nsga else None
    if nsga:
        print(f"NSGA-II: mean final HV {target:.4f}; a third of its sample-forwards: {third:,.0f}")
    print(
        "| method | runs | evaluations | sample-forwards | HV | HV within a third of NSGA-II's "
        "forwards | forwards to NSGA-II's HV (reached in) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, group in runs.items():
        evaluations = statistics.mean(len(r.points) for r in group)
        forwards = statistics.mean(r.forwards for r in group)
        final = mean_sd([run_hypervolume(r, reference) for r in group])
        at_third = mean_sd([within(r, third, reference) for r in group]) if third else ""
        reach, reached = "", ""
        if target is not None:
            found = [forwards_to_reach(r, target, reference) for r in group]
            hits = [f for f in found if f is not None]
            reach = f"{statistics.mean(hits):,.0f}" if hits else "never"
            reached = f" ({len(hits)}/{len(group)})"
        print(
            f"| {name} | {len(group)} | {evaluations:.0f} | {forwards:,.0f} | {final} | "
            f"{at_third} | {reach}{reached} |"
        )
    budgets = [f * reference[1] for f in fractions]
    print(
        f"\nBest feasible accuracy within a cost budget (fractions {fractions} of the reference):"
    )
    print("| method | " + " | ".join(f"cost <= {b:g}" for b in budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    seeds: list[str] = []
    for name, group in runs.items():
        found = [[run_best_within(r, b, reference.higher) for r in group] for b in budgets]
        print(f"| {name} | " + " | ".join(mean_sd(cell) for cell in found) + " |")
        for budget, cell in zip(budgets, found, strict=True):
            if len(cell) > 1:
                seeds.append(f"{name}, cost <= {budget:g}: {each_seed(cell)}")
    print("\nPer seed:\n" + "\n".join(seeds))
    if held_baseline is not None:
        held_out_tables(runs, reference, budgets, held_baseline)


def held_out_tables(
    runs: dict[str, list[Run]], reference: Reference, budgets: list[float], baseline: float
) -> None:
    """The same judgements on the held-out data: each run's front (as selected) at its
    held-out accuracies, and per budget the held-out accuracy of the member the method would
    pick there (its best where selected)."""
    print(f"\nOn the held-out data (no search selected on it; the float model: {baseline:.4f}):")
    print(
        "| method | HV where selected | HV held-out | "
        + " | ".join(f"picked within cost <= {b:g}" for b in budgets)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(budgets))
    seeds: list[str] = []
    for name, group in runs.items():
        selected = mean_sd([run_hypervolume(r, reference) for r in group])
        held = mean_sd([held_out_hypervolume(r, reference) for r in group])
        found = [[picked_within(r, b, reference.higher) for r in group] for b in budgets]
        cells = " | ".join(mean_sd(cell) for cell in found)
        print(f"| {name} | {selected} | {held} | {cells} |")
        for budget, cell in zip(budgets, found, strict=True):
            if len(cell) > 1:
                seeds.append(f"{name}, cost <= {budget:g}, held-out: {each_seed(cell)}")
    print("\nPer seed, held-out:\n" + "\n".join(seeds))
    paired = paired_picks(runs, budgets, reference.higher)
    if paired:
        print(
            "\nEach pick against the best peer's pick at its budget, paired on the held-out "
            "samples (difference in samples, each seed's; seeds distinctly behind or ahead, "
            "p < 0.05):"
        )
        print("| method | budget | best peer there | difference | behind | ahead | smallest p |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(paired))


def run_best_within(run: Run, budget: float, higher: bool = True) -> float | None:
    """The accuracy where selected of the member the run would pick within `budget`: of its
    front as chosen, the best in what ranked it."""
    if not run.ranked:
        return best_within(run.points, budget, higher)
    inside = [i for i in run.chosen(None, higher) if run.points[i][2] <= budget]
    return run.points[min(inside, key=lambda i: run.ranks[i])][1] if inside else None


def best_within(points, budget: float, higher: bool = True) -> float | None:  # noqa: ANN001
    """The best accuracy among a run's feasible points that cost at most `budget`."""
    inside = [a for _, a, c, ok in points if ok and c <= budget]
    return (max(inside) if higher else min(inside)) if inside else None


if __name__ == "__main__":
    main()
