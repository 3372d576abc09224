"""Energy backends, the CSV, the original energy formula and the energy-aware problem."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from conftest import REPOSITORY
from model_explorer.cli import main
from model_explorer.cost.energy.analytic import analytic_energy
from model_explorer.cost.energy.base import CSV_COLUMNS, energy_layers
from model_explorer.cost.energy.model import EnergyModel
from model_explorer.cost.energy.spec import Accelerator
from model_explorer.cost.graph import layer_producers
from model_explorer.models import create_model
from model_explorer.operations.energy import read_energy_csv, write_energy_csv
from model_explorer.results import ExplorationResult


def bits_plan(input_bits: dict, weight_bits: dict) -> dict:
    """A per-layer plan of input and weight bit widths."""
    return {
        name: {"input_bits": bits, "weight_bits": weight_bits[name]}
        for name, bits in input_bits.items()
    }


def test_analytic_backend_by_hand() -> None:
    model = create_model("digits_cnn").eval()
    accelerator = Accelerator(global_buffer_kib=1.0, word_bits=16, dram_pj_per_word=10.0)
    rows = analytic_energy(model, torch.zeros(2, 1, 8, 8), accelerator)
    assert [r.layer_name for r in rows] == ["0", "3", "7", "12", "14"]
    fc = rows[3]  # Linear 512 -> 64: 32,768 weights = 64 KiB, four times half the buffer
    tiles = math.ceil(32768 * 2 / 512)
    assert fc.w_reads == 32768 and fc.i_reads == 2 * 512 * tiles and fc.o_updates == 2 * 64
    assert (
        fc.w_energy == 32768 * 10.0
        and fc.total_dram_energy == (32768 + 2 * 512 * tiles + 128) * 10.0
    )
    first = rows[0]  # 144 weights fit: the input is read once
    assert first.i_reads == 2 * 64 and first.o_updates == 2 * 16 * 64 and first.bitwidth == 16


def test_csv_round_trip(tmp_path: Path) -> None:
    rows = analytic_energy(create_model("lenet5").eval(), torch.zeros(1, 1, 32, 32))
    path = write_energy_csv(rows, tmp_path / "e.csv")
    assert path.read_text().splitlines()[0].split(",") == CSV_COLUMNS
    assert read_energy_csv(path) == rows


def test_sequential_energy_is_the_original_formula() -> None:
    model = create_model("digits_cnn").eval()
    example = torch.zeros(1, 1, 8, 8)
    rows = analytic_energy(model, example)
    layers = [r.layer_name for r in rows]
    producers = layer_producers(model, example, energy_layers(model))
    assert producers == {"0": {"input"}, "3": {"0"}, "7": {"3"}, "12": {"7"}, "14": {"12"}}
    energy = EnergyModel(rows, layers, producers)
    b_in = dict(zip(layers, [8, 4, 6, 3, 5], strict=True))
    b_w = dict(zip(layers, [2, 7, 4, 8, 6], strict=True))
    # The original: sum_k [O_{k-1} b_in_k/16 (k > 0) + I_k b_in_k/16 + W_k b_w_k/16] + O_last.
    expected = rows[-1].o_energy
    for k, row in enumerate(rows):
        expected += row.i_energy * b_in[layers[k]] / 16 + row.w_energy * b_w[layers[k]] / 16
        if k > 0:
            expected += rows[k - 1].o_energy * b_in[layers[k]] / 16
    assert energy.energy_uj(bits_plan(b_in, b_w)) == pytest.approx(expected / 1e6)
    sixteen = {name: 16 for name in layers}
    assert energy.energy_uj(bits_plan(sixteen, sixteen)) == pytest.approx(
        energy.full_precision_uj()
    )


class Branches(nn.Module):
    """a feeds b and c; b + c feeds d."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(4, 4) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return self.d(self.b(y) + self.c(y))


def test_branches_count_each_output_once_at_its_widest_reader(caplog) -> None:
    model = Branches().eval()
    example = torch.zeros(1, 4)
    rows = analytic_energy(model, example)
    producers = layer_producers(model, example, energy_layers(model))
    assert producers == {"a": {"input"}, "b": {"a"}, "c": {"a"}, "d": {"b", "c"}}
    b_in = {"a": 8, "b": 4, "c": 6, "d": 2}
    b_w = {name: 8 for name in b_in}
    energy = EnergyModel(rows, list(b_in), producers)
    o = {r.layer_name: r.o_energy for r in rows}
    outputs = o["a"] * 6 / 16 + o["b"] * 2 / 16 + o["c"] * 2 / 16 + o["d"]
    reads = sum((r.i_energy * b_in[r.layer_name] + r.w_energy * 8) / 16 for r in rows)
    assert energy.energy_uj(bits_plan(b_in, b_w)) == pytest.approx((outputs + reads) / 1e6)
    # A layer missing from the CSV is reported and counts as zero, the rest stays aligned by name.
    with caplog.at_level(logging.WARNING):
        partial = EnergyModel(
            [r for r in rows if r.layer_name != "c"], list(b_in), producers, "e.csv"
        )
    assert "e.csv has no row for layers c" in caplog.text
    c_row = next(r for r in rows if r.layer_name == "c")
    without_c = (
        energy.energy_uj(bits_plan(b_in, b_w))
        - (c_row.i_energy * 6 + c_row.w_energy * 8) / 16 / 1e6
        - c_row.o_energy * 2 / 16 / 1e6
    )
    assert partial.energy_uj(bits_plan(b_in, b_w)) == pytest.approx(without_c)


def test_energy_aware_problem_runs_on_digits(trained_digits, tmp_path: Path, capsys) -> None:
    _, checkpoint = trained_digits
    data = yaml.safe_load((REPOSITORY / "workloads" / "digits_cnn_energy.yaml").read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(tmp_path / "c.pt")
    data["workload"]["energy_evaluation"]["dram_analysis_file"] = str(tmp_path / "dram.csv")
    data["workload"]["exploration"]["nsga"].update(pop_size=8, offsprings=8, generations=2)
    path = tmp_path / "energy.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 2
    assert "write it with `model-explorer energy-analysis WORKLOAD`" in capsys.readouterr().err
    assert main(["energy-analysis", str(path)]) == 0
    assert "total DRAM energy: 10.744 uJ" in capsys.readouterr().out  # pJ in the CSV
    assert main(["energy-analysis", str(path)]) == 2  # never overwrites without --force
    assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 0
    result = ExplorationResult.load(tmp_path / "r.pkl")
    assert result.problem["name"] == "energy_aware_quant_problem"
    assert [name for name, _ in result.judged] == ["accuracy", "energy"]
    assert [name for name, _ in result.objectives] == ["kl", "energy"]  # ranked by divergence
    energies = [i.values["energy"] for i in result.individuals]
    assert 0 < min(energies) < max(energies) < 10.744  # uJ, below the 16-bit total of 10.744 uJ
