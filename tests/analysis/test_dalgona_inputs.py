"""What `analyze` runs on where dalgona would: one random sample without input data
(dalgona's runAnalysisWithRandomInput, uniform in [-5, 5)), the raw bytes of ONE's
imgdata2hdf5.py (rawData: float32 values of the Circle model's NHWC input, no shape stored),
and 4-D records whose layout, NHWC or NCHW, is told by the model's first layer.

Oracles: arrays made here and turned into bytes or records by hand, the PyTorch model run
directly on them (its weights passed to the command as a checkpoint), and the distribution's
own moments for the random sample."""

from __future__ import annotations

import logging
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from bad_input_support import run_cli, write
from test_dalgona import run_log, small_net, write_dalgona_h5

from model_explorer.analysis.hooks import (
    choose_layout,
    dalgona_file,
    file_samples,
    random_samples,
)
from model_explorer.errors import UserError
from model_explorer.input_shapes import first_layer_channels
from model_explorer.models import create_model, save_checkpoint

DUMP = """
import numpy as np


class Dump:
    def StartAnalysis(self, args):
        self.path, self.inputs, self.outputs = args, [], []

    def StartNetworkExecution(self, inputs):
        self.inputs.append(inputs[0]["data"])

    def EndNetworkExecution(self, outputs):
        self.outputs.append(outputs[0]["data"])

    def EndAnalysis(self):
        np.savez(self.path, inputs=np.stack(self.inputs), outputs=np.stack(self.outputs))
"""


def write_raw_h5(path: Path, records: list[bytes]) -> Path:
    """ONE's imgdata2hdf5.py: /value with attribute rawData, /value/<record>/0 the bytes, uint8."""
    with h5py.File(path, "w") as file:
        group = file.create_group("value")
        group.attrs["desc"] = "Input data"
        group.attrs["rawData"] = "1"
        for index, data in enumerate(records):
            record = group.create_group(str(index))
            record.attrs["desc"] = f"image{index}.bin"
            record.create_dataset("0", data=np.frombuffer(data, dtype=np.uint8))
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, list[str]]:
    """digits_cnn (first layer Conv2d(1, 16, 3)), its checkpoint and the analysis dumping the
    network's input (NHWC, as dalgona passes it) and output: the command line's start."""
    folder = tmp_path_factory.mktemp("digits")
    torch.manual_seed(3)
    model = create_model("digits_cnn", None).eval()
    save_checkpoint(model, folder / "digits.pt")
    (folder / "Dump.py").write_text(DUMP)
    command = ["analyze", "--dalgona", "--input_model", "digits_cnn"]
    command += ["--weights", str(folder / "digits.pt"), "--analysis", str(folder / "Dump.py")]
    return model, command


def dumped(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as file:
        return file["inputs"], file["outputs"]


def expected_outputs(model: torch.nn.Module, nchw: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return np.stack([model(torch.from_numpy(x[None])).numpy() for x in nchw])


# -- 1. one random sample, as dalgona's run without --input_data ---------------------------------


def test_random_sample_is_uniform_in_minus_five_to_five_and_seeded() -> None:
    (sample,) = list(random_samples((1, 3, 64, 64), seed=0))
    (x,) = sample
    values = x.numpy().ravel()
    assert x.dtype == torch.float32 and x.shape == (1, 3, 64, 64)
    assert values.min() >= -5.0 and values.max() < 5.0
    assert values.min() < -4.99 and values.max() > 4.99  # the whole range is drawn from
    # Uniform on [-5, 5): mean 0, standard deviation 10 / sqrt(12), ten equal bins.
    assert abs(values.mean()) < 0.1
    assert abs(values.std() - 10 / np.sqrt(12)) < 0.05
    counts, _ = np.histogram(values, bins=10, range=(-5, 5))
    assert np.all(np.abs(counts - values.size / 10) < 0.1 * values.size / 10), counts
    (again,) = next(random_samples((1, 3, 64, 64), seed=0))
    (other,) = next(random_samples((1, 3, 64, 64), seed=1))
    assert torch.equal(x, again) and not torch.equal(x, other)


def test_analyze_without_input_data_runs_one_random_sample(digits, tmp_path: Path, capsys) -> None:
    model, command = digits
    runs = {}
    for name, extra in [("a", []), ("b", []), ("seed", ["--seed", "1"])]:
        out = tmp_path / f"{name}.npz"
        outcome = run_cli(capsys, *command, "--analysis_args", out, *extra)
        assert outcome.status == 0, outcome.errors
        runs[name] = dumped(out)
    lines = outcome.out.splitlines()
    assert lines[0] == (
        "no --input-data: one random sample, uniform in [-5, 5), shape [1, 1, 8, 8], seed 1"
    )
    assert "ran 1 samples through Dump" in lines[-1]
    inputs, outputs = runs["a"]
    assert inputs.shape == (1, 1, 8, 8, 1)  # one sample, NHWC: the registered 1 x 8 x 8
    assert inputs.min() >= -5 and inputs.max() < 5 and inputs.std() > 2
    nchw = inputs[:, 0].transpose(0, 3, 1, 2)
    np.testing.assert_allclose(outputs, expected_outputs(model, nchw), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(runs["b"][0], inputs)  # the same seed, the same sample
    assert not np.array_equal(runs["seed"][0], inputs)
    shaped = tmp_path / "shaped.npz"
    given = ["--input-shape", "1", "1", "12", "10", "--analysis_args", shaped]
    assert run_cli(capsys, *command, *given).status == 0
    assert dumped(shaped)[0].shape == (1, 1, 12, 10, 1)


def test_random_sample_without_a_shape_or_of_a_wrong_one_is_one_error(digits, capsys) -> None:
    _, command = digits
    wrong = run_cli(capsys, *command, "--input-shape", "1", "3", "8", "8")
    wrong.one_error("--input-shape: the model cannot take an input of shape [1, 3, 8, 8]")
    assert "expects 1 input channel" in wrong.errors[0] and "ran" not in wrong.out
    unknown = ["analyze", "--model", "torchvision:resnet18", "--analysis", "zero_ratio"]
    line = run_cli(capsys, *unknown).one_error("--input-shape", "'torchvision:resnet18'")
    assert "no registered input shape" in line


# -- 2. rawData: the bytes of the Circle model's input ---------------------------------------------


def test_raw_bytes_read_as_float32_nhwc_then_nchw(tmp_path: Path) -> None:
    nchw = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) - 60.5
    # The bytes a Circle model's (1, 4, 5, 3) float32 input holds, as a .bin file would.
    raw = write_raw_h5(tmp_path / "raw.h5", [x.transpose(1, 2, 0).tobytes() for x in nchw])
    assert dalgona_file(raw).raw
    samples = list(file_samples(raw, shape=(1, 3, 4, 5)))
    assert [s.names for s in samples] == [["input"], ["input"]]
    for sample, x in zip(samples, nchw, strict=True):
        (tensor,) = sample
        np.testing.assert_array_equal(tensor.numpy(), x[None])
    # A model converted with its NCHW input kept reads the bytes in PyTorch's order.
    flat = write_raw_h5(tmp_path / "flat.h5", [x.tobytes() for x in nchw])
    (first, _) = [s[0].numpy() for s in file_samples(flat, shape=(1, 3, 4, 5), layout="nchw")]
    np.testing.assert_array_equal(first, nchw[:1])
    # 3 x 3 x 3: the stored NHWC shape equals the NCHW one, and is still transposed.
    cube = np.arange(27, dtype=np.float32).reshape(1, 3, 3, 3)
    square = write_raw_h5(tmp_path / "square.h5", [cube.transpose(0, 2, 3, 1).tobytes()])
    (read,) = next(file_samples(square, shape=(1, 3, 3, 3)))
    np.testing.assert_array_equal(read.numpy(), cube)


def test_raw_bytes_of_another_size_or_without_a_shape_are_one_error(tmp_path: Path) -> None:
    data = [np.zeros((1, 6, 6, 3), np.float32).tobytes() for _ in range(3)]
    data[1] = data[1][:-4]  # planted: one float short
    raw = write_raw_h5(tmp_path / "raw.h5", data)
    samples = file_samples(raw, shape=(1, 3, 6, 6))
    assert next(samples)[0].shape == (1, 3, 6, 6)  # record 0 is whole
    with pytest.raises(UserError) as error:
        next(samples)
    message = str(error.value)
    assert str(raw) in message and "/value/1/0 holds 428 bytes" in message
    assert "shape [1, 3, 6, 6] takes 432" in message
    with pytest.raises(UserError, match="carry no shape; give .* with --input-shape"):
        next(file_samples(raw))
    with h5py.File(tmp_path / "floats.h5", "w") as file:
        file.create_group("value").attrs["rawData"] = "1"
        file["value/0/0"] = np.zeros(108, np.float32)  # values, not bytes
    with pytest.raises(UserError, match=r"/value/0/0 holds float32 values, not raw bytes"):
        next(file_samples(tmp_path / "floats.h5", shape=(1, 3, 6, 6)))


def test_analyze_reads_raw_bytes_in_the_registered_or_given_shape(
    digits, tmp_path: Path, capsys
) -> None:
    model, command = digits
    nchw = np.random.default_rng(0).normal(size=(2, 1, 8, 8)).astype(np.float32)
    raw = write_raw_h5(tmp_path / "raw.h5", [x.transpose(1, 2, 0).tobytes() for x in nchw])
    out = tmp_path / "out.npz"
    outcome = run_cli(capsys, *command, "--input_data", raw, "--analysis_args", out)
    assert outcome.status == 0, outcome.errors
    inputs, outputs = dumped(out)
    np.testing.assert_array_equal(inputs[:, 0], nchw.transpose(0, 2, 3, 1))  # NHWC, as given
    np.testing.assert_allclose(outputs, expected_outputs(model, nchw), rtol=1e-4, atol=1e-4)
    wrong = run_cli(capsys, *command, "--input_data", raw, "--input-shape", "1", "3", "8", "8")
    line = wrong.one_error("--input-shape of the rawData records", "[1, 3, 8, 8]")
    assert "expects 1 input channel" in line
    other = run_cli(capsys, *command, "--input_data", raw, "--input-shape", "1", "1", "4", "8")
    other.one_error(f"'{raw}'", "/value/0/0 holds 256 bytes", "[1, 1, 4, 8] takes 128")
    unknown = ["analyze", "--model", "torchvision:resnet18", "--input-data", raw]
    line = run_cli(capsys, *unknown, "--analysis", "zero_ratio").one_error("--input-shape")
    assert "holds raw bytes (rawData), which carry no shape" in line


def test_a_workloads_raw_bytes_take_its_datas_shape(digits, tiny, tmp_path: Path, capsys) -> None:
    """The tiny workload's digits are 1 x 8 x 8: the shape of its rawData records."""
    workload = write(tiny, tmp_path / "w.yaml")
    nchw = np.random.default_rng(4).normal(size=(2, 1, 8, 8)).astype(np.float32)
    raw = write_raw_h5(tmp_path / "raw.h5", [x.transpose(1, 2, 0).tobytes() for x in nchw])
    out = tmp_path / "out.npz"
    dump = digits[1][-1]  # the Dump analysis, last on the command line
    command = ["analyze", "--dalgona", "--workload", workload, "--analysis", dump]
    outcome = run_cli(capsys, *command, "--input_data", raw, "--analysis_args", out)
    assert outcome.status == 0, outcome.errors
    np.testing.assert_array_equal(dumped(out)[0][:, 0], nchw.transpose(0, 2, 3, 1))
    unused = run_cli(capsys, *command, "--input-shape", "1", "1", "8", "8")
    unused.one_error("--input-shape", "the workload's --dataset exploration samples")


# -- 3. 4-D records: NHWC or NCHW ------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, layout, chosen",
    [
        ((1, 8, 8, 3), "auto", "nhwc"),  # only axis 3 holds the 3 channels
        ((1, 3, 8, 8), "auto", "nchw"),  # only axis 1 does
        ((1, 3, 8, 3), "auto", "nhwc"),  # both: dalgona's convention
        ((1, 5, 8, 7), "auto", "nhwc"),  # neither: the same, and the model will say so
        ((1, 8, 8, 3), "nchw", "nchw"),  # forced
        ((1, 3, 8, 8), "nhwc", "nhwc"),
        (None, "auto", "nhwc"),  # raw bytes, or no 4-D record
    ],
)
def test_layout_told_by_the_first_layers_channels(shape, layout, chosen) -> None:
    assert first_layer_channels(small_net()) == 3
    assert choose_layout(shape, 3, layout)[0] == chosen
    assert choose_layout(shape, None, "auto")[0] == "nhwc"  # no channel-fixing first layer


def test_nchw_records_run_as_the_model_takes_them(tmp_path: Path) -> None:
    images = np.random.default_rng(1).normal(size=(2, 3, 6, 6)).astype(np.float32)  # NCHW
    model = small_net()
    found = dalgona_file(write_dalgona_h5(tmp_path / "nchw.h5", images))
    assert found == type(found)(raw=False, record_shape=(1, 3, 6, 6))
    layout, why = choose_layout(found.record_shape, first_layer_channels(model))
    assert layout == "nchw" and "only axis 1" in why
    log = run_log(model, file_samples(tmp_path / "nchw.h5", layout=layout))
    for network, x in zip(log.networks, images, strict=True):
        np.testing.assert_array_equal(network["inputs"][0]["data"], x[None].transpose(0, 2, 3, 1))
        with torch.no_grad():
            expected = model(torch.from_numpy(x[None])).numpy()
        np.testing.assert_allclose(network["outputs"][0]["data"], expected, atol=1e-5)


def test_analyze_reads_nhwc_and_nchw_records_alike(digits, tmp_path: Path, capsys, caplog) -> None:
    model, command = digits
    nchw = np.random.default_rng(2).normal(size=(2, 1, 8, 8)).astype(np.float32)
    files = {
        "nhwc": write_dalgona_h5(tmp_path / "nhwc.h5", nchw.transpose(0, 2, 3, 1)),
        "nchw": write_dalgona_h5(tmp_path / "nchw.h5", nchw),
    }
    caplog.set_level(logging.INFO, logger="model_explorer.cli.analysis")
    for layout, data in files.items():
        out = tmp_path / f"{layout}.npz"
        outcome = run_cli(capsys, *command, "--input_data", data, "--analysis_args", out)
        assert outcome.status == 0, outcome.errors
        inputs, outputs = dumped(out)
        np.testing.assert_array_equal(inputs[:, 0], nchw.transpose(0, 2, 3, 1))
        np.testing.assert_allclose(outputs, expected_outputs(model, nchw), rtol=1e-4, atol=1e-4)
        assert f"4-D inputs read as {layout.upper()} (only axis" in caplog.text
    # Planted: NCHW records forced to be read as NHWC reach the model as [1, 8, 1, 8].
    forced = run_cli(capsys, *command, "--input_data", files["nchw"], "--input-layout", "nhwc")
    line = forced.one_error("(4-D records NHWC, read as NCHW)", "shape [1, 8, 1, 8]")
    assert "expects 1 input channel" in line
    given = ["--input_data", files["nchw"], "--input-shape", "1", "1", "8", "8"]
    run_cli(capsys, *command, *given).one_error("--input-shape: shapes the random sample")
