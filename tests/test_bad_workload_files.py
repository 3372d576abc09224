"""Broken workload files, by class: each ends in one `error:` line per problem naming the file
or key, with exit status 2, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_support import run_cli, write

# -- files that are not UTF-8 text, or that write a key twice -----------------------------------

NOT_UTF8 = {
    "latin-1 accent": ("workload:\n  name: caf\xe9\n".encode("latin-1"), 2, "0xe9"),
    "utf-16 with a byte order mark": ("workload:\n  seed: 1\n".encode("utf-16"), 1, "0xff"),
    "a png image": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", 1, "0x89"),
    "utf-8 cut inside a character": ("workload:\n  name: \u00e9t\u00e9".encode()[:-1], 2, "0xc3"),
}


@pytest.mark.parametrize("case", NOT_UTF8, ids=list(NOT_UTF8))
def test_a_file_that_is_not_utf8_text_is_named_with_its_line(case, tmp_path, capsys) -> None:
    content, line, byte = NOT_UTF8[case]
    path = tmp_path / "w.yaml"
    path.write_bytes(content)
    run_cli(capsys, "validate", path).one_error(f"{path} line {line}: not UTF-8 text", byte)


DUPLICATES = {
    "top level of the section": (
        "workload:\n  seed: 1\n  model: {type: digits_cnn}\n  seed: 2\n",
        [("seed", 4, 2)],
    ),
    "nested, in flow style": (
        "workload:\n  model: {type: digits_cnn, type: lenet5}\n",
        [("type", 2, 2)],
    ),
    "two in one file": (
        "workload:\n  model:\n    type: digits_cnn\n    weights: a.pt\n    weights: b.pt\n"
        "  exploration:\n    nsga: {pop_size: 4}\n    nsga: {pop_size: 8}\n",
        [("weights", 5, 4), ("nsga", 8, 7)],
    ),
}


@pytest.mark.parametrize("case", DUPLICATES, ids=list(DUPLICATES))
def test_a_key_written_twice_is_refused_with_both_lines(case, tmp_path, capsys) -> None:
    text, expected = DUPLICATES[case]
    path = tmp_path / "w.yaml"
    path.write_text(text)
    outcome = run_cli(capsys, "validate", path)
    assert outcome.status == 2
    duplicate_lines = [line for line in outcome.errors if "written twice" in line]
    assert len(duplicate_lines) == len(expected), outcome.errors
    for line, (key, second, first) in zip(duplicate_lines, expected, strict=True):
        assert line.startswith(f"error: {path} line {second}: key '{key}'"), line
        assert f"also line {first}" in line


def test_duplicates_are_listed_with_the_other_problems_of_the_file(tmp_path, capsys) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  seed: -1\n  seed: -2\n  model: {type: digits_cnn, wieghts: x}\n")
    outcome = run_cli(capsys, "validate", path)
    assert outcome.status == 2 and len(outcome.errors) == 3, outcome.errors
    assert "line 3: key 'seed' is written twice" in outcome.errors[0]
    assert "workload.seed: must not be negative" in outcome.errors[1]
    assert "workload.model.wieghts: unknown key" in outcome.errors[2]


def test_overriding_a_merged_key_is_not_a_duplicate(tmp_path, capsys) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "workload:\n  model: {type: digits_cnn, pretrained: false}\n  exploration:\n"
        "    datasets:\n      exploration: &d {type: digits, split: validation, batch_size: 10}\n"
        "      baseline: {<<: *d, batch_size: 20}\n"
    )
    outcome = run_cli(capsys, "validate", path)
    assert outcome.status == 0, outcome.errors


# -- settings that no value of theirs makes sense for ------------------------------------------


def _set(path: str, value):  # noqa: ANN001, ANN202
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        node = data["workload"]
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


NAN, INF = float("nan"), float("inf")

BAD_SETTINGS = {
    "nan mutation_eta": (
        _set("exploration.nsga.mutation_eta", NAN),
        "workload.exploration.nsga.mutation_eta: must be a finite number",
    ),
    "infinite threshold_limit": (
        _set("exploration.extra_args.threshold_limit", INF),
        "workload.exploration.extra_args.threshold_limit: must be a finite number",
    ),
    "minus infinity crossover_prob": (
        _set("exploration.nsga.crossover_prob", -INF),
        "workload.exploration.nsga.crossover_prob: must be a finite number",
    ),
    "nan in a list of minimum accuracies": (
        _set("exploration.minimum_accuracy", [0.5, NAN]),
        "workload.exploration.minimum_accuracy.1: must be a finite number",
    ),
    "nan percentile": (
        _set("calibration", {"method": "percentile", "percentile": NAN}),
        "workload.calibration.percentile: must be a finite number",
    ),
    "infinite predefined parameter": (
        _set("exploration.predefined_parameters", [0.1, INF]),
        "workload.exploration.predefined_parameters.1: must be a finite number",
    ),
    "nan maximum_divergence": (
        _set("exploration.maximum_divergence", NAN),
        "workload.exploration.maximum_divergence: must be a finite number",
    ),
    "no objective": (
        _set("exploration.objectives", []),
        "workload.exploration.objectives: names no objective",
    ),
    "an objective twice": (
        _set("exploration.objectives", ["accuracy", "weighted_bits", "accuracy"]),
        "workload.exploration.objectives: names accuracy more than once",
    ),
    "two objectives twice": (
        _set("exploration.objectives", ["bops", "bops", "accuracy", "accuracy"]),
        "names accuracy, bops more than once",
    ),
    "predefined parameter above the threshold limit": (
        _set("exploration.predefined_parameters", [0.2, 1.5]),
        "workload.exploration.predefined_parameters: [1.5] lie above threshold_limit",
    ),
    "predefined parameter above a lowered limit": (
        lambda d: (
            _set("exploration.extra_args.threshold_limit", 0.1)(d),
            _set("exploration.predefined_parameters", [0.05, 0.3])(d),
        ),
        "[0.3] lie above threshold_limit (0.1)",
    ),
    "layer bounds upside down": (
        _set("exploration.layer_bounds", {"0": [6, 3]}),
        "workload.exploration.layer_bounds.0: the lower bound 6 of '0' is above its upper bound 3",
    ),
    "layer bounds above the explored range": (
        _set("exploration.layer_bounds", {"*": [4, 12]}),
        "workload.exploration.layer_bounds: [4, 12] of '*' reach outside the explored range 2-8",
    ),
    "layer bounds below the explored range": (
        lambda d: (
            _set("exploration.extra_args.num_bits_lower_limit", 4)(d),
            _set("exploration.layer_bounds", {"3.*": [2, 8]})(d),
        ),
        "[2, 8] of '3.*' reach outside the explored range 4-8",
    ),
    "an option of another calibrator": (
        _set("calibration.num_bins", 1024),  # the tiny workload calibrates with max
        "workload.calibration.num_bins: only the entropy, mse and percentile calibrators take "
        "'num_bins'; set 'method: entropy' or remove 'num_bins'",
    ),
    "per-channel inputs with percentile calibration": (
        lambda d: (
            _set("quantization.input.axis", 1)(d),
            _set("calibration.method", "percentile")(d),
        ),
        "workload.quantization.input.axis: per-channel input quantizers (axis 1) need "
        "calibration.method: max; the percentile calibrator",
    ),
    "per-channel inputs with mse calibration": (
        lambda d: (_set("quantization.input.axis", 0)(d), _set("calibration.method", "mse")(d)),
        "the mse calibrator works per tensor",
    ),
    "per-channel inputs with entropy calibration": (
        lambda d: (
            _set("quantization.input.axis", -1)(d),
            _set("calibration.method", "entropy")(d),
        ),
        "(axis -1) need calibration.method: max",
    ),
}


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=list(BAD_SETTINGS))
def test_a_setting_no_run_can_use_is_refused_at_validate(case, tiny, tmp_path, capsys) -> None:
    change, words = BAD_SETTINGS[case]
    change(tiny)
    path = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "validate", path).one_error(f"{path}: ", words)
    # Commands that run refuse it as early, before writing anything.
    run_cli(capsys, "explore", path, "--output", tmp_path / "r.pkl").one_error(words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]


def test_every_bad_setting_of_one_file_is_listed_at_once(tiny, tmp_path, capsys) -> None:
    for key, value in [
        ("exploration.nsga.mutation_eta", NAN),
        ("exploration.objectives", []),
        ("exploration.layer_bounds", {"0": [6, 3]}),
        ("calibration", {"method": "percentile", "percentile": INF}),
    ]:
        _set(key, value)(tiny)
    outcome = run_cli(capsys, "validate", write(tiny, tmp_path / "w.yaml"))
    assert outcome.status == 2 and len(outcome.errors) == 4, outcome.errors
    assert all(line.startswith("error: ") for line in outcome.errors)


def test_a_valid_file_still_validates(tiny, tmp_path: Path, capsys) -> None:
    _set("exploration.layer_bounds", {"0": [8, 8], "3": [2, 4]})(tiny)
    _set("exploration.objectives", ["accuracy", "bops"])(tiny)
    _set("quantization.input.axis", 1)(tiny)  # per channel with the max calibrator: fine
    outcome = run_cli(capsys, "validate", write(tiny, tmp_path / "w.yaml"))
    assert outcome.status == 0 and outcome.errors == []


def test_an_unknown_problem_does_not_hide_the_mistakes_beside_it(tiny, tmp_path, capsys) -> None:
    """An original-layout file with a misspelt problem, a misspelt option and a bad bit limit:
    the options are checked against the problem the did-you-mean names, all three listed."""
    tiny["workload"]["problem"] = {"problem_function": "quantisation_problem"}
    tiny["workload"]["exploration"]["extra_args"] = {
        "num_bits_lower_limit": 0,
        "num_bits_uper_limit": 8,
    }
    outcome = run_cli(capsys, "validate", write(tiny, tmp_path / "w.yaml"))
    assert outcome.status == 2 and len(outcome.errors) == 3, outcome.errors
    said = "\n".join(outcome.errors)
    assert "problem_function: must be one of" in said and "'quantization_problem'" in said
    assert "num_bits_uper_limit: unknown key (did you mean 'num_bits_upper_limit'?)" in said
    assert "num_bits_lower_limit: must be between 2 and 16 bits, got 0" in said


def test_a_file_of_another_kind_where_a_workload_goes_is_named(tiny, tmp_path, capsys) -> None:
    """A result file, a checkpoint, an array handed to a command that reads a workload: the
    sentence says what the file is and which command takes it, not the YAML reader's byte."""
    import pickle

    import numpy as np
    import torch

    result = tmp_path / "r.pkl"
    result.write_bytes(pickle.dumps({"format": "model_explorer result"}, protocol=4))
    torch.save({"state_dict": {}}, tmp_path / "c.pt")
    np.savez(tmp_path / "d.npz", x=np.zeros(3))
    for path, words in [
        (result, "this is a result file of explore (report, evaluate-individual"),
        (tmp_path / "c.pt", "this is a PyTorch file"),
        (tmp_path / "d.npz", "this is a NumPy .npz archive"),
    ]:
        run_cli(capsys, "validate", path).one_error(f"error: {path}: {words}", "not a YAML")
        run_cli(capsys, "explore", path).one_error(f"error: {path}: {words}")


COMMANDS_READING_A_WORKLOAD = [
    ["validate"],
    ["retrain", "--baseline"],
    ["calibrate"],
    ["evaluate"],
    ["explore"],
    ["cost"],
    ["energy-analysis"],
    ["blocks"],
    ["diagnose"],
    ["compare"],
    ["latency"],
]


@pytest.mark.parametrize("command", COMMANDS_READING_A_WORKLOAD, ids=lambda c: " ".join(c))
def test_a_bad_file_is_refused_before_torch_is_imported(command: list[str], tmp_path: Path) -> None:
    """Each command reads and checks the workload before it imports what runs a model: a file
    with a wrong key is one line and exit status 2, in a fresh interpreter that never loaded
    torch (a third of a second, not two)."""
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "workload:\n  model: {type: digits_cnn, weights: x.pt}\n"
        "  problem: {problem_function: quantization_problem, bogus: 1}\n"
    )
    code = (
        "import sys\n"
        "from model_explorer.cli import main\n"
        f"status = main({[*command, str(bad)]!r})\n"
        "print(status, 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert "workload.problem.bogus: unknown key" in done.stderr
