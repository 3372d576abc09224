"""The `processes` runner: local worker processes, each building the problem once.

Each worker process receives the ProblemRecipe once (see `worker.py`), builds the problem from it
and then receives only genomes. When a worker process dies, the pool breaks: the genomes not yet
answered are evaluated again in a new pool.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

import numpy as np

from model_explorer.exploration.runners.base import Done, Front, Runner, register_runner
from model_explorer.exploration.runners.recipe import ProblemRecipe
from model_explorer.exploration.runners.worker import (
    cores_per_worker,
    evaluate_genome,
    install,
)
from model_explorer.problems.base import Problem
from model_explorer.schema.specs import PositiveInt, Spec

log = logging.getLogger(__name__)


class ProcessesOptions(Spec):
    workers: PositiveInt = 2
    """Local worker processes evaluating candidates side by side, each building the model, data
    and calibration once; a pool whose process dies is restarted."""
    threads_per_worker: PositiveInt | None = None
    """Torch threads of each worker process; when not given, the machine's cores divided by
    `workers`, so that they do not oversubscribe the cores."""


class ProcessRunner(Runner):
    """`workers` local processes (started fresh, not forked), each building the problem once.

    When a worker process dies, the pool breaks: the genomes not yet answered are evaluated
    again in a new pool, up to `restarts` times per generation."""

    def __init__(
        self, workers: int = 2, threads_per_worker: int | None = None, restarts: int = 3
    ) -> None:
        self.workers = workers
        self.threads = threads_per_worker or cores_per_worker(os.cpu_count(), workers)
        self.restarts = restarts
        self._pool: ProcessPoolExecutor | None = None
        self._key: str | None = None

    def _pool_for(self, recipe: ProblemRecipe) -> ProcessPoolExecutor:
        if self._pool is None or self._key != recipe.key:
            self.close()
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=get_context("spawn"),
                initializer=install,
                initargs=(recipe, self.threads),
            )
            self._key = recipe.key
        return self._pool

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (empty before the first evaluation)."""
        # The executor keeps its processes in a private mapping; this is for diagnostics.
        return [] if self._pool is None else [p.pid for p in self._pool._processes.values()]

    def evaluate(
        self, problem: Problem, genomes: Sequence[np.ndarray], done: Done, front: Front = ()
    ) -> None:
        recipe = self.attached_recipe()
        waiting = dict(enumerate(genomes))
        for restart in range(self.restarts + 1):
            if self._attempt(self._pool_for(recipe), recipe.key, waiting, done, front):
                return
            self.close()
            if restart == self.restarts:
                break
            log.warning(
                "a worker process died; %d evaluations of this generation run again in a new "
                "pool of %d processes (restart %d of at most %d)",
                len(waiting),
                self.workers,
                restart + 1,
                self.restarts,
            )
        raise RuntimeError(
            f"worker processes died {self.restarts + 1} times in one generation; the evaluations "
            "recorded so far are saved, see the log above for the cause"
        )

    @staticmethod
    def _attempt(
        pool: ProcessPoolExecutor,
        key: str,
        waiting: dict[int, np.ndarray],
        done: Done,
        front: Front = (),
    ) -> bool:
        """Evaluate the waiting genomes; False when the pool broke (the rest stay waiting)."""
        futures: dict[Future, int] = {}
        try:
            for position, genome in waiting.items():
                futures[pool.submit(evaluate_genome, key, genome, list(front))] = position
            for future in as_completed(futures):
                try:
                    configuration, evaluation = future.result()
                except BrokenProcessPool:
                    continue
                position = futures[future]
                del waiting[position]
                done(position, configuration, evaluation)
        except BrokenProcessPool:
            pass  # broke while submitting
        finally:
            for future in futures:
                future.cancel()
        return not waiting

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._key = None


@register_runner("processes", options=ProcessesOptions)
def processes_runner(options: ProcessesOptions) -> ProcessRunner:
    return ProcessRunner(options.workers, options.threads_per_worker)
