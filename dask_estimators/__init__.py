"""scikit-learn estimators trained on a Dask cluster by one distributed optimizer.

Every ``fit`` places the data on the workers once (one aligned shard per
worker), then drives a well-kept optimizer whose every evaluation is one task
per worker and a tree-sum among the workers.

The estimators are imported on first use (``de.LogisticRegression``), so that
``import dask_estimators`` costs little: torch, numba and the Dask engine
load when a fit needs them.
"""

from __future__ import annotations

import sys as _sys
from typing import TYPE_CHECKING

from ._lazy import lazy_attributes

if TYPE_CHECKING:  # what the names below resolve to (for type checkers and the API docs)
    from .estimators import (
        CharLSTM,
        GammaRegressor,
        LinearRegression,
        LinearRegressionCV,
        LinearSVC,
        LinearSVR,
        LogisticRegression,
        LogisticRegressionCV,
        MLPClassifier,
        MLPRegressor,
        PoissonRegressor,
        TweedieRegressor,
    )
    from .session import KeptData

__version__ = "0.1.0"

__all__ = [
    "CharLSTM",
    "GammaRegressor",
    "KeptData",
    "LinearRegression",
    "LinearRegressionCV",
    "LinearSVC",
    "LinearSVR",
    "LogisticRegression",
    "LogisticRegressionCV",
    "MLPClassifier",
    "MLPRegressor",
    "PoissonRegressor",
    "TweedieRegressor",
    "__version__",
]

#: Public name -> the module that defines it, imported by ``__getattr__`` on first use.
_LAZY = {
    "KeptData": ".session",
    "LinearRegression": ".estimators.linear",
    "LinearSVC": ".estimators.linear",
    "LinearSVR": ".estimators.linear",
    "LogisticRegression": ".estimators.linear",
    "LogisticRegressionCV": ".estimators.cv",
    "LinearRegressionCV": ".estimators.cv",
    "MLPClassifier": ".estimators.neural",
    "MLPRegressor": ".estimators.neural",
    "CharLSTM": ".estimators.text",
    "PoissonRegressor": ".estimators.glm",
    "GammaRegressor": ".estimators.glm",
    "TweedieRegressor": ".estimators.glm",
}


_getattr, __dir__ = lazy_attributes(__name__, _LAZY)
#: The classes whose first read has the zygote make the networks' first uses before it forks the workers.
_NETWORKS = frozenset({"MLPClassifier", "MLPRegressor", "CharLSTM"})


def __getattr__(name):
    if name == "config":  # the settings (dask_estimators/config.py), registered with Dask's config when imported
        import importlib

        return importlib.import_module(".config", __name__)
    if name in _LAZY:
        # the process that forks the embedded cluster's workers starts importing the engine now, while this one
        # imports scikit-learn; once per process, and not where a client or a worker is here (engine/cluster/_zygote.py)
        from .engine.cluster import _zygote

        networks = name in _NETWORKS
        _zygote.prewarm(networks=networks)
        _warm_dask_clients(networks)  # a client of the user's: its workers import the engine now
        value = _getattr(name)
        _warm_dask_clients(networks)  # distributed is imported by now: the clients made from now on
        return value
    return _getattr(name)


def _warm_dask_clients(networks: bool = False) -> None:
    """Where this process has imported distributed (and is no Dask worker): the workers of its active client
    start importing the engine now, and each client made later has its workers do so as it connects
    (engine/cluster/client.py, ``warm_new_client``).  Nothing is imported where distributed is not."""
    if "distributed.client" not in _sys.modules:
        return
    from .engine.cluster import _zygote

    if _zygote.in_dask_worker():
        return
    from .engine.cluster import client

    client.watch_new_clients()
    client.warm_active_client(networks)


_warm_dask_clients()  # a client made before this import, and those made after it
