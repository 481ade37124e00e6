"""A worker preload that imports the engine and the kernels in the background.

The embedded cluster's workers load it (``preload=``) when they start, so
that torch, numba and the linear kernels are imported while the client still
validates its data, instead of in the first task.  The imports run in a
daemon thread: the worker registers with the scheduler at once, and a task
that needs a module meanwhile waits for the import under way (Python's import
lock) rather than starting it again.
"""

from __future__ import annotations

import importlib
import threading

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
    """Start the background imports (called by the worker's preload manager).

    Parameters
    ----------
    worker : distributed.Worker
        The worker starting up (unused).
    """
    threading.Thread(target=_import_all, name="dask-estimators-warm", daemon=True).start()
