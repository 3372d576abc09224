"""Parallel evaluation (local processes, Dask) against the serial run of the same digits search."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from model_explorer.cli import main
from model_explorer.errors import UserError, WorkloadError
from model_explorer.exploration.runners import RunnerSpec, build_runner
from model_explorer.results import ExplorationResult
from model_explorer.workload.file import Workload
from tests_support import without_times

pytestmark = pytest.mark.slow  # each test starts worker processes or a Dask cluster


@pytest.fixture(scope="module")
def digits_search(trained_digits, tmp_path_factory) -> dict:
    """A small digits search (calibrated once) as workload data, and its serial result."""
    workload_file, checkpoint = trained_digits
    folder = tmp_path_factory.mktemp("parallel")
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["name"] = "parallel"
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    data["workload"]["exploration"]["nsga"].update(pop_size=8, offsprings=6, generations=2)
    path = folder / "serial.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    output = folder / "serial.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    return {"data": data, "serial": without_times(output)}


def with_runner(search: dict, folder: Path, runner: dict | None) -> Workload:
    data = yaml.safe_load(yaml.safe_dump(search["data"]))
    if runner is not None:
        data["workload"]["exploration"]["runner"] = runner
    path = folder / "workload.yaml"
    path.write_text(yaml.safe_dump(data))
    return Workload.load(path)


class KillsOnce:
    """Runner mixin: kills one worker process as the first result of the runner's
    `kill_in`-th generation arrives."""

    kill_in = 2
    generations = 0
    killed = False

    def worker_pid(self) -> int:
        raise NotImplementedError

    def evaluate(self, problem, genomes, done, front=()) -> None:  # noqa: ANN001
        self.generations += 1

        def kill_once(position, configuration, evaluation) -> None:  # noqa: ANN001
            if self.generations == self.kill_in and not self.killed:
                os.kill(self.worker_pid(), signal.SIGKILL)
                self.killed = True
            done(position, configuration, evaluation)

        super().evaluate(problem, genomes, kill_once, front)


def test_a_run_interrupted_under_processes_resumes_to_the_serial_result_past_a_killed_worker(
    digits_search: dict, tmp_path: Path, monkeypatch, caplog
) -> None:
    """The workload's `runner: {type: processes}` through the CLI: the first generation, then
    the rest after a resume, each in fresh worker processes, give the serial result, although
    a worker process is killed in the resumed generation (the pool is replaced and the
    genomes it had not answered are evaluated again)."""
    from model_explorer.exploration.explorer import Explorer
    from model_explorer.exploration.runners import processes

    started: list[KillsOnce] = []

    class KillingProcessRunner(KillsOnce, processes.ProcessRunner):
        kill_in = 1  # the resumed run's first generation

        def __init__(self, *arguments) -> None:  # noqa: ANN002
            super().__init__(*arguments)
            started.append(self)

        def worker_pid(self) -> int:
            return self.worker_pids()[0]

    with_runner(digits_search, tmp_path, {"type": "processes", "workers": 2})
    workload, output = str(tmp_path / "workload.yaml"), str(tmp_path / "cut.pkl")
    original = Explorer._close_generation

    def interrupt_after_first(self, generation, algorithm):  # noqa: ANN001, ANN202
        original(self, generation, algorithm)
        if generation == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(Explorer, "_close_generation", interrupt_after_first)
    assert main(["explore", workload, "--output", output]) == 130
    assert not ExplorationResult.load(output).complete
    monkeypatch.setattr(Explorer, "_close_generation", original)
    # the `processes` runner's builder finds ProcessRunner in its module when it is called
    monkeypatch.setattr(processes, "ProcessRunner", KillingProcessRunner)
    with caplog.at_level(logging.WARNING, "model_explorer"):
        assert main(["explore", workload, "--output", output, "--resume"]) == 0
    assert [runner.killed for runner in started] == [True]
    assert "a worker process died" in caplog.text
    assert without_times(Path(output)) == digits_search["serial"]


@pytest.mark.xdist_group("dask")  # one local cluster (two worker processes) at a time
def test_a_dask_search_is_the_serial_one_even_when_a_worker_is_killed(
    digits_search: dict, tmp_path: Path, monkeypatch
) -> None:
    """The workload's `runner: {type: dask}` through the CLI, with one worker killed in the
    second generation: the cluster replaces it and the result is the serial one (which a run
    without a kill gives all the more; one local cluster instead of two keeps the suite short)."""
    pytest.importorskip("distributed")
    from model_explorer.exploration.runners import dask_cluster

    started: list[KillsOnce] = []

    class KillingDaskRunner(KillsOnce, dask_cluster.DaskRunner):
        def __init__(self, *arguments) -> None:  # noqa: ANN002
            super().__init__(*arguments)
            started.append(self)

        def worker_pid(self) -> int:
            return sorted(self.client.run(os.getpid).values())[0]

    # the `dask` runner's builder imports DaskRunner from dask_cluster when it is called
    monkeypatch.setattr(dask_cluster, "DaskRunner", KillingDaskRunner)
    with_runner(digits_search, tmp_path, {"type": "dask", "workers": 2})
    output = tmp_path / "dask.pkl"
    assert main(["explore", str(tmp_path / "workload.yaml"), "--output", str(output)]) == 0
    assert [runner.killed for runner in started] == [True]
    assert without_times(output) == digits_search["serial"]


def test_the_dask_runner_without_dask_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if it were not installed
    monkeypatch.delitem(
        sys.modules, "model_explorer.exploration.runners.dask_cluster", raising=False
    )
    with pytest.raises(UserError, match=r"pip install 'model_explorer\[dask\]'"):
        build_runner(RunnerSpec(type="dask"))


def test_runner_settings_are_validated(default_workload_data: dict) -> None:
    exploration = default_workload_data["workload"]["exploration"]
    assert Workload.from_dict(default_workload_data, check_paths=False).exploration.runner == (
        RunnerSpec(type="serial")
    )
    exploration["runner"] = {"type": "processes", "address": "tcp://10.0.0.1:8786"}
    with pytest.raises(WorkloadError, match="exploration.runner.address: only the dask runner"):
        Workload.from_dict(default_workload_data, check_paths=False)
    exploration["runner"] = {"type": "threads"}
    with pytest.raises(WorkloadError, match="exploration.runner.type: must be one of"):
        Workload.from_dict(default_workload_data, check_paths=False)
    exploration["runner"] = {"type": "dask", "workers": 0}
    with pytest.raises(WorkloadError, match="exploration.runner.workers: must be a positive"):
        Workload.from_dict(default_workload_data, check_paths=False)
