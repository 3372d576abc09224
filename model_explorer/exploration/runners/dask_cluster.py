"""Evaluation on a Dask cluster: a scheduler at an address, or a local cluster of processes.

Imported only when a workload asks for `runner: {type: dask}` (see `dask.py`); Dask's
`distributed` is the optional `dask` extra. A worker plugin installs the problem's recipe on
every worker, also on one that joins or restarts later; tasks carry a genome. When a worker
dies, the scheduler runs its tasks again on others (up to
`distributed.scheduler.allowed-failures` times per task).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import dask
import distributed
import numpy as np
from distributed.comm import get_address_host

from model_explorer.errors import UserError
from model_explorer.exploration.runners.base import Done, Front, Runner
from model_explorer.exploration.runners.recipe import ProblemRecipe
from model_explorer.exploration.runners.worker import (
    cores_per_worker,
    evaluate_genome,
    install,
    uninstall,
)
from model_explorer.problems.base import Problem

log = logging.getLogger(__name__)
_CHATTER = logging.getLogger("distributed")

PRE_SPAWN = "distributed.nanny.pre-spawn-environ"
# How often, at most, the scheduler is asked which workers are alive (to report departures).
WORKER_CHECK_SECONDS = 1.0


class ProblemSetup(distributed.WorkerPlugin):
    """Installs a recipe on each worker with its share of torch threads: `threads` maps a
    machine (host) to threads; a worker on a machine not in it gets `default`."""

    def __init__(self, recipe: ProblemRecipe, threads: dict[str, int], default: int | None):
        self.recipe = recipe
        self.threads = threads
        self.default = default

    def setup(self, worker: Any) -> None:
        install(self.recipe, self.threads.get(get_address_host(worker.address), self.default))

    def teardown(self, worker: Any) -> None:
        uninstall(self.recipe.key)


def _cpu_count() -> int | None:
    return os.cpu_count()


class DaskRunner(Runner):
    """Evaluates on the Dask scheduler at `address`, or on a LocalCluster of `workers`
    single-threaded worker processes when no address is given."""

    def __init__(
        self, workers: int = 2, address: str | None = None, threads_per_worker: int | None = None
    ) -> None:
        self.threads_per_worker = threads_per_worker
        self.cluster: Any = None
        # Dask logs every step of starting and stopping a cluster at INFO: kept for -vv only.
        self._chatter_level = _CHATTER.level
        if not log.isEnabledFor(logging.DEBUG):
            _CHATTER.setLevel(max(self._chatter_level, logging.WARNING))
        if address is None:
            # Dask's nannies set MALLOC_TRIM_THRESHOLD_ for their workers (and in this process);
            # a fixed trim threshold turns off glibc's adaptive mmap threshold, so every large
            # tensor is mapped and unmapped again: evaluations measured 1.6x slower with it.
            with dask.config.set({f"{PRE_SPAWN}.MALLOC_TRIM_THRESHOLD_": None}):
                self.cluster = distributed.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                )
            self.client = distributed.Client(self.cluster)
            self.default_threads = threads_per_worker or cores_per_worker(os.cpu_count(), workers)
        else:
            try:
                self.client = distributed.Client(address, timeout="10s")
            except (OSError, TimeoutError) as error:
                _CHATTER.setLevel(self._chatter_level)
                raise UserError(
                    f"exploration.runner.address: no Dask scheduler answers at '{address}' "
                    f"({error}); start one with `dask scheduler` or correct the address"
                ) from None
            self.default_threads = threads_per_worker
        self._plugin: str | None = None

    def _machine_threads(self) -> dict[str, int]:
        """Torch threads per machine: its cores shared by the worker processes on it."""
        if self.cluster is not None:
            return {}
        workers = self.client.scheduler_info()["workers"]
        per_host = Counter(get_address_host(address) for address in workers)
        cores = self.client.run(_cpu_count)
        threads = {}
        for address in workers:
            host = get_address_host(address)
            threads[host] = self.threads_per_worker or cores_per_worker(
                cores.get(address), per_host[host]
            )
        return threads

    def _install(self, recipe: ProblemRecipe) -> None:
        name = f"model-explorer-{recipe.key}"
        if self._plugin == name:
            return
        self._uninstall()
        plugin = ProblemSetup(recipe, self._machine_threads(), self.default_threads)
        self.client.register_plugin(plugin, name=name)
        self._plugin = name

    def _uninstall(self) -> None:
        if self._plugin is not None:
            self.client.unregister_worker_plugin(self._plugin)
            self._plugin = None

    def _alive(self) -> set[str]:
        return set(self.client.scheduler_info()["workers"])

    def evaluate(
        self, problem: Problem, genomes: Sequence[np.ndarray], done: Done, front: Front = ()
    ) -> None:
        recipe = self.attached_recipe()
        self._install(recipe)
        futures = {
            self.client.submit(
                evaluate_genome, recipe.key, genome, list(front), pure=False
            ): position
            for position, genome in enumerate(genomes)
        }
        alive = self._alive()
        checked = time.monotonic()
        try:
            for future in distributed.as_completed(futures):
                try:
                    configuration, evaluation = future.result()
                except distributed.KilledWorker as error:
                    raise RuntimeError(
                        f"Dask gave up on an evaluation: every worker that ran it died ({error}); "
                        "the evaluations recorded so far are saved"
                    ) from None
                done(futures[future], configuration, evaluation)
                if time.monotonic() - checked > WORKER_CHECK_SECONDS:
                    alive, checked = self._report_departures(alive), time.monotonic()
            self._report_departures(alive)
        finally:
            self.client.cancel([future for future in futures if not future.done()])

    def _report_departures(self, before: set[str]) -> set[str]:
        now = self._alive()
        for address in sorted(before - now):
            log.warning(
                "Dask worker %s left the cluster; the scheduler runs its evaluations on others",
                address,
            )
        return now

    def close(self) -> None:
        try:
            if self.cluster is None:
                self._uninstall()
        finally:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()
            _CHATTER.setLevel(self._chatter_level)
