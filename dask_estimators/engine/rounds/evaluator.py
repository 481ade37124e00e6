"""The evaluator: one distributed round = parameters out, one task per shard, tree-sum back.

It knows no loss.  ``evaluator(fn, *args)`` runs ``fn(shard, *args)`` once on
every worker's shard and returns the sum of the results as NumPy float64.
Objectives build ``value_and_grad``, ``hessp`` and ``hess`` on top of it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from ... import config as _config
from ..data import _shared, _worker
from ..cluster import _watch
from ..data._actor import Payload
from ..cluster._watch import WorkerLostError
from .reduce import REDUCTIONS, tree_sum

__all__ = ["DistributedEvaluator", "LocalEvaluator", "EvalStats", "INLINE_BYTES", "solve_on_shard"]

#: Parameter payloads up to this many bytes travel inside the task message;
#: larger ones are scattered (broadcast) first, at the crossover that
#: ``benchmarks/bench_engine.py --only scatter`` measures (tasks transport);
#: docs/design-measurements.md has the measurement.
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
    recoveries: int = 0
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
        Seconds one round may take before :class:`TimeoutError` (default:
        the placement's ``timeout``).  Without
        it a round is not limited in time, but the loss of a worker, of the
        scheduler or of the client is still detected (see :mod:`._watch`).
    recover : bool, default True
        When a worker holding a shard dies during a round, re-place its
        shards on the surviving workers (:meth:`Placement.recover`), replay on
        them the last call of every kernel (kernels may leave state in
        ``shard.cache`` for later rounds, such as the curvature a
        Hessian-vector product needs), and run the round again.  At most
        ``dask-estimators.max-recoveries`` (default 3) times per evaluator.

    Examples
    --------
    >>> ev = DistributedEvaluator(placement)  # doctest: +SKIP
    >>> ev(lambda shard, w: shard.get("X").sum(0) @ w, np.ones(3))  # doctest: +SKIP
    """

    def __init__(self, placement, *, reduction="tree", fan_in=2, inline_bytes=None, timeout=None, recover=True):
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}.")
        if int(fan_in) != fan_in or fan_in < 2:
            raise ValueError(f"fan_in must be an integer >= 2, got {fan_in!r}.")
        self.placement = placement
        self.client = placement.client
        self.reduction = reduction
        self.fan_in = fan_in
        self.inline_bytes = INLINE_BYTES if inline_bytes is None else inline_bytes
        self.timeout = getattr(placement, "timeout", None) if timeout is None else timeout
        self.recover = recover
        self.stats = EvalStats()
        self._since: dict = {}  # when the client was first seen reconnecting to its scheduler
        self._share_args = False  # large arguments go to the actors through shared memory (all on the client's host)
        self._args_lease = None  # this round's arguments in shared memory: leased until the next round
        self._last: dict = {}  # kernel -> its last arguments, in order of last use (replayed on rebuilt shards)
        self._linked = False  # the actors' tree is set up at the first round: an evaluator may never need one

    def _wait(self, futs, cancel=None):
        return _watch.wait_results(futs, self.client, self.placement.workers, self.timeout, cancel_on_error=cancel)

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
        shares = self._actor_shares(children)
        self._wait([a.set_children(c, s) for a, c, s in zip(actors, children, shares)])
        self._linked = True

    def _actor_shares(self, children):
        """Per actor: how its subtotal goes to its reader through shared memory ("map" to a parent worker,
        "copy" from the root to the client), or None when they are not on one host (or the config
        ``dask-estimators.shared-memory`` is off)."""

        from ..data._shared import identities, identity, shares_memory

        n = len(children)
        self._share_args = False
        if not _config.get("shared-memory"):
            return [None] * n
        workers = list(self.placement.workers)
        ids = identities(self.client, sorted(set(workers)))
        where = [ids[w] for w in workers]
        client = identity()
        self._share_args = all(shares_memory(w, client) for w in where)
        if self.reduction == "gather":
            return [None] * n
        index = {id(a): i for i, a in enumerate(self.placement.actors)}
        reader = {index[id(c)]: where[i] for i, cs in enumerate(children) for c in cs}
        out = []
        for i in range(n):
            same = shares_memory(where[i], reader.get(i, client if i == 0 else (None, None)))
            out.append(("map" if i in reader else "copy") if same else None)
        return out

    def _call_actors(self, fn, args):
        actors = self.placement.actors
        self._args_lease = None  # the last round's readers are done: its segments go back to the pool
        if self._share_args and _nbytes(args) >= _shared.MIN_BYTES:
            # every actor maps the arrays of >= 1 MB from this process's segments: no bytes cross a socket
            args = self._args_lease = _shared.share_args(args, _worker._add)
        payload = Payload.pack(fn, args)
        if self.reduction == "gather":
            return _worker.add(*self._wait([a.run(payload) for a in actors]))
        return _shared.copied(self._wait([actors[0].reduce(payload)])[0])  # an actor in this process: copied

    def __call__(self, fn, *args):
        """``sum over shards of fn(shard, *args)``, surviving the loss of workers (see ``recover``)."""

        max_recoveries = int(_config.get("max-recoveries"))
        # Rounds on actors need no scheduler: without this check a fit would go on for a while after its
        # scheduler died or its client was closed, and fail later at a less clear place.
        _watch.check_client(self.client, self._since)
        while True:
            try:
                try:
                    out = self._round(fn, args)
                except Exception as e:  # an actor proxy raises at once when its worker is known lost
                    _watch.explain(e, self.client, self.placement.workers)
                    raise
                break
            except WorkerLostError as e:
                if not self.recover or self.stats.recoveries >= max_recoveries:
                    raise
                self._recover(e)
        self._last.pop(fn, None)
        self._last[fn] = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        return out

    def _recover(self, err):
        """Re-place the lost shards, relink the tree, and bring the new shards to the others' state."""
        p = self.placement
        idx = p.recover(err.workers)
        self.stats.recoveries += 1
        if p.actors:
            self._link_actors()
        for fn, args in self._last.items():  # best effort: a kernel needing a later one's state may fail here
            for i in idx:
                with contextlib.suppress(Exception):
                    _watch.wait_results([p._submit_one(i, fn, args, body=_worker.run_kernel)], self.client,
                                        [p.workers[i]], self.timeout)

    def _round(self, fn, args):
        t0 = time.perf_counter()
        client, p = self.client, self.placement
        if p.actors:
            if not self._linked:
                self._link_actors()
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
        if self.reduction == "gather":
            out = _worker.add(*self._wait(parts, cancel=parts))
        elif self.reduction == "single" and len(parts) > 1:
            total = client.submit(_worker.add, *parts, workers=[p.workers[0]], pure=False)
            out = self._wait([total], cancel=[total, *parts])[0]
        else:
            total = tree_sum(client, parts, p.workers, self.fan_in)
            out = self._wait([total], cancel=[total, *parts])[0]
        received = _nbytes(out if isinstance(out, tuple) else (out,))
        self.stats.record(getattr(fn, "__name__", "kernel"), time.perf_counter() - t0, sent, received, scattered)
        return out


class LocalEvaluator:
    """The same contract as :class:`DistributedEvaluator` over in-process shards (tests, single machine).

    Examples
    --------
    >>> from dask_estimators.engine.data._worker import Shard
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


def solve_on_shard(shard, driver, objective, args=(), kwargs=None, warnings_kept=(Warning,)):
    """Task body: ``driver(objective, *args, **kwargs)`` on this worker, ``objective`` evaluating this shard here.

    ``objective`` offers ``with_evaluator(evaluate)``: the copy it returns
    evaluates through a :class:`LocalEvaluator` of ``shard``, without a round
    trip.  Run by a placement's ``map`` on its one shard, so a worker lost
    during the task is recovered as any placement call is (the shard placed
    again, the task run again).

    Returns the driver's result, the evaluations' counters
    (:meth:`EvalStats.as_dict`), and the (category, message) of each
    warning raised meanwhile whose category is one of ``warnings_kept``,
    for the caller to raise again where the driver would have raised them.

    Examples
    --------
    >>> from dask_estimators.engine.data._worker import Shard
    >>> class Total:  # an objective: a value through its evaluator
    ...     def __init__(self, evaluate=None):
    ...         self.evaluate = evaluate
    ...     def with_evaluator(self, evaluate):
    ...         return Total(evaluate)
    >>> shard = Shard({"X": np.ones((3, 2))}, device="cpu")
    >>> out, stats, caught = solve_on_shard(shard, lambda obj, k: k * float(obj.evaluate(lambda s: s.get("X").sum())),
    ...                                     Total(), (2.0,))
    >>> out, stats["rounds"], caught
    (12.0, 1, [])
    """
    import warnings

    evaluator = LocalEvaluator([shard])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = driver(objective.with_evaluator(evaluator), *args, **(kwargs or {}))
    kept = [(w.category, str(w.message)) for w in caught if issubclass(w.category, tuple(warnings_kept))]
    return out, evaluator.stats.as_dict(), kept
