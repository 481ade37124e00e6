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
(:func:`._nanny.fork_workers`), and the preload finds them imported.
"""

from __future__ import annotations

import importlib

#: Modules imported on each worker, in this order.
MODULES = (
    "dask_estimators.engine._worker",
    "torch",
    "numba",
    "dask_estimators.objectives.losses",
    "dask_estimators.objectives._fused",
    "dask_estimators.objectives.linear",
    "dask_estimators.objectives.targets",
)


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the task that needs it reports the error
            return


def dask_setup(worker) -> None:
    """Import the modules (called by the worker's preload manager, before the worker serves anything).

    Parameters
    ----------
    worker : distributed.Worker
        The worker starting up (unused).
    """
    _import_all()
