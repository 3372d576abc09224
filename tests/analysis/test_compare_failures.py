"""A comparison goes on past one environment's failure, as DeltaNN records a failed conversion:
an environment that cannot be built and one whose intermediates cannot be read (TVM on a file
with dynamic pads) are each recorded with their reason, every file is written for the others,
and the exit status says that something failed. With a label-free metric (agreement) the
per-sample records hold the float model's top classes where labels would be."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from conftest import write_workload
from model_explorer.cli import main

PLANTED = '''
import torch
from model_explorer.analysis.compare.environments import Environment


class Unreadable(Environment):
    """Runs the model with its outputs shifted; its intermediates cannot be read."""

    exposes_intermediates = True

    def prepare(self, model, example):
        self.model = model

    def run(self, inputs):
        with torch.no_grad():
            out = self.model(inputs).double()
        return out + 0.5 * out.std() * torch.linspace(0, 1, out.shape[1], dtype=out.dtype)

    def intermediates(self, inputs):
        raise RuntimeError("the frontend cannot read tapped.onnx: Dynamic pads are not supported")


def unreadable(model, example):
    return Unreadable("planted_failures:unreadable")


def broken(model, example):
    raise RuntimeError("the converter rejects this model")
'''


def test_failures_are_recorded_and_the_rest_is_written(
    trained_digits, tmp_path: Path, capsys, monkeypatch
) -> None:
    (tmp_path / "planted_failures.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    workload, _ = trained_digits
    data = yaml.safe_load(Path(workload).read_text())
    data["workload"]["metric"] = "agreement"  # no labels: scored against the float model
    data["workload"]["problem"] = {"minimum_accuracy": 0.9}
    label_free = write_workload(data, tmp_path / "agreement.yaml")
    out = tmp_path / "out"
    envs = ["eager", "half", "planted_failures:unreadable", "planted_failures:broken"]
    argv = ["compare", str(label_free), "--samples", "48", "--repeats", "1", "--out", str(out)]
    status = main(argv + [a for env in envs for a in ("--env", env)])
    captured = capsys.readouterr()
    sys.modules.pop("planted_failures", None)

    assert status == 1
    # the build, and the localisation of both pairs with the unreadable environment
    assert "3 failed" in captured.err and "the converter rejects" in captured.err
    assert "Dynamic pads" in captured.err
    report = json.loads((out / "comparison.json").read_text())
    assert report["skipped"]["planted_failures:broken"].startswith("failed: RuntimeError")
    assert set(report["environments"]) == {"eager", "half", "planted_failures:unreadable"}
    pair = next(p for p in report["pairs"] if p["b"] == "planted_failures:unreadable")
    assert not pair["agree"] and "Dynamic pads" in pair["localisation"]["failed"]
    for name in ("samples.csv", "agreement.png", "timing.png", "deltann.png"):
        assert (out / name).stat().st_size > 0

    samples = pd.read_csv(out / "samples.csv")
    assert "label" not in samples.columns
    # the reference's top classes: the float model's own, computed here by hand
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    context = WorkloadContext(Workload.load(label_free), device="cpu")
    cache = context.batches("exploration")
    with torch.no_grad():
        float_outputs = context.build_model()(cache.inputs[:48]).numpy()
    eager = samples[samples["environment"] == "eager"]
    expected = np.argsort(-float_outputs, axis=1, kind="stable")[:, :2]
    assert (eager["reference_top1"].to_numpy() == expected[:, 0]).all()
    assert (eager["reference_top2"].to_numpy() == expected[:, 1]).all()
