"""A worker preload that imports the engine and the kernels while the worker starts.

The embedded cluster's workers load it (``preload=``) when they start, so
that torch, numba and the linear kernels are imported while the client still
validates its data, instead of in the first task.  The imports run before the
worker registers with the scheduler, not in a background thread: a thread
importing scikit-learn while the worker's event loop unpickled a message that
imports it too ended in Python's ``_DeadlockError`` on the two module locks
(sklearn.base and sklearn.utils.validation), and the fit then hung (seen once
in CI, in a docs example's fresh cluster).  On Linux the embedded cluster's
nannies import the same modules before they fork their workers
(:func:`._nanny_process.fork_workers`), and the preload finds them imported.
"""

from __future__ import annotations

import importlib

#: Modules a linear fit runs on a worker, imported on each worker in this order: torch is not among them (a linear
#: fit never imports it on a worker; the numba kernels and scipy's solvers are all it runs).
LINEAR_MODULES = (
    "dask_estimators.engine.data._worker",
    "numba",
    "dask_estimators.objectives.losses",
    "dask_estimators.objectives._fused",
    "dask_estimators.objectives.linear",
    "dask_estimators.objectives.targets",
)

#: The solver a small linear fit runs on its worker (scipy.optimize, the largest import of a linear fit's
#: warm-up: benchmarks/results/history/first-fit.md), imported after :data:`LINEAR_MODULES`: at once before a
#: worker serves, but on a worker already serving only once it has nothing to run (:func:`warm_running`), so
#: that the rounds of a large first fit, whose solver runs on the client, do not wait for it.
SOLVER_MODULES = ("dask_estimators.optim.scipy_driver",)

#: The networks' modules, imported after :data:`LINEAR_MODULES` where the networks are warmed too.
NETWORK_MODULES = (
    "torch",
    "dask_estimators.objectives.module",
    "dask_estimators.objectives._fused_mlp",
    "torch.distributed",
    "dask_estimators.engine.ddp.collective",
    "dask_estimators.engine.ddp.train",
    "dask_estimators.optim.torch_driver",  # the ddp ranks' optimizer and epochs (their ``training``)
)

#: Every module a worker may import ahead, in order.
MODULES = LINEAR_MODULES + SOLVER_MODULES + NETWORK_MODULES

#: How often (s) and how long (s) a serving worker looks for a moment with nothing to run, to import
#: :data:`SOLVER_MODULES` (:func:`warm_running`); a small fit that comes first imports them itself.
IDLE_POLL, IDLE_PATIENCE = 0.1, 120.0


#: Whether this process's warm-up makes the networks' first uses (:func:`warm_kernels`): False in a zygote
#: started for a linear model that was asked for a nanny before it could make them (:func:`._zygote.prewarm`),
#: and in the nannies and workers it forks.
NETWORKS = [True]


def _import_all(networks: bool = True) -> None:
    """Import :data:`LINEAR_MODULES` and :data:`SOLVER_MODULES`, and with ``networks`` :data:`NETWORK_MODULES`
    after them."""
    _import(MODULES if networks else LINEAR_MODULES + SOLVER_MODULES)


def _import(names) -> bool:
    """Import ``names`` in order; False where one fails (the rest are left to the tasks that need them)."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the task that needs it reports the error
            return False
    return True


def warm_kernels(networks: bool = True) -> None:
    """Initialise numba's compiler and load the dense float64 kernels from their cache (once);
    with ``networks``, also the networks' first uses (:func:`warm_networks`;
    benchmarks/results/history/first-fit.md has both costs).

    The first call of any compiled function in a process sets up numba's
    target (its registries and runtime); the first call of a kernel for a
    type signature loads its machine code.  Done here, a nanny pays it once
    before it forks its workers, and a spawned worker before it registers,
    instead of the first task of the first fit.  Runs no threads.
    """
    try:
        import numpy as np

        from ...objectives import _fused

        for d in (2, 32):  # rows the kernels read as they come, and rows they ask for ahead (_fused._ahead)
            X, y, W, b = np.ones((2, d)), np.ones((2, 1)), np.zeros((1, d)), np.zeros(1)
            curv = np.empty((2, 1))
            _fused.value_grad(X, y, None, W, b, "binomial", 0.0, curv)
            _fused.value_grad(X, y, np.ones(2), W, b, "binomial", 0.0, curv)
            _fused.hessp(X, None, curv, W, b, "binomial")
    except Exception:  # noqa: BLE001 - a kernel that fails here fails in its task, with its error
        return
    if networks:
        warm_networks()


def warm_networks() -> None:
    """The networks' first uses: the MLP kernel in both dtypes (:mod:`..objectives._fused_mlp`), and torch.optim.

    A process's first ``torch.optim`` optimizer imports ``torch._dynamo``,
    most of a ddp fit's first-use cost on a fresh cluster (benchmarks/results/history/first-fit.md).
    """
    _import_all(networks=True)
    try:
        _first_network_uses()
    except Exception:  # noqa: BLE001 - what fails here fails in the fit's task, with its error
        return


def _first_network_uses() -> None:
    from ...objectives import module as M

    M.first_uses()


async def warm_running(networks: bool = True, dask_worker=None) -> None:
    """:func:`dask_setup`'s imports and first kernel calls on a worker already serving (``client.run``'s target);
    ``networks`` as :func:`warm_kernels`'.

    A coroutine, so that ``client.run(..., wait=False)`` returns at once
    (:func:`~.cluster.warm_ahead`).  It runs on the worker's event loop and
    holds it meanwhile (long on a fresh worker, next to nothing on a warm one;
    benchmarks/results/history/first-fit.md has the measurement): the imports never run beside the event
    loop's own, which unpickles the tasks (the module docstring's deadlock),
    only before or after them.  Without ``networks``, :data:`SOLVER_MODULES`
    come last, on the event loop too, at the first moment the worker has no
    task and no actor (:func:`_idle`): a large fit that arrived meanwhile runs
    its rounds first.
    """
    if networks:
        _import_all(networks)
        warm_kernels(networks)
        return
    if not _import(LINEAR_MODULES):
        return
    warm_kernels(False)
    if dask_worker is not None:
        import asyncio
        import time

        from distributed.core import Status

        deadline = time.monotonic() + IDLE_PATIENCE
        while True:
            await asyncio.sleep(IDLE_POLL)  # the event loop takes in what was sent while it imported
            if dask_worker.status not in (Status.running, Status.paused) or time.monotonic() > deadline:
                return
            if _idle(dask_worker):
                break
    _import(SOLVER_MODULES)


def _idle(worker) -> bool:
    """Whether ``worker`` runs nothing and has nothing to run: no task executing, ready or long-running, and no
    actor (a fit's shards hold actors while it runs)."""
    state = worker.state
    return not (state.executing or state.long_running or state.ready or state.constrained or state.actors)


def dask_setup(worker) -> None:
    """Import the modules (called by the worker's preload manager, before the worker serves anything).

    Parameters
    ----------
    worker : distributed.Worker
        The worker starting up (unused).
    """
    _import_all(NETWORKS[0])
    warm_kernels(NETWORKS[0])
