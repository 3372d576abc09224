"""The `dask` runner's registration and options; Dask itself loads only when it is chosen.

Evaluation on a Dask cluster: the scheduler at `address`, or a local cluster of `workers`
processes (see `dask_cluster.py`; Dask's `distributed` is the optional `dask` extra).
"""

from __future__ import annotations

from model_explorer.errors import UserError
from model_explorer.exploration.runners.base import Runner, register_runner
from model_explorer.schema import PositiveInt, Spec


class DaskOptions(Spec):
    workers: PositiveInt = 2  # processes of a local cluster (no address)
    address: str | None = None  # a running scheduler, e.g. tcp://10.0.0.5:8786
    threads_per_worker: PositiveInt | None = None  # torch threads; None: cores // workers


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
