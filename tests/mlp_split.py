"""A test helper: an MLP fit's early-stopping split, given to in-process shards as the estimators give it.

The client draws scikit-learn's ``train_test_split`` of the global rows and gives each shard its part of it
in a ``BatchOrder`` (``positions``: each row's place among the training rows, -1 for a validation row);
:func:`hold_out` does the same for shards of consecutive rows, already prepared (``module.prepare``).
Shared by tests/objectives/test_module.py, tests/optim/test_torch_driver.py and
tests/estimators/test_sparse_mlp.py (tests/ is on ``sys.path`` under pytest, as for ``sparse_guard.py``).
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

from dask_estimators.objectives import module as M


def split_positions(n: int, validation_fraction: float, seed: int = 0) -> np.ndarray:
    """Each of ``n`` rows' place among the training rows of ``train_test_split`` (-1: a validation row)."""
    train, _ = train_test_split(np.arange(n), test_size=validation_fraction, random_state=seed)
    place = np.full(n, -1, dtype=np.int64)
    place[train] = np.arange(len(train))
    return place


def hold_out(shards, validation_fraction: float, seed: int = 0, *, batch_size=None, n_steps=None) -> list:
    """Give the prepared ``shards`` (the input's rows in order, shard after shard) their parts of the split
    :func:`split_positions` draws, with the epochs' shuffles drawn from ``RandomState(seed)``.  Global batches
    of ``batch_size`` rows, or of as many as make ``n_steps`` batches, or else one batch of every training row.
    Returns each shard's counts (``module.set_batch_order``'s)."""
    sizes = [sh.n_rows for sh in shards]
    place = split_positions(sum(sizes), validation_fraction, seed)
    n_train = int(np.sum(place >= 0))
    if batch_size is None:
        batch_size = -(-n_train // n_steps) if n_steps else n_train
    state = M.shuffle_state(np.random.RandomState(seed))
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [M.set_batch_order(sh, M.BatchOrder(((int(lo), int(hi)),), n_train, int(batch_size), state, 0,
                                               positions=place[lo:hi]))
            for sh, lo, hi in zip(shards, bounds[:-1], bounds[1:])]
