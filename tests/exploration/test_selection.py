"""Selection by divergence: a front chosen by the mean KL divergence from the float model keeps
a planted lucky candidate off it (one that gets a few more samples right by chance, its outputs
far from the float model's), which a front chosen by top-1 takes; hypervolumes and curves judge
that front in accuracy; per-sample outcomes stay with the front members only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_results_analysis import synthetic_result
from torch import nn

from model_explorer.datasets import TensorCache
from model_explorer.exploration import Explorer
from model_explorer.exploration.spec import NSGASpec
from model_explorer.problems import Objective, Variable
from model_explorer.problems.base import ModelProblem
from model_explorer.problems.options import QuantizationOptions
from model_explorer.results.confidence import Outcomes, front_confidence

SAMPLES = 200


class Table(nn.Module):
    """Returns, for each input row index, the scores of the configuration in effect."""

    def __init__(self, scores: list[torch.Tensor]) -> None:
        super().__init__()
        self.table, self.chosen = scores, 0
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.table[self.chosen][index.long()]


class Tabled(ModelProblem):
    """One gene choosing among tabled outputs, each at a given cost."""

    name = "tabled"

    def __init__(self, scores: list[torch.Tensor], costs: list[float], labels: torch.Tensor):
        self.model = Table(scores)
        self.batches = TensorCache(torch.arange(SAMPLES), labels, 50)
        self.metric = "top1"
        self.options = QuantizationOptions()
        self.costs = costs
        self.variables = [Variable("layer.weight_quantizer", 0, len(scores) - 1)]
        self.objectives = [Objective("accuracy", True), Objective("bits")]
        self.constraints = []
        self.minimum_accuracy = None

    def apply_plan(self, plan) -> None:  # noqa: ANN001
        self.model.chosen = int(plan["layer"]["weight_bits"])

    def known_values(self, configuration) -> dict[str, float]:  # noqa: ANN001
        return {"bits": self.costs[int(configuration[0])]}

    def measure(self, configuration):  # noqa: ANN001, ANN201
        plan = self.plan(configuration)
        self.apply_plan(plan)
        known = self.known_values(configuration)
        return self.evaluation(self.score(known), known, plan)


def planted() -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, list[int]]:
    """The float model's scores, the candidates' and the labels: 20 samples mislabelled for
    the float model (top-1 0.9). Candidate 0 (cost 10) is close to the float model; candidate 1
    (cost 10 too) is the float model at a fifth of its confidence (the same classes, far in
    KL) that by luck gets 3 of the mislabelled samples right; candidate 2, at cost 20, is the
    float model itself."""
    generator = torch.Generator().manual_seed(0)
    reference = 3 * torch.randn(SAMPLES, 10, generator=generator)
    labels = reference.argmax(1)
    wrong = torch.randperm(SAMPLES, generator=generator)[:20]
    labels[wrong] = (labels[wrong] + 1) % 10
    close = reference + 0.05 * torch.randn(SAMPLES, 10, generator=generator)
    lucky = reference * 0.2
    lucky[wrong[:3], labels[wrong[:3]]] += 100.0
    dear = reference.clone()
    return reference, [close, lucky, dear], labels, [10.0, 10.0, 20.0]


def front_ids(selection: str) -> tuple[set[int], object]:
    reference, scores, labels, costs = planted()
    problem = Tabled(scores, costs, labels)
    if selection == "kl":
        problem.rank_by_divergence(lambda: reference)
    nsga = NSGASpec(pop_size=6, offsprings=6, generations=2)
    result = Explorer(problem, nsga, seed=0).run()
    by_configuration = {r["configuration"][0]: r for r in result.records}
    return {i.configuration[0] for i in result.pareto_front()}, (result, by_configuration)


def test_a_lucky_noisy_candidate_joins_a_top1_front_and_not_a_divergence_front() -> None:
    by_top1, (result, records) = front_ids("accuracy")
    assert records[1]["values"]["accuracy"] == pytest.approx(0.915)  # 3 samples above 0.9
    assert records[0]["values"]["accuracy"] <= 0.9
    # the lucky one dominates the close one at its cost, and even the float model's own
    # outputs at twice the cost: the winner's curse in one search
    assert by_top1 == {1}
    by_kl, (result, records) = front_ids("kl")
    assert by_kl == {0, 2}
    assert records[1]["values"]["kl"] > 10 * records[0]["values"]["kl"]
    # the accuracy is still measured and recorded, and the front judged in it
    assert [name for name, _ in result.judged] == ["accuracy", "bits"]
    assert result.selection == "kl"
    reference = {"accuracy": 0.5, "bits": 20.0}
    hand = (records[0]["values"]["accuracy"] - 0.5) * (20.0 - 10.0)  # member 2 sits at 20
    assert result.hypervolume(reference) == pytest.approx(hand)


def test_outcomes_stay_with_the_front_and_give_its_intervals() -> None:
    _, (result, records) = front_ids("kl")
    assert "outcomes" not in records[1]["extra"]  # dominated: its outcomes dropped
    front = sorted(result.pareto_front(), key=lambda i: i.values["bits"])
    outcomes = Outcomes.of(front[0].extra["outcomes"])
    assert outcomes is not None and len(outcomes.hits) == SAMPLES
    assert outcomes.hits.mean() == pytest.approx(front[0].values["accuracy"])
    assert outcomes.kl.mean() == pytest.approx(front[0].values["kl"], rel=1e-5)
    figures = front_confidence(result, front)
    assert figures[0].accuracy.low < front[0].values["accuracy"] < figures[0].accuracy.high
    assert figures[1].against_cheaper is not None  # the dearer member paired with the cheaper


def test_the_curves_judge_the_front_the_divergence_chose() -> None:
    """A record that is better in top-1 but not in the divergence never counts in the
    hypervolume of a result ranked by divergence, by generation or by sample-forwards."""
    points = [
        {"accuracy": 0.90, "kl": 0.01, "bits": 10.0},
        {"accuracy": 0.95, "kl": 0.20, "bits": 10.0},  # dominated in kl: off the front
        {"accuracy": 0.97, "kl": 0.001, "bits": 20.0},
    ]
    result = synthetic_result(points, [("kl", False), ("bits", False)])
    result.problem["selection"] = "kl"
    result.problem["constraints"] = [{"name": "accuracy", "minimum": 0.5, "maximum": None}]
    reference = {"accuracy": 0.5, "bits": 30.0}
    hand = (0.90 - 0.5) * (20.0 - 10.0) + (0.97 - 0.5) * (30.0 - 20.0)
    assert result.hypervolume(reference) == pytest.approx(hand)
    assert result.hypervolume_by_generation(reference)[-1][1] == pytest.approx(hand)
    assert result.hypervolume_by_samples(reference)[-1][1] == pytest.approx(hand)
    # ranked by top-1 instead, the second record would have counted
    result.problem["selection"] = "accuracy"
    assert result.hypervolume(reference, ["accuracy", "bits"]) > hand


def test_window_keeps_the_best_ranks_and_the_newest_among_equals() -> None:
    from model_explorer.exploration import surrogate

    class Two:
        objectives = [Objective("a"), Objective("b")]

        def objective_vector(self, values):  # noqa: ANN001, ANN202
            return np.array([values["a"], values["b"]])

    rng = np.random.default_rng(0)
    records = [{"values": {"a": float(a), "b": float(b)}} for a, b in rng.random((600, 2))]
    kept = surrogate.window(Two(), records)
    assert len(kept) == surrogate.WINDOW
    positions = [records.index(r) for r in kept]
    assert positions == sorted(positions)  # in recorded order
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    fronts = NonDominatedSorting().do(
        np.array([[r["values"]["a"], r["values"]["b"]] for r in records])
    )
    rank = {int(i): level for level, members in enumerate(fronts) for i in members}
    worst_kept = max(rank[p] for p in positions)
    assert all(rank[i] > worst_kept - 1 for i in range(600) if i not in positions)
    assert all(rank[p] <= rank[i] for p in positions for i in range(600) if i not in positions)
    assert surrogate.window(Two(), records[:10]) == records[:10]


def test_the_sensitivity_table_of_a_problem_ranked_by_divergence_resolves_every_quantizer(
    trained_digits, tmp_path
) -> None:  # noqa: ANN001
    """On the default workload at 2 bits, the top-1 table leaves quantizers at no drop it can
    resolve; the divergence's table gives each a positive damage, each the mean KL of the model
    with only that quantizer on against the float model, computed here with torch's kl_div."""
    from model_explorer.operations.explore import measure_baseline, minimum_accuracy
    from model_explorer.operations.rebuild import build_problem
    from model_explorer.quantization.sensitivity import layer_sensitivity
    from tests_support import calibrated_digits

    context, _ = calibrated_digits(trained_digits, tmp_path)
    minimum = minimum_accuracy(context.workload.problem.options, measure_baseline(context))
    problem = build_problem(context, minimum)
    assert problem.selection == "kl"
    batches, metric = problem.sensitivity_scoring()
    assert metric == "kl"
    table = layer_sensitivity(problem.model, batches, metric, 2)
    plain = layer_sensitivity(problem.model, problem.batches, problem.metric, 2)
    assert any(row.drop <= 0 for row in plain.rows)
    assert all(row.drop > 0 for row in table.rows)
    inputs = problem.batches.inputs
    with torch.no_grad():
        reference = context.build_model()(inputs).log_softmax(1)
        for row in table.rows[:3]:
            with problem.model.preserved_settings():
                problem.model.set_enabled(False)
                quantizer = problem.model.quantizers[row.name]
                quantizer.num_bits, quantizer.enabled = 2, True
                log_q = problem.model(inputs).log_softmax(1)
            expected = nn.functional.kl_div(log_q, reference, log_target=True, reduction="none")
            assert row.drop == pytest.approx(float(expected.sum(1).mean()), rel=1e-4)
