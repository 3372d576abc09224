"""The `dask` runner's registration and options; Dask itself loads only when it is chosen.

Evaluation on a Dask cluster: the scheduler at `address`, or a local cluster of `workers`
processes (see `dask_cluster.py`; Dask's `distributed` is the optional `dask` extra).
"""

from __future__ import annotations

from model_explorer.errors import UserError
from model_explorer.exploration.runners.base import Runner, register_runner
from model_explorer.schema.specs import PositiveInt, Spec


class DaskOptions(Spec):
    workers: PositiveInt = 2
    """Worker processes of the local Dask cluster started when no `address` is given, each
    evaluating one candidate at a time; not used with an `address`."""
    address: str | None = None
    """A running Dask scheduler whose workers evaluate, e.g. `tcp://10.0.0.5:8786`; when not
    given, a local cluster of `workers` processes is started."""
    threads_per_worker: PositiveInt | None = None
    """Torch threads of each worker process; when not given, each machine's cores divided by the
    worker processes on it, so that they do not oversubscribe the cores."""


@register_runner("dask", options=DaskOptions)
def dask_runner(options: DaskOptions) -> Runner:
    try:
        from model_explorer.exploration.runners.dask_cluster import DaskRunner
    except ImportError as error:
        if error.name is None or not error.name.startswith(("dask", "distributed")):
            raise
        raise UserError(
            "exploration.runner: type 'dask' needs Dask's distributed package; install it "
            "with `pip install 'model_explorer[dask]'`, or choose type 'processes'"
        ) from None
    return DaskRunner(options.workers, options.address, options.threads_per_worker)
