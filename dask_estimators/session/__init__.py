"""The one way from the estimators into the engine: a :class:`DataSession`.

An estimator's ``fit`` opens a session on its cluster, puts its data there
(:meth:`DataSession.data`), hands the session its problem (an objective to
minimise, a training run, a search's paths) and reads the result.  The
session owns what lies between: which client, where the shards go, how a
problem runs (rounds from the client, one task on the worker of a small
problem's one shard, a training run of ranks), the evaluator of the rounds,
and the release of every shard when it closes (dask input placed on every
worker is kept for the next fit on the same collections instead, within a
budget: :mod:`._kept`, :func:`release_kept`).  The estimators hold no
lifecycle code and see no future; they never import :mod:`dask_estimators.engine`.

Layers (``.importlinter``): estimators -> session -> optim -> engine -> objectives.
"""

from __future__ import annotations

from ._kept import KeptData
from ._session import (
    REDUCTIONS,
    DataSession,
    PlacedData,
    ReplicasWontFit,
    adopt_sender,
    canonical_csr,
    check_lengths,
    is_dask_collection,
    prestart,
    release_kept,
    sender_address,
    small_problem,
    stored_values,
    warn_again,
    worker_solve_below,
)

__all__ = [
    "REDUCTIONS",
    "DataSession",
    "KeptData",
    "PlacedData",
    "ReplicasWontFit",
    "adopt_sender",
    "canonical_csr",
    "check_lengths",
    "is_dask_collection",
    "prestart",
    "release_kept",
    "sender_address",
    "small_problem",
    "stored_values",
    "warn_again",
    "worker_solve_below",
]
