"""The distributed engine: which cluster, placement, scatter, one task per shard, tree-sum.

One folder per concern, each lower than the one before it:

- :mod:`.ddp`: the ranks of a network fit and their collectives;
- :mod:`.rounds`: evaluations over every shard and the tree-sum of their results;
- :mod:`.data`: placement, its transports, and the memory of the shards;
- :mod:`.cluster`: which cluster, its processes, and the watch on its workers.

It knows no loss: objectives hand it per-shard kernels.  Names are imported on
first use, so that a worker's nanny process (:mod:`.cluster._nanny_process`) loads only
what it runs.  The estimators reach it through :mod:`dask_estimators.session`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from .cluster._watch import ClusterLostError, WorkerLostError, WorkerLostWarning, WorkerPausedError
    from .data._worker import Shard, aligned_copy, is_aligned
    from .cluster.client import client_context, close_embedded_cluster, get_embedded_client, resolve_client
    from .rounds.evaluator import DistributedEvaluator, EvalStats, LocalEvaluator, solve_on_shard
    from .data.placement import Placement, is_dask_collection, place, workers_per_gpu, workers_worth
    from .rounds.reduce import REDUCTIONS, reduce_parts, tree_sum

__all__ = [
    "REDUCTIONS",
    "ClusterLostError",
    "WorkerLostError",
    "WorkerLostWarning",
    "WorkerPausedError",
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
    "ClusterLostError": ".cluster._watch",
    "WorkerLostError": ".cluster._watch",
    "WorkerLostWarning": ".cluster._watch",
    "WorkerPausedError": ".cluster._watch",
    "Shard": ".data._worker",
    "aligned_copy": ".data._worker",
    "is_aligned": ".data._worker",
    "client_context": ".cluster.client",
    "close_embedded_cluster": ".cluster.client",
    "get_embedded_client": ".cluster.client",
    "resolve_client": ".cluster.client",
    "DistributedEvaluator": ".rounds.evaluator",
    "EvalStats": ".rounds.evaluator",
    "LocalEvaluator": ".rounds.evaluator",
    "solve_on_shard": ".rounds.evaluator",
    "Placement": ".data.placement",
    "is_dask_collection": ".data.placement",
    "place": ".data.placement",
    "workers_per_gpu": ".data.placement",
    "workers_worth": ".data.placement",
    "REDUCTIONS": ".rounds.reduce",
    "reduce_parts": ".rounds.reduce",
    "tree_sum": ".rounds.reduce",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
