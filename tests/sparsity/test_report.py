"""`model-explorer blocks`: block counts per layer against hand computation."""

from __future__ import annotations

import math

import pandas as pd

from conftest import REPOSITORY
from model_explorer.cli import main


def test_total_blocks_for_an_input_shape(tmp_path, capsys) -> None:
    output = tmp_path / "total.csv"
    workload = REPOSITORY / "workloads" / "digits_cnn_sparsity.yaml"
    assert (
        main(
            ["blocks", str(workload), "--input-shape", "2", "1", "8", "8", "--output", str(output)]
        )
        == 0
    )
    table = pd.read_csv(output)
    width, height = 4, 4
    # digits_cnn: (columns K = C_in x 3 x 3, rows L = output positions) per layer.
    matrices = [(1 * 9, 64), (16 * 9, 64), (32 * 9, 16), (512, 1), (64, 1)]
    expected = [math.ceil(k / width) * math.ceil(rows / height) for k, rows in matrices]
    assert table["total_blocks"].tolist() == expected
    assert table["layer"].astype(str).tolist() == ["0", "3", "7", "12", "14"]
    assert "blocks per sample for input 2 x 1 x 8 x 8" in capsys.readouterr().out


def test_present_blocks_need_the_weights_and_data(trained_digits, capsys) -> None:
    workload_file, _ = trained_digits
    assert main(["blocks", str(workload_file), "--present"]) == 0
    printed = capsys.readouterr().out
    assert "zero blocks already present per sample" in printed and "present_share" in printed
