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

        _zygote.prewarm(networks=name in _NETWORKS)
        if "distributed.client" in _sys.modules:  # a client of the user's: its workers import the engine now
            from .engine.cluster.client import warm_active_client

            warm_active_client(networks=name in _NETWORKS)
    return _getattr(name)
