"""Broken or hostile files handed to commands, by class: result files, retrained checkpoints,
calibration files (damaged, or made with other quantizer settings), DRAM access tables,
quantizer axes outside their tensors, and outputs that are all NaN. Each ends in one line
naming the file (or key) and what it holds, and leaves the files there as they were."""

from __future__ import annotations

import logging
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from bad_input_support import run_cli, write

from model_explorer.results import ExplorationResult


class Hostile:
    """A class that a pickle names: loading such a file would import and run code."""

    def __reduce__(self):  # noqa: ANN204
        return (print, ("this should never run",))


@pytest.fixture(scope="module")
def real_result(tmp_path_factory, tiny_calibration) -> Path:
    """A small complete result of the tiny workload, made once."""
    import copy

    from bad_input_support import TINY

    from model_explorer.cli import main

    folder = tmp_path_factory.mktemp("result")
    data = copy.deepcopy(TINY)
    data["workload"]["calibration"]["file"] = str(tiny_calibration)
    workload = write(data, folder / "w.yaml")
    assert main(["explore", str(workload), "--output", str(folder / "r.pkl"), "-s"]) == 0
    return folder / "r.pkl"


def _pickled(value) -> bytes:  # noqa: ANN001
    return pickle.dumps(value, protocol=4)


def _result_data(path: Path) -> dict:
    from model_explorer.results.result import load_plain

    return load_plain(path)


def _changed(path: Path, change) -> bytes:  # noqa: ANN001
    data = _result_data(path)
    change(data)
    return _pickled(data)


def _torch_bytes(value, folder: Path) -> bytes:  # noqa: ANN001
    torch.save(value, folder / "scratch.pt")
    return (folder / "scratch.pt").read_bytes()


RESULT_FILES = {
    "empty": (lambda r, f: b"", "not a model_explorer result file"),
    "random bytes": (lambda r, f: bytes(range(256)) * 4, "not a model_explorer result file"),
    "a pickled list": (lambda r, f: _pickled([1, 2, 3]), "it holds a list"),
    "a pickled class": (lambda r, f: _pickled(Hostile()), "refusing to load builtins.print"),
    "truncated": (lambda r, f: r.read_bytes()[:200], "not a model_explorer result file"),
    "a torch checkpoint": (
        lambda r, f: _torch_bytes({"state_dict": {}}, f),
        "this is a PyTorch file or other zip archive",
    ),
    "no individuals": (
        lambda r, f: _changed(r, lambda d: d.pop("individuals")),
        "damaged result file: it has no 'individuals'",
    ),
    "individuals as text": (
        lambda r, f: _changed(r, lambda d: d.update(individuals="many")),
        "'individuals' holds a str, not a list",
    ),
    "an individual without its configuration": (
        lambda r, f: _changed(r, lambda d: d["individuals"][1].pop("configuration")),
        "individual 1 lacks 'configuration'",
    ),
    "values that are not a mapping": (
        lambda r, f: _changed(r, lambda d: d["individuals"][0].update(values=[0.5])),
        "individual 0 lacks 'values'",
    ),
    "completeness as text": (
        lambda r, f: _changed(r, lambda d: d.update(complete="yes")),
        "'complete' holds a str, not a bool",
    ),
}


@pytest.mark.parametrize("case", RESULT_FILES, ids=list(RESULT_FILES))
def test_a_damaged_result_file_is_named_in_one_line(case, real_result, tiny, tmp_path, capsys):
    make, words = RESULT_FILES[case]
    path = tmp_path / "broken.pkl"
    path.write_bytes(make(real_result, tmp_path))
    before = path.read_bytes()
    run_cli(capsys, "report", path).one_error(f"error: {path}: ", words)
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "evaluate-individual", workload, path).one_error(f"error: {path}: ", words)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".pt") == [
        "broken.pkl",
        "w.yaml",
    ]


def test_the_real_result_loads(real_result) -> None:
    """The material the damaged cases are cut from is itself a valid result."""
    assert ExplorationResult.load(real_result).complete


def _checkpoint_cases(folder: Path) -> dict[str, tuple[bytes, str]]:
    good = _torch_bytes({"state_dict": {"w": torch.ones(3)}, "configuration": [4]}, folder)
    return {
        "a pickled class": (
            _torch_bytes({"state_dict": {}, "configuration": Hostile()}, folder),
            "it holds a pickled print, which is never loaded",
        ),
        "a truncated archive": (good[: len(good) // 2], "PytorchStreamReader failed"),
        "a text file": (b"weights: none\n", "is not a file written by torch.save"),
        "an empty file": (b"", "is empty"),
        "a plain pickle": (_pickled({"configuration": [4]}), "it is a Python pickle"),
        "a checkpoint of no retraining": (
            _torch_bytes({"state_dict": {"w": torch.ones(3)}}, folder),
            "is not a checkpoint written by `retrain`",
        ),
    }


CHECKPOINT_CASES = [
    "a pickled class",
    "a truncated archive",
    "a text file",
    "an empty file",
    "a plain pickle",
    "a checkpoint of no retraining",
]


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_a_hostile_or_broken_retrained_checkpoint_is_named(case, tiny, tmp_path, capsys) -> None:
    content, words = _checkpoint_cases(tmp_path)[case]
    path = tmp_path / "retrained_0.pt"
    path.write_bytes(content)
    workload = write(tiny, tmp_path / "w.yaml")
    outcome = run_cli(capsys, "evaluate-individual", workload, "--retrained", path)
    outcome.one_error(f"error: --retrained: '{path}'", words)
    assert "this should never run" not in outcome.out
    # The same file as the model's weights is refused alike, naming the key.
    tiny["workload"]["model"]["weights"] = str(path)
    if case != "a checkpoint of no retraining":
        outcome = run_cli(capsys, "evaluate", write(tiny, tmp_path / "w.yaml"))
        outcome.one_error(f"error: workload.model.weights: '{path}'", words)


# -- calibration files ----------------------------------------------------------------------------


def _calibration_data(tiny_calibration: Path) -> dict:
    return torch.load(tiny_calibration, weights_only=True)


def _calibration_cases(tiny_calibration: Path, folder: Path) -> dict[str, tuple[bytes, str]]:
    def changed(change) -> bytes:  # noqa: ANN001
        data = _calibration_data(tiny_calibration)
        change(data)
        return _torch_bytes(data, folder)

    whole = tiny_calibration.read_bytes()
    return {
        "a pickled class": (
            _torch_bytes({"format": Hostile()}, folder),
            "it holds a pickled print",
        ),
        "truncated": (whole[: len(whole) // 3], "is not a readable calibration file"),
        "text": (b"amax: 1.0\n", "is not a file written by torch.save"),
        "another kind of torch file": (
            _torch_bytes({"state_dict": {}}, folder),
            "is not a model_explorer calibration file",
        ),
        "no layers": (
            changed(lambda d: d.pop("layers")),
            "damaged calibration file: 'layers' is missing",
        ),
        "a layer's entry gone": (
            changed(lambda d: d["input_quantizers"].pop("3")),
            "the entry of layer '3' is missing or broken",
        ),
        "a calibrator state without its method": (
            changed(lambda d: d["input_quantizers"]["0"]["calibrator"].pop("method")),
            "the entry of layer '0' is missing or broken",
        ),
    }


CALIBRATION_CASES = [
    "a pickled class",
    "truncated",
    "text",
    "another kind of torch file",
    "no layers",
    "a layer's entry gone",
    "a calibrator state without its method",
]


@pytest.mark.parametrize("case", CALIBRATION_CASES)
def test_a_broken_calibration_file_is_named_in_one_line(
    case, tiny, tiny_calibration, tmp_path, capsys
) -> None:
    content, words = _calibration_cases(tiny_calibration, tmp_path)[case]
    path = tmp_path / "calibration.pt"
    path.write_bytes(content)
    tiny["workload"]["calibration"]["file"] = str(path)
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "evaluate", workload, "--bits", "4").one_error(
        f"error: workload.calibration.file: '{path}'", words
    )
    run_cli(capsys, "explore", workload, "--output", tmp_path / "r.pkl", "-s").one_error(words)
    assert path.read_bytes() == content and not (tmp_path / "r.pkl").exists()


OTHER_SETTINGS = {
    "unsigned inputs": ("input", {"unsigned": True}, "quantization.input.unsigned 'auto' there"),
    "signed inputs": ("input", {"unsigned": False}, "input.unsigned 'auto' there and False"),
    "asymmetric inputs": ("input", {"asymmetric": True}, "input.asymmetric False there and True"),
    "narrow range inputs": ("input", {"narrow_range": True}, "quantization.input.narrow_range"),
    "per-channel inputs": ("input", {"axis": 1}, "quantization.input.axis None there and 1"),
    "per-tensor weights": ("weight", {"axis": None}, "quantization.weight.axis 0 there and None"),
    "narrow range weights": (
        "weight",
        {"axis": 0, "narrow_range": True},
        "quantization.weight.narrow_range False there and True",
    ),
}


@pytest.mark.parametrize("case", OTHER_SETTINGS, ids=list(OTHER_SETTINGS))
def test_a_calibration_made_with_other_quantizer_settings_is_refused_or_redone(
    case, tiny, tiny_calibration, tmp_path, capsys, caplog
) -> None:
    role, settings, words = OTHER_SETTINGS[case]
    path = tmp_path / "calibration.pt"
    shutil.copy(tiny_calibration, path)
    before = path.read_bytes()
    tiny["workload"]["calibration"]["file"] = str(path)
    tiny["workload"]["quantization"] = {role: settings}
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "evaluate", workload, "--bits", "4").one_error(
        f"error: workload.calibration.file: '{path}' was made with other quantizer settings",
        words,
    )
    assert path.read_bytes() == before
    # `calibrate --if-missing` redoes it, saying why, and the new file fits.
    with caplog.at_level(logging.WARNING):
        assert run_cli(capsys, "calibrate", workload, "--if-missing").status == 0
    assert any("recalibrating" in r.getMessage() for r in caplog.records)
    assert run_cli(capsys, "evaluate", workload, "--bits", "4").status == 0
    recorded = torch.load(path, weights_only=True)["settings"][role]
    assert all(recorded[key] == value for key, value in settings.items())


def test_a_calibration_file_that_records_no_settings_is_warned_about_once(
    tiny, tiny_calibration, tmp_path, capsys, caplog
) -> None:
    data = _calibration_data(tiny_calibration)
    del data["settings"]
    path = tmp_path / "calibration.pt"
    torch.save(data, path)
    tiny["workload"]["calibration"]["file"] = str(path)
    with caplog.at_level(logging.WARNING):
        outcome = run_cli(capsys, "evaluate", write(tiny, tmp_path / "w.yaml"), "--bits", "4")
    assert outcome.status == 0
    said = [r.getMessage() for r in caplog.records if "does not record the quantizer" in r.message]
    assert len(said) == 1 and str(path) in said[0]


# -- DRAM access tables ---------------------------------------------------------------------------

HEADER = (
    "layer_idx,layer_type,w_reads,w_updates,w_fills,i_reads,i_updates,i_fills,o_reads,"
    "o_updates,o_fills,w_energy,i_energy,o_energy,total_dram_energy,bitwidth,layer_name\n"
)
DRAM_FILES = {
    "a text file": (b"energy of the layers: low\n", "is not a CSV of DRAM accesses: it lacks"),
    "an empty file": (b"", "is not a CSV of DRAM accesses"),
    "the header only": (HEADER.encode(), "holds no rows"),
    "a word where a number goes": (
        (HEADER + "0,Conv2d,many,0,0,0,0,0,0,0,0,1,1,1,3,16,0\n").encode(),
        "holds a value that is not a number",
    ),
    "not UTF-8": (b"\xff\xfe" + HEADER.encode("utf-16-le"), "is not a CSV text file"),
    "columns of another table": (b"name,value\nconv,3\n", "it lacks 16 of its columns"),
}


@pytest.mark.parametrize("case", DRAM_FILES, ids=list(DRAM_FILES))
def test_a_file_that_is_not_a_dram_table_is_refused(case, tiny, tmp_path, capsys) -> None:
    content, words = DRAM_FILES[case]
    path = tmp_path / "dram.csv"
    path.write_bytes(content)
    exploration = tiny["workload"]["exploration"]
    exploration["objectives"] = ["accuracy", "energy"]
    exploration["energy_evaluation"] = {"dram_analysis_file": str(path)}
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "explore", workload, "--output", tmp_path / "r.pkl", "-s").one_error(
        f"error: workload.exploration.energy_evaluation.dram_analysis_file: '{path}'", words
    )
    assert path.read_bytes() == content and not (tmp_path / "r.pkl").exists()


# -- quantizer axes outside their tensors ---------------------------------------------------------

AXES = {
    "weight axis 7 of a 4-d weight": ("weight", 7, "weight.axis: axis 7 is outside the 4"),
    "weight axis -5": ("weight", -5, "weight.axis: axis -5 is outside the 4 dimensions"),
    "input axis 4 of 4-d inputs": ("input", 4, "input.axis: axis 4 is outside the 4 dimensions"),
    "input axis -9": ("input", -9, "input.axis: axis -9 is outside"),
}


@pytest.mark.parametrize("case", AXES, ids=list(AXES))
def test_a_quantizer_axis_outside_its_tensor_is_refused(case, tiny, tmp_path, capsys) -> None:
    role, axis, words = AXES[case]
    tiny["workload"]["calibration"]["file"] = str(tmp_path / "c.pt")
    tiny["workload"]["quantization"] = {role: {"axis": axis}}
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "calibrate", workload).one_error(words)
    assert not (tmp_path / "c.pt").exists()


# -- outputs that are all NaN ---------------------------------------------------------------------


def test_evaluate_says_when_every_output_is_nan(tiny, tiny_calibration, tmp_path, capsys) -> None:
    from model_explorer.models import build_model, save_checkpoint
    from model_explorer.workload.file import Workload

    model = build_model(Workload.from_dict(tiny).model)
    with torch.no_grad():
        model[0].weight.fill_(float("nan"))
    tiny["workload"]["model"] = {"type": "digits_cnn", "weights": str(tmp_path / "nan.pt")}
    save_checkpoint(model, tmp_path / "nan.pt")
    outcome = run_cli(capsys, "evaluate", write(tiny, tmp_path / "w.yaml"), "--bits", "4", "6")
    assert outcome.status == 0
    lines = outcome.out.strip().splitlines()
    assert len(lines) == 3 and all("(16 of 16 outputs NaN or infinite)" in line for line in lines)
    warnings = [line for line in outcome.errors if line.startswith("warning: ")]
    assert [w.split(" model")[0] for w in warnings] == [
        "warning: float",
        "warning: 4 bit",
        "warning: 6 bit",
    ]
    assert all("every output is NaN or infinite" in w for w in warnings)


def test_a_workload_where_a_result_goes_is_named(tiny, tmp_path, capsys) -> None:
    workload = write(tiny, tmp_path / "w.yaml")
    for argv in (["report", workload], ["evaluate-individual", workload, workload]):
        run_cli(capsys, *argv).one_error(
            f"error: {workload}: this is a workload YAML", "not a result file", "explore writes"
        )


def test_an_option_given_twice_is_refused_or_collected(capsys) -> None:
    """argparse keeps the last of a repeated option silently; one that takes a value is
    refused, one that takes a list collects every value."""
    from model_explorer.cli import build_parser

    args = build_parser().parse_args(["evaluate", "w.yaml", "--bits", "8", "--bits", "4", "6"])
    assert args.bits == [8, 4, 6]
    for argv, said in [
        (
            ["--samples", "3", "--samples", "4"],
            "--samples is given twice (3, then 4); give it once",
        ),
        (["--out", "a", "--output", "b"], "--output is given twice ('a', then 'b')"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args(["compare", "w.yaml", *argv])
        assert stopped.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("error: model-explorer compare: ") and said in line
