"""The distributed engine: which cluster, placement, scatter, one task per shard, tree-sum.

It knows no loss: objectives hand it per-shard kernels.  Names are imported on
first use, so that a worker's nanny process (:mod:`._nanny`) loads only what
it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._watch import ClusterLostError, WorkerLostError, WorkerLostWarning
    from ._worker import Shard, aligned_copy, is_aligned
    from .cluster import client_context, close_embedded_cluster, get_embedded_client, resolve_client
    from .evaluator import DistributedEvaluator, EvalStats, LocalEvaluator, solve_on_shard
    from .placement import Placement, is_dask_collection, place, workers_per_gpu, workers_worth
    from .reduce import REDUCTIONS, reduce_parts, tree_sum

__all__ = [
    "REDUCTIONS",
    "ClusterLostError",
    "WorkerLostError",
    "WorkerLostWarning",
    "DistributedEvaluator",
    "EvalStats",
    "LocalEvaluator",
    "Placement",
    "Shard",
    "aligned_copy",
    "client_context",
    "close_embedded_cluster",
    "get_embedded_client",
    "is_aligned",
    "is_dask_collection",
    "place",
    "workers_per_gpu",
    "workers_worth",
    "reduce_parts",
    "resolve_client",
    "solve_on_shard",
    "tree_sum",
]

_LAZY = {
    "ClusterLostError": "._watch",
    "WorkerLostError": "._watch",
    "WorkerLostWarning": "._watch",
    "Shard": "._worker",
    "aligned_copy": "._worker",
    "is_aligned": "._worker",
    "client_context": ".cluster",
    "close_embedded_cluster": ".cluster",
    "get_embedded_client": ".cluster",
    "resolve_client": ".cluster",
    "DistributedEvaluator": ".evaluator",
    "EvalStats": ".evaluator",
    "LocalEvaluator": ".evaluator",
    "solve_on_shard": ".evaluator",
    "Placement": ".placement",
    "is_dask_collection": ".placement",
    "place": ".placement",
    "workers_per_gpu": ".placement",
    "workers_worth": ".placement",
    "REDUCTIONS": ".reduce",
    "reduce_parts": ".reduce",
    "tree_sum": ".reduce",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
