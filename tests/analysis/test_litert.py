"""compare's LiteRT environments, run where the litert extra is installed (`make test` runs
this file a second time in .venv-litert, layered over the test environment): the float model
converted by litert-torch, its intermediates, and a searched individual as LiteRT runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from conftest import write_workload
from model_explorer.analysis.compare.environments import environment
from model_explorer.cli import main
from model_explorer.models import create_model
from tests_support import localise_perturbed, runtime_intermediates

pytest.importorskip("litert_torch", reason="the litert extra is not installed")
pytest.importorskip("ai_edge_litert", reason="the litert extra is not installed")


def test_litert_runs_a_torchvision_model_as_eager_does() -> None:
    import torchvision

    torch.manual_seed(0)
    model, x = torchvision.models.resnet18(num_classes=10).eval(), torch.randn(3, 3, 32, 32)
    env = environment("litert")
    env.prepare(model, x[:1])
    try:
        found = env.run(x)
    finally:
        env.close()
    with torch.no_grad():
        expected = model(x).double()
    assert found.shape == expected.shape
    assert float((found - expected).abs().max()) <= 1e-4 * float(expected.abs().max())


def test_litert_intermediates_line_up_with_eager_in_a_residual_model() -> None:
    """resnet20 (blocks, shortcuts, ReLUs in place after batch norms): each module's output as
    LiteRT computes it is the value eager gives the operator it is named after."""
    torch.manual_seed(0)
    model, x = create_model("resnet20", in_channels=1).eval(), torch.randn(2, 1, 32, 32)
    found, expected = runtime_intermediates("litert", model, x)
    assert len(found) > 40 and set(found) <= set(expected)
    for name, value in found.items():
        scale = float(expected[name].abs().max()) or 1.0
        assert float((value - expected[name]).abs().max()) <= 1e-5 * scale, name


def test_a_layer_perturbed_inside_litert_is_localised_there() -> None:
    found = localise_perturbed("litert", "7", samples=16)
    assert found["intermediates_of"] == ["eager", "perturbed"]
    assert found["first"]["name"] == "7/Conv2D#0"


@pytest.mark.parametrize("inputs", ["unsigned auto", "asymmetric"])
def test_a_searched_individual_runs_in_litert_as_the_search_scored_it(
    trained_digits, tmp_path: Path, inputs: str
) -> None:
    """Every front member of a short search, converted with its quantizers as LiteRT's
    quantize/dequantize operators, computes the fake-quantized individual's logits (activations
    of 3-7 bits included: litert-torch drops a range narrower than INT8, the export clamps;
    unsigned and asymmetric ones, UINT8 in ONNX, as INT8 with the zero point moved by 128)."""
    from model_explorer.results import ExplorationResult

    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["calibration"]["file"] = str(tmp_path / "calibration.pt")
    if inputs == "asymmetric":
        data["workload"]["quantization"] = {"input": {"asymmetric": True}}
    data["workload"]["exploration"]["nsga"].update(pop_size=6, offsprings=6, generations=2)
    workload = str(write_workload(data, tmp_path / "digits_cnn.yaml"))
    result = tmp_path / "result.pkl"
    assert main(["calibrate", workload]) == 0
    assert main(["explore", workload, "--output", str(result)]) == 0
    front = ExplorationResult.load(result).pareto_front()
    # the cheapest member every quantizer of which is below 8 bits (an 8-bit product LiteRT
    # runs on its integer kernels, which round their own way)
    low_bits = sorted(
        (i for i in front if max(i.configuration) < 8), key=lambda i: i.values["weighted_bits"]
    )
    assert low_bits, "the front must hold an individual below 8 bits"
    reference = f"{result}#{low_bits[0].id}"
    environments = ["--env", f"quantized:{reference}", "--env", f"deployed-litert:{reference}"]
    out = tmp_path / "compare"
    arguments = [workload, *environments, "--tolerance", "1e-12", "--out", str(out)]
    assert main(["compare", *arguments]) == 0
    (pair,) = json.loads((out / "comparison.json").read_text())["pairs"]
    assert pair["top1_agreement"] == 1.0 and pair["max_rel_error"] < 1e-4
    # Individuals of a result go by kind#ID; the exported file's stand-in is the individual.
    identifier = reference.rpartition("#")[2]
    assert pair["localisation"]["intermediates_of"] == [f"quantized#{identifier}"] * 2
