"""The evaluator: one distributed round = parameters out, one task per shard, tree-sum back.

It knows no loss.  ``evaluator(fn, *args)`` runs ``fn(shard, *args)`` once on
every worker's shard and returns the sum of the results as NumPy float64.
Objectives build ``value_and_grad``, ``hessp`` and ``hess`` on top of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import _worker
from .reduce import REDUCTIONS, reduce_parts

__all__ = ["DistributedEvaluator", "LocalEvaluator", "EvalStats", "INLINE_BYTES"]

#: Parameter payloads up to this many bytes travel inside the task message;
#: larger ones are scattered (broadcast) first.  The crossover measured on the
#: 2-core development machine lies between 2.4 and 8 MB (tasks transport); see
#: ``benchmarks/bench_engine.py --only scatter`` and docs/performance.md.
INLINE_BYTES = 4 << 20


def _nbytes(args) -> int:
    total = 0
    for a in args:
        if isinstance(a, np.ndarray):
            total += a.nbytes
        elif isinstance(a, tuple):
            total += _nbytes(a)
    return total


@dataclass
class EvalStats:
    """Counters of the distributed rounds of one fit.

    Examples
    --------
    >>> from dask_estimators.engine import EvalStats
    >>> stats = EvalStats()
    >>> stats.record("value_and_grad", 0.004, 800, 808, False)
    >>> stats.as_dict()["rounds"], stats.by_kernel
    (1, {'value_and_grad': 1})
    """

    rounds: int = 0
    seconds: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    scattered_rounds: int = 0
    by_kernel: dict = field(default_factory=dict)

    def record(self, name, seconds, sent, received, scattered):
        """Count one round of kernel ``name``: its seconds, bytes sent and received, and whether it scattered."""
        self.rounds += 1
        self.seconds += seconds
        self.bytes_sent += sent
        self.bytes_received += received
        self.scattered_rounds += int(scattered)
        self.by_kernel[name] = self.by_kernel.get(name, 0) + 1

    def as_dict(self) -> dict:
        """The counters as a dict, with ``seconds_per_round`` added (what ``fit_stats_`` shows)."""
        d = dict(self.__dict__)
        d["by_kernel"] = dict(self.by_kernel)
        d["seconds_per_round"] = self.seconds / self.rounds if self.rounds else 0.0
        return d


class DistributedEvaluator:
    """Evaluate a per-shard kernel on every worker and sum the results.

    With the ``"actors"`` transport (see :func:`~dask_estimators.engine.place`)
    a round is one call to the root actor: it forwards the call down a tree of
    actors (worker to worker, no scheduler), and each actor adds its
    children's subtotals to its own.  With ``"tasks"`` a round is one pinned
    task per shard plus a tree of add tasks, all submitted at once.

    Parameters
    ----------
    placement : Placement
        The shards to evaluate on.
    reduction : {"tree", "gather", "single"}, default "tree"
        How partial results are summed: on the workers along a tree, on the
        client (every part travels to it), or by one worker (star).
    fan_in : int, default 2
        Partial results each node of the tree receives from below.
    inline_bytes : int, optional
        Arguments up to this size travel inline; larger ones are scattered.
    timeout : float, optional
        Seconds one round may take before :class:`TimeoutError`.

    Examples
    --------
    >>> ev = DistributedEvaluator(placement)  # doctest: +SKIP
    >>> ev(lambda shard, w: shard.get("X").sum(0) @ w, np.ones(3))  # doctest: +SKIP
    """

    def __init__(self, placement, *, reduction="tree", fan_in=2, inline_bytes=None, timeout=None):
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}.")
        if int(fan_in) != fan_in or fan_in < 2:
            raise ValueError(f"fan_in must be an integer >= 2, got {fan_in!r}.")
        self.placement = placement
        self.client = placement.client
        self.reduction = reduction
        self.fan_in = fan_in
        self.inline_bytes = INLINE_BYTES if inline_bytes is None else inline_bytes
        self.timeout = timeout
        self.stats = EvalStats()
        if placement.actors:
            self._link_actors()

    def _link_actors(self):
        actors = self.placement.actors
        n = len(actors)
        if self.reduction == "tree":
            children = [[actors[j] for j in range(self.fan_in * i + 1, self.fan_in * i + self.fan_in + 1) if j < n]
                        for i in range(n)]
        elif self.reduction == "single":
            children = [actors[1:]] + [[] for _ in range(n - 1)]
        else:
            children = [[] for _ in range(n)]
        for f in [a.set_children(c) for a, c in zip(actors, children)]:
            f.result(self.timeout)

    def _call_actors(self, fn, args):
        actors = self.placement.actors
        if self.reduction == "gather":
            futs = [a.run(fn, args) for a in actors]
            return _worker.add(*(f.result(self.timeout) for f in futs))
        return actors[0].reduce(fn, args).result(self.timeout)

    def __call__(self, fn, *args):
        t0 = time.perf_counter()
        client, p = self.client, self.placement
        if p.actors:
            out = self._call_actors(fn, args)
            received = _nbytes(out if isinstance(out, tuple) else (out,))
            sent = _nbytes(args)
            self.stats.record(getattr(fn, "__name__", "kernel"), time.perf_counter() - t0, sent, received, False)
            return out
        sent = _nbytes(args)
        scattered = sent > self.inline_bytes
        call_args = args
        if scattered:
            call_args = tuple(
                client.scatter(a, workers=p.workers, broadcast=True, hash=False) if isinstance(a, np.ndarray) else a
                for a in args
            )
        parts = [
            client.submit(
                _worker.run_kernel, fn, s, *call_args, workers=[w], allow_other_workers=False, pure=False
            )
            for s, w in zip(p.shards, p.workers)
        ]
        out = reduce_parts(client, parts, p.workers, self.reduction, self.fan_in, self.timeout)
        received = _nbytes(out if isinstance(out, tuple) else (out,))
        self.stats.record(getattr(fn, "__name__", "kernel"), time.perf_counter() - t0, sent, received, scattered)
        return out


class LocalEvaluator:
    """The same contract as :class:`DistributedEvaluator` over in-process shards (tests, single machine).

    Examples
    --------
    >>> from dask_estimators.engine._worker import Shard
    >>> import numpy as np
    >>> ev = LocalEvaluator([Shard({"X": np.ones((2, 2))}, device="cpu")])
    >>> float(ev(lambda s: s.get("X").sum()))
    4.0
    """

    def __init__(self, shards):
        self.shards = list(shards)
        self.stats = EvalStats()

    def __call__(self, fn, *args):
        t0 = time.perf_counter()
        out = _worker.add(*(_worker.run_kernel(fn, s, *args) for s in self.shards))
        self.stats.record(getattr(fn, "__name__", "kernel"), time.perf_counter() - t0, _nbytes(args), 0, False)
        return out
