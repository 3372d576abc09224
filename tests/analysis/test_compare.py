"""Cross-environment comparison: pair metrics by hand, backends that must agree, planted faults."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from conftest import write_workload
from model_explorer.analysis.compare import compare, pair_metrics
from model_explorer.analysis.compare.environments import Environment, TorchEnvironment, eager
from model_explorer.cli import main
from model_explorer.errors import UserError
from tests_support import localise_perturbed, runtime_intermediates

TOLERANCE = 1e-4  # the command's default relative error of an agreeing pair


def test_pair_metrics_match_a_hand_computation() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 7))
    b = a.copy()
    b[1, [2, 5]] = b[1, [5, 2]]  # swap two classes of sample 1
    b[2] += 0.01 * rng.normal(size=7)
    b[3] = -a[3]  # opposite direction: cosine -1
    order = np.argsort(-a[4])
    b[4, order[0]], b[4, order[1]] = a[4, order[1]], a[4, order[0]]  # same top-5 set, new top-1
    b[5, order_6 := np.argsort(-a[5])[5]] = a[5].max() + 1.0  # the 6th class enters the top 5
    del order_6

    metrics = pair_metrics(a, b)

    top1 = np.mean([np.argmax(x) == np.argmax(y) for x, y in zip(a, b, strict=True)])
    top5 = np.mean(
        [set(np.argsort(-x)[:5]) == set(np.argsort(-y)[:5]) for x, y in zip(a, b, strict=True)]
    )
    cosines = [x @ y / np.sqrt((x @ x) * (y @ y)) for x, y in zip(a, b, strict=True)]
    largest = max(abs(x - y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
    scale = max(max(abs(a.ravel())), max(abs(b.ravel())))
    assert metrics["top1_agreement"] == pytest.approx(top1)
    assert metrics["top5_agreement"] == pytest.approx(top5)
    assert metrics["max_abs_error"] == pytest.approx(largest)
    assert metrics["max_rel_error"] == pytest.approx(largest / scale)
    assert metrics["cosine_similarity_mean"] == pytest.approx(np.mean(cosines))
    assert metrics["cosine_similarity_min"] == pytest.approx(-1.0)
    assert 0 < top1 < 1 and 0 < top5 < 1  # the planted changes touch both metrics


def test_top_k_falls_back_to_the_number_of_classes() -> None:
    a = np.array([[1.0, 2.0, 3.0]])
    metrics = pair_metrics(a, a[:, ::-1].copy())
    assert metrics["top_k"] == 3 and metrics["top5_agreement"] == 1.0
    assert metrics["top1_agreement"] == 0.0


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_eager_fp64_and_onnxruntime_agree_on_the_digits_cnn(
    trained_digits, tmp_path: Path, capsys
) -> None:
    pytest.importorskip("onnxruntime")
    workload, _ = trained_digits
    names = ["eager", "eager-fp64", "onnxruntime"]
    argv = ["compare", str(workload), "--samples", "96", "--repeats", "3", "--out", str(tmp_path)]
    for name in names:
        argv += ["--env", name]

    status, out, _ = _run(argv, capsys)

    assert status == 0
    data = json.loads((tmp_path / "comparison.json").read_text())
    pairs = {(p["a"], p["b"]): p for p in data["pairs"]}
    assert set(pairs) == set(itertools.combinations(names, 2))
    for pair in pairs.values():
        assert pair["top1_agreement"] == 1.0
        assert pair["max_rel_error"] <= TOLERANCE
        assert pair["agree"] and pair["localisation"] is None
    assert data["samples"] == 96 and data["tolerance"] == TOLERANCE
    for name in names:
        run = data["environments"][name]
        assert len(run["seconds_per_sample_repeats"]) == 3
        assert run["seconds_per_sample"] == statistics.median(run["seconds_per_sample_repeats"])
        assert run["bitwise_stable"] is True
    assert (tmp_path / "agreement.png").stat().st_size > 0
    assert (tmp_path / "timing.png").stat().st_size > 0
    assert "eager-fp64" in out and "onnxruntime" in out


class Perturbed(Environment):
    """Eager float32 with one layer's weights shifted: a planted difference."""

    def __init__(self, layer: str) -> None:
        super().__init__(f"perturbed-{layer}")
        self.layer = layer
        self.inner = TorchEnvironment(self.name)

    def prepare(self, model: nn.Module, example: torch.Tensor) -> None:
        weight = model.get_submodule(self.layer).weight
        with torch.no_grad():
            weight += 0.5 * weight.std()
        self.inner.prepare(model, example)

    def run(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.inner.run(inputs)

    def intermediates(self, inputs: torch.Tensor):
        return self.inner.intermediates(inputs)


@pytest.mark.parametrize("layer, opcode", [("3", "Conv2D"), ("12", "FullyConnected")])
def test_a_perturbed_layer_is_localised(layer: str, opcode: str) -> None:
    torch.manual_seed(0)
    from model_explorer.models import create_model

    model = create_model("digits_cnn").eval()
    inputs = torch.randn(40, 1, 8, 8)

    comparison = compare(model, inputs, ["eager", Perturbed(layer)], repeats=1, batch_size=16)

    found = comparison.localisations[("eager", f"perturbed-{layer}")]
    assert found["first"]["name"] == f"{layer}/{opcode}#0"
    before = found["operators"][: found["operators"].index(found["first"])]
    assert before and all(o["relative_error"] == 0.0 for o in before)


def test_a_user_environment_by_import_path_is_localised_and_plotted(
    trained_digits, tmp_path: Path, capsys, monkeypatch
) -> None:
    (tmp_path / "planted_environment.py").write_text(
        "import torch\n\n"
        "def shift_conv7(model, example):\n"
        "    with torch.no_grad():\n"
        "        model[7].weight += 0.3 * model[7].weight.std()\n"
        "    return model\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    workload, _ = trained_digits
    spec = "planted_environment:shift_conv7"
    out = tmp_path / "out"
    argv = ["compare", str(workload), "--env", "eager", "--env", spec, "--samples", "64"]
    status, printed, _ = _run(argv + ["--repeats", "1", "--out", str(out)], capsys)

    assert status == 0
    pair = json.loads((out / "comparison.json").read_text())["pairs"][0]
    assert not pair["agree"]
    assert pair["localisation"]["first"]["layer"] == "7"
    assert (out / pair["localisation"]["plot"]).stat().st_size > 0
    assert (
        pair["localisation"]["plot"] == "localisation_eager_vs_planted_environment_shift_conv7.png"
    )
    assert "7/Conv2D#0" in printed
    sys.modules.pop("planted_environment", None)


def _calibrated_workload(trained_digits, tmp_path: Path) -> Path:
    from model_explorer.operations.pipeline import calibrate_workload
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    source, _ = trained_digits
    data = yaml.safe_load(source.read_text())
    data["workload"]["calibration"]["file"] = str(tmp_path / "calibration.pt")
    path = write_workload(data, tmp_path / "workload.yaml")
    calibrate_workload(WorkloadContext(Workload.load(path), device="cpu"))
    return path


def _result_with_uniform_bits(workload: Path, bits: list[int], path: Path) -> Path:
    from model_explorer.operations.rebuild import build_problem
    from model_explorer.results import ExplorationResult, Individual
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    loaded = Workload.load(workload)
    problem = build_problem(WorkloadContext(loaded, device="cpu"))
    genes = len(problem.variables)
    records = [
        asdict(Individual(i, 0, i, [float(b)] * genes, [b] * genes, {}, [], True))
        for i, b in enumerate(bits)
    ]
    ExplorationResult(loaded.to_dict(), problem.describe(), individuals=records).save(path)
    return path


def test_a_quantized_individual_at_low_bits_agrees_less_than_at_16_bits(
    trained_digits, tmp_path: Path, capsys
) -> None:
    workload = _calibrated_workload(trained_digits, tmp_path)
    result = _result_with_uniform_bits(workload, [2, 16], tmp_path / "result.pkl")
    out = tmp_path / "out"
    low, high = f"quantized:{result}#0", f"quantized:{result}#1"
    argv = ["compare", str(workload), "--env", "eager", "--env", low, "--env", high]
    status, _, _ = _run(argv + ["--samples", "128", "--repeats", "1", "--out", str(out)], capsys)

    assert status == 0
    data = json.loads((out / "comparison.json").read_text())
    pairs = {(p["a"], p["b"]): p for p in data["pairs"]}
    # A result's individuals go by kind#ID, their references in the descriptions.
    at_low, at_high = pairs[("eager", "quantized#0")], pairs[("eager", "quantized#1")]
    assert data["environments"]["quantized#0"]["description"].startswith(f"{low}: ")
    assert at_low["top1_agreement"] < at_high["top1_agreement"]
    assert at_low["cosine_similarity_mean"] < at_high["cosine_similarity_mean"]
    assert at_high["top1_agreement"] >= 0.95
    # the 2-bit model's first layer already quantizes its input and weights coarsely
    assert at_low["localisation"]["first"]["name"] == "0/Conv2D#0"

    status, _, err = _run(["compare", str(workload), "--env", f"quantized:{result}#7"], capsys)
    assert status == 2 and "has no individual 7" in err and err.count("\n") == 1


def test_an_unknown_environment_is_one_line_with_a_suggestion(trained_digits, capsys) -> None:
    workload, _ = trained_digits
    status, _, err = _run(["compare", str(workload), "--env", "onnxrutime"], capsys)
    assert status == 2
    assert err.count("\n") == 1
    assert "unknown environment 'onnxrutime' (did you mean 'onnxruntime'?)" in err
    assert "eager-fp64" in err and "threads=N" in err


def test_environments_that_cannot_run_here_are_skipped_with_a_reason(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(eager, "compiler", lambda: None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "tvm", None)
    monkeypatch.setitem(sys.modules, "litert_torch", None)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))

    environments = ["eager", "cuda", "compile", "onnxruntime", "tvm", "litert"]
    comparison = compare(model, torch.randn(8, 1, 2, 2), environments, repeats=1)

    assert list(comparison.runs) == ["eager"]
    assert "CUDA" in comparison.skipped["cuda"]
    assert "C++ compiler" in comparison.skipped["compile"]
    assert "pip install 'model_explorer[onnx]'" in comparison.skipped["onnxruntime"]
    assert "pip install 'model_explorer[tvm]'" in comparison.skipped["tvm"]
    assert "pip install 'model_explorer[litert]'" in comparison.skipped["litert"]
    assert comparison.pairs == []


class Noisy(Environment):
    """Different logits on every call: a planted run-to-run instability."""

    def prepare(self, model: nn.Module, example: torch.Tensor) -> None:
        self.model = model

    def run(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            output = self.model(inputs)
        return (output + 1e-2 * torch.randn_like(output)).double()


def test_repeats_report_bitwise_stability_and_median_timings() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    comparison = compare(
        model, torch.randn(10, 1, 2, 2), ["eager", "threads=1", Noisy("noisy")], repeats=4
    )
    assert comparison.runs["eager"].bitwise_stable
    assert comparison.runs["threads=1"].bitwise_stable
    assert not comparison.runs["noisy"].bitwise_stable
    for run in comparison.runs.values():
        assert len(run.seconds_per_sample) == 4
        assert run.median_seconds_per_sample == statistics.median(run.seconds_per_sample)
    pair = next(p for p in comparison.pairs if p["b"] == "noisy" and p["a"] == "eager")
    note = comparison.localisations[("eager", "noisy")]["note"]
    assert note.startswith("noisy exposes no") and "arises inside noisy" in note
    assert pair["max_abs_error"] > 0


class Flipped(Environment):
    """Eager logits with the top-1 class moved on the samples whose first input value is
    positive (rolled by one class): a planted disagreement on samples counted by hand."""

    def prepare(self, model: nn.Module, example: torch.Tensor) -> None:
        self.model = model

    def run(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            output = self.model(inputs)
        chosen = inputs.reshape(len(inputs), -1)[:, 0] > 0
        return torch.where(chosen[:, None], output.roll(1, dims=1), output)


def kept_share(inputs: torch.Tensor) -> float:
    """The share of samples Flipped leaves alone, counted by hand."""
    flat = inputs.reshape(len(inputs), -1)
    return sum(1 for row in flat if not row[0] > 0) / len(inputs)


def assert_agreements(comparison, expected: dict[tuple[str, str], float]) -> None:  # noqa: ANN001
    found = {(p["a"], p["b"]): p for p in comparison.pairs}
    assert set(found) == set(expected)
    for key, agreement in expected.items():
        assert found[key]["top1_agreement"] == agreement, key
        if agreement == 1.0:
            assert found[key]["max_rel_error"] <= TOLERANCE and found[key]["agree"], key
        else:
            assert not found[key]["agree"], key


def test_a_planted_disagreement_is_counted_in_every_pair() -> None:
    """Each pair's top-1 agreement is the share of samples whose arg-max class matches: 1 where
    both run the float model, the share Flipped leaves alone (counted by hand) beside it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    inputs = torch.randn(12, 1, 4, 4)
    kept = kept_share(inputs)
    assert 0 < kept < 1  # the plant moves some samples, not all
    comparison = compare(model, inputs, ["eager", "threads=1", Flipped("flipped")], repeats=1)
    assert_agreements(
        comparison,
        {
            ("eager", "threads=1"): 1.0,
            ("eager", "flipped"): kept,
            ("threads=1", "flipped"): kept,
        },
    )


@pytest.mark.skipif(eager.compiler() is None, reason="torch.compile needs a C++ compiler")
def test_compile_agrees_with_eager() -> None:
    """compile agrees with eager, and disagrees with a planted disagreement as much as eager
    does (counted by hand): an agreement of 1.0 is measured, not a constant."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    inputs = torch.randn(12, 1, 4, 4)
    kept = kept_share(inputs)
    assert 0 < kept < 1
    comparison = compare(model, inputs, ["eager", "compile", Flipped("flipped")], repeats=1)
    assert comparison.skipped == {}
    assert_agreements(
        comparison,
        {
            ("eager", "compile"): 1.0,
            ("eager", "flipped"): kept,
            ("compile", "flipped"): kept,
        },
    )
    assert not comparison.runs["compile"].has_intermediates


@pytest.mark.skipif(shutil.which("g++") is None, reason="the planted compiler wraps g++")
# torch says that the disabled caches (so that the planted compiler is called) disable its
# profile-guided recompiles too
@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled:UserWarning")
def test_a_compile_that_fails_is_skipped_with_its_cause(tmp_path: Path) -> None:
    """inductor's BackendCompilerFailed says only "backend='inductor' raised:" on its first
    line; the skip names the error it wraps (here: a C++ compiler that answers --version, as
    inductor's check asks, and compiles nothing)."""
    import torch._inductor.config as inductor

    compiler = tmp_path / "g++"
    compiler.write_text(
        '#!/bin/sh\ncase "$*" in *--version*) exec g++ "$@";; esac\necho planted >&2\nexit 1\n'
    )
    compiler.chmod(0o755)
    torch._dynamo.reset()
    try:
        with inductor.patch({"cpp.cxx": (str(compiler),), "force_disable_caches": True}):
            model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
            comparison = compare(model, torch.randn(6, 1, 4, 4), ["eager", "compile"], repeats=1)
    finally:
        torch._dynamo.reset()
    assert comparison.skipped == {
        "compile": "torch.compile failed (CppCompileError: C++ compile error)"
    }


class PlantedNaN(Perturbed):
    """One weight of a layer is NaN."""

    def prepare(self, model: nn.Module, example: torch.Tensor) -> None:
        with torch.no_grad():
            model.get_submodule(self.layer).weight.view(-1)[0] = float("nan")
        self.inner.prepare(model, example)


def test_a_nan_is_localised_and_the_json_stays_valid() -> None:
    from model_explorer.analysis.compare.render import to_dict

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    comparison = compare(model, torch.randn(9, 6), ["eager", PlantedNaN("2")], repeats=1)

    found = comparison.localisations[("eager", "perturbed-2")]
    assert found["first"]["name"] == "2/FullyConnected#0"
    text = json.dumps(to_dict(comparison), allow_nan=False)
    assert json.loads(text)["pairs"][0]["max_rel_error"] == "nan"


@pytest.mark.slow
@pytest.mark.parametrize(
    "runtime, layer, opcode",
    [
        ("onnxruntime", "3", "Conv2D"),
        ("onnxruntime", "12", "FullyConnected"),
        ("tvm", "7", "Conv2D"),
    ],
)
def test_a_layer_perturbed_inside_a_runtime_is_localised_there(
    runtime: str, layer: str, opcode: str
) -> None:
    """A runtime's own intermediates (every module's output marked in the export) name the
    layer where it diverges, not the eager stand-in."""
    pytest.importorskip(runtime)
    found = localise_perturbed(runtime, layer, samples=32)
    assert found["intermediates_of"] == ["eager", "perturbed"]
    assert found["first"]["name"] == f"{layer}/{opcode}#0"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino", "tvm"])
def test_runtime_intermediates_line_up_with_eager_in_nested_residual_models(runtime: str) -> None:
    """resnet20: blocks, residual additions, shortcuts; each marked module's output must be
    the value eager gives the operator it is named after."""
    pytest.importorskip(runtime)
    from model_explorer.models import create_model

    torch.manual_seed(0)
    model, x = create_model("resnet20", in_channels=1).eval(), torch.randn(4, 1, 32, 32)
    found, expected = runtime_intermediates(runtime, model, x)
    assert len(found) > 40 and set(found) <= set(expected)
    assert any(name.startswith("layers.0.") for name in found)  # inside the blocks too
    for name, value in found.items():
        scale = float(expected[name].abs().max()) or 1.0
        assert float((value - expected[name]).abs().max()) <= 1e-5 * scale, name


@pytest.mark.slow
def test_tvm_runs_a_torchvision_model_as_eager_does_at_every_level() -> None:
    """Relax's optimisation levels: level 0 leaves operators unfused, 1-4 fuse;
    docs/performance-runtimes.md says the logits stay bit-identical, and every level must agree
    with eager (TVM's kernels are its own)."""
    pytest.importorskip("tvm")
    import torchvision

    from model_explorer.analysis.compare.environments import environment

    torch.manual_seed(0)
    model, x = torchvision.models.resnet18(num_classes=10).eval(), torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x).double()
    outputs = {}
    for spec in ("tvm", "tvm:0", 'tvm:4:{"kind": "llvm"}'):
        env = environment(spec)
        env.prepare(model, x[:1])
        outputs[spec] = env.run(x)
        env.close()
        assert float((outputs[spec] - expected).abs().max()) <= 1e-4 * float(expected.abs().max())
    assert torch.equal(outputs["tvm"], outputs["tvm:0"])


@pytest.mark.parametrize("spec", ["tvm:5", "tvm:high", "tvm:"])
def test_a_wrong_tvm_level_is_one_line(spec: str, trained_digits, capsys) -> None:
    workload, _ = trained_digits
    assert main(["compare", str(workload), "--env", "eager", "--env", spec]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    said = "name a setting after the colon" if spec == "tvm:" else "level must be 0 to 4"
    assert said in line and "O0, O1" * (spec == "tvm:") in line


class _SamePadded(nn.Module):
    """TensorFlow-style "same" padding, computed from the input's shape as EfficientNet-Lite's
    published port computes it: its ONNX export holds a Pad whose pads are computed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.act = nn.ReLU6()
        self.head = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        pad_h = max((-(-height // 2) - 1) * 2 + 3 - height, 0)
        pad_w = max((-(-width // 2) - 1) * 2 + 3 - width, 0)
        x = nn.functional.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return self.head(self.act(self.conv(x)).mean(dim=(2, 3)))


def test_tvm_localises_inside_a_model_its_onnx_frontend_cannot_read(tmp_path: Path) -> None:
    """TVM's ONNX frontend refuses the marked export (dynamic pads); its intermediates come
    through torch.export, the path the `tvm` environment runs the model on, and are eager's."""
    pytest.importorskip("tvm")
    from model_explorer.deployment.runtimes.taps import tapped_export
    from model_explorer.deployment.runtimes.tvm import onnx_module

    torch.manual_seed(0)
    model, x = _SamePadded().eval(), torch.randn(3, 3, 9, 9)
    tapped_export(model, x[:1], tmp_path / "tapped.onnx")
    with pytest.raises(UserError, match="ONNX frontend cannot read"):
        onnx_module(tmp_path / "tapped.onnx", "here")

    found, expected = runtime_intermediates("tvm", model, x)
    assert list(found) == ["conv/Conv2D#0", "act/Relu6#0", "head/FullyConnected#0"]
    for name, value in found.items():
        assert torch.allclose(value, expected[name], atol=1e-5), name


def test_the_samples_to_localise_on_are_those_that_differ_most() -> None:
    """By hand, five samples: the third's top-1 differs (it comes first), then the largest
    differences, 0.9 (the fourth) and 0.5 (the first); 0.1 and 0.0 are left out."""
    from model_explorer.analysis.compare.localisation import localisation_samples

    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.8], [1.0, 0.0], [1.0, 0.0]])
    b = a.copy()
    b[0, 1] += 0.5
    b[1, 1] += 0.1
    b[2, 1] += 0.4  # 1.2 > 1.0: its top-1 moves
    b[3, 1] += 0.9
    assert localisation_samples(a, b, 3) == [0, 2, 3]
    assert localisation_samples(a, b, 1) == [2]
