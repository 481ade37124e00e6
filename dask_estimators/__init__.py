"""scikit-learn estimators trained on a Dask cluster by one distributed optimizer.

Every ``fit`` places the data on the workers once (one aligned shard per
worker), then drives a well-kept optimizer whose every evaluation is one task
per worker and a tree-sum among the workers.
"""

from .estimators import (
    CharLSTM,
    LinearRegression,
    LinearSVC,
    LinearSVR,
    LogisticRegression,
    MLPClassifier,
    MLPRegressor,
)

__version__ = "0.1.0"

__all__ = [
    "CharLSTM",
    "LinearRegression",
    "LinearSVC",
    "LinearSVR",
    "LogisticRegression",
    "MLPClassifier",
    "MLPRegressor",
    "__version__",
]
