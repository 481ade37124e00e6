"""The package's preload, for workers and for clients.

A worker that runs it imports the engine and loads the kernels while it starts, so that the first fit it runs
does not.  On a cluster you start yourself::

    dask worker tcp://scheduler:8786 --nthreads 1 --preload dask_estimators.preload

or ``LocalCluster(..., preload=["dask_estimators.preload"])``.  The embedded cluster's workers start warm
without it.

A client that runs it (``distributed.client.preload``, which the package lists by default once it is
imported: docs/clusters.md) asks its workers to do the same as it connects, without waiting.
"""

from __future__ import annotations

import sys

from .engine.cluster._warm import dask_setup as _setup_worker

__all__ = ["dask_setup"]


def dask_setup(server) -> None:
    """Run by Dask's preload manager: a worker (or nanny's worker) starting up imports the engine and the
    kernels; a client connecting asks its workers to (``dask-estimators.warm-clients``).

    Parameters
    ----------
    server : distributed.Worker or distributed.Client
    """
    client_module = sys.modules.get("distributed.client")
    if client_module is not None and isinstance(server, client_module.Client):
        from .engine.cluster.client import warm_new_client

        warm_new_client(server)
        return
    _setup_worker(server)
