"""`model-explorer debug`: per-layer SQNRs against onnxruntime's own `qdq_loss_debug` on the
exported file, planted faults found where they were planted, the repair against brute force on
a case small enough to enumerate and, on resnet20_digits, a repaired individual that holds
when exported and scored in onnxruntime; and its bad input, one sentence each."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import write_workload
from model_explorer.analysis.debug import api as debug_api
from model_explorer.analysis.debug.errors import SQNR, layer_errors
from model_explorer.analysis.debug.repair import AlreadyMeets, Unreachable, repair
from model_explorer.cli import main
from model_explorer.results import ExplorationResult
from tests_support import calibrated_digits

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
from onnxruntime.quantization import CalibrationDataReader, qdq_loss_debug  # noqa: E402


def test_sqnr_is_onnxruntimes_over_every_batch() -> None:
    generator = np.random.default_rng(0)
    references = [generator.normal(size=(4, 3, 5)).astype(np.float32) for _ in range(3)]
    noisy = [r + generator.normal(scale=0.1, size=r.shape).astype(np.float32) for r in references]
    meter = SQNR()
    for reference, other in zip(references, noisy, strict=True):
        meter.add(torch.from_numpy(reference), other)
    expected = qdq_loss_debug.compute_signal_to_quantization_noice_ratio(references, noisy)
    assert meter.db == pytest.approx(expected, abs=1e-4)


def _cheapest(result_file: Path) -> tuple[ExplorationResult, object]:
    result = ExplorationResult.load(result_file)
    front = result.pareto_front()
    return result, min(front, key=lambda individual: individual.values["weighted_bits"])


class _Batches(CalibrationDataReader):
    def __init__(self, name: str, batches: list) -> None:
        self.feeds = iter([{name: batch[0].numpy()} for batch in batches])

    def get_next(self) -> dict | None:
        return next(self.feeds, None)


def test_the_runtimes_sqnrs_are_onnxruntimes_qdq_loss_debug(searched, tmp_path: Path) -> None:
    """The exported file's SQNRs as debug measures them in onnxruntime, against what
    `qdq_loss_debug` computes for the same file (its tensors renamed to the convention it
    matches on), with the float model's layer inputs taken by a plain forward pre-hook."""
    from model_explorer.analysis.debug.exported import quantizer_tensors, runtime_errors
    from model_explorer.models import build_model
    from model_explorer.operations.deployment_check import export_individual
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    workload, result_file = searched
    result, individual = _cheapest(result_file)
    context = WorkloadContext(Workload.load(workload), device="cpu")
    path = tmp_path / "individual.onnx"
    model, _ = export_individual(context, result, individual, path)
    batches = list(context.batches("exploration"))
    ours = runtime_errors(model, batches, path, "onnxruntime")

    proto = onnx.load(str(path))
    tensors = quantizer_tensors(proto, model)
    assert set(tensors) == set(model.layers)
    assert all(len(calls) == 1 for calls in tensors.values())  # each layer runs once
    renamed = {
        after: f"{before}{qdq_loss_debug.DEQUANT_OUTPUT_SUFFIX}"
        for ((before, after),) in tensors.values()
    }
    for node in proto.graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                names[i] = renamed.get(name, name)
    onnx.save(proto, str(tmp_path / "ort.onnx"))
    qdq_loss_debug.modify_model_output_intermediate_tensors(
        str(tmp_path / "ort.onnx"), str(tmp_path / "augmented.onnx")
    )
    activations = qdq_loss_debug.collect_activations(
        str(tmp_path / "augmented.onnx"), _Batches(proto.graph.input[0].name, batches)
    )
    floats: dict[str, list[np.ndarray]] = {}
    float_model = build_model(context.workload.model).eval()
    hooks = [
        float_model.get_submodule(layer).register_forward_pre_hook(
            lambda _, args, before=before: floats.setdefault(before, []).append(
                args[0].detach().numpy().copy()
            )
        )
        for layer, ((before, _),) in tensors.items()
    ]
    with torch.no_grad():
        for batch in batches:
            float_model(batch[0])
    for hook in hooks:
        hook.remove()
    matched = qdq_loss_debug.create_activation_matching(activations, floats)
    theirs = qdq_loss_debug.compute_activation_error(matched)
    for layer, ((before, _),) in tensors.items():
        assert ours[layer]["local_db"] == pytest.approx(theirs[before]["qdq_err"], abs=0.01)
        assert ours[layer]["accumulated_db"] == pytest.approx(
            theirs[before]["xmodel_err"], abs=0.01
        )
    # the cheapest member quantizes below 8 bits somewhere: not every figure is noiseless
    assert min(errors["accumulated_db"] for errors in ours.values()) < 40


def test_planted_faults_are_found_in_their_layers(trained_digits, tmp_path: Path) -> None:
    """Every quantizer at 8 bits but one layer's weight and another's input at 2: the weight-
    only SQNR is lowest at the first, the activation-only and local SQNRs at the second, and
    the accumulated SQNR falls from the first faulty layer on."""
    context, model = calibrated_digits(trained_digits, tmp_path)
    names = list(model.layers)
    weight_fault, input_fault = names[1], names[3]
    for layer in model.layers.values():
        layer.input_quantizer.num_bits = layer.weight_quantizer.num_bits = 8
    model.layers[weight_fault].weight_quantizer.num_bits = 2
    model.layers[input_fault].input_quantizer.num_bits = 2
    errors = layer_errors(model, list(context.batches("exploration"))[:2])

    def lowest(column: str) -> str:
        return min(errors, key=lambda name: errors[name][column])

    assert lowest("weight_only_db") == weight_fault
    assert lowest("weight_db") == weight_fault
    assert lowest("activation_only_db") == input_fault
    assert lowest("local_db") == input_fault
    assert errors[names[0]]["accumulated_db"] > 30  # 8 bits, nothing before it
    assert errors[names[2]]["accumulated_db"] < errors[names[0]]["accumulated_db"] - 10


# A synthetic accuracy over six genes of 2-5 bits: each gene's loss halves per bit, weighted,
# with one pair that costs more together than apart.
WEIGHTS = [0.08, 0.01, 0.05, 0.002, 0.03, 0.02]


def _accuracy(genome: tuple[int, ...]) -> float:
    loss = sum(w * 2.0 ** -(g - 2) for w, g in zip(WEIGHTS, genome, strict=True))
    return 1.0 - loss - 0.04 * (genome[0] < 4) * (genome[2] < 4)


def _cost(genome: tuple[int, ...]) -> float:
    return float(sum(g * size for g, size in zip(genome, [3, 1, 2, 1, 4, 2], strict=True)))


@pytest.mark.parametrize("target", [0.93, 0.95, 0.97])
def test_a_repair_meets_its_target_near_the_enumerated_optimum(target: float) -> None:
    """Against every genome between the parent and the widest choices: the repair meets the
    target, none of its genes can be lowered by one without missing it, and it costs at most
    10% more than the cheapest genome that meets the target, in far fewer evaluations."""
    parent, upper = (2, 3, 2, 2, 2, 3), [5] * 6
    found = repair(_accuracy, _cost, parent, upper, target)
    assert _accuracy(found.genome) >= target
    for i, gene in enumerate(found.genome):
        if gene > parent[i]:
            lower = list(found.genome)
            lower[i] -= 1
            assert _accuracy(tuple(lower)) < target
    box = itertools.product(*[range(p, u + 1) for p, u in zip(parent, upper, strict=True)])
    optimum = min(_cost(g) for g in box if _accuracy(g) >= target)
    assert found.cost <= 1.1 * optimum
    assert found.evaluations < 0.1 * np.prod(
        [u - p + 1 for p, u in zip(parent, upper, strict=True)]
    )


def test_a_repair_refuses_what_it_need_not_or_cannot_do() -> None:
    with pytest.raises(AlreadyMeets):
        repair(_accuracy, _cost, (5,) * 6, [5] * 6, 0.9)
    with pytest.raises(Unreachable):
        repair(_accuracy, _cost, (2,) * 6, [3] * 6, 0.99)


def test_a_repair_ranks_quantizers_by_gain_per_unit_of_cost() -> None:
    """By hand: raising the first quantizer gains 0.02 for 10 units of cost, the second 0.01
    for 1 (0.002 against 0.01 per unit): the second ranks first, and raising it alone meets a
    target of 0.905, at a tenth of the cost of raising the first."""

    def accuracy(genome: tuple[int, ...]) -> float:
        return 0.9 + 0.02 * genome[0] + 0.01 * genome[1]

    def cost(genome: tuple[int, ...]) -> float:
        return 10.0 * genome[0] + genome[1]

    found = repair(accuracy, cost, (0, 0), [1, 1], 0.905)
    assert found.ranking == [1, 0]
    assert (found.genome, found.cost) == ((0, 1), 1.0)


def test_a_repair_of_a_metric_where_lower_is_better_brings_it_under_the_target() -> None:
    """A divergence 0.4 / (1 + g0 + 2 g1), target 0.1 (lower is better): the parent's 0.4
    is above it, so the repair raises genes until it is at most 0.1; a parent already under
    it is refused as meeting it."""

    def divergence(genome: tuple[int, ...]) -> float:
        return 0.4 / (1 + genome[0] + 2 * genome[1])

    def cost(genome: tuple[int, ...]) -> float:
        return float(genome[0] + 3 * genome[1])

    found = repair(divergence, cost, (0, 0), [3, 3], 0.1, higher=False)
    assert found.accuracy == divergence(found.genome) <= 0.1
    assert divergence((0, 0)) > 0.1 and found.genome != (0, 0)
    with pytest.raises(AlreadyMeets):
        repair(divergence, cost, (3, 3), [3, 3], 0.1, higher=False)


def reference_args(reference: str, workload: Path) -> list[str]:
    return ["debug", reference, "--workload", str(workload)]


def test_debug_writes_the_table_and_figure_and_names_the_layers(
    searched, tmp_path: Path, capsys
) -> None:
    workload, result_file = searched
    result, individual = _cheapest(result_file)
    prefix = tmp_path / "debug"
    reference = f"{result_file}#{individual.id}"
    assert main(["debug", reference, "--workload", str(workload), "--output", str(prefix)]) == 0
    table = pd.read_csv(prefix.with_suffix(".csv"), dtype={"layer": str})
    assert list(table["layer"]) == list(result.plan_of(individual))
    assert {"onnxruntime_local_db", "onnxruntime_accumulated_db", "restored_accuracy"} <= set(table)
    assert prefix.with_suffix(".png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "layers that explain most of the drop" in out
    assert f"wrote {prefix.with_suffix('.csv')}" in out
    # restoring every layer to float, one at a time, measured against the result's own record
    assert table["restored_accuracy"].max() >= individual.values["accuracy"]
    # a rerun says that it replaced the table (and how to keep both)
    rerun = [*reference_args(reference, workload), "--no-runtime", "--output", str(prefix)]
    assert main(rerun) == 0
    said = capsys.readouterr().out
    assert f"replaced the earlier {prefix.with_suffix('.csv')}" in said and "--output" in said
    assert "onnxruntime_local_db" not in pd.read_csv(prefix.with_suffix(".csv"))


@pytest.mark.slow
@pytest.mark.xdist_group("resnet20_searched")  # one worker builds the fixture
def test_a_repaired_resnet20_individual_holds_in_onnxruntime(
    resnet20_searched, tmp_path: Path, capsys
) -> None:
    """The most accurate fully scored individual of a short resnet20 search that misses 1.5
    points below the float model (every quantizer at 8 bits keeps it within about one point),
    repaired to that: the repaired individual is appended with its parent, meets the target on
    the exploration data, and exported and scored in onnxruntime it keeps what the repair
    measured (the export check's half point). The nearest miss raises the fewest quantizers,
    which keeps the give-back pass short."""
    workload, original = resnet20_searched
    result_file = tmp_path / "result.pkl"
    shutil.copyfile(original, result_file)
    result = ExplorationResult.load(result_file)
    target = result.baseline[0] - 0.015
    misses = [i for i in result.individuals if i.complete and i.values["accuracy"] < target]
    assert misses, "the search left nothing to repair"
    parent = max(misses, key=lambda i: i.values["accuracy"])
    done = debug_api.repair(f"{result_file}#{parent.id}", drop=0.015, workload=workload)
    repaired = ExplorationResult.load(result_file).records[-1]
    assert repaired == done.record and done.id == len(result.records)
    assert repaired["extra"]["repaired_from"] == parent.id
    assert repaired["values"]["accuracy"] >= target
    assert repaired["extra"]["raised"]
    assert set(repaired["extra"]["reevaluation"]) == {"parent", "repaired"}
    reference = f"{result_file}#{repaired['id']}"
    onnx_file = tmp_path / "repaired.onnx"
    capsys.readouterr()
    status = main(
        [
            "export",
            reference,
            "--workload",
            str(workload),
            "--onnx",
            str(onnx_file),
            "--check",
            "onnxruntime",
        ]
    )
    assert status == 0, capsys.readouterr().out


def _bad(arguments: list[str], capsys) -> str:
    assert main(arguments) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_debugs_bad_input_is_one_sentence_and_changes_nothing(
    searched, tmp_path: Path, capsys
) -> None:
    workload, original = searched
    result_file = tmp_path / "result.pkl"
    shutil.copyfile(original, result_file)
    result, individual = _cheapest(result_file)
    before = result_file.read_bytes()
    reference = f"{result_file}#{individual.id}"
    common = [
        "debug",
        reference,
        "--workload",
        str(workload),
        "--no-runtime",
        "--output",
        str(tmp_path / "d"),
    ]
    # well below what its samples assure (paired with the float model, about 2 points below
    # what it scores on 360 samples)
    line = _bad([*common, "--target", str(individual.values["accuracy"] - 0.04)], capsys)
    assert "already reaches" in line and "unchanged" in line
    line = _bad([*common, "--target", str(result.baseline[0] + 0.01)], capsys)
    assert "beyond the float model's accuracy" in line
    assert result_file.read_bytes() == before
    data = yaml.safe_load(Path(workload).read_text())
    data["workload"]["calibration"]["file"] = str(tmp_path / "gone.pt")
    elsewhere = write_workload(data, tmp_path / "gone.yaml")
    line = _bad(["debug", reference, "--workload", str(elsewhere)], capsys)
    assert "gone.pt" in line and "does not exist" in line
    assert "--samples" in _bad([*common, "--samples", "0"], capsys)
    # a result whose genes set no quantizer (planted: its variables renamed to thresholds)
    result.problem["variables"] = [
        {**variable, "name": variable["name"].rsplit(".", 1)[0]}
        for variable in result.problem["variables"]
    ]
    result.save(tmp_path / "sparse.pkl")
    line = _bad(["debug", f"{tmp_path / 'sparse.pkl'}#0", "--workload", str(workload)], capsys)
    assert "set no quantizer" in line


def test_the_repair_decides_on_what_the_samples_assure() -> None:
    """A genome's accuracy for the repair is the float model's plus the lower end of the
    paired difference's 95% interval (by hand: b samples only the genome gets right, c only
    the float model, n in all: (b - c)/n - 1.96 sqrt(b + c - (b - c)^2/n)/n)."""
    import math

    import numpy as np

    from model_explorer.analysis.debug.individual import assured_accuracy
    from model_explorer.problems import Evaluation
    from model_explorer.results.statistics import pack_hits

    n = 360
    float_hits = np.ones(n, dtype=bool)
    float_hits[:6] = False  # 354 right: 0.98333
    genome_hits = float_hits.copy()
    genome_hits[6:14] = False  # 8 lost
    genome_hits[:2] = True  # 2 gained

    class Problem:
        def configuration(self, genome):  # noqa: ANN001, ANN202
            return list(genome)

        def measure(self, configuration):  # noqa: ANN001, ANN202
            outcomes = {"hits": pack_hits(genome_hits)}
            return Evaluation(
                {"accuracy": float(genome_hits.mean())}, [], extra={"outcomes": outcomes}
            )

    result = ExplorationResult({}, {"name": "q", "variables": [], "objectives": []})
    result.stats["baseline_outcomes"] = {"hits": pack_hits(float_hits)}
    b, c = 2, 8
    half = 1.959964 * math.sqrt(b + c - (b - c) ** 2 / n) / n
    expected = 354 / n + (b - c) / n - half
    assert assured_accuracy(Problem(), result, True)((0,)) == pytest.approx(expected, abs=1e-6)
    assert expected < genome_hits.mean()
    del result.stats["baseline_outcomes"]  # a result from before: the accuracy as measured
    assert assured_accuracy(Problem(), result, True)((0,)) == pytest.approx(genome_hits.mean())


def test_an_unknown_runtime_is_refused_before_anything_is_written(
    searched, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`debug --runtime ort` exited 0 and wrote over the earlier table and figure; it is one
    sentence naming the known runtimes, exit status 2, the earlier files as they were."""
    from model_explorer.cli import main

    _, result = searched
    prefix = tmp_path / "earlier"
    for suffix in (".csv", ".png"):
        prefix.with_suffix(suffix).write_text("earlier")
    arguments = ["debug", f"{result}#0", "--runtime", "ort", "--output", str(prefix)]
    assert main(arguments) == 2
    assert "--runtime: unknown runtime 'ort'; known: litert, onnxruntime" in capsys.readouterr().err
    assert all(prefix.with_suffix(s).read_text() == "earlier" for s in (".csv", ".png"))
