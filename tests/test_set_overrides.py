"""`--set KEY=VALUE`: a workload setting changed for one run, validated like the file, recorded
in the result; a wrong one is one line naming it as set on the command line."""

from __future__ import annotations

import json
from pathlib import Path

from bad_input_support import run_cli, write

from model_explorer.results import ExplorationResult


def test_settings_are_applied_validated_and_recorded(tiny, tmp_path: Path, capsys) -> None:
    tiny["workload"]["calibration"]["file"] = str(tmp_path / "calibration.pt")
    workload = write(tiny, tmp_path / "w.yaml")
    sets = [
        "--set", "exploration.nsga.pop_size=3",
        "--set", "exploration.nsga.offsprings=2",
        "--set", "exploration.nsga.generations=2",
        "--set", "exploration.strategy.type=nsga2",
        "--set", "seed=7",
    ]  # fmt: skip
    shown = run_cli(capsys, "validate", workload, "--show", *sets)
    assert shown.status == 0
    body = json.loads(shown.out[shown.out.index("{") :])["workload"]
    assert body["seed"] == 7 and body["exploration"]["nsga"]["pop_size"] == 3
    result = tmp_path / "r.pkl"
    # Another seed draws another calibration subset: calibrate for it first.
    assert run_cli(capsys, "calibrate", workload, *sets).status == 0
    assert run_cli(capsys, "explore", workload, *sets, "--output", result).status == 0
    recorded = ExplorationResult.load(result)
    # nsga2 evaluates pop_size, then offsprings per generation (no duplicates on 5 layers).
    assert len(recorded) == 3 + 2 * 2
    assert recorded.workload["workload"]["seed"] == 7
    assert "seed: 0" in (tmp_path / "w.yaml").read_text()  # the file is unchanged


def test_a_wrong_setting_is_one_line_marked_as_set_on_the_command_line(
    tiny, tmp_path: Path, capsys
) -> None:
    workload = write(tiny, tmp_path / "w.yaml")
    outcome = run_cli(capsys, "validate", workload, "--set", "exploration.nsga.pop_sze=3")
    outcome.one_error("workload.exploration.nsga.pop_sze", "did you mean 'pop_size'", "--set")
    outcome = run_cli(capsys, "validate", workload, "--set", "seed=many")
    outcome.one_error("workload.seed: must be an integer", "(set by --set)")
    run_cli(capsys, "validate", workload, "--set", "seed").one_error("--set seed: write KEY=VALUE")
    outcome = run_cli(capsys, "validate", workload, "--set", "seed.value=1")
    outcome.one_error("--set seed.value=1: 'seed' holds a value, not settings")
