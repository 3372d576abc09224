"""Diagnostics: each inspector sees the problem planted for it, and a clean model yields none."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from conftest import DEFAULT_WORKLOAD, write_workload
from model_explorer import cli
from model_explorer.analysis.diagnose import (
    DEFAULT_ORDER,
    DiagnosisContext,
    Finding,
    SensitivityTable,
    allocation_path,
    apply_recommendations,
    diagnose,
    layer_sensitivity,
    merged_recommendations,
    run_inspectors,
)
from model_explorer.analysis.diagnose.inspectors import Image, channel_sqnr
from model_explorer.analysis.diagnose.inspectors.ranges import layer_sqnr
from model_explorer.datasets.digits import digits_tensors
from model_explorer.errors import UserError
from model_explorer.models import build_model
from model_explorer.operations.retraining import train_baseline
from model_explorer.quantization.sensitivity import (
    Row,
    decay_rates,
    last_accepted,
    resolvable,
    spread,
)
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def _workload_data(folder: Path) -> dict:
    data = yaml.safe_load(DEFAULT_WORKLOAD.read_text())
    body = data["workload"]
    body["model"] = {"type": "tests_support:plain_cnn", "weights": str(folder / "plain.pt")}
    body["calibration"]["file"] = str(folder / "calibration.pt")
    body["problem"]["num_bits_lower_limit"] = 4
    body["retraining"]["epochs"] = 6
    return data


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The default workload with a small CNN without batch norm, trained once."""
    folder = tmp_path_factory.mktemp("diagnose")
    data = _workload_data(folder)
    path = write_workload(data, folder / "plain.yaml")
    train_baseline(WorkloadContext(Workload.load(path), device="cpu"), progress=False)
    return data


def _variant(clean: dict) -> tuple[dict, dict]:
    data = copy.deepcopy(clean)
    return data, data["workload"]


def _context(data: dict, tmp_path: Path, name: str = "w") -> DiagnosisContext:
    path = write_workload(data, tmp_path / f"{name}.yaml")
    workload = Workload.load(path)
    return DiagnosisContext(WorkloadContext(workload, device="cpu"), tmp_path / "out")


def _arrays(tmp_path: Path, x: np.ndarray, y: np.ndarray, name: str = "data") -> dict:
    file = tmp_path / f"{name}.npz"
    np.savez(file, inputs=x.astype(np.float32), labels=y.astype(np.int64))
    return {"type": "arrays", "path": str(file), "batch_size": 128}


def _run(context: DiagnosisContext, *order: str) -> list[Finding]:
    return run_inspectors(context, order)


def _serious(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity != "info"]


def test_clean_model_yields_no_warnings(clean: dict, tmp_path: Path) -> None:
    findings = _run(_context(copy.deepcopy(clean), tmp_path), *DEFAULT_ORDER)
    assert _serious(findings) == [], [f.line() for f in findings]
    # every inspector reported what it measured, except ConcatenatedOutputs (no torch.cat)
    assert {f.inspector for f in findings} == set(DEFAULT_ORDER) - {"ConcatenatedOutputs"}


def test_unnormalized_inputs_are_a_norm_error(clean: dict, tmp_path: Path) -> None:
    x, y = digits_tensors("train")
    raw = (x.numpy() * 4.0 + 8.0) * 16  # roughly the 0-255 scale of raw pixels
    data, body = _variant(clean)
    body["calibration"]["datasets"]["calibrate"] = _arrays(tmp_path, raw, y.numpy())
    context = _context(data, tmp_path)
    context.max_batches = 100  # all of it, to compare with numpy
    [finding] = _run(context, "Norm")
    assert finding.severity == "error"
    assert finding.evidence["mean"][0] == pytest.approx(raw.mean(), rel=1e-3)
    assert finding.evidence["std"][0] == pytest.approx(raw.std(ddof=1), rel=1e-3)
    assert "not normalized" in finding.message


@pytest.mark.parametrize(
    ("scale", "severity", "words"),
    [
        ("raw", "info", "match what"),
        ("standardized", "error", "normalized twice"),
        ("unit", "error", "multiply them by 255"),
    ],
)
def test_a_model_that_normalizes_inside(
    clean: dict, tmp_path: Path, scale: str, severity: str, words: str
) -> None:
    """The clean CNN behind a Standardize of raw 0-255 pixels (mean and std of the raw data):
    raw data is what it expects; already standardized data is normalized twice; data scaled
    to [0, 1] has 1/255 of the spread it expects."""
    from tests_support import normalizing_cnn

    x, y = digits_tensors("train")
    raw = (x.numpy() * 4.0 + 8.0) * 16
    model = normalizing_cnn()
    state = torch.load(clean["workload"]["model"]["weights"], weights_only=True)
    model[1].load_state_dict(state.get("state_dict", state))
    model[0].mean.fill_(float(raw.mean()))
    model[0].std.fill_(float(raw.std()))
    torch.save(model.state_dict(), tmp_path / "normalizing.pt")
    data, body = _variant(clean)
    body["model"] = {
        "type": "tests_support:normalizing_cnn",
        "weights": str(tmp_path / "normalizing.pt"),
    }
    inputs = {"raw": raw, "standardized": x.numpy(), "unit": raw / 255}[scale]
    body["calibration"]["datasets"]["calibrate"] = _arrays(tmp_path, inputs, y.numpy())
    [finding] = _run(_context(data, tmp_path), "Norm")
    assert finding.severity == severity and words in finding.message
    assert finding.evidence["expected_mean"] == pytest.approx([raw.mean()], rel=1e-4)
    assert finding.evidence["expected_std"] == pytest.approx([raw.std()], rel=1e-4)


def test_inputs_filling_minus_one_to_one_are_normalized(clean: dict, tmp_path: Path) -> None:
    # TensorFlow's convention, (p - 127.5) / 127.5: std about 0.8 here, under 0.5 on photographs
    x, y = digits_tensors("train")
    unit = (x.numpy() - x.numpy().min()) / (x.numpy().max() - x.numpy().min())
    data, body = _variant(clean)
    body["calibration"]["datasets"]["calibrate"] = _arrays(tmp_path, unit * 2 - 1, y.numpy())
    [finding] = _run(_context(data, tmp_path), "Norm")
    assert finding.severity == "info" and "[-1, 1]" in finding.message


def test_inputs_in_zero_one_are_a_norm_warning(clean: dict, tmp_path: Path) -> None:
    x, y = digits_tensors("train")
    unit = (x.numpy() - x.numpy().min()) / (x.numpy().max() - x.numpy().min())
    data, body = _variant(clean)
    body["calibration"]["datasets"]["calibrate"] = _arrays(tmp_path, unit, y.numpy())
    [finding] = _run(_context(data, tmp_path), "Norm")
    assert finding.severity == "warning"  # mean about 0.3, std about 0.4: scaled, not standardized


def test_conv_followed_by_unfused_batchnorm(trained_digits, tmp_path: Path) -> None:
    workload_file, _ = trained_digits
    data = yaml.safe_load(Path(workload_file).read_text())
    findings = _run(_context(data, tmp_path), "BatchNorm")
    pairs = {(f.layer, f.evidence.get("batch_norm")) for f in findings if f.severity == "warning"}
    # digits_cnn: conv 0 -> bn 1, conv 3 -> bn 4, conv 7 -> bn 8
    assert pairs == {("0", "1"), ("3", "4"), ("7", "8")}
    assert all(f.recommendation == {"model": {"fold_batchnorm": True}} for f in findings)

    data["workload"]["model"]["fold_batchnorm"] = True
    folded = _run(_context(data, tmp_path, "folded"), "BatchNorm")
    assert _serious(folded) == []


def test_a_model_without_batch_norms_and_wild_outputs(clean: dict, tmp_path: Path) -> None:
    """The clean CNN (no batch norm) with convolution '0' scaled up 40x and '2' down as much:
    the same function (ReLU is positively homogeneous), but '0' now puts out channels with
    stds far above 3: Hailo's outlier warning for '0' only and the error advising batch norms.
    A model with batch norms (folded or not) never gets them."""
    data, body = _variant(clean)
    state = torch.load(body["model"]["weights"], weights_only=True)
    state = {k: v.clone() for k, v in state.get("state_dict", state).items()}
    for key in ("0.weight", "0.bias"):
        state[key] *= 40
    state["2.weight"] /= 40
    torch.save(state, tmp_path / "wild.pt")
    body["model"]["weights"] = str(tmp_path / "wild.pt")
    context = _context(data, tmp_path)
    findings = _run(context, "BatchNorm")
    warned = [f for f in findings if f.severity == "warning" and "far from normalized" in f.message]
    assert [f.layer for f in warned] == ["0"]
    x = torch.cat(context.inputs)
    with torch.no_grad():
        outputs = context.float_model[0](x)
    stds = outputs.transpose(0, 1).reshape(16, -1).std(1)
    assert warned[0].evidence["std_share"] == pytest.approx(float((stds > 3).float().mean()))
    [error] = [f for f in findings if f.severity == "error"]
    assert "retraining the model with batch norms" in error.message
    assert error.evidence["outliers"] == ["0"]
    assert not _serious(_run(_context(clean, tmp_path, "plain"), "BatchNorm"))


def test_folding_keeps_the_function_and_names(trained_digits) -> None:
    workload_file, _ = trained_digits
    workload = Workload.load(workload_file)
    float_model = build_model(workload.model)
    folded = build_model(workload.model.model_copy(update={"fold_batchnorm": True}))
    x, _ = digits_tensors("validation")
    with torch.no_grad():
        torch.testing.assert_close(folded(x), float_model(x), atol=1e-4, rtol=1e-4)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    convs = {n for n, m in folded.named_modules() if isinstance(m, torch.nn.Conv2d)}
    assert convs == {"0", "3", "7"}


def _outlier_data(tmp_path: Path, factor: float) -> tuple[dict, float, float, float]:
    """The digits with three pixels at `high + factor * (high - low)` (low: the smaller of
    0 and the data's minimum): (dataset entry, low, high, the outliers' value)."""
    x, y = digits_tensors("train")
    x = x.numpy().copy()
    low, high = min(0.0, float(x.min())), float(x.max())
    outlier = high + factor * (high - low)
    x.reshape(-1)[[100, 5000, 20000]] = outlier
    return _arrays(tmp_path, x, y.numpy()), low, high, outlier


@pytest.mark.parametrize("method", ["max", "percentile"])
def test_a_few_huge_outliers_are_clipping_findings(
    clean: dict, tmp_path: Path, method: str
) -> None:
    """Three pixels far above the rest: the histogram of the first layer's input has a top
    tail of 3 values over 3/4 of its range. Max calibration covers it: a warning whose
    recommended amax is the top of the other values (to within a bin); percentile calibration
    already clips it: info."""
    entry, low, high, outlier = _outlier_data(tmp_path, 3.0)
    data, body = _variant(clean)
    body["calibration"]["datasets"]["calibrate"] = entry
    body["calibration"]["method"] = method
    context = _context(data, tmp_path)
    context.max_batches = 100  # every sample, so all three outliers are seen
    findings = {f.layer: f for f in _run(context, "Clipping")}
    found = findings["0.input_quantizer"]
    bin_size = (outlier - low) / 100
    assert found.evidence["range"] == pytest.approx([low, outlier], rel=1e-4)
    assert found.evidence["tails"][1] == pytest.approx(0.75, abs=0.011)
    top = found.evidence["suggested_range"][1]
    assert high <= top <= high + bin_size * 1.001
    if method == "max":
        assert found.severity == "warning"
        amax = found.recommendation["calibration"]["amax"]["0.input_quantizer"]
        assert amax == pytest.approx(max(abs(low), top), rel=1e-4)  # evidence: 4 digits
    else:
        assert found.severity == "info" and found.recommendation is None


def test_a_recommended_amax_holds_at_every_bit_width(clean: dict, tmp_path: Path) -> None:
    data, body = _variant(clean)
    body["calibration"]["method"] = "mse"  # an amax that depends on the bit width
    body["calibration"]["amax"] = {"0.input_quantizer": 1.25, "2*.input_quantizer": 2.5}
    model = _context(data, tmp_path).quantized_model
    for bits in (8, 4, 3):
        model.bit_widths = [bits] * len(model.bit_widths)
        assert float(model.quantizers["0.input_quantizer"].amax) == 1.25
        assert float(model.quantizers["2.input_quantizer"].amax) == 2.5
    other = model.quantizers["7.input_quantizer"]
    amaxes = set()
    for bits in (8, 3):
        model.bit_widths = [bits] * len(model.bit_widths)
        amaxes.add(float(other.amax))
    assert len(amaxes) == 2  # the calibrated ones still follow the bit width
    body["calibration"]["amax"] = {"conv9.input_quantizer": 1.0}
    with pytest.raises(UserError, match="'conv9.input_quantizer' names no input quantizer"):
        _ = _context(data, tmp_path, "wrong").quantized_model


def _plant_sensitive_layer(clean: dict, tmp_path: Path) -> dict:
    """Channel 0 of convolution '2' scaled up 1000x in its weights and back down by the
    ChannelScale after it: the same function, but per-tensor 4-bit weights of that layer now
    round every other channel to zero."""
    data, body = _variant(clean)
    checkpoint = torch.load(body["model"]["weights"], weights_only=True)
    state = {k: v.clone() for k, v in checkpoint.get("state_dict", checkpoint).items()}
    state["2.weight"][0] *= 1000
    state["2.bias"][0] *= 1000
    state["4.scale"][0] /= 1000
    weights = tmp_path / "planted.pt"
    torch.save(state, weights)
    body["model"]["weights"] = str(weights)
    body["calibration"]["file"] = str(tmp_path / "planted_calibration.pt")
    body["quantization"] = {"weight": {"axis": None}}
    x, _ = digits_tensors("validation")
    original = build_model(Workload.from_dict(clean).model)
    planted = build_model(Workload.from_dict(data).model)
    with torch.no_grad():
        torch.testing.assert_close(planted(x), original(x), atol=1e-3, rtol=1e-3)
    return data


def test_a_very_sensitive_layer_is_ranked_first(clean: dict, tmp_path: Path) -> None:
    data = _plant_sensitive_layer(clean, tmp_path)
    context = _context(data, tmp_path)
    findings = _run(context, "HighPrecision", "Sensitivity")
    precision = [f for f in findings if f.inspector == "HighPrecision"]
    assert precision[0].layer == "2" and precision[0].severity in ("warning", "error")
    assert precision[0].evidence["rank"] == 1
    assert [f.layer for f in precision if f.severity != "info"] == ["2"]
    assert context.cache["sqnr"]["2"] == min(context.cache["sqnr"].values())

    table: SensitivityTable = context.cache["sensitivity"]
    assert table.ranked()[0].name == "2.weight_quantizer"
    warnings = [f for f in findings if f.inspector == "Sensitivity" and f.severity == "warning"]
    assert warnings[0].layer == "2.weight_quantizer"
    low, high = context.bit_range
    bits = warnings[0].evidence["bits"]
    assert low < bits <= high
    assert warnings[0].recommendation == {
        "problem": {"layer_bounds": {"2.weight_quantizer": [bits, high]}}
    }
    assert (context.out_dir / "sensitivity.png").stat().st_size > 0
    rows = (context.out_dir / "sensitivity.csv").read_text().splitlines()
    assert rows[1].split(",")[1] == "2.weight_quantizer"


def test_a_sensitive_layer_ranks_first_under_a_metric_where_lower_is_better(
    clean: dict, tmp_path: Path
) -> None:
    """Scored by kl against the float model, the planted layer's weights alone at 4 bits gain
    the most divergence: the drop is that gain (positive), ranked first and named in kl."""
    data = _plant_sensitive_layer(clean, tmp_path)
    body = data["workload"]
    body["metric"] = "kl"
    body["problem"].pop("allowable_accuracy_drop", None)
    body["problem"].pop("minimum_accuracy", None)
    body["problem"]["maximum_divergence"] = 0.5
    context = _context(data, tmp_path)
    [*warnings, summary] = _run(context, "Sensitivity")
    table: SensitivityTable = context.cache["sensitivity"]
    assert table.baseline == pytest.approx(0.0, abs=1e-6)  # the float model against itself
    assert all(row.drop == pytest.approx(row.accuracy - table.baseline) for row in table.rows)
    assert all(row.drop >= -1e-6 for row in table.rows)
    assert table.ranked()[0].name == "2.weight_quantizer"
    assert "raises kl by" in summary.message and "2.weight_quantizer" in summary.message
    assert all(w.severity == "warning" and "raises kl by" in w.message for w in warnings)


def test_sensitivity_table_matches_evaluating_one_quantizer_alone(
    clean: dict, tmp_path: Path
) -> None:
    context = _context(copy.deepcopy(clean), tmp_path)
    model = context.quantized_model
    batches = context.context.batches("exploration")
    table = layer_sensitivity(model, batches, "top1", 4)
    assert model.bit_widths == [8] * len(model.bit_widths)  # the table left the model as it was
    assert all(q.enabled for q in model.quantizers.values())
    name = "2.weight_quantizer"
    # by hand: every quantizer off but this one, at 4 bits, top-1 over the exploration data
    for quantizer_name, quantizer in model.quantizers.items():
        quantizer.enabled = quantizer_name == name
    model.quantizers[name].num_bits = 4
    correct = total = 0
    with torch.no_grad():
        for x, y in batches:
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    row = next(r for r in table.rows if r.name == name)
    assert row.accuracy == pytest.approx(correct / total)


def test_layer_sqnr_matches_the_network_run_with_one_layer_quantized(
    clean: dict, tmp_path: Path
) -> None:
    # the reference: the whole network run with only that layer's quantizers on, the layer's
    # output read by a hook, per-channel powers summed over every batch
    context = _context(copy.deepcopy(clean), tmp_path)
    table = layer_sqnr(context)
    model = context.quantized_model
    assert all(q.enabled for q in model.quantizers.values())  # the table left them on
    batches = [x for (x,) in context.input_batches()]
    assert set(table) == set(model.layers)
    for name, layer in model.layers.items():
        outputs = {True: [], False: []}
        for on in (False, True):
            for quantizer_name, quantizer in model.quantizers.items():
                quantizer.enabled = on and quantizer_name.rpartition(".")[0] == name
            handle = layer.register_forward_hook(lambda m, a, y, kept=outputs[on]: kept.append(y))
            with torch.no_grad():
                for x in batches:
                    model(x)
            handle.remove()
        expected = channel_sqnr(torch.cat(outputs[False]), torch.cat(outputs[True]))
        assert table[name] == pytest.approx(expected, abs=1e-6)
    for quantizer in model.quantizers.values():
        quantizer.enabled = True


def test_channel_sqnr_by_hand() -> None:
    y = torch.tensor([[[1.0, 2.0], [3.0, 0.0]]]).reshape(1, 2, 2)  # (batch 1, 2 channels, 2)
    q = y.clone()
    q[0, 0, 0] += 0.1  # channel 0: signal 5, noise 0.01 -> 26.99 dB
    q[0, 1, 0] -= 0.3  # channel 1: signal 9, noise 0.09 -> 20 dB
    expected = (10 * math.log10(5 / 0.01) + 10 * math.log10(9 / 0.09)) / 2
    assert channel_sqnr(y, q) == pytest.approx(expected)


def test_channel_swapped_images_are_written_both_ways(tmp_path: Path) -> None:
    import matplotlib.image

    x = torch.zeros(4, 3, 8, 8)
    x[:, 0] = torch.linspace(0, 1, 8)  # red ramps left to right
    x[:, 2, :4] = 1.0  # blue in the top half
    context = SimpleNamespace(inputs=[x], out_dir=tmp_path, interactive=False)
    [finding] = Image().run(context)
    standard = matplotlib.image.imread(tmp_path / "standard.png")[..., :3]
    inverse = matplotlib.image.imread(tmp_path / "inverse.png")[..., :3]
    assert standard.shape == (8, 32, 3)
    np.testing.assert_array_equal(inverse, standard[..., ::-1])
    np.testing.assert_allclose(standard[0, :8, 0], np.linspace(0, 1, 8), atol=1 / 255)
    assert finding.severity == "info"

    asked = SimpleNamespace(inputs=[x], out_dir=tmp_path, interactive=True, ask=lambda q: "i")
    [swapped] = Image().run(asked)
    assert swapped.severity == "error" and "channel" in swapped.message


def test_concatenated_branches_with_different_ranges(tmp_path: Path, clean: dict) -> None:
    from tests_support import two_branches

    torch.manual_seed(0)
    model = two_branches()
    with torch.no_grad():
        model.b.weight *= 100
        model.b.bias *= 100
    torch.save(model.state_dict(), tmp_path / "branches.pt")
    data, body = _variant(clean)
    body["model"] = {"type": "tests_support:two_branches", "weights": str(tmp_path / "branches.pt")}
    context = _context(data, tmp_path)
    [finding] = _run(context, "ConcatenatedOutputs")
    x = torch.cat(context.inputs)
    with torch.no_grad():
        ranges = [float(model.a(x).abs().max()), float(model.b(x).abs().max())]
    assert finding.severity == "warning"
    assert finding.evidence["ranges"] == pytest.approx(ranges, rel=1e-4)
    assert finding.evidence["ratio"] == pytest.approx(ranges[1] / ranges[0], rel=1e-3)
    # The head reads the concatenation (flattened): its input bits go up by the lost bits.
    assert finding.evidence["readers"] == ["head"]
    low, high = context.bit_range
    bits = min(high, low + math.ceil(math.log2(ranges[1] / ranges[0])))
    assert finding.recommendation == {
        "problem": {"layer_bounds": {"head.input_quantizer": [bits, high]}}
    }

    with torch.no_grad():  # comparable branches: nothing to report
        model.b.weight /= 100
        model.b.bias /= 100
    torch.save(model.state_dict(), tmp_path / "branches.pt")
    assert _run(_context(data, tmp_path, "even"), "ConcatenatedOutputs") == []


def test_a_concatenated_model_output(tmp_path: Path, clean: dict) -> None:
    """Hailo's case: the model's output is a concatenation of branches far apart: the advice
    is to put out the branches, and no layer's bits are recommended (none reads it)."""
    from tests_support import concatenated_heads

    torch.manual_seed(0)
    model = concatenated_heads()
    with torch.no_grad():
        model.b.weight *= 100
    torch.save(model.state_dict(), tmp_path / "heads.pt")
    data, body = _variant(clean)
    body["model"] = {
        "type": "tests_support:concatenated_heads",
        "weights": str(tmp_path / "heads.pt"),
    }
    [finding] = _run(_context(data, tmp_path), "ConcatenatedOutputs")
    assert finding.severity == "warning" and "model output" in finding.message
    assert finding.recommendation is None


def test_compression_by_hand(clean: dict, tmp_path: Path) -> None:
    data, body = _variant(clean)
    body["quantization"] = {"weight": {"num_bits": 4, "axis": 0}, "input": {"num_bits": 8}}
    *four_bit, finding = _run(_context(data, tmp_path), "Compression")
    assert [f.evidence for f in four_bit] == [
        {"four_bit_share": 1.0},  # every weight at 4 bits, as configured
        {"searchable_four_bit_share": 1.0},  # the file chose num_bits_lower_limit: 4
    ]
    assert [f.severity for f in four_bit] == ["info", "info"]
    weights = 16 * 9 + 16 * 16 * 9 + 256 * 10  # conv, conv, linear weights
    biases = 16 + 16 + 10
    buffers = 0  # ChannelScale's factors are a buffer, not a parameter
    assert finding.evidence["float_bytes"] == 4 * (weights + biases + buffers)
    assert finding.evidence["quantized_bytes"] == (4 * weights + 32 * biases) / 8
    assert finding.evidence["average_weight_bits"] == 4
    macs = 16 * 9 * 64 + 16 * 16 * 9 * 64 + 256 * 10
    assert finding.evidence["bops"] == 8 * 4 * macs


def test_implicit_four_bit_weights_are_a_compression_warning(clean: dict, tmp_path: Path) -> None:
    """Without num_bits_lower_limit in the file, the default (4) lets the search put every
    weight at 4 bits: Hailo's implicit-compression warning, recommending a limit of 5; a
    layer_bounds keeping the linear layer (2560 of the 4144 weights) at 5 bits or more shares
    the rest."""
    data, body = _variant(clean)
    del body["problem"]["num_bits_lower_limit"]
    findings = _run(_context(data, tmp_path), "Compression")
    [warning] = [f for f in findings if f.severity == "warning"]
    assert "implicit compression" in warning.message
    assert warning.evidence == {"searchable_four_bit_share": 1.0}
    assert warning.recommendation == {"problem": {"num_bits_lower_limit": 5}}
    body["problem"]["layer_bounds"] = {"7.weight_quantizer": [5, 8]}
    findings = _run(_context(data, tmp_path, "bounded"), "Compression")
    [warning] = [f for f in findings if f.severity == "warning"]
    weights = {"0": 16 * 9, "2": 16 * 16 * 9, "7": 256 * 10}
    share = (weights["0"] + weights["2"]) / sum(weights.values())
    assert warning.evidence["searchable_four_bit_share"] == pytest.approx(share, abs=1e-6)


def test_output_workload_applies_the_recommendations(clean: dict, tmp_path: Path, capsys) -> None:
    data = _plant_sensitive_layer(clean, tmp_path)
    body = data["workload"]
    body["calibration"]["method"] = "max"
    entry, *_ = _outlier_data(tmp_path, 3.0)
    body["calibration"]["datasets"]["calibrate"] = entry
    workload = write_workload(data, tmp_path / "planted.yaml")
    out = tmp_path / "recommended.yaml"
    code = cli.main(
        [
            "diagnose",
            str(workload),
            "--no-interactive",
            "--out",
            str(tmp_path / "diagnosis"),
            "--order",
            "Clipping,HighPrecision",
            "--order",
            "Sensitivity",
            "--batches",
            "20",
            "--output-workload",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "[warning] Clipping 0.input_quantizer:" in printed
    recommended = Workload.load(out, check_paths=False)  # the schema accepts it
    bounds = recommended.problem.options.layer_bounds
    assert bounds["2.weight_quantizer"][0] > 4  # raised above the explored lower limit
    assert bounds["2.weight_quantizer"][1] == 8
    assert set(recommended.calibration.amax) == {"0.input_quantizer"}
    assert recommended.calibration.file.endswith("planted_calibration_recommended.pt")
    log = (tmp_path / "diagnosis" / "diagnostic.log").read_text()
    assert "[warning] Clipping 0.input_quantizer" in log and '"inspector": "Sensitivity"' in log
    # the recommended bound is where the planted layer alone stays within 1 point
    context = _context(yaml.safe_load(out.read_text()), tmp_path, "check")
    model = context.quantized_model
    table = layer_sensitivity(model, context.context.batches("exploration"), "top1", 4)
    low = bounds["2.weight_quantizer"][0]
    alone = table.bits_within(
        model,
        context.context.batches("exploration"),
        "top1",
        "2.weight_quantizer",
        0.01,
        (low, low),
    )
    assert alone == low


def test_a_recommended_calibration_method_keeps_only_its_own_options() -> None:
    written = {"file": "results/c.pt", "method": "percentile", "percentile": 99.9, "num_bins": 512}
    applied = apply_recommendations(
        {"workload": {"calibration": written}}, {"calibration": {"method": "mse"}}
    )
    # percentile is an option of the percentile calibrator only; num_bins is mse's too.
    assert applied["workload"]["calibration"] == {
        "file": "results/c_recommended.pt",
        "method": "mse",
        "num_bins": 512,
    }


def test_recommendations_merge_and_stay_in_range() -> None:
    findings = [
        Finding("warning", "A", "m", recommendation={"problem": {"layer_bounds": {"q": [5, 8]}}}),
        Finding("error", "B", "m", recommendation={"problem": {"layer_bounds": {"q": [7, 8]}}}),
        Finding("warning", "C", "m", recommendation={"calibration": {"method": "percentile"}}),
        Finding("error", "D", "m", recommendation={"calibration": {"method": "mse"}}),
        Finding("warning", "E", "m", recommendation={"problem": {"layer_bounds": {"r": [12, 16]}}}),
    ]
    merged = merged_recommendations(findings)
    assert merged["problem"]["layer_bounds"]["q"] == [7, 8]
    assert merged["calibration"]["method"] == "mse"
    data = {
        "workload": {"calibration": {"file": "results/c.pt", "method": "max"}, "exploration": {}}
    }
    applied = apply_recommendations(data, merged, (2, 8))
    assert applied["workload"]["problem"]["layer_bounds"]["r"] == [8, 8]
    assert applied["workload"]["calibration"]["file"] == "results/c_recommended.pt"
    # A file of the original layout gets the bounds where its own are read from, not twice.
    original = {"workload": {"exploration": {"layer_bounds": {"q": [3, 8], "s": [4, 4]}}}}
    applied = apply_recommendations(original, merged, (2, 8))["workload"]
    assert "layer_bounds" not in applied["exploration"]
    assert applied["problem"]["layer_bounds"] == {"q": [7, 8], "s": [4, 4], "r": [8, 8]}
    assert data["workload"]["calibration"]["file"] == "results/c.pt"  # the input is untouched


def test_allocation_path_by_hand() -> None:
    # drops at 2 bits a 0.3, b 0 (counts as half of 0.1), c 0.1; a step's estimated loss is
    # drop * 4**(2 - bits): from 4 bits b (0.05/16), c (0.1/16), b (0.05/4), a (0.3/16), c, a
    table = SensitivityTable(0.9, 2, [Row("a", 0.6, 0.3), Row("b", 0.9, 0.0), Row("c", 0.8, 0.1)])
    path = allocation_path(table, [(2, 4), (2, 4), (2, 4)])
    assert path == [[4, 3, 4], [4, 3, 3], [4, 2, 3], [3, 2, 3], [3, 2, 2], [2, 2, 2]]
    assert spread(path, 3) == [[4, 3, 4], [4, 2, 3], [2, 2, 2]]
    assert spread(path, 10) == path
    # a quantizer whose bit costs twice as much goes first among equally sensitive ones
    equal = SensitivityTable(0.9, 2, [Row("a", 0.8, 0.1), Row("b", 0.8, 0.1)])
    assert allocation_path(equal, [(2, 3), (2, 3)], weights=[1.0, 2.0])[0] == [3, 2]
    assert allocation_path(equal, [(2, 3), (2, 3)])[0] == [2, 3]  # ties: the model's order


@pytest.mark.parametrize("measured", [False, True])
def test_allocation_path_is_the_exhaustive_optimum_of_its_estimate(measured: bool) -> None:
    # every point of the path has the least estimated loss, sum(d * r**(bits - b)), of all
    # configurations within the bounds with the same total bits (exhaustive search); r = 4,
    # or a rate of each quantizer's own between 2 and 4
    rng = np.random.default_rng(3)
    bounds = [(2, 6), (3, 8), (2, 5), (4, 7)]
    drops = [float(d) for d in rng.uniform(0.001, 0.4, len(bounds))]
    rates = [float(r) for r in rng.uniform(2, 4, len(bounds))] if measured else [4.0] * 4
    table = SensitivityTable(1.0, 2, [Row(str(i), 1 - d, d) for i, d in enumerate(drops)])

    def loss(config) -> float:  # noqa: ANN001
        return sum(d * r ** (2 - b) for d, r, b in zip(drops, rates, config, strict=True))

    best: dict[int, float] = {}
    for config in itertools.product(*(range(low, high + 1) for low, high in bounds)):
        best[sum(config)] = min(best.get(sum(config), np.inf), loss(config))
    path = allocation_path(table, bounds, rates=rates if measured else None)
    assert len(path) == sum(high - low for low, high in bounds)
    for config in path:
        assert loss(config) == pytest.approx(best[sum(config)], rel=1e-12)


def test_decay_rates_by_hand() -> None:
    # drops at 2 bits: a 0.32, b 0.08, c 0.01 (the resolution: the smallest positive drop),
    # d 0.02, e 0; only drops of at least 4 x 0.01 can be resolved two bits wider: a and b
    low = SensitivityTable(
        0.9,
        2,
        [Row(n, 0.9 - d, d) for n, d in zip("abcde", [0.32, 0.08, 0.01, 0.02, 0.0], strict=True)],
    )
    assert resolvable(low) == ["a", "b"]
    # at 4 bits a drops to 0.08 (4x in two bits: 2 per bit), b to 0.03, below 4 x 0.01, so
    # not resolved (4, the noise model); a drop falling by 9 in two bits (3 per bit) stays 3,
    # one falling by 64 (8 per bit) is held at 4, one falling by 1.21 (1.1 per bit) at 2
    wide = SensitivityTable(0.9, 4, [Row("a", 0.82, 0.08), Row("b", 0.87, 0.03)])
    assert decay_rates(low, wide) == [2.0, 4.0, 4.0, 4.0, 4.0]
    fine = SensitivityTable(0.9, 2, [Row("a", 0.0, 0.9), Row("c", 0.899, 0.001)])
    for fall, rate in ((9.0, 3.0), (64.0, 4.0), (1.21, 2.0)):
        wide = SensitivityTable(0.9, 4, [Row("a", 0.9 - 0.9 / fall, 0.9 / fall)])
        assert decay_rates(fine, wide) == [pytest.approx(rate), 4.0]
    # equal drops of 0.1 at 2 bits, a falling by 2 per bit, b by 4: a step from b bits costs
    # 0.1 * r**(2 - b) * (r - 1): from 4 bits a 0.025, b 0.01875; from 3 bits a 0.05, b 0.075.
    # b is lowered first (a's loss stays where the bits are high), a then goes down to 2 bits
    # before b leaves 3
    equal = SensitivityTable(0.9, 2, [Row("a", 0.8, 0.1), Row("b", 0.8, 0.1)])
    path = allocation_path(equal, [(2, 4), (2, 4)], rates=[2.0, 4.0])
    assert path == [[4, 3], [3, 3], [2, 3], [2, 2]]
    assert allocation_path(equal, [(2, 4), (2, 4)])[:2] == [[3, 4], [3, 3]]  # the model's order


def test_sensitivity_seeded_exploration_starts_from_the_allocation_path(
    clean: dict, tmp_path: Path
) -> None:
    from model_explorer.metrics.functions import score
    from model_explorer.operations.explore import ExploreOptions, explore, minimum_accuracy
    from model_explorer.operations.pipeline import calibrate_workload

    data, body = _variant(clean)
    body["exploration"]["initialization"] = "sensitivity"
    body["exploration"]["nsga"].update(pop_size=8, offsprings=4, generations=2)
    # tables of top-1 drops, as computed here (ranked by divergence, they measure it:
    # tests/exploration/test_selection.py)
    body.setdefault("problem", {})["selection"] = "accuracy"
    workload = Workload.load(write_workload(data, tmp_path / "seeded.yaml"))
    calibrate_workload(WorkloadContext(workload), if_missing=True)
    result, _ = explore(workload, ExploreOptions(output=str(tmp_path / "seeded.pkl")))
    # the seeds, computed here on their own from a freshly calibrated model: the allocation
    # path (bits_weighted_linear: every bit costs the same) from its start to a point that
    # keeps the minimum accuracy and whose next point does not (or the path's end)
    context = _context(data, tmp_path, "again")
    model, batches = context.quantized_model, context.context.batches("exploration")
    table = layer_sensitivity(model, batches, "top1", 4)
    wider = layer_sensitivity(model, batches, "top1", 6, resolvable(table))
    rates = decay_rates(table, wider)
    path = allocation_path(table, [(4, 8)] * len(model.bit_widths), rates=rates)
    first = [i.configuration for i in result.individuals if i.generation == 0][:4]
    last = path.index(first[-1])
    assert first == spread(path[: last + 1], 4)
    minimum = minimum_accuracy(workload.problem.options, result.baseline)[0]

    def accuracy(configuration: list[int]) -> float:
        model.bit_widths = configuration
        return float(np.mean(score(model, batches, "top1").accuracies))

    assert accuracy(path[last]) >= minimum
    assert last == len(path) - 1 or accuracy(path[last + 1]) < minimum
    # the table's and the bisection's forwards count in the search's, before its first
    table_forwards = (len(model.bit_widths) + len(wider.rows) + 1) * batches.num_samples
    bisection = math.ceil(math.log2(len(path) + 1)) * batches.num_samples
    spent = result.stats["sensitivity_forwards"]
    assert table_forwards < spent <= table_forwards + bisection
    assert result.stats["sample_forwards"] == spent + result.sample_forwards()
    assert result.hypervolume_by_samples()[0][0] > spent


def test_last_accepted_bisects_a_path() -> None:
    for length in range(0, 40):
        for cut in range(-1, length):
            calls = []

            def accepts(point: int, cut: int = cut, calls: list = calls) -> bool:
                calls.append(point)
                return point <= cut

            assert last_accepted(list(range(length)), accepts) == cut
            assert len(calls) <= math.ceil(math.log2(length + 1))


def test_sensitivity_initialization_needs_a_quantization_problem(
    trained_digits, tmp_path: Path
) -> None:
    from model_explorer.operations.explore import ExploreOptions, explore

    workload_file, _ = trained_digits
    data = yaml.safe_load(Path(workload_file).read_text())
    data["workload"]["problem"]["problem_function"] = "sparsity_problem"
    data["workload"]["exploration"]["initialization"] = "sensitivity"
    data["workload"]["problem"].pop("objectives")  # the sparsity problem's default
    for key in ("num_bits_lower_limit", "num_bits_upper_limit", "bit_weighting_function"):
        data["workload"]["problem"].pop(key)
    workload = Workload.load(write_workload(data, tmp_path / "w.yaml"))
    with pytest.raises(UserError, match="exploration.initialization: 'sensitivity'"):
        explore(workload, ExploreOptions(output=str(tmp_path / "r.pkl")))


def test_user_inspector_by_import_path_and_unknown_names(clean: dict, tmp_path: Path) -> None:
    context = _context(copy.deepcopy(clean), tmp_path)
    [finding] = _run(context, "tests_support:AlwaysWarns")
    assert finding.line() == "[warning] AlwaysWarns everywhere: planted"
    with pytest.raises(UserError, match="did you mean 'Clipping'"):
        _run(context, "Cliping")
    with pytest.raises(UserError, match="cannot load inspector"):
        _run(context, "tests_support:Missing")


def test_diagnose_command_reports_a_wrong_inspector_with_status_2(
    clean: dict, tmp_path: Path, capsys
) -> None:
    workload = write_workload(copy.deepcopy(clean), tmp_path / "w.yaml")
    assert cli.main(["diagnose", str(workload), "--order", "Nrom", "--no-interactive"]) == 2
    assert "did you mean 'Norm'" in capsys.readouterr().err


def test_diagnose_writes_the_log_also_when_an_inspector_fails(clean: dict, tmp_path: Path) -> None:
    workload = Workload.load(write_workload(copy.deepcopy(clean), tmp_path / "w.yaml"))
    with pytest.raises(RuntimeError, match="planted failure"):
        diagnose(workload, ["Norm", "tests_support:Explodes"], tmp_path / "out", echo=print)
    log = (tmp_path / "out" / "diagnostic.log").read_text()
    assert log.startswith("[info] Norm input channel means")
