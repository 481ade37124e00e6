"""The distributed engine: which cluster, placement, scatter, one task per shard, tree-sum.

It knows no loss: objectives hand it per-shard kernels.
"""

from ._watch import ClusterLostError, WorkerLostError
from ._worker import Shard, aligned_copy, is_aligned
from .cluster import client_context, close_embedded_cluster, get_embedded_client, resolve_client
from .evaluator import DistributedEvaluator, EvalStats, LocalEvaluator
from .placement import Placement, is_dask_collection, place
from .reduce import REDUCTIONS, reduce_parts, tree_sum

__all__ = [
    "REDUCTIONS",
    "ClusterLostError",
    "WorkerLostError",
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
    "reduce_parts",
    "resolve_client",
    "tree_sum",
]
