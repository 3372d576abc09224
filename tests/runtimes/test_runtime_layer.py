"""The runtime layer: a backend is one Runtime class, registered once, and compare's
environments (`NAME`, `NAME:SETTING`, `deployed-NAME:`), the deployment check (`--check NAME`,
`--backend NAME`) and localisation's taps all come from it. The planted backend is onnx's
reference evaluator: an executor of ONNX no runtime of ours wraps, so what it computes is an
oracle for the files and taps the layer hands it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")

from model_explorer.analysis.compare.environments import ENVIRONMENTS, environment  # noqa: E402
from model_explorer.cli import main  # noqa: E402
from model_explorer.deployment.runtimes import RUNTIMES, Runtime, register_runtime  # noqa: E402
from model_explorer.models import create_model  # noqa: E402
from model_explorer.results import ExplorationResult  # noqa: E402
from model_explorer.tracing import operator_outputs  # noqa: E402


class Reference(Runtime):
    """onnx's ReferenceEvaluator as a runtime: the whole backend."""

    name = "reference"
    description = "onnx's reference evaluator"
    settings = {"default": "ReferenceEvaluator with its defaults"}

    def require(self) -> None:
        self.version = onnx.__version__

    def activate(self, path: Path) -> None:
        from onnx.reference import ReferenceEvaluator

        self.evaluator = ReferenceEvaluator(str(path))
        self.outputs = [output.name for output in onnx.load(str(path)).graph.output]

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = self.evaluator.run(None, {"input": inputs})
        return dict(zip(self.outputs, values, strict=True))


@pytest.fixture
def reference():  # noqa: ANN201
    register_runtime(Reference)  # the one registration a backend needs
    yield
    RUNTIMES._entries.pop("reference")
    RUNTIMES._namespaces.pop("reference")
    ENVIRONMENTS._entries.pop("reference", None)
    for prefix in ("reference", "deployed-reference"):
        ENVIRONMENTS._namespaces.pop(prefix, None)


def test_a_backend_of_one_class_runs_a_float_model_and_its_taps_in_compare(reference) -> None:
    torch.manual_seed(0)
    model, x = create_model("digits_cnn").eval(), torch.randn(6, 1, 8, 8)
    env = environment("reference")
    env.prepare(model, x)
    try:
        logits, found = env.run(x), env.intermediates(x)
    finally:
        env.close()
    with torch.no_grad():
        expected = model(x).double()
    assert torch.allclose(logits, expected, atol=1e-5 * float(expected.abs().max()))
    eager = operator_outputs(model, x)
    assert found and set(found) <= set(eager) and "12/FullyConnected#0" in found
    for name, value in found.items():
        assert torch.allclose(value, eager[name], atol=1e-5 * float(eager[name].abs().max()))
    assert environment("reference:default").description.startswith("onnx's reference evaluator")


@pytest.mark.slow
def test_a_backend_of_one_class_checks_and_compares_a_searched_individual(
    reference, searched, tmp_path: Path
) -> None:
    workload, result = searched
    member = ExplorationResult.load(result).pareto_front()[0]
    chosen = f"{result}#{member.id}"
    target = tmp_path / "chosen.onnx"
    arguments = ["--onnx", str(target), "--workload", str(workload), "--check", "reference"]
    assert main(["export", chosen, *arguments]) == 0
    props = {entry.key: entry.value for entry in onnx.load(str(target)).metadata_props}
    checked = json.loads(props["model_explorer.check.reference"])
    assert props["model_explorer.check"] == "passed" and checked["agreement"] >= 0.99
    assert abs(checked["accuracy"] - member.values["accuracy"]) <= 0.005
    environments = ["--env", f"quantized:{chosen}", "--env", f"deployed-reference:{chosen}"]
    # 64 samples: onnx's reference evaluator pools in Python loops (seconds per batch)
    compared = [*environments, "--samples", "64", "--out", str(tmp_path)]
    assert main(["compare", str(workload), *compared]) == 0
    (pair,) = json.loads((tmp_path / "comparison.json").read_text())["pairs"]
    assert pair["top1_agreement"] >= 0.99


def test_a_runtime_that_reads_no_onnx_is_refused_before_the_export(
    searched, tmp_path: Path, capsys
) -> None:
    workload, result = searched
    member = ExplorationResult.load(result).pareto_front()[0]
    target = tmp_path / "chosen.onnx"
    arguments = ["--onnx", str(target), "--workload", str(workload), "--check", "litert"]
    assert main(["export", f"{result}#{member.id}", *arguments]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot run the exported ONNX file" in line and "deployed-litert:" in line
    assert not target.exists()
