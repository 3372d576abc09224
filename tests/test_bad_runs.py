"""Runs that must lose no data: result paths that cannot be written (refused before the first
evaluation), runs started at once (never one file for two), runs that stopped before their
first save (said at the next start), temporaries of interrupted writes, files with the user's
umask, and search spaces smaller than the population (every configuration once)."""

from __future__ import annotations

import fnmatch
import itertools
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_support import run_cli, write

from model_explorer.fileio import atomic_path, file_mode
from model_explorer.operations import explore as explore_module
from model_explorer.operations.result_file import claim, this_process
from model_explorer.results import ExplorationResult


def _no_evaluation(monkeypatch) -> None:  # noqa: ANN001
    def refuse(context):  # noqa: ANN001, ANN202
        raise AssertionError("an evaluation ran before the result path was checked")

    monkeypatch.setattr(explore_module, "measure_baseline", refuse)


def _file_in_the_way(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    return tmp_path / "notes.txt" / "r.pkl"


UNWRITABLE = {
    "below /dev/null": (lambda tmp: Path("/dev/null/x.pkl"), "'/dev/null' is not a folder"),
    "below a file": (_file_in_the_way, "notes.txt' is not a folder"),
    "deeper below a file": (lambda tmp: _file_in_the_way(tmp).parent / "a" / "b.pkl", "notes.txt"),
    "an existing folder": (lambda tmp: tmp, "exists; choose another path or pass --resume"),
}


@pytest.mark.parametrize("case", UNWRITABLE, ids=list(UNWRITABLE))
def test_an_unwritable_result_path_fails_before_any_evaluation(
    case, tiny, tmp_path, capsys, monkeypatch
) -> None:
    make, words = UNWRITABLE[case]
    output = make(tmp_path)
    workload = write(tiny, tmp_path / "w.yaml")
    _no_evaluation(monkeypatch)
    run_cli(capsys, "explore", workload, "--output", output).one_error("error: --output: ", words)
    # The same path named in the workload is named by its key.
    tiny["workload"]["problem"] = {"results_file": str(output)}
    workload = write(tiny, tmp_path / "w.yaml")
    run_cli(capsys, "explore", workload).one_error("error: workload.problem.results_file: ", words)


def test_runs_started_in_the_same_second_get_files_of_their_own(
    tiny, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(explore_module.time, "strftime", lambda *a: "20250101-120000")
    workload = write(tiny, tmp_path / "w.yaml")
    assert run_cli(capsys, "explore", workload, "--skip-baseline").status == 0
    (first,) = sorted((tmp_path / "results").glob("*.pkl"))
    before = first.read_bytes()
    assert run_cli(capsys, "explore", workload, "--skip-baseline").status == 0
    files = sorted((tmp_path / "results").glob("*.pkl"))
    assert {f.name for f in files} == {first.name, first.name.replace(".pkl", "-2.pkl")}
    assert first.read_bytes() == before  # the first run's file is intact
    assert all(ExplorationResult.load(f).complete for f in files)


def test_claiming_is_exclusive_and_numbers_taken_default_names(tmp_path) -> None:
    path = tmp_path / "r.pkl"
    taken = [claim(path, {"workload": {}}, "results", numbered=True) for _ in range(3)]
    assert [p.name for p in taken] == ["r.pkl", "r-2.pkl", "r-3.pkl"]
    with pytest.raises(Exception, match="exists; choose another path"):
        claim(path, {"workload": {}}, "--output", numbered=False)
    assert ExplorationResult.load(path).owner == this_process()


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    return int(done.stdout)


def _stopped_placeholder(tmp_path: Path, workload: Path, owner_pid: int) -> Path:
    """What a run killed before its first save leaves: its claimed, empty result file."""
    from model_explorer.operations.explore import result_path
    from model_explorer.operations.result_file import SearchDefinition
    from model_explorer.workload.file import Workload

    loaded = Workload.load(workload)
    path = tmp_path / result_path(loaded, None)
    placeholder = claim(path, SearchDefinition.of(loaded).stored, "results", numbered=True)
    result = ExplorationResult.load(placeholder)
    result.owner = {**this_process(), "pid": owner_pid}
    result.save(placeholder)
    return placeholder


def test_a_run_killed_before_its_first_save_is_reported_at_the_next_start(
    tiny, tmp_path, capsys, caplog, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    workload = write(tiny, tmp_path / "w.yaml")
    stopped = _stopped_placeholder(tmp_path, workload, _dead_pid())
    with caplog.at_level(logging.WARNING):
        assert run_cli(capsys, "explore", workload, "--skip-baseline").status == 0
    said = [r.getMessage() for r in caplog.records if "stopped before its first" in r.message]
    assert said == [
        f"{stopped}: an earlier run of this workload stopped before its "
        "first save; nothing was saved there (remove the file)"
    ]
    caplog.clear()
    # --resume takes it up, says that nothing was saved, and completes it.
    with caplog.at_level(logging.WARNING):
        assert run_cli(capsys, "explore", workload, "--resume", "--skip-baseline").status == 0
    said = [r.getMessage() for r in caplog.records if "nothing was saved" in r.message]
    assert len(said) == 1 and said[0].startswith(f"{stopped}: the run")
    assert ExplorationResult.load(stopped).complete and len(ExplorationResult.load(stopped)) > 0


def test_resume_skips_a_result_another_live_run_is_writing(
    tiny, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    workload = write(tiny, tmp_path / "w.yaml")
    running = _stopped_placeholder(tmp_path, workload, os.getppid())  # a live process
    before = running.read_bytes()
    outcome = run_cli(capsys, "explore", workload, "--resume", "--skip-baseline")
    outcome.one_error("error: --resume: no unfinished result of this workload")
    assert running.read_bytes() == before


def test_a_failed_run_that_saved_nothing_leaves_no_file_and_says_so(
    tiny, tmp_path, capsys, caplog, monkeypatch
) -> None:
    from model_explorer.problems.quantization import LayerwiseQuantizationProblem

    def fail(self, configuration):  # noqa: ANN001, ANN202
        raise RuntimeError("planted evaluation failure")

    monkeypatch.setattr(LayerwiseQuantizationProblem, "measure", fail)
    tiny["workload"]["exploration"]["initialization"] = "random"
    workload = write(tiny, tmp_path / "w.yaml")
    output = tmp_path / "r.pkl"
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="planted"):
        run_cli(capsys, "explore", workload, "--output", output, "--skip-baseline")
    messages = [r.getMessage() for r in caplog.records]
    assert any("before any evaluation was saved" in m for m in messages), messages
    assert not any("evaluations are saved" in m for m in messages)
    assert not output.exists()
    # With the sensitivity start the table is measured before the first evaluation fails:
    # the file keeps it, and the log says how to resume.
    tiny["workload"]["exploration"]["initialization"] = "sensitivity"
    workload = write(tiny, tmp_path / "w.yaml")
    caplog.clear()
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="planted"):
        run_cli(capsys, "explore", workload, "--output", output, "--skip-baseline")
    messages = [r.getMessage() for r in caplog.records]
    assert any("the sensitivity start's measurements are saved in" in m for m in messages)
    assert "tables" in ExplorationResult.load(output).stats["sensitivity"]


def test_the_log_counts_what_the_file_holds_when_a_later_save_fails(
    tiny, tmp_path, capsys, caplog, monkeypatch
) -> None:
    """Saves after the first generation fail (a full disk): the log gives the count of the
    file, and the run ends in one error line instead of a traceback."""
    # The claim and generation 0 are written; the save after generation 1 fails.
    monkeypatch.setattr("model_explorer.results.result.save_plain", _failing_after(2))
    tiny["workload"]["exploration"]["nsga"]["generations"] = 2
    tiny["workload"]["exploration"]["initialization"] = "random"  # no saves before the first
    workload = write(tiny, tmp_path / "w.yaml")
    output = tmp_path / "r.pkl"
    with caplog.at_level(logging.ERROR):
        outcome = run_cli(capsys, "explore", workload, "--output", output, "--skip-baseline")
    outcome.one_error(f"error: {output}: cannot write the result file (No space left on device)")
    held = ExplorationResult.load(output)
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{len(held)} evaluations are saved in {output}" in m for m in messages), messages
    assert len(held) > 0 and not held.complete


def _failing_after(count: int):  # noqa: ANN202
    from model_explorer.results import result as result_module

    real = result_module.save_plain
    calls = itertools.count()

    def save_plain(data, path):  # noqa: ANN001, ANN202
        if next(calls) >= count:
            raise OSError(28, "No space left on device")
        return real(data, path)

    return save_plain


# -- temporaries and permissions ------------------------------------------------------------------


def test_an_interrupted_write_leaves_no_temporary_and_the_old_file(tmp_path) -> None:
    target = tmp_path / "calibration.pt"
    target.write_bytes(b"the previous content")
    for interruption in (KeyboardInterrupt, RuntimeError, SystemExit):
        with pytest.raises(interruption), atomic_path(target) as temporary:
            temporary.write_bytes(b"half of the new")
            raise interruption()
        assert target.read_bytes() == b"the previous content"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.pt"]


def test_temporaries_of_killed_writers_are_removed_at_the_next_write(tmp_path) -> None:
    import socket

    target = tmp_path / "r.pkl"
    host = socket.gethostname()
    dead = tmp_path / f".r.pkl.{host}-{_dead_pid()}.abcd1234.tmp"
    live = tmp_path / f".r.pkl.{host}-{os.getppid()}.efgh5678.tmp"
    other_host = tmp_path / f".r.pkl.elsewhere.example-{_dead_pid()}.ijkl9012.tmp"
    other_target = tmp_path / f".s.pkl.{host}-{_dead_pid()}.mnop3456.tmp"
    for path in (dead, live, other_host, other_target):
        path.write_bytes(b"left over")
    with atomic_path(target) as temporary:
        temporary.write_bytes(b"new")
    remaining = sorted(p.name for p in tmp_path.iterdir())
    assert remaining == sorted(["r.pkl", live.name, other_host.name, other_target.name])


@pytest.fixture
def umask():  # noqa: ANN201
    """Runs the test under umask 027 (not the usual 022), restoring it afterwards."""
    from model_explorer import fileio

    fileio._umask.cache_clear()
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)
    fileio._umask.cache_clear()


def test_written_files_get_the_users_umask(umask, tiny, tmp_path, capsys) -> None:
    from model_explorer.models import save_checkpoint
    from tests_support import plain_cnn

    expected = 0o640
    assert file_mode() == expected
    tiny["workload"]["calibration"]["file"] = str(tmp_path / "c.pt")
    workload = write(tiny, tmp_path / "w.yaml")
    assert run_cli(capsys, "calibrate", workload).status == 0
    output = tmp_path / "r.pkl"
    assert run_cli(capsys, "explore", workload, "--output", output, "-s").status == 0
    checkpoint = save_checkpoint(plain_cnn(), tmp_path / "m.pt")
    for path in (tmp_path / "c.pt", output, checkpoint):
        assert path.stat().st_mode & 0o777 == expected, path


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_writes_follow_any_umask(mask, tmp_path) -> None:
    from model_explorer import fileio

    fileio._umask.cache_clear()
    old = os.umask(mask)
    try:
        with atomic_path(tmp_path / "f.bin") as temporary:
            temporary.write_bytes(b"x")
        assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o666 & ~mask
    finally:
        os.umask(old)
        fileio._umask.cache_clear()


# -- search spaces smaller than the population ----------------------------------------------------

ALL = "*"
SPACES = {
    "one configuration": ({ALL: [4, 4]}, 4, 2),
    "2 bits x 2 quantizers, population 4": ({ALL: [8, 8], "0.*": [3, 4]}, 4, 2),
    "2 bits x 2 quantizers, population 8": ({ALL: [8, 8], "3.*": [7, 8]}, 8, 3),
    "2 bits x 3 quantizers, population 10": (
        {ALL: [8, 8], "0.*": [5, 6], "14.input_quantizer": [2, 3]},
        10,
        3,
    ),
}


@pytest.mark.parametrize("case", SPACES, ids=list(SPACES))
def test_a_space_smaller_than_the_population_is_evaluated_once_each(
    case, tiny, tmp_path, capsys
) -> None:
    bounds, population, generations = SPACES[case]
    exploration = tiny["workload"]["exploration"]
    exploration["layer_bounds"] = bounds
    exploration["nsga"].update(pop_size=population, generations=generations)
    output = tmp_path / "r.pkl"
    outcome = run_cli(capsys, "explore", write(tiny, tmp_path / "w.yaml"), "--output", output, "-s")
    assert outcome.status == 0 and outcome.errors == [], outcome.errors
    result = ExplorationResult.load(output)
    names = result.variable_names
    ranges = []
    for name in names:  # the space by hand: later patterns win, as documented
        low, high = 2, 8
        for pattern, (a, b) in bounds.items():
            if fnmatch.fnmatchcase(name, pattern):
                low, high = a, b
        ranges.append(range(low, high + 1))
    space = {tuple(c) for c in itertools.product(*ranges)}
    evaluated = [tuple(r["configuration"]) for r in result.records]
    assert result.complete
    assert sorted(evaluated) == sorted(space)  # every configuration, each once


@pytest.mark.parametrize("problem", ["quantization_problem", "quantization_sparsity_problem"])
def test_a_layer_bounds_pattern_matching_no_quantizer_is_refused_before_the_search(
    problem: str, tiny, tmp_path, capsys
) -> None:
    tiny["workload"].setdefault("problem", {})["problem_function"] = problem
    tiny["workload"]["exploration"]["layer_bounds"] = {"classifier.*": [2, 4]}
    output = tmp_path / "r.pkl"
    outcome = run_cli(capsys, "explore", write(tiny, tmp_path / "w.yaml"), "--output", output)
    assert outcome.status == 2
    assert len(outcome.errors) == 1, outcome.errors
    assert (
        "workload.exploration.layer_bounds.classifier.*: matches no quantizer"
        in (outcome.errors[0])
    )
    assert not output.exists()  # the claimed result file, empty, is released


def test_a_minimum_the_baseline_misses_is_said_at_the_start_and_wherever_a_front_is_shown(
    tiny, tmp_path, capsys, caplog
) -> None:
    """digits_cnn with random weights (about 10% top-1) against a 0.65 minimum: nothing can be
    feasible; the run says so first, and the console, report.md and front.png do not call the
    infeasible individuals a Pareto front."""
    from model_explorer.reports.plots import plot_front, plot_layers
    from model_explorer.results import ExplorationResult

    tiny["workload"]["exploration"]["minimum_accuracy"] = 0.65
    workload = write(tiny, tmp_path / "w.yaml")
    result = tmp_path / "r.pkl"
    outcome = run_cli(capsys, "explore", workload, "--output", result, "--report")
    assert outcome.status == 0
    warning = "the search will most likely find no feasible individual"
    assert "below the minimum 0.6500" in caplog.text and warning in caplog.text
    assert "No feasible individual" in outcome.out and "Pareto front:" not in outcome.out
    report = (tmp_path / "r_report" / "report.md").read_text()
    assert "## No feasible individual" in report and "## Pareto front" not in report
    loaded = ExplorationResult.load(result)
    assert not loaded.feasible()
    assert plot_front(loaded).axes[0].get_title() == "no feasible individual"
    assert "no feasible individual" in plot_layers(loaded).axes[0].get_title()


def test_a_second_run_on_a_result_being_written_is_refused(
    tiny, tmp_path, capsys, monkeypatch
) -> None:
    """Two `--resume` runs of one result file both ran to the end, each over the other's
    saves: while a run holds the file, a second one is one sentence and exit status 2, the
    file as it was; once the first is over, the resume runs."""
    from model_explorer.operations.result_file import hold

    monkeypatch.chdir(tmp_path)
    workload = write(tiny, tmp_path / "w.yaml")
    stopped = _stopped_placeholder(tmp_path, workload, _dead_pid())
    before = stopped.read_bytes()
    release = hold(stopped, "another run")  # as the first run holds it while it goes
    try:
        outcome = run_cli(
            capsys, "explore", workload, "--resume", "--output", stopped, "--skip-baseline"
        )
    finally:
        release()
    outcome.one_error(
        f"error: --resume: '{stopped}' is being written by another run that is still going "
        f"(it holds {stopped.name}.lock); wait for it to end, or stop it, then resume"
    )
    assert stopped.read_bytes() == before
    again = run_cli(capsys, "explore", workload, "--resume", "--output", stopped, "--skip-baseline")
    assert again.status == 0 and ExplorationResult.load(stopped).complete
    assert not stopped.with_name(stopped.name + ".lock").exists()
