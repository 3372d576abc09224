"""Cost tables against the conventional totals of REFERENCE.md section 3 and hand counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from conftest import write_workload
from model_explorer.cli import main
from model_explorer.cost import analyze_cost
from model_explorer.models import create_model

MIB = 2**20


@pytest.fixture(scope="module")
def reports():
    found = {}
    for name in ("resnet18", "resnet50", "mobilenet_v2"):
        model = getattr(torchvision.models, name)().eval()
        found[name] = (
            model,
            analyze_cost(model, (1, 3, 224, 224)),
            analyze_cost(model, (1, 3, 224, 224), leaf_modules_only=True),
        )
    return found


# Convolution + linear MACs at 1x3x224x224 (torchinfo, ptflops' aten backend, calflops).
CONVENTIONAL_GMACS = {"resnet18": 1.8141, "resnet50": 4.0892, "mobilenet_v2": 0.3008}


@pytest.mark.parametrize("name", list(CONVENTIONAL_GMACS))
def test_params_and_macs_follow_the_conventions(reports, name: str) -> None:
    model, operations, leaves = reports[name]
    parameters = sum(p.numel() for p in model.parameters())
    assert operations.totals["params"] == leaves.totals["params"] == parameters
    assert round(operations.totals["macs"] / 1e9, 4) == CONVENTIONAL_GMACS[name]
    assert leaves.totals["macs"] == operations.totals["macs"]


def test_mobilenet_memory_matches_the_seed_at_leaf_level(reports) -> None:
    _, operations, leaves = reports["mobilenet_v2"]
    totals = leaves.totals
    assert round(totals["storage_bytes"] / MIB, 2) == 13.37
    assert round(totals["inference_bytes"] / MIB, 2) == 74.25
    assert round((totals["read_bytes"] + totals["write_bytes"]) / MIB, 2) == 162.19
    # The operation-level table adds what modules do not show (e.g. the functional pooling).
    assert operations.totals["inference_bytes"] > totals["inference_bytes"]


def test_functional_operations_are_rows(reports) -> None:
    _, operations, leaves = reports["resnet18"]
    adds = [r for r in operations.rows if r.operation in ("add", "add_")]
    assert len(adds) == 8 and all(r.module_type == "BasicBlock" for r in adds)
    assert not any(r.operation in ("add", "add_") for r in leaves.rows)
    flatten = [r for r in operations.rows if r.name == "" and r.operation == "view"]
    assert flatten and flatten[0].read_bytes == 0  # a view moves no data


class Functional(nn.Module):
    """Only functional code: a matmul, an addition and attention; no layer modules."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, self.weight)  # (2, 8, 16) @ (16, 32)
        y = y + y
        q = y.view(2, 4, 8, 8)  # 4 heads of width 8
        return F.scaled_dot_product_attention(q, q, q)


def test_matmul_additions_and_attention_are_counted() -> None:
    report = analyze_cost(Functional(), torch.randn(2, 8, 16))
    operations = [r.operation for r in report.rows]
    assert "add" in operations
    matmul = 2 * 8 * 16 * 32
    attention = 2 * 4 * 8 * 8 * (8 + 8)  # q k^T and weights v
    # Fused attention in its own column: `macs` follows torch's FLOP counter, which leaves
    # the fused kernel out on the CPU.
    assert report.totals["macs"] == matmul
    assert report.totals["attention_macs"] == attention
    assert report.totals["params"] == 16 * 32
    add = next(r for r in report.rows if r.operation == "add")
    assert add.other_ops == 2 * 8 * 32 and add.write_bytes == 2 * 8 * 32 * 4


def test_halving_all_bits_halves_storage() -> None:
    model = create_model("lenet5").eval()
    layers = [n for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    reports = {
        bits: analyze_cost(
            model,
            (1, 1, 32, 32),
            plan={n: {"input_bits": bits, "weight_bits": bits} for n in layers},
        )
        for bits in (16, 8)
    }
    assert reports[8].totals["storage_bytes"] * 2 == reports[16].totals["storage_bytes"]
    assert reports[16].totals["storage_bytes"] == sum(p.numel() for p in model.parameters()) * 2
    conv = next(r for r in reports[8].rows if r.name == "0")
    assert conv.read_bytes == 32 * 32 + 6 * 25 + 6  # inputs and parameters at one byte each


def test_cost_command_prints_and_writes(tmp_path: Path, capsys) -> None:
    csv, js, png = tmp_path / "c.csv", tmp_path / "c.json", tmp_path / "c.png"
    status = main(
        [
            "cost",
            "--model",
            "resnet20",
            "--depth",
            "1",
            "--sort",
            "macs",
            "--csv",
            str(csv),
            "--json",
            str(js),
            "--plot",
            str(png),
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "totals (operations, input (1, 3, 32, 32))" in printed and "FLOPs = 2 x MACs" in printed
    table = pd.read_csv(csv)
    assert table["macs"].is_monotonic_decreasing
    data = json.loads(js.read_text())
    assert data["totals"]["params"] == sum(p.numel() for p in create_model("resnet20").parameters())
    assert png.stat().st_size > 1000
    assert main(["cost", "--model", "torchvision:resnet18"]) == 2
    assert "--input-shape: give the input shape" in capsys.readouterr().err


def test_cost_of_a_folding_workload_has_no_batch_norm_rows(
    tmp_path: Path, default_workload_data: dict
) -> None:
    """With `model.fold_batchnorm: true` the cost table lists what runs: the digits model's
    batch norm is folded into its convolution (no row), which keeps its MACs and gains a bias."""
    tables = {}
    for fold in (False, True):
        default_workload_data["workload"]["model"]["fold_batchnorm"] = fold
        path = write_workload(default_workload_data, tmp_path / f"fold_{fold}.yaml")
        csv = tmp_path / f"fold_{fold}.csv"
        assert main(["cost", str(path), "--csv", str(csv)]) == 0
        tables[fold] = pd.read_csv(csv, dtype={"name": str}).set_index("name")
    assert "BatchNorm2d" in set(tables[False]["module_type"])
    assert "BatchNorm2d" not in set(tables[True]["module_type"])
    conv = tables[False].loc["0"]
    batch_norm = tables[False].loc["1"]
    assert tables[True].loc["0", "macs"] == conv["macs"]
    assert tables[True].loc["0", "params"] == conv["params"] + batch_norm["params"] // 2
