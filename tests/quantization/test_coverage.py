"""The coverage statement: the share of a model's weight MACs that run on quantized weights,
against MACs counted by hand, with every layer left in float named; the warning about those the
workload did not leave out; and where the statement appears (calibrate, the result file)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from conftest import write_workload
from model_explorer.operations.pipeline import excluded_layer
from model_explorer.quantization import QuantizedModel
from model_explorer.quantization.coverage import Coverage, plan_coverage, weight_coverage
from model_explorer.quantization.spec import QuantizationSpec


class Hidden(nn.Module):
    """A projection whose weight is one slice of a 3-D parameter: no layer the swap knows."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = nn.Parameter(torch.randn(1, 4, 8 * 6 * 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.flatten(1), self.kernels[0])


def toy() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), Hidden(), nn.Linear(4, 2))


def measured() -> tuple[QuantizedModel, Coverage]:
    """The toy model quantized but its last layer (excluded), and its coverage."""
    torch.manual_seed(0)
    model = QuantizedModel(toy(), exclude=["3"])
    x = torch.randn(5, 3, 8, 8)
    model.calibrate([x], method="max")
    with torch.no_grad():
        return model, weight_coverage(model, lambda: model(x))


def test_the_share_is_the_quantized_layers_macs_by_hand_and_the_rest_is_named() -> None:
    model, coverage = measured()
    conv = 5 * 8 * 6 * 6 * (3 * 3 * 3)  # outputs x MACs per output
    hidden, linear = 5 * 4 * 288, 5 * 2 * 4
    assert coverage.total_macs == conv + hidden + linear
    assert coverage.quantized_macs == conv
    assert [(layer.name, layer.type, layer.macs) for layer in coverage.float_layers] == [
        ("2", "Hidden", hidden),
        ("3", "Linear", linear),
    ]
    assert coverage.statement().startswith(f"{conv / (conv + hidden + linear):.1%} of the weight")
    assert "in float: 2 (Hidden, " in coverage.statement()
    # the quantizers' settings are as they were
    assert all(quantizer.enabled for quantizer in model.quantizers.values())


def test_the_cost_table_with_a_plan_sees_the_layers_the_search_sees() -> None:
    """The float model's cost table priced with the quantized model's plan gives the same
    coverage as measuring the quantized model."""
    from model_explorer.cost import analyze_cost
    from model_explorer.plan import current_plan

    model, coverage = measured()
    report = analyze_cost(toy(), (5, 3, 8, 8), current_plan(model))
    priced = plan_coverage(report.rows, current_plan(model))
    assert priced.to_dict() == coverage.to_dict()


def test_a_float_layer_the_workload_did_not_leave_out_is_warned_about() -> None:
    _, coverage = measured()
    spec = QuantizationSpec(exclude=["3"])
    warned = coverage.warned(0.01, lambda name, kind: excluded_layer(spec, name, kind))
    assert [layer.name for layer in warned] == ["2"]  # Hidden; the excluded Linear is not
    by_type = QuantizationSpec(layer_types=["Conv2d"])
    assert excluded_layer(by_type, "3", "Linear") and not excluded_layer(by_type, "2", "Hidden")
    assert coverage.warned(0.5, lambda name, kind: False) == []  # below the threshold


def test_calibrate_states_the_coverage_and_the_result_file_records_it(
    trained_digits, tmp_path: Path, capsys, caplog
) -> None:
    from model_explorer.cli import main
    from model_explorer.results import ExplorationResult

    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    body = data["workload"]
    body["calibration"]["file"] = str(tmp_path / "calibration.pt")
    body["quantization"] = {"exclude": ["7"]}
    body["exploration"]["nsga"].update(pop_size=4, offsprings=4, generations=1)
    workload = str(write_workload(data, tmp_path / "w.yaml"))
    with caplog.at_level(logging.WARNING):
        assert main(["calibrate", workload]) == 0
    out = capsys.readouterr().out
    assert "of the weight MACs run on quantized weights; in float: 7 (Conv2d, " in out
    assert not [r for r in caplog.records if "run in float" in r.getMessage()]  # excluded
    result = tmp_path / "result.pkl"
    assert main(["explore", workload, "--output", str(result)]) == 0
    coverage = ExplorationResult.load(result).problem["coverage"]
    assert [layer["name"] for layer in coverage["float_layers"]] == ["7"]
    assert 0.5 < coverage["share"] < 1
    assert "quantization coverage: " in capsys.readouterr().out
    front = ExplorationResult.load(result).pareto_front()[0].id
    assert main(["cost", workload, "--individual", f"{result}#{front}"]) == 0
    assert "quantization coverage: " in (out := capsys.readouterr().out)
    assert "in float: 7 (Conv2d, " in out


class Tokens(nn.Module):
    """A lookup table, a positional parameter added to activations, and one linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 8)
        self.position = nn.Parameter(torch.randn(6, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(tokens) + self.position).mean(1)


def test_weights_no_product_reads_are_named_with_their_share_of_the_weights() -> None:
    torch.manual_seed(0)
    model = QuantizedModel(Tokens())
    tokens = torch.randint(0, 50, (4, 6))
    model.calibrate([tokens], method="max")
    with torch.no_grad():
        coverage = weight_coverage(model, lambda: model(tokens))
    weights = 50 * 8 + 6 * 8 + 3 * 8  # the parameters of two dimensions
    assert coverage.share == 1.0 and coverage.total_macs == 4 * 6 * 3 * 8
    assert [(m.name, m.type, m.elements) for m in coverage.unread] == [
        ("embedding", "Embedding", 400),
        ("", "Tokens", 48),  # the model's own positional parameter
    ]
    assert coverage.unread[0].share == pytest.approx(400 / weights)
    said = coverage.statement()
    assert (
        f"weights no product reads, in float: embedding (Embedding, {400 / weights:.1%} of" in said
    )
    assert Coverage.from_dict(coverage.to_dict()) == coverage
    older = {k: v for k, v in coverage.to_dict().items() if k != "unread"}  # an older result
    assert Coverage.from_dict(older).unread == []
    assert "<the model> (Tokens, " in said
