"""An input shape the model cannot take, wherever a user gives one (a workload key, a command's
--input-shape, a sample file, dalgona's HDF5 records), is one sentence naming the key, the
shape and what the refusing layer expects, exit status 2, before anything is written: checked
for a wrong channel count and a wrong rank in each place."""

from __future__ import annotations

import copy
from pathlib import Path

import h5py
import numpy as np
import pytest
import torchvision
from bad_input_support import run_cli, write

from conftest import REPOSITORY
from model_explorer.errors import UserError
from model_explorer.input_shapes import run_on_shape

# (shape given, words the sentence must hold) for digits_cnn, whose first layer is
# Conv2d(1, 16, 3): three channels, and one sample without its batch axis.
WRONG = [
    ([1, 3, 8, 8], ["[1, 3, 8, 8]", "expects 1 input channel", "e.g. [1, 1, 8, 8]"]),
    ([8, 8], ["[8, 8]", "in 4 dimensions, N x C x H x W"]),
]


@pytest.mark.parametrize("shape, words", WRONG)
def test_energy_input_shape_is_checked_by_validate_and_the_energy_analysis(
    shape: list[int],
    words: list[str],
    tiny,
    tmp_path: Path,
    capsys,
) -> None:
    data = copy.deepcopy(tiny)
    data["workload"]["energy_evaluation"] = {"input_shape": shape}
    workload = write(data, tmp_path / "w.yaml")
    output = tmp_path / "energy.csv"
    key = "workload.energy_evaluation.input_shape"
    run_cli(capsys, "validate", workload).one_error(key, *words)
    run_cli(capsys, "energy-analysis", workload, "--output", output).one_error(key, *words)
    assert not output.exists()


@pytest.mark.parametrize("shape, words", WRONG)
def test_cost_and_blocks_check_their_input_shape(
    shape: list[int],
    words: list[str],
    tiny,
    tmp_path: Path,
    capsys,
) -> None:
    workload = write(tiny, tmp_path / "w.yaml")
    sizes = [str(n) for n in shape]
    run_cli(capsys, "cost", workload, "--input-shape", *sizes).one_error("--input-shape", *words)
    model = ["--model", "digits_cnn", "--input-shape", *sizes]
    run_cli(capsys, "cost", *model).one_error("--input-shape", *words)
    sparsity = REPOSITORY / "workloads" / "digits_cnn_sparsity.yaml"
    output = tmp_path / "blocks.csv"
    arguments = ["--input-shape", *sizes, "--output", output]
    run_cli(capsys, "blocks", sparsity, *arguments).one_error("--input-shape", *words)
    assert not output.exists()


@pytest.mark.parametrize(
    "analysis, written",
    [("activation_ranges", "activation_ranges.json"), ("zero_ratio", "zero_ratio.csv")],
)
@pytest.mark.parametrize("samples", [(4, 3, 8, 8), (4, 8, 8)])
def test_a_sample_file_of_the_wrong_shape_stops_analyze_before_the_analysis(
    samples: tuple[int, ...],
    analysis: str,
    written: str,
    tiny,
    tmp_path: Path,
    capsys,
    monkeypatch,
) -> None:
    """...and the shipped analysis's file of an earlier run, in the working directory where it
    writes by default, is left as it was (it had been replaced by an empty one)."""
    workload = write(tiny, tmp_path / "w.yaml")
    data = tmp_path / "samples.npy"
    np.save(data, np.zeros(samples, dtype=np.float32))
    monkeypatch.chdir(tmp_path)
    earlier = tmp_path / written  # where the analysis writes without --analysis-args
    earlier.write_text("an earlier run's results\n")
    arguments = ["--workload", workload, "--input-data", data, "--analysis", analysis]
    outcome = run_cli(capsys, "analyze", *arguments)
    line = outcome.one_error(
        f"--input-data '{data}'", f"shape [1, {', '.join(map(str, samples[1:]))}]"
    )
    assert "expects 1 input channel" in line and "e.g. [1, 1, 8, 8]" in line
    assert "ran" not in outcome.out  # no sample reached the analysis
    assert earlier.read_text() == "an earlier run's results\n"


@pytest.mark.parametrize("record", [(1, 8, 8, 3), (8, 8, 1)])
def test_dalgona_records_of_the_wrong_shape_are_one_sentence(
    record: tuple[int, ...],
    tiny,
    tmp_path: Path,
    capsys,
) -> None:
    """dalgona's /value/<sample>/<input> records, NHWC: three channels, or no batch axis."""
    workload = write(tiny, tmp_path / "w.yaml")
    data = tmp_path / "records.h5"
    with h5py.File(data, "w") as file:
        for index in range(2):
            file.create_dataset(f"value/{index}/0", data=np.zeros(record, dtype=np.float32))
    analysis = REPOSITORY / "tests" / "analysis" / "dalgona" / "TensorLog.py"
    arguments = ["--workload", workload, "--input-data", data, "--dalgona"]
    line = run_cli(capsys, "analyze", *arguments, "--analysis", analysis).one_error(
        "(4-D records NHWC, read as NCHW)", "the model cannot take an input of shape"
    )
    assert "layer '0' (Conv2d) expects 1 input channel" in line


@pytest.mark.parametrize(
    "shape, words",
    [
        ([1, 1, 32, 32], ["expects 3 input channels", "e.g. [1, 3, 32, 32]"]),
        ([3, 32, 32], ["in 4 dimensions", "e.g. [1, 3, 32, 32]"]),
        ([1, 3], ["layer 'conv1' (Conv2d) expects 3 input channels"]),
    ],
)
def test_a_model_nobody_here_wrote_says_what_its_first_layer_takes(
    shape: list[int], words: list[str]
) -> None:
    """torchvision's resnet18 (its conv1 takes 3 channels, as torchvision documents)."""
    model = torchvision.models.resnet18(num_classes=10)
    with pytest.raises(UserError) as raised:
        run_on_shape(model, shape, "--input-shape")
    message = str(raised.value)
    assert message.startswith(f"--input-shape: the model cannot take an input of shape {shape}")
    assert all(word in message for word in words), message
    assert model.training  # the model's mode is restored
    assert run_on_shape(model.eval(), [2, 3, 32, 32], "--input-shape").shape == (2, 3, 32, 32)


@pytest.mark.parametrize("command", [["compare", "--env", "eager", "--out", "c"], ["evaluate"]])
def test_data_a_model_without_a_registered_shape_cannot_take_names_its_first_layer(
    command: list[str],
    tiny,
    tmp_path: Path,
    capsys,
) -> None:
    """torchvision's resnet18 (3 input channels) on the 1-channel digits: the data check, which
    compare, export and every other command pass through, says what conv1 takes."""
    data = copy.deepcopy(tiny)
    data["workload"]["model"] = {
        "type": "torchvision:resnet18",
        "num_classes": 10,
        "pretrained": False,
    }
    workload = write(data, tmp_path / "w.yaml")
    name, *options = command
    options = [str(tmp_path / o) if o == "c" else o for o in options]
    run_cli(capsys, name, workload, *options).one_error(
        "workload.exploration.datasets",
        "one sample has shape [1, 8, 8]",
        "layer 'conv1' (Conv2d) expects 3 input channels",
    )
    assert not (tmp_path / "c").exists()
