"""The search benchmark's peers (benchmarks/peer_*.py): a peer that is not installed is skipped
with one line, and modelopt's AutoQuantize (installed with the test extras) maps its per-layer
formats onto the genome as the budgets demand, by hand: at 2 effective bits only the 2-bit
format fits, at 8 nothing needs to be cut."""

from __future__ import annotations

import copy
import importlib
import json
import pickle
import sys

import numpy as np
import pytest
import torch
from torch import nn

from conftest import REPOSITORY


@pytest.fixture
def benchmarks(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.syspath_prepend(str(REPOSITORY / "benchmarks"))


def test_a_peer_that_is_not_installed_is_one_line(benchmarks, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "aimet_torch", None)  # as if aimet-torch were missing
    aimet = importlib.import_module("peer_aimet")
    assert aimet.available().startswith("aimet-torch does not import")
    bench = importlib.import_module("bench_search_quality")
    assert bench.peer_runs(["aimet"], None, None, "weighted_bits", [4], None) == {}
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aimet: skipped (aimet-torch does not import")


@pytest.mark.parametrize("metric", ["top1", "cosine"])
def test_autoquantize_meets_its_budgets_on_the_genome(benchmarks, metric: str) -> None:
    pytest.importorskip("modelopt.torch.quantization", reason="the modelopt extra is missing")
    peer = importlib.import_module("peer_modelopt")
    scoring = importlib.import_module("peer_result").Scoring(metric)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    inputs = torch.randn(64, 6)
    with torch.no_grad():  # labels, or the float outputs as a label-free metric's targets
        targets = [model(inputs[i : i + 32]) for i in (0, 32)]
    if metric == "top1":
        targets = [t.argmax(1) for t in targets]
    batches = [(inputs[i : i + 32], t) for i, t in zip((0, 32), targets, strict=True)]
    genes = [(layer, role, 2, 8) for layer in ("0", "2") for role in ("input", "weight")]
    found = peer.propose(model, batches, batches, genes, [2.0, 8.0], seed=0, scoring=scoring)
    assert found.genomes == [[2, 2, 2, 2], [8, 8, 8, 8]]
    assert metric in found.notes
    # One calibration pass per format over 64 samples, then 64 scored samples each counted
    # as a forward and a backward plus one re-run per format.
    formats = len(peer.candidate_pairs(genes, peer.DEFAULT_LEVELS))
    assert found.forwards == 64 * formats + 64 * (2 + formats)


def test_autoquantize_scores_its_proposals_with_its_own_quantizers(benchmarks) -> None:
    """At 8 effective bits every layer takes the 8-bit format: modelopt's own score of that
    proposal is its documented INT8 configuration (per-channel weights, per-tensor inputs, max
    calibration) on the same calibration batches, on the evaluation and the held-out data."""
    mtq = pytest.importorskip("modelopt.torch.quantization", reason="modelopt is missing")
    peer = importlib.import_module("peer_modelopt")
    scoring = importlib.import_module("peer_result").Scoring("top1")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    inputs = torch.randn(96, 6) * torch.linspace(0.1, 4.0, 6)
    with torch.no_grad():
        labels = (model(inputs) + 0.3 * torch.randn(96, 3)).argmax(1)  # not every one right
    batches = [(inputs[i : i + 32], labels[i : i + 32]) for i in (0, 32)]
    held_out = [(inputs[64:], labels[64:])]
    genes = [(layer, role, 2, 8) for layer in ("0", "2") for role in ("input", "weight")]
    found = peer.propose(
        model, batches, batches, genes, [8.0], seed=0, scoring=scoring, held_out=held_out
    )
    assert found.genomes == [[8, 8, 8, 8]]

    def calibrate(module: nn.Module) -> None:
        for x, _ in batches:
            module(x)

    with torch.no_grad():
        reference = mtq.quantize(copy.deepcopy(model), mtq.INT8_DEFAULT_CFG, calibrate)
    expected = (scoring.score(reference, batches), scoring.score(reference, held_out))
    assert found.own == [expected]
    assert expected != (scoring.score(model, batches), scoring.score(model, held_out))


def test_aimet_s_curve_points_take_the_held_out_score_of_their_own_evaluation(
    benchmarks,
) -> None:
    """Phase 2 evaluates the baseline, then each curve point in order, then the final state;
    a point's held-out score is the one measured with its own evaluation, also where two
    points tie on the evaluation data."""
    aimet = importlib.import_module("peer_aimet")
    evaluations = [(0.99, 0.98), (0.97, 0.96), (0.97, 0.95), (0.90, 0.91), (0.90, 0.93)]
    points = [0.97, 0.97, 0.90]
    assert aimet.held_out_of_points(points, evaluations) == [0.96, 0.95, 0.91]
    assert aimet.held_out_of_points([0.5, 0.97], evaluations) == [None, 0.96]


def test_an_aimet_run_cut_short_continues_with_its_counts_and_held_out_scores(
    benchmarks, tmp_path
) -> None:
    """A resumed run: AIMET's cache skips the curve points evaluated before the cut, so their
    held-out scores and the passes, samples and seconds spent come from the records the first
    process kept; the resumed phase 2 evaluates its baseline again before the next point."""
    aimet = importlib.import_module("peer_aimet")
    first = aimet._Records(str(tmp_path))
    first.passes["evaluations"] += 12
    first.phase2 += [(0.99, 0.98), (0.97, 0.96)]
    first.save(samples=640, seconds=30.0)  # then the process is killed
    second = aimet._Records(str(tmp_path))
    assert second.passes["evaluations"] == 12 and (second.samples, second.seconds) == (640, 30.0)
    second.phase2 += [(0.99, 0.98), (0.97, 0.95), (0.90, 0.91)]
    second.save(samples=200, seconds=10.0)
    assert aimet.held_out_of_points([0.97, 0.97, 0.90], second.phase2) == [0.96, 0.95, 0.91]
    third = aimet._Records(str(tmp_path))
    assert (third.samples, third.seconds, len(third.phase2)) == (840, 40.0, 5)
    assert aimet._Records(None).path is None
    # A pickle of AIMET's cache cut short by the kill is removed, the whole ones kept.
    (tmp_path / ".cache").mkdir()
    whole = pickle.dumps([(0.5, 0.97, "group", "candidate")] * 50)
    (tmp_path / ".cache" / "accuracy_list.pkl").write_bytes(whole)
    (tmp_path / ".cache" / "pareto_list.pkl").write_bytes(whole[: len(whole) // 2])
    assert aimet.drop_unreadable_cache(str(tmp_path)) == ["pareto_list.pkl"]
    assert [p.name for p in (tmp_path / ".cache").iterdir()] == ["accuracy_list.pkl"]


def test_a_peer_s_own_scores_are_judged_without_rescoring(benchmarks) -> None:
    """The run of a peer's own quantizer takes the held-out scores its quantizer measured:
    the problem is never asked to evaluate, and a front member without one counts nothing."""
    bench = importlib.import_module("bench_search_quality")
    result = importlib.import_module("peer_result").PeerResult

    class Costs:
        def known_values(self, genome):  # noqa: ANN001, ANN202
            return {"bits": sum(genome)}

    found = result([[2, 2], [4, 4], [4, 4], [8, 8]], 500, 1.0, "", [])
    found.own = [(0.80, 0.70), (0.95, None), (0.95, 0.9), (0.97, 0.96)]
    run = bench.own_run(found, Costs(), "bits", bench.Reference(0.9, 16.0))
    assert run.forwards == 500 and len(run.points) == 4  # [4, 4] once
    assert [p[3] for p in run.points[1:]] == [False, True, True]  # 0.80 below the limit

    def never(genome):  # noqa: ANN001, ANN202
        raise AssertionError(f"{genome} re-scored")

    bench.judge_fronts({"peer": [run]}, never, higher=True)
    # [4, 4]'s held-out score was not measured
    assert run.held_out == [(16.0, 0.97, 0.96, None, (8, 8))]
    ours = bench.Run()
    for genome, accuracy in (((4, 4), 0.95), ((8, 8), 0.97)):
        ours.add(10, accuracy, sum(genome), True, genome)
    bench.judge_fronts({"ours": [ours]}, lambda genome: sum(genome) / 100, higher=True)
    assert ours.held_out == [(8, 0.95, 0.08, None, (4, 4)), (16, 0.97, 0.16, None, (8, 8))]


def test_a_run_ranked_by_divergence_is_judged_on_the_front_it_chose(benchmarks) -> None:
    """A run that ranked by the divergence chose [4, 4] at 8 bits (divergence 0.02) over the
    luckier [5, 3] (top-1 0.99, divergence 0.05): its hypervolume where selected, its pick and
    its held-out front are [4, 4]'s; ranked by top-1 the same points give [5, 3]'s."""
    bench = importlib.import_module("bench_search_quality")
    points = (((4, 4), 0.97, 0.02), ((5, 3), 0.99, 0.05), ((8, 8), 0.98, 0.01))
    ranked, plain = bench.Run(), bench.Run()
    for genome, accuracy, rank in points:
        ranked.add(10, accuracy, sum(genome), True, genome, rank)
        plain.add(10, accuracy, sum(genome), True, genome)
    reference = bench.Reference(0.9, 20.0)
    # by hand: [4, 4] from 8 to 16 bits at 0.97, [8, 8] from 16 to 20 at 0.98; over 20 x 0.1
    hand = ((16 - 8) * (0.97 - 0.9) + (20 - 16) * (0.98 - 0.9)) / (20 * 0.1)
    assert bench.run_hypervolume(ranked, reference) == pytest.approx(hand)
    assert bench.run_hypervolume(plain, reference) == pytest.approx(12 * 0.09 / 2)
    assert bench.run_best_within(ranked, 8.0) == 0.97
    assert bench.run_best_within(plain, 8.0) == 0.99
    held = {(4, 4): 0.96, (5, 3): 0.93, (8, 8): 0.97}
    bench.judge_fronts({"ranked": [ranked], "plain": [plain]}, held.get, higher=True)
    assert [m[:3] for m in ranked.held_out] == [(8, 0.97, 0.96), (16, 0.98, 0.97)]
    assert bench.picked_within(ranked, 10.0, True) == 0.96
    assert bench.picked_within(plain, 10.0, True) == 0.93


def test_the_peers_score_with_the_workloads_metric(benchmarks) -> None:
    """Scoring against hand computations in numpy: top-1 and cross entropy against labels;
    cosine (1 - cosine as the loss), kl (negated as a score) and agreement (the KL divergence
    to the float outputs as its loss, since an argmax has no gradient) against float outputs."""
    scoring = importlib.import_module("peer_result").Scoring
    torch.manual_seed(1)
    output, reference = torch.randn(8, 5, requires_grad=True), torch.randn(8, 5)
    labels = reference.argmax(1)
    o, r = output.detach().double().numpy(), reference.double().numpy()

    def log_softmax(x: np.ndarray) -> np.ndarray:
        shifted = x - x.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    cosines = (o * r).sum(1) / np.linalg.norm(o, axis=1) / np.linalg.norm(r, axis=1)
    kl = (np.exp(log_softmax(r)) * (log_softmax(r) - log_softmax(o))).sum(1)
    entropy = -log_softmax(o)[np.arange(8), labels.numpy()]
    same = (o.argmax(1) == r.argmax(1)).mean()
    model = nn.Identity()

    def check(metric: str, targets: torch.Tensor, score: float, loss: float) -> None:
        found = scoring(metric)
        assert found.score(
            model, [(output[:3].detach(), targets[:3]), (output[3:].detach(), targets[3:])]
        ) == pytest.approx(score)
        value = found.loss(output, targets)
        assert value.item() == pytest.approx(loss, rel=1e-5)
        assert value.requires_grad  # a gradient for AutoQuantize's scores

    check("top1", labels, (o.argmax(1) == labels.numpy()).mean(), entropy.mean())
    check("cosine", reference, cosines.mean(), 1 - cosines.mean())
    check("kl", reference, -kl.mean(), kl.mean())
    check("agreement", reference, same, kl.mean())


def test_aimet_candidate_sets_span_the_genes_bit_range(benchmarks) -> None:
    """On 2-8 bits, AIMET's documented ladder and the pairs of {8, 4, 2} / {8, 6, 4, 3, 2};
    on 4-10 bits, levels spaced geometrically by hand: 4 x 2.5^(k/2) = 4, 6.3, 10 and
    4 x 2.5^(k/4) = 4, 5.0, 6.3, 7.9, 10."""
    candidates = importlib.import_module("peer_aimet").candidates
    assert candidates(4, 2, 8) == [(8, 8), (4, 8), (4, 4), (2, 4)]
    assert candidates(9, 2, 8) == [(a, w) for a in (8, 4, 2) for w in (8, 4, 2)]
    assert candidates(25, 2, 8) == [(a, w) for a in (8, 6, 4, 3, 2) for w in (8, 6, 4, 3, 2)]
    assert candidates(4, 4, 10) == [(10, 10), (6, 10), (6, 6), (4, 6)]
    assert candidates(25, 4, 10) == [(a, w) for a in (10, 8, 6, 5, 4) for w in (10, 8, 6, 5, 4)]
    with pytest.raises(ValueError, match="4, 9 or 25"):
        candidates(16, 2, 8)


def test_aimet_gets_the_model_unprepared_where_tracing_fails(benchmarks) -> None:
    """A model torch.fx cannot trace (a planted failure of prepare_model) goes to AIMET as it
    is, its eval-mode dropouts made identities: the same function, and the reason in the notes."""
    prepared = importlib.import_module("peer_aimet")._prepared
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Sequential(nn.Dropout1d(0.2)))
    model.eval()
    inputs = torch.randn(3, 4)
    expected = model(inputs)

    def untraceable(module: nn.Module) -> nn.Module:
        raise TypeError("slice indices must be integers")

    found, notes = prepared(model, untraceable)
    assert found is model
    assert not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in found.modules())
    torch.testing.assert_close(found(inputs), expected)
    assert notes[0].startswith("2 dropouts") and "slice indices must be integers" in notes[1]
    found, notes = prepared(model, lambda module: "traced")
    assert found == "traced" and notes == []  # no dropout left to replace, prepared as is


def test_bench_hypervolume_for_a_metric_where_lower_is_better(benchmarks) -> None:
    """By hand: with kl bounded at 0.25 and a reference cost of 800, a feasible point at kl 0.1
    and cost 400 dominates (0.25 - 0.1) x (800 - 400) = 60 of the 0.25 x 800 box; a second at
    kl 0.2 and cost 200 adds (0.25 - 0.2) x (400 - 200) = 10; an infeasible one adds nothing."""
    bench = importlib.import_module("bench_search_quality")
    reference = bench.Reference(0.25, 800.0, higher=False)
    points = [(10, 0.1, 400.0, True), (20, 0.2, 200.0, True), (30, 0.0, 0.0, False)]
    assert bench.hypervolume(points[:1], reference) == pytest.approx(60 / 200)
    assert bench.hypervolume(points, reference) == pytest.approx(70 / 200)
    assert bench.best_within(points, 400.0, higher=False) == 0.1
    assert bench.best_within(points, 300.0, higher=False) == 0.2
    assert bench.best_within(points, 100.0, higher=False) is None


def test_bench_summarises_runs_saved_in_several_files(benchmarks, tmp_path, capsys) -> None:
    bench = importlib.import_module("bench_search_quality")
    reference = bench.Reference(0.25, 800.0, higher=False)
    first = {
        "reference": list(reference),
        "runs": {"ours": [[[10, 0.1, 400.0, True]]]},
        # the front member at cost 400, kl 0.1 where selected, 0.15 on the held-out data
        "held_out": {"ours": [[[400.0, 0.1, 0.15]]]},
        "held_out_baseline": 0.05,
    }
    second = {"reference": list(reference), "runs": {"peer": [[[50, 0.2, 200.0, True]]]}}
    paths = []
    for index, saved in enumerate((first, second)):
        paths.append(tmp_path / f"{index}.json")
        paths[-1].write_text(json.dumps(saved))
    runs, found, baseline = bench.saved_runs([str(p) for p in paths])
    assert found == reference and set(runs) == {"ours", "peer"} and baseline == 0.05
    bench.summarise(runs, found, [0.5], baseline)
    printed = capsys.readouterr().out
    assert "| ours | 1 | 1 | 10 | 0.3000" in printed  # 60 of the 200 box, as above
    assert "| peer | 1 | 1 | 50 | 0.1500" in printed  # (0.25 - 0.2) x (800 - 200) = 30
    # Held out: (0.25 - 0.15) x (800 - 400) = 40 of the 200 box; picked within 400: 0.15. The
    # peer's file judged nothing there.
    assert "the float model: 0.0500" in printed
    assert "| ours | 0.3000 +- 0.0000 | 0.2000 +- 0.0000 | 0.1500 +- 0.0000 |" in printed
    assert "| peer | 0.1500 +- 0.0000 | 0.0000 +- 0.0000 | none |" in printed


class _SubclassedLinear(nn.Linear):
    """A Linear subclass with its own forward, as EfficientNet-Lite's convolutions subclass
    Conv2d with a forward that pads and calls F.conv2d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


def test_autoquantize_searches_layers_of_subclassed_types(benchmarks) -> None:
    """modelopt's registry takes a subclass only where it keeps its base's forward: without
    registering this one, both layers stay float and outside the search (the genome at its
    upper bounds at every budget)."""
    pytest.importorskip("modelopt.torch.quantization", reason="the modelopt extra is missing")
    peer = importlib.import_module("peer_modelopt")
    scoring = importlib.import_module("peer_result").Scoring("top1")
    torch.manual_seed(0)
    model = nn.Sequential(_SubclassedLinear(6, 16), nn.ReLU(), _SubclassedLinear(16, 3)).eval()
    inputs = torch.randn(64, 6)
    with torch.no_grad():
        labels = model(inputs).argmax(1)
    batches = [(inputs[i : i + 32], labels[i : i + 32]) for i in (0, 32)]
    genes = [(layer, role, 2, 8) for layer in ("0", "2") for role in ("input", "weight")]
    found = peer.propose(model, batches, batches, genes, [2.0, 8.0], seed=0, scoring=scoring)
    assert found.genomes == [[2, 2, 2, 2], [8, 8, 8, 8]]


def test_the_front_selection_benchmark_splits_and_rescores(benchmarks) -> None:
    """The two halves hold every sample once, each in dataset order; the front chosen on the
    second half takes that half's scores, feasible configurations only, each once."""
    selection = importlib.import_module("bench_front_selection")
    cache_type = importlib.import_module("model_explorer.datasets.cache").TensorCache
    inputs = torch.arange(10.0).view(10, 1)
    first, second = selection.halves(cache_type(inputs, torch.arange(10), 4))
    merged = torch.cat([first.inputs, second.inputs]).flatten()
    assert sorted(merged.tolist()) == list(range(10)) and first.num_samples == 5
    for half in (first, second):
        assert torch.equal(half.inputs.flatten(), half.inputs.flatten().sort().values)
        assert torch.equal(half.targets.float(), half.inputs.flatten())
    bench = importlib.import_module("bench_search_quality")
    run = bench.Run()
    for genome, feasible in (((2, 2), True), ((4, 4), False), ((2, 2), True), ((8, 8), True)):
        run.add(10, 0.9, sum(genome), feasible, genome)

    class Problem:  # scores on "the other half": the genome's first gene / 10
        def evaluate(self, genome):  # noqa: ANN001, ANN202
            values = {"accuracy": float(genome[0]) / 10, "bits": float(sum(genome))}
            extra = {"samples": 5}
            return None, type("E", (), {"values": values, "complete": True, "extra": extra})

        def feasible(self, values) -> bool:  # noqa: ANN001
            return values["accuracy"] >= 0.5

    chosen = selection.chosen_on(run, Problem(), "bits")
    assert chosen.forwards == 40 + 10  # the search's 40, then two configurations of 5
    assert [p[1:] for p in chosen.points[1:]] == [(0.2, 4.0, False), (0.8, 16.0, True)]


def test_runs_in_autoquantize_s_effective_bits(benchmarks) -> None:
    """By hand: a layer of 6 x 16 weights and one of 16 x 3; input and weight bits of a
    layer averaged, the layers weighted by their weight elements (96 and 48)."""
    bench = importlib.import_module("bench_search_quality")
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    genes = [(layer, role, 2, 8) for layer in ("0", "2") for role in ("input", "weight")]
    run = bench.Run()
    run.add(100, 0.0, 0.0, False)  # spent without a configuration
    run.add(10, 0.9, 20.0, True, (8, 4, 2, 2))
    converted = bench.in_effective_bits({"m": [run]}, model, genes)["m"][0]
    expected = (96 * (8 + 4) / 2 + 48 * (2 + 2) / 2) / (96 + 48)
    assert converted.points == [(100, 0.0, 0.0, False), (110, 0.9, expected, True)]
    assert converted.genomes == run.genomes and run.points[1][2] == 20.0


def test_aimet_s_child_convolutions_take_the_layer_they_were_made_from(benchmarks) -> None:
    """AIMET's model preparer makes the F.conv2d call of a Conv2d subclass's forward (EfficientNet-
    Lite's Conv2dStaticSamePadding) a child module, whose weight quantizer AIMET's groups
    name: our layer maps to that child, a layer with its own weight quantizer to itself, and
    one with none anywhere stays as it is (its genes then at the baseline)."""
    names = importlib.import_module("peer_aimet")._aimet_names

    class Quantized(nn.Module):
        def __init__(self, weighted: bool) -> None:
            super().__init__()
            self.param_quantizers = nn.ModuleDict({"weight": nn.Identity()} if weighted else {})

    model = nn.Module()
    model.add_module("same_padding", nn.Module())
    model.same_padding.add_module("static_padding", nn.Identity())
    model.same_padding.add_module("module_conv2d_1", Quantized(True))
    model.add_module("plain", Quantized(True))
    model.add_module("unquantized", Quantized(False))
    found = names(model, ["same_padding", "plain", "unquantized"])
    assert found == {
        "same_padding": "same_padding.module_conv2d_1",
        "plain": "plain",
        "unquantized": "unquantized",
    }


def test_picks_are_paired_with_the_best_peers_pick_on_the_held_out_samples(benchmarks) -> None:
    """Two seeds' picks within 8 bits against the peer whose pick there is best: the first
    loses 12 samples the peer gets right and gains none (McNemar p = 2 x 0.5^12: distinctly
    behind), the second differs from it on one sample (p = 1); by hand."""
    bench = importlib.import_module("bench_search_quality")
    n = 100
    peer_hits = np.ones(n, dtype=bool)
    behind, level = peer_hits.copy(), peer_hits.copy()
    behind[:12] = False
    level[0] = False
    bench.HITS.clear()
    bench.HITS.update({(4, 4): peer_hits, (3, 5): behind, (5, 3): level, (2, 2): ~peer_hits})
    peer, worse = bench.Run(), bench.Run()
    peer.held_out = [(8, 0.99, 1.0, None, (4, 4))]
    worse.held_out = [(8, 0.99, 0.0, None, (2, 2))]
    ours = [bench.Run(), bench.Run()]
    ours[0].held_out = [(8, 0.9, 0.88, 0.01, (3, 5))]
    ours[1].held_out = [(8, 0.9, 0.99, 0.02, (5, 3))]
    runs = {"ours": ours, "P (re-scored here)": [peer], "W (re-scored here)": [worse]}
    (line,) = bench.paired_picks(runs, [8.0], higher=True)
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[:3] == ["ours", "8", "P (re-scored here)"]
    assert cells[3] == "-6.5 (-12, -1)"
    assert cells[4:6] == ["1", "0"]
    assert float(cells[6]) == pytest.approx(2 * 0.5**12, rel=1e-2)
    bench.HITS.clear()
