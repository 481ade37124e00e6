"""A test helper: in-process shards for the SVM duals, rows split in order, each with its index set.

Shared by tests/objectives/test_dual.py and test_crammer_singer.py (tests/ is
on ``sys.path`` under pytest, as for ``sparse_guard.py``).
"""

from __future__ import annotations

import numpy as np

from dask_estimators.engine import Shard
from dask_estimators.objectives import targets as T
from dask_estimators.objectives.dual import set_shard_index


def indexed_shards(X, y, encoding, n_outputs, n_shards, sample_weight=None, class_weight=None):
    """``n_shards`` CPU shards of consecutive rows, targets prepared for ``encoding``, shard ``i`` indexed ``i``."""
    shards = []
    for i, idx in enumerate(np.array_split(np.arange(len(y)), n_shards)):
        arrays = {"X": X[idx], "y": y[idx]}
        if sample_weight is not None:
            arrays["sample_weight"] = sample_weight[idx]
        shard = Shard(arrays, device="cpu")
        T.prepare_targets(shard, encoding, n_outputs, class_weight)
        set_shard_index(shard, i)
        shards.append(shard)
    return shards
