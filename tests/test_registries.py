"""Every extension point is a registry: `model-explorer list` answers for each, a workload's
typed keys check entries' own options, and every registered entry does its job.

The expected names below are the ones docs/ documents, written out here, not read from the
registries under test."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from model_explorer.analysis.compare.environments import ENVIRONMENTS, EnvironmentSkipped
from model_explorer.analysis.diagnose import DEFAULT_ORDER, INSPECTORS
from model_explorer.analysis.hooks import ANALYSES, HookRunner, load_analysis
from model_explorer.cli import main
from model_explorer.cli.listing import REGISTRIES
from model_explorer.cost.energy.analytic import analytic_energy
from model_explorer.cost.energy.base import CSV_COLUMNS, energy_layers
from model_explorer.cost.energy.spec import ENERGY_BACKENDS, EnergyEvaluationSpec
from model_explorer.datasets import DATASETS, DatasetSpec
from model_explorer.exploration import Explorer
from model_explorer.exploration.algorithms import ALGORITHMS, AlgorithmSpec
from model_explorer.exploration.runners import RUNNERS, Runner, RunnerSpec, build_runner
from model_explorer.exploration.spec import NSGASpec
from model_explorer.metrics.functions import METRICS, MetricSpec, create_metric
from model_explorer.models import create_model
from model_explorer.operations.energy import write_energy_csv
from model_explorer.problems import PROBLEMS
from model_explorer.quantization.calibrators import CALIBRATORS, calibrator_from_state
from model_explorer.quantization.spec import CalibrationSpec
from tests_support import Synthetic

DOCUMENTED = {
    "runtimes": {"onnxruntime", "openvino", "tvm", "litert"},
    "models": {
        "digits_cnn",
        "lenet5",
        "resnet18",
        "resnet20",
        "resnet32",
        "resnet44",
        "resnet50",
        "resnet56",
        "digits_vit",
        "all_minilm_l6_v2",
        "efficientnet_lite0",
    },
    "datasets": {
        "digits",
        "cifar10",
        "imagefolder",
        "imagenet",
        "imagenet_c",
        "arrays",
        "sentences",
        "photos",
    },
    "metrics": {
        "top1",
        "top5",
        "topk",
        "pixel_accuracy",
        "mean_iou",
        "agreement",
        "agreement_top5",
        "cosine",
        "kl",
    },
    "problems": {
        "quantization_problem",
        "energy_aware_quant_problem",
        "sparsity_problem",
        "quantization_sparsity_problem",
    },
    "objectives": {
        "accuracy",
        "weighted_bits",
        "model_size",
        "bops",
        "energy",
        "latency",
        "created_blocks",
        "block_sparsity",
        "effective_bops",
    },
    "runners": {"serial", "processes", "dask"},
    "strategies": {"nsga2", "spread", "multifidelity", "surrogate"},
    "algorithms": {"nsga2", "nsga3", "smsemoa", "agemoea", "agemoea2", "random"},
    "calibrators": {"max", "percentile", "mse", "entropy"},
    "formats": {"int", "fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4"},
    "inspectors": {
        "Norm",
        "Image",
        "BatchNorm",
        "ConcatenatedOutputs",
        "Clipping",
        "Compression",
        "Coverage",
        "HighPrecision",
        "Sensitivity",
        "Activation",
        "PreQuantAlgo",
        "PostQuantAlgo",
    },
    "energy": {"analytic", "zigzag"},
    "environments": {
        "eager",
        "eager-fp64",
        "half",
        "bfloat16",
        "compile",
        "onnxruntime",
        "openvino",
        "tvm",
        "litert",
        "cuda",
    },
    "analyses": {"template", "activation_ranges", "zero_ratio", "histograms"},
}
FORMS = {
    "models": ["torchvision:<name>", "package.module:factory"],
    "runtimes": ["litert:SETTING", "onnxruntime:SETTING", "openvino:SETTING", "tvm:SETTING"],
    "environments": [
        "litert:SETTING",
        "onnxruntime:SETTING",
        "openvino:SETTING",
        "tvm:SETTING",
        "deployed-litert:RESULTS#ID",
        "deployed:RESULTS#ID",
        "deployed-onnxruntime:RESULTS#ID",
        "deployed-openvino:RESULTS#ID",
        "deployed-tvm:RESULTS#ID",
        "threads=N",
        "quantized:RESULTS#ID",
        "package.module:factory",
    ],
    "inspectors": ["package.module:Class"],
    "datasets": ["package.module:builder"],
    "metrics": ["package.module:Class"],
    "objectives": ["package.module:function"],
}


@pytest.mark.parametrize("kind", sorted(DOCUMENTED))
def test_list_answers_for_every_registry(kind: str, capsys) -> None:
    assert main(["list", kind]) == 0
    lines = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    forms = FORMS.get(kind, [])
    assert lines[len(lines) - len(forms) :] == forms
    names = lines[: len(lines) - len(forms)]
    assert names == sorted(names) and set(names) == DOCUMENTED[kind]


def test_list_shows_each_entrys_options_with_their_defaults(capsys) -> None:
    # The calibrators' options and defaults as docs/workloads.md documents them.
    assert main(["list", "calibrators"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "entropy     {num_bins: 2048, start_bin: 128}",
        "max",
        "mse         {num_bins: 2048, start_bin: 128}",
        "percentile  {percentile: 99.99, num_bins: 2048}",
    ]
    assert main(["list", "energy", "zig*"]) == 0
    assert capsys.readouterr().out.splitlines() == ["zigzag  {hardware: eyeriss_like}"]


def test_list_covers_every_kind_and_loads_optional_backends_only_when_used() -> None:
    assert set(REGISTRIES) == set(DOCUMENTED)
    code = (
        "import sys; from model_explorer.cli import main; "
        "main(['list', 'energy']); main(['list', 'runners']); main(['list', 'algorithms']); "
        "main(['list', 'environments']); main(['list', 'runtimes']); "
        "optional = ('zigzag', 'distributed', 'onnxruntime', 'numba', 'pymoo', 'openvino'); "
        "loaded = [m for m in optional if m in sys.modules]; "
        "print('loaded:', loaded)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout


def test_default_order_runs_every_registered_inspector() -> None:
    # tests/analysis/test_diagnose.py runs DEFAULT_ORDER on a trained model.
    assert sorted(DEFAULT_ORDER) == INSPECTORS.names()


# -- typed keys: each entry's own options --------------------------------------------------------


# Options a dataset type cannot do without (docs/workloads.md says so).
REQUIRED_OPTIONS = {"imagenet": {"kind": "imagefolder"}}


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_dataset_type_validates_its_defaults(name: str, tmp_path: Path) -> None:
    required = REQUIRED_OPTIONS.get(name, {})
    (tmp_path / "fog" / "1").mkdir(parents=True)  # imagenet_c's default corruption and severity
    spec = DatasetSpec.model_validate(
        {"type": name, "path": str(tmp_path), **required}, context={"check_paths": True}
    )
    assert spec.options is not None and spec.options == type(spec.options)(**required)


def test_a_key_of_another_entry_says_which_entry_takes_it() -> None:
    with pytest.raises(
        ValidationError,
        match="only the cifar10, digits, photos and sentences datasets take 'split'",
    ):
        DatasetSpec.model_validate({"type": "arrays", "path": "x.npz", "split": "test"})
    with pytest.raises(ValidationError, match="only the zigzag energy backend takes 'hardware'"):
        EnergyEvaluationSpec.model_validate({"backend": "analytic", "hardware": "tpu_like"})
    with pytest.raises(ValidationError, match="unknown key"):
        RunnerSpec.model_validate({"type": "serial", "wokers": 2})
    with pytest.raises(ValidationError, match="only the percentile calibrator takes 'percentile'"):
        CalibrationSpec.model_validate({"method": "mse", "percentile": 99.9})


@pytest.mark.parametrize("name", METRICS.names())
def test_every_metric_scores_a_perfect_prediction_as_one(name: str) -> None:
    metric = create_metric(MetricSpec.model_validate(name))
    labels = torch.tensor([[0, 1], [2, 1]]) if "iou" in name or "pixel" in name else None
    if labels is None:
        labels = torch.tensor([3, 0, 2, 1, 4])
        scores = torch.nn.functional.one_hot(labels, 6).float()
    else:
        scores = torch.nn.functional.one_hot(labels, 3).permute(2, 0, 1)[None].float()
        labels = labels[None]
    if metric.needs_reference:
        labels = scores  # a fidelity metric scores against the float model's own outputs
    metric.update(scores, labels)
    # A perfect prediction: 1 for an accuracy, 0 for a divergence (kl).
    assert metric.compute() == pytest.approx(1.0 if metric.higher_is_better else 0.0, abs=1e-6)


# -- every entry does its job ---------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNNERS.names())
def test_every_runner_builds_from_its_defaults(name: str) -> None:
    if name == "dask":
        pytest.importorskip("distributed")
    runner = build_runner(RunnerSpec(type=name))
    try:
        assert isinstance(runner, Runner)
        problem = Synthetic(genes=3)
        genomes = [np.array([8.0, 8.0, 8.0]), np.array([4.0, 5.0, 6.0])]
        if name == "serial":
            done = []
            runner.evaluate(problem, genomes, lambda i, c, e: done.append((i, c)))
            assert done == [(0, [8, 8, 8]), (1, [4, 5, 6])]
        else:  # parallel runners rebuild the problem from a workload's recipe only
            with pytest.raises(ValueError, match="parallel runners evaluate problems built"):
                runner.evaluate(problem, genomes, lambda *found: None)
    finally:
        runner.close()


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_search_algorithm_searches_within_the_bounds(name: str) -> None:
    # tests/exploration/test_algorithms.py checks each against pymoo's own loop and resume.
    needs = (ALGORITHMS.get(name).info or {}).get("needs")
    if needs:
        pytest.importorskip(needs)
    problem = Synthetic(genes=3)
    nsga = NSGASpec(pop_size=6, offsprings=4, generations=2)
    result = Explorer(problem, nsga, algorithm=AlgorithmSpec(type=name)).run()
    assert result.complete and [g["generation"] for g in result.generations] == [0, 1, 2]
    assert sum(r["generation"] == 0 for r in result.records) == 6
    assert all(2 <= bits <= 8 for r in result.records for bits in r["configuration"])
    assert len(problem.calls) == len(result) and max(problem.calls.values()) == 1


@pytest.mark.parametrize("name", CALIBRATORS.names())
def test_every_calibrator_builds_collects_and_keeps_its_amax_through_its_state(name: str) -> None:
    entry = CALIBRATORS.get(name)
    calibrator = entry.builder.build(entry.options() if entry.options else None)
    # Evenly spread values up to 2: whatever its rule, no calibrator clips most of them, and
    # none reaches above the largest.
    values = torch.linspace(-2.0, 2.0, 4001)
    calibrator.collect(values[:2000])
    calibrator.collect(values[2000:])
    assert calibrator.min_value == -2.0
    for bits in (4, 8):
        amax = float(calibrator.compute_amax(bits))
        assert 1.0 < amax <= 2.0 * (1 + 1e-6), (bits, amax)
    state = calibrator.state()
    assert state["method"] == name
    restored = calibrator_from_state(copy.deepcopy(state))
    assert type(restored) is type(calibrator) and restored.min_value == -2.0
    for bits in (4, 8):
        assert torch.equal(restored.compute_amax(bits), calibrator.compute_amax(bits))


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5)).eval()


@pytest.mark.parametrize("name", ENERGY_BACKENDS.names())
def test_every_energy_backend_reports_each_layer(name: str, tmp_path: Path) -> None:
    """Each backend's rows name the layers and their types as the analytic model's do, and its
    CSV has the analytic CSV's columns (a convolution and a linear layer: ZigZag's mapping search
    takes seconds per layer)."""
    if name == "zigzag":
        pytest.importorskip("zigzag")
    entry = ENERGY_BACKENDS.get(name)
    model, example = tiny(), torch.zeros(1, 1, 8, 8)
    rows = entry.builder(model, example, entry.options())
    analytic = analytic_energy(model, example)
    assert [r.layer_name for r in rows] == list(energy_layers(model)) == ["0", "3"]
    assert [r.layer_type for r in rows] == [r.layer_type for r in analytic]
    for row in rows:
        assert set(row.as_row()) == set(CSV_COLUMNS)
        assert row.total_dram_energy == pytest.approx(row.w_energy + row.i_energy + row.o_energy)
        assert row.w_reads > 0 and row.total_dram_energy > 0
    written = [write_energy_csv(r, tmp_path / f"{i}.csv") for i, r in enumerate((rows, analytic))]
    assert written[0].read_text().splitlines()[0] == written[1].read_text().splitlines()[0]


@pytest.mark.parametrize("name", ENVIRONMENTS.names())
def test_every_environment_runs_or_says_why_not(name: str) -> None:
    from model_explorer.analysis.compare import environment

    model, x = tiny(), torch.randn(4, 1, 8, 8)
    env = environment(name)
    try:
        env.prepare(copy.deepcopy(model), x)  # as `compare` does: environments may convert it
        logits = env.run(x)
    except EnvironmentSkipped as reason:
        assert str(reason)  # e.g. no CUDA here: the reason says so
        return
    finally:
        env.close()
    assert logits.dtype == torch.float64 and logits.shape == (4, 5)
    with torch.no_grad():
        reference = model(x).double()
    tolerance = 0.05 if name in ("half", "bfloat16") else 1e-4
    assert torch.allclose(logits, reference, atol=tolerance * float(reference.abs().max()))


@pytest.mark.parametrize("name", ANALYSES.names())
def test_every_shipped_analysis_runs(name: str, tmp_path: Path) -> None:
    outputs = {
        "activation_ranges": tmp_path / "ranges.json",
        "zero_ratio": tmp_path / "zeros.csv",
        "histograms": tmp_path / "histograms",
    }
    analysis, source = load_analysis(name, str(outputs[name]) if name in outputs else None)
    samples = [(torch.randn(1, 1, 8, 8),) for _ in range(2)]
    assert HookRunner(create_model("digits_cnn").eval(), analysis, source).run(samples) == 2
    if name in outputs:
        assert outputs[name].exists()


def test_every_problem_is_documented_and_built_from_a_workload() -> None:
    # Each problem is built and searched from the shipped workloads in tests/problems,
    # tests/cost/test_energy.py and tests/exploration/test_golden.py.
    assert set(PROBLEMS.names()) == DOCUMENTED["problems"]


def test_show_fills_in_the_options_of_typed_keys(capsys) -> None:
    from conftest import DEFAULT_WORKLOAD

    assert main(["validate", "--show", str(DEFAULT_WORKLOAD)]) == 0
    printed = capsys.readouterr().out
    body = json.loads(printed[printed.index("{") :])["workload"]
    exploration = body["exploration"]["datasets"]["exploration"]
    assert exploration["split"] == "validation"  # from the file
    assert exploration["resize"] == 8 and exploration["split_seed"] == 0  # digits' defaults
    assert body["metric"] == {"type": "top1"}  # top1 has no options
