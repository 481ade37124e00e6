"""Placement: named row-aligned arrays -> one aligned shard per worker.

* NumPy input (pandas is converted by the estimator's validation) is split by
  rows on the client and each part goes straight to its worker: through a
  memfd of the client's that the worker maps when it runs on the client's host
  (one memcpy, no pickling), else by ``scatter``.  A scipy.sparse ``X`` is
  made canonical CSR once and split the same way, each part as its three
  arrays (views of the matrix's ``data`` and ``indices``); the worker keeps
  them as a torch sparse CSR tensor.
* Dask arrays and dataframes are persisted together (a graph is computed
  once, blocks already in memory not again); ``who_has`` tells where each
  block lives, and one pinned task per worker validates the rows it takes
  and writes them into its shard in one pass (:mod:`._dask_input`).  The
  data never passes through the client, and inputs are aligned by row
  position, so X, y and sample weights may be partitioned differently.

Either way each worker ends up with one :class:`~dask_estimators.engine.data._worker.Shard`
whose arrays are C-contiguous, 64-byte aligned copies on the worker's device.
The shards stay on the workers until :meth:`Placement.release`.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ... import config as _config
from . import _dask_input, _shm, _worker
from ..cluster import _watch
from ._actor import Deferred, HostedShard, Payload, Resolved, ShardActor, ShardHost
from ._held import ShardGone, hold, is_held_here
from ..cluster._watch import WorkerLostError
from ..cluster.client import current


#: How a round reaches the shards: long-lived actors (direct worker-to-worker
#: calls, no scheduler) or plain tasks (scatter, pinned tasks, tree of add tasks).
TRANSPORTS = ("actors", "tasks")

__all__ = ["TRANSPORTS", "Placement", "place", "is_dask_collection", "workers_per_gpu", "workers_worth"]


def is_dask_collection(a) -> bool:
    """True for dask arrays, dataframes and series.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from dask_estimators.engine import is_dask_collection
    >>> is_dask_collection(da.ones(4)), is_dask_collection(np.ones(4))
    (True, False)
    """
    return hasattr(a, "__dask_graph__") and hasattr(a, "to_delayed")


def _build_shard(device, *parts):
    """One part (a dict of NumPy arrays scattered by the client) as an aligned shard on this worker (an actor's
    :class:`~._actor.Deferred` build)."""
    _worker.setup_threads()
    [arrays] = parts
    return _worker.Shard(arrays, device=device)


def _build_shard_task(device, arrays):
    """Task body: :func:`_build_shard`, the shard held by its worker (:mod:`._held`)."""
    return hold(_build_shard(device, arrays))


def _rows(shard) -> int:
    return int(_worker.resolve(shard).n_rows or 0)


def _pin(shard) -> None:
    shard.pin()


def _restore(shard) -> None:
    shard.restore()


def _nbytes(shard) -> int:
    return shard.nbytes()


def _source_rows(source) -> int:
    """The rows of the shard built from ``source``: a NumPy part's length, or a dask shard's planned rows."""
    kind, data = source
    if kind == "numpy":
        return int(np.shape(next(iter(data.values())))[0])
    return int(data[4])


class Placement:
    """Shards placed on the workers for one fit.

    Attributes
    ----------
    client : distributed.Client
    shards : list of distributed.Future
        One future per worker holding a :class:`Shard` (a shard its actor
        built, from the client's memory: that actor's future).
    workers : list of str
        The worker address of each shard.
    n_rows : list of int
        Rows in each shard.
    timeout : float or None
        Seconds a per-shard call (:meth:`map`) may take.
    recoveries : list of dict
        One record per shard re-placed after the loss of its worker (see :meth:`recover`).
    row_ranges : list of list of (int, int) or None
        The global rows (positions in the input, ``[start, stop)``) each shard
        holds, in the order of its rows; a shard rebuilt after a worker loss
        holds the same rows.  Per-shard kernels that need a row's position
        (cross-validation folds) get it from here.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import place, resolve_client
    >>> with place(resolve_client(), {"X": np.ones((100, 3))}) as p:  # doctest: +SKIP
    ...     p.n_rows, p.map(lambda shard: float(shard.get("X").sum()))
    ([50, 50], [150.0, 150.0])

    Notes
    -----
    Each shard remembers its *source*: the client's rows for NumPy input (views
    of the caller's arrays, no copy) or the delayed row blocks of dask input
    (the graph, not the data).  When a worker dies, :meth:`recover` rebuilds
    its shards from their sources on surviving workers and replays on them
    every :meth:`map` and :meth:`map_each` call made so far, so the rebuilt
    shard is in the state the lost one was in.
    """

    #: Whether its shards live in the client's shard hosts (:func:`hosts_used`).
    _hosted = False

    def __init__(self, client, shards, workers, transport="actors", sources=None, device="auto", timeout=None,
                 buffers=None, row_ranges=None, actor_futures=None):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}.")
        # the client's shared memory the shards map (_shm): back to its pool on release, or when this is collected
        self._buffers = buffers if buffers is not None else []
        weakref.finalize(self, _shm.release, self._buffers).atexit = False  # at exit the process frees them
        self.client = client
        self.shards = list(shards)
        self.workers = list(workers)
        self.transport = transport
        self.sources = list(sources) if sources is not None else None
        self.row_ranges = [list(r) for r in row_ranges] if row_ranges is not None else None
        self.device = device
        self.timeout = timeout
        self.token = uuid.uuid4().hex[:8]
        self.recoveries: list = []
        self._log: list = []  # (fn, args, per_shard) of every map / map_each, replayed on a rebuilt shard
        self._pinned_log = 0  # the calls of _log that made the shards as pin() kept them
        self._lost: set = set()
        self._actor_futures: list = []
        self.actors: list = []
        try:
            if transport == "actors":
                # an actor that built its shard itself (``actor_futures``) is that shard's future too
                made = list(actor_futures) if actor_futures is not None else [None] * len(self.shards)
                self._actor_futures = [
                    a if a is not None else
                    client.submit(ShardActor, s, workers=[w], allow_other_workers=False, actor=True, pure=False)
                    for a, s, w in zip(made, self.shards, self.workers)
                ]
                with current(client):
                    self.actors = _watch.wait_results(self._actor_futures, client, self.workers, timeout)
            if self.sources is not None:  # the placement planned them: no round to ask
                self.n_rows = [_source_rows(src) for src in self.sources]
            else:
                self.n_rows = self._wait([self._submit_one(i, _rows, ()) for i in range(len(self.shards))])
        except BaseException:
            try:  # a shard that failed to build (its actor failed with it, or built it): its own error
                _dask_input.raise_first_error(self.shards)
            finally:  # after: an actor that built its shard is that shard's future, whose error goes with it
                _watch._cancel(client, self._actor_futures)
            raise
        keep = [i for i, n in enumerate(self.n_rows) if n > 0] or [0]
        if len(keep) < len(self.shards):  # empty partitions make empty shards: drop them
            drop = sorted(set(range(len(self.shards))) - set(keep))
            self._close_actors([self.actors[i] for i in drop] if self.actors else [])
            for i in drop:
                self.shards[i].release()
                if self._actor_futures:
                    self._actor_futures[i].release()
            self.shards = [self.shards[i] for i in keep]
            self.workers = [self.workers[i] for i in keep]
            self.n_rows = [self.n_rows[i] for i in keep]
            if self.sources is not None:
                self.sources = [self.sources[i] for i in keep]
            if self.row_ranges is not None:
                self.row_ranges = [self.row_ranges[i] for i in keep]
            if self.actors:
                self.actors = [self.actors[i] for i in keep]
                self._actor_futures = [self._actor_futures[i] for i in keep]

    @staticmethod
    def _close_actors(actors, timeout=5):
        """Ask the actors to drop their shards; all at once, at most ``timeout`` seconds in all.

        A hosted shard's close is not waited for: its host lives on, and the next call to it comes after.
        """
        import time

        pending = []
        for a in actors:
            with contextlib.suppress(Exception):
                call = a.close()
                if not isinstance(a, HostedShard):
                    pending.append(call)
        deadline = time.monotonic() + timeout
        for f in pending:
            with contextlib.suppress(BaseException):
                f.result(max(0.0, deadline - time.monotonic()))

    @property
    def n_samples(self) -> int:
        """Rows over all shards."""
        return int(sum(self.n_rows))

    def _wait(self, futs, workers=None, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        return _watch.wait_results(futs, self.client, self.workers if workers is None else workers, timeout,
                                   cancel_on_error=[f for f in futs if hasattr(f, "key")])

    def _submit_one(self, i, fn, args, body=_worker.apply):
        try:
            if self.actors:
                payload = Payload.pack(fn, args)
                return self.actors[i].apply(payload) if body is _worker.apply else self.actors[i].run(payload)
            return self.client.submit(
                body, fn, self.shards[i], *args, workers=[self.workers[i]], allow_other_workers=False, pure=False
            )
        except Exception as e:  # an actor proxy raises at once when its worker is known lost
            _watch.explain(e, self.client, [self.workers[i]])
            raise

    def map(self, fn, *args, timeout=None) -> list:
        """Run ``fn(shard, *args)`` on every shard, on its own worker, and return the results in shard order.

        The call is remembered and replayed on a shard rebuilt after a worker
        loss (see :meth:`recover`).  When a worker dies during the call, its
        shards are re-placed and the call runs again on them only (the others
        keep their results: a call that changes its shard runs once on each).
        """
        return self._map_recovering(fn, [args] * len(self.shards), False, timeout)

    def _map_recovering(self, fn, per_shard_args, per_shard, timeout):

        n = len(self.shards)
        futs, out, done = [None] * n, [None] * n, [False] * n
        max_recoveries = int(_config.get("max-recoveries"))
        attempts = 0
        while True:
            try:
                for i in range(n):
                    if futs[i] is None:
                        futs[i] = self._submit_one(i, fn, per_shard_args[i])
                for i in range(n):
                    if not done[i]:
                        out[i] = self._wait([futs[i]], timeout=timeout)[0]
                        done[i] = True
                break
            except WorkerLostError as e:
                attempts += 1
                if attempts > max_recoveries:
                    raise
                rebuilt = set(self.recover(e.workers))
                for i in range(n):
                    if i in rebuilt or futs[i] is None or (not done[i] and futs[i].done() and _watch._failed(futs[i])):
                        done[i] = False
                        futs[i] = None  # submitted again at the top of the loop
        self._log.append((fn, per_shard_args if per_shard else per_shard_args[0], per_shard))
        return out

    def submit_each(self, fn, per_shard_args, indices=None) -> list:
        """Start ``fn(shard, *args_i)`` on every shard at once (``args_i`` from ``per_shard_args``).

        Returns one future-like object per shard (``.result(timeout)``), in
        shard order.  All calls run concurrently, which a collective (an
        allreduce among the shards) needs.  Wait on them with :meth:`wait`.
        With ``indices``, only on those shards (``per_shard_args`` in their order).
        """
        per_shard_args = list(per_shard_args)
        indices = list(range(len(self.shards))) if indices is None else list(indices)
        if len(per_shard_args) != len(indices):
            raise ValueError(f"Expected {len(indices)} argument tuples, got {len(per_shard_args)}.")
        return [self._submit_one(i, fn, tuple(args)) for i, args in zip(indices, per_shard_args)]

    def wait(self, futs, timeout=None) -> list:
        """The results of :meth:`submit_each`, never hanging on a lost worker, scheduler or client."""
        return self._wait(futs, timeout=timeout)

    def map_each(self, fn, per_shard_args, timeout=None) -> list:
        """Like :meth:`map`, with its own arguments for each shard (for example its rank)."""
        per_shard_args = [tuple(a) for a in per_shard_args]
        if len(per_shard_args) != len(self.shards):
            raise ValueError(f"Expected {len(self.shards)} argument tuples, got {len(per_shard_args)}.")
        return self._map_recovering(fn, per_shard_args, True, timeout)

    # ------------------------------------------------------------- kept for more fits
    def pin(self) -> None:
        """Keep the shards as they are now for more fits: :meth:`restore` brings them back to this state.

        What a fit does on them after (the :meth:`map` calls that encode its
        targets, the per-shard state of its rounds) is undone by
        :meth:`restore`, and no longer replayed on a shard rebuilt after a
        worker loss.
        """
        self.map(_pin)
        self._pinned_log = len(self._log)

    def restore(self) -> None:
        """The shards as :meth:`pin` left them, and the calls made since forgotten (a fit on them is over)."""
        del self._log[self._pinned_log:]  # a shard rebuilt during the restore replays up to the pin only
        self.map(_restore)
        del self._log[self._pinned_log:]

    def cut_sources(self, arrays: dict) -> list | None:
        """Sources for this placement of NumPy or scipy.sparse input from ``arrays``, input equal to the one it
        was placed from: views of their rows, cut as the shards hold them (None where a shard holds more than one
        range of rows).  A kept placement of such input holds no source of its own between fits; the next fit
        on it lends its arrays, from which a shard lost meanwhile is rebuilt."""
        if self.row_ranges is None or any(len(r) != 1 for r in self.row_ranges):
            return None
        return [("numpy", part) for part in _cut_rows({k: v for k, v in arrays.items() if v is not None},
                                                      [r for [r] in self.row_ranges])]

    def nbytes(self) -> int:
        """The bytes the shards hold on their workers (one call to each)."""
        return int(sum(self.map(_nbytes)))

    def detach(self) -> None:
        """Close the shards' actors and keep the shards, as task results Dask may move (between fits on kept
        data: Dask does not retire a worker that holds an actor).  :meth:`attach` makes new actors.  Nothing
        is done where a shard lives in its actor (:meth:`detachable`)."""
        if self.transport != "actors" or not self.actors or not self.detachable():
            return
        actors, futs = self.actors, self._actor_futures
        self.actors, self._actor_futures = [], []
        self._close_actors(actors)
        _watch._cancel(self.client, futs, cancel=True)

    def detachable(self) -> bool:
        """Whether every shard is a task result of its own, so that :meth:`detach` can close the actors and keep
        the shards: not where an actor built its shard from the client's shared memory (NumPy input on the
        client's host), whose shard lives in that actor."""
        return not any(a is not None and a.key == s.key for a, s in zip(self._actor_futures, self.shards))

    def attach(self) -> None:
        """Actors for the shards again after :meth:`detach`, on the workers that hold the shards now (a retired
        worker's shard was moved by Dask); a shard whose worker was lost is rebuilt from its source."""
        if self.transport != "actors" or self.actors:
            return
        n = len(self.shards)
        # a shard whose worker died may be cancelled by now (Dask found it could not compute it again, its
        # source being gone too): lost, as a shard nobody holds; who_has refuses cancelled futures (older Dask)
        gone = {s.key for s in self.shards if s.status in ("cancelled", "lost", "error")}
        who = self.client.who_has([s for s in self.shards if s.key not in gone])
        alive = _watch.alive_workers(self.client)
        lost, moved = set(), []
        for i, s in enumerate(self.shards):
            holders = [] if s.key in gone else sorted(set(who.get(s.key, ())) & alive)
            if not holders:
                lost.add(self.workers[i])
            elif self.workers[i] not in holders:
                self.workers[i] = holders[0]
                moved.append(i)
        self.actors, self._actor_futures = [None] * n, [None] * n
        if moved and not lost and self.sources is not None:
            with contextlib.suppress(WorkerLostError):  # the loop below meets the loss again, and recovers
                self._rebuild_left_behind(moved)
        for _ in range(int(_config.get("max-recoveries")) + 1):
            if lost:
                self.recover(lost)  # rebuilds the shards of the lost workers, each with its actor
            todo = [i for i in range(n) if self.actors[i] is None]
            if not todo:
                return
            for i in todo:
                self._actor_futures[i] = self.client.submit(
                    ShardActor, self.shards[i], workers=[self.workers[i]], allow_other_workers=False, actor=True,
                    pure=False)
            futs = [self._actor_futures[i] for i in todo]
            try:
                with current(self.client):
                    got = _watch.wait_results(futs, self.client, [self.workers[i] for i in todo], self.timeout)
            except WorkerLostError as e:
                lost = set(e.workers)
                continue
            except ShardGone:
                # Dask moved these shards' handles off a retiring worker, and the shards stayed with it (_held):
                # each is built again from its source where its handle is now, with its actor
                _watch.wait_done(futs, self.client, [self.workers[i] for i in todo], self.timeout)
                gone = [i for i, f in zip(todo, futs) if _watch._failed(f) and isinstance(f.exception(), ShardGone)]
                if not gone or self.sources is None:
                    raise
                self._rebuild_where_they_are(gone)
                continue
            for i, a in zip(todo, got):
                self.actors[i] = a
            return
        raise WorkerLostError(lost, f"Lost the Dask worker(s) {sorted(lost)} while the kept data was taken up again.")

    def _rebuild_left_behind(self, moved) -> None:
        """Build again from its source each shard of ``moved`` (whose handle Dask moved off a retiring worker) that
        stayed with that worker (:mod:`._held`), with its actor.  Asked first, so that an actor made on a handle
        with nothing behind it does not fail (the worker logs each failed task as an error)."""
        futs = [self.client.submit(is_held_here, self.shards[i], workers=[self.workers[i]], allow_other_workers=False,
                                   pure=False) for i in moved]
        here = _watch.wait_results(futs, self.client, [self.workers[i] for i in moved], self.timeout)
        self._rebuild_where_they_are([i for i, ok in zip(moved, here) if not ok])

    def _rebuild_where_they_are(self, indices) -> None:
        """Build shards ``indices`` again from their sources on the workers that hold their handles, each with its
        actor, and record each as a recovery without a lost worker."""
        t0 = time.perf_counter()
        for i in indices:
            self._rebuild(i, self.workers[i])
            self.recoveries.append({"shard": i, "lost": [], "to": self.workers[i],
                                    "seconds": time.perf_counter() - t0})

    # ------------------------------------------------------------- recovery
    def lost_workers(self) -> set:
        """The workers holding a shard that the scheduler no longer knows (one request)."""
        return set(self.workers) - _watch.alive_workers(self.client)

    def _survivors(self, wait_s):
        import time

        deadline = time.monotonic() + wait_s
        while True:
            alive = _watch.alive_workers(self.client) - self._lost
            if alive:
                return sorted(alive)
            _watch.check_client(self.client)
            if time.monotonic() >= deadline:
                raise WorkerLostError(
                    self._lost,
                    f"Lost the Dask worker(s) {sorted(self._lost)} and no worker is left to take over their "
                    f"shards (waited {wait_s:g} s for one to join); the fit was stopped.",
                )
            time.sleep(0.2)

    def recover(self, lost, wait_s=None) -> list:
        """Re-place the shards of the ``lost`` workers on surviving workers, from their sources.

        Each rebuilt shard goes to the surviving worker holding the fewest
        shards (a worker may then hold two, each with its own actor), and every
        :meth:`map` / :meth:`map_each` call made so far is replayed on it.  A
        worker lost while it takes a shard over (such as a worker its nanny
        had just restarted) is one more loss: its shards go to the workers
        left, up to ``dask-estimators.max-recoveries`` (3) such losses.
        Returns the indices of the rebuilt shards.  Raises
        :class:`~dask_estimators.engine.WorkerLostError` when no worker is left
        (after waiting ``wait_s`` seconds, default the dask config
        ``dask-estimators.recovery-wait``, 10 s, for one to join).
        """
        import time

        lost = set(lost)
        if wait_s is None:
            wait_s = float(_config.get("recovery-wait"))
        max_losses = int(_config.get("max-recoveries"))
        t0 = time.perf_counter()
        rebuilt: set = set()
        for attempt in range(max_losses + 1):
            self._lost |= lost
            idx = [i for i, w in enumerate(self.workers) if w in self._lost]
            if not idx:
                break
            if self.sources is None:
                raise WorkerLostError(lost, f"Lost the Dask worker(s) {sorted(lost)}; this placement cannot be "
                                      "rebuilt.")
            survivors = self._survivors(wait_s)
            try:
                for i in idx:
                    target = min(survivors, key=lambda w: (self.workers.count(w), w))
                    self._rebuild(i, target)
                    rebuilt.add(i)
                    self.recoveries.append({"shard": i, "lost": sorted(lost), "to": target,
                                            "seconds": time.perf_counter() - t0})
            except WorkerLostError as e:
                lost = e.workers - self._lost
                if not lost or attempt == max_losses:
                    raise
        if rebuilt:
            import warnings

            moved = [r for r in self.recoveries if r["shard"] in rebuilt]
            warnings.warn(
                f"Lost the Dask worker(s) {sorted(self._lost)} during the fit; their {len(rebuilt)} shard(s) were "
                f"placed again on {sorted({r['to'] for r in moved})} from the input, and the fit went on.",
                _watch.WorkerLostWarning,
                stacklevel=2,
            )
        return sorted(rebuilt)

    def _rebuild(self, i, target) -> None:
        """Shard ``i`` built again from its source on ``target``, with its actor, its checks and the replayed calls."""
        old = [self.shards[i]] + ([self._actor_futures[i]] if self._actor_futures else [])
        _watch._cancel(self.client, old)
        shard = _build_from_source(self.client, self.sources[i], target, self.device, self._buffers, self.timeout)
        self.shards[i], self.workers[i] = shard, target
        if self.transport == "actors":
            fut = self.client.submit(
                ShardActor, shard, workers=[target], allow_other_workers=False, actor=True, pure=False
            )
            self._actor_futures[i] = fut
            with current(self.client):
                [self.actors[i]] = self._wait([fut], [target])
        [n] = self._wait([self._submit_one(i, _rows, ())], [target])
        if n != self.n_rows[i]:
            raise RuntimeError(
                f"A shard rebuilt after a worker loss has {n} rows, the lost one had {self.n_rows[i]}: "
                "the input is not deterministic."
            )
        for fn, args, per_shard in self._log:
            self._wait([self._submit_one(i, fn, args[i] if per_shard else args)], [target])

    def release(self) -> None:
        """Drop the shards (and their actors) from the workers; bounded in time, also after a failure."""
        actors, self.actors = self.actors, []
        workers = list(self.workers)
        if self.client.status == "running":
            self._close_actors([a for a, w in zip(actors, workers) if w not in self._lost] if actors else [])
        futs = self._actor_futures + [s for s in self.shards if not any(s is a for a in self._actor_futures)]
        # an actor proxy holds a future of its own, and after a recovery a proxy may sit in a reference cycle
        # (a traceback's frames) until the client's garbage collector runs: let go of its key now
        futs += [a._future for a in actors if getattr(a, "_future", None) is not None]
        self._actor_futures, self.shards = [], []
        if futs:  # cancel (drops the keys even if someone else holds a future), unless a worker was lost
            _watch._cancel(self.client, futs, cancel=not self._lost)
        _shm.release(self._buffers)  # nothing reads the shards now: the next placement may reuse the memory
        self._buffers.clear()
        if self._hosted:
            self._hosted = False
            hosts_used(self.client, -1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self) -> str:
        return f"Placement(n_shards={len(self.shards)}, n_rows={self.n_rows})"


def _workers(client, workers=None, wait_s=None) -> list[str]:

    if workers is not None:
        return list(workers)
    _watch.check_client(client)
    ws = sorted(_watch.alive_workers(client))
    if not ws:
        wait_s = float(_config.get("recovery-wait")) if wait_s is None else wait_s
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except (TimeoutError, OSError) as e:
            raise WorkerLostError(
                set(), f"The Dask cluster at {_watch._scheduler_address(client)} has no worker "
                f"(waited {wait_s:g} s for one)."
            ) from e
        ws = sorted(_watch.alive_workers(client))
    return ws


#: The most bytes of input :func:`workers_worth` puts on one worker.
MAX_BYTES_PER_WORKER = 1 << 30
_turn = [0]  # which workers :func:`workers_worth` gives next


def workers_worth(client, flops_per_step: float, nbytes: int = 0, workers=None) -> list | None:
    """The workers a fit of minibatch steps should take: None for every worker, or a few of them.

    The ranks of a fit meet at every step (an allreduce and a barrier),
    which costs about what a second rank saves on a step of a few MFLOP,
    while a second rank adds to the fit's fixed cost (docs/performance.md
    has the measurements).  So each worker taken
    gets at least ``dask-estimators.min-step-flops-per-worker`` (2.5 MFLOP,
    0 for every worker) of each step's ``flops_per_step``, and
    at most :data:`MAX_BYTES_PER_WORKER` of the input's ``nbytes``.  Fits
    that take fewer than every worker take them in turn.  ``workers`` (None:
    every worker) are those to choose from; all of them are returned as they
    were given (None stays None).

    Examples
    --------
    >>> from dask_estimators.engine import place, resolve_client, workers_worth
    >>> client = resolve_client()  # doctest: +SKIP
    >>> ws = workers_worth(client, 6 * 200 * 803)  # doctest: +SKIP
    >>> len(ws)  # a 4-100-3 network's step on 200 rows, 0.96 MFLOP: one worker  # doctest: +SKIP
    1
    >>> workers_worth(client, 6 * 200 * 7510) is None  # 64-100-10, 9 MFLOP: every worker  # doctest: +SKIP
    True
    >>> p = place(client, {"X": X}, workers=ws)  # doctest: +SKIP
    """

    least = float(_config.get("min-step-flops-per-worker"))
    if least <= 0:
        return workers
    ws = _workers(client, workers)
    k = max(1, int(flops_per_step // least), -(-int(nbytes) // MAX_BYTES_PER_WORKER))
    if k >= len(ws):
        return workers
    start = _turn[0] % len(ws)
    _turn[0] += k
    return [ws[(start + i) % len(ws)] for i in range(k)]


_GPU: dict = {}  # (worker address, device) -> the UUID of the CUDA device its shards live on; "" for none


def _gpu_of(device: str) -> str:
    """On a worker: the UUID of the CUDA device that ``device`` means here; "" where it means none."""
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return ""
    return str(torch.cuda.get_device_properties(torch.device(_worker.choose_device(device))).uuid)


def one_per_gpu(workers: list, gpu_of: dict) -> list:
    """Of ``workers``, the first on each GPU of ``gpu_of`` (worker -> GPU UUID, "" for none); all where none has one.

    Examples
    --------
    >>> one_per_gpu(["a", "b", "c", "d"], {"a": "", "b": "GPU-1", "c": "GPU-1", "d": "GPU-2"})
    ['b', 'd']
    >>> one_per_gpu(["a", "b"], {"a": "", "b": ""})
    ['a', 'b']
    """
    seen: dict = {}
    for w in workers:
        if gpu_of.get(w):
            seen.setdefault(gpu_of[w], w)
    return list(seen.values()) or list(workers)


def workers_per_gpu(client, device: str, workers=None) -> list | None:
    """The workers of ``workers`` (None: every worker) a network fit on ``device`` takes: one per GPU, if any.

    The ranks of a network fit sum their gradients through NCCL on GPUs, and
    NCCL takes one rank per GPU: two workers on one GPU (a ``LocalCluster`` of
    several workers on a one-GPU machine) fail it.  Nor would a second rank
    there help: the two processes take turns on the one device.  So the first
    worker on each GPU trains, and where only some workers have a GPU
    (``device="auto"``), only those; without a GPU, all of them.  The list
    is the one looked up here, so that the fit's :func:`workers_worth` and
    :func:`place` need not ask the scheduler again.  With ``device="cpu"``,
    ``workers`` as given, nothing asked.  Each worker is asked once which GPU
    it has (``client.run``, cached by its address).

    Examples
    --------
    >>> from dask_estimators.engine import place, resolve_client, workers_per_gpu
    >>> client = resolve_client()  # doctest: +SKIP
    >>> ws = workers_per_gpu(client, "auto")  # doctest: +SKIP
    >>> ws == sorted(client.nthreads())  # CPU workers, or one per GPU: all of them  # doctest: +SKIP
    True
    >>> ws = workers_per_gpu(client, "auto")  # two workers on one GPU: the first of them  # doctest: +SKIP
    >>> len(ws)  # doctest: +SKIP
    1
    >>> p = place(client, {"X": X}, device="auto", workers=ws)  # doctest: +SKIP
    """
    if device == "cpu":
        return workers
    ws = _workers(client, workers)
    missing = [w for w in ws if (w, device) not in _GPU]
    if missing:
        try:
            found = client.run(_gpu_of, device, workers=missing, on_error="return")
        except Exception:  # no worker could be asked: the placement says what is wrong
            return ws
        # a worker that failed to answer counts as one without a GPU this time, and is asked again next time
        _GPU.update({(w, device): g for w, g in found.items() if isinstance(g, str)})
    return one_per_gpu(ws, {w: _GPU.get((w, device), "") for w in ws})


def client_input_may_be_kept(client, workers, transport: str) -> bool:
    """Whether a placement of the client's own arrays (NumPy, pandas, scipy.sparse) on ``workers`` (None: all)
    could outlive its fit (:meth:`Placement.detachable`): not with the ``"actors"`` transport where a worker
    shares the client's memory, since that worker's actor builds its shard from the client's shared memory and
    holds it.  Asked before the input is hashed for the kept placements: such input is not hashed at all."""
    if transport != "actors":
        return True
    from ._shared import shares_with_client

    return not any(shares_with_client(client, _workers(client, workers)))


def place(
    client, arrays: dict, *, check=None, device: str = "auto", workers=None, transport: str | None = None,
    timeout=None, hosted: bool = False,
) -> Placement:
    """Place named, row-aligned arrays on the cluster as one shard per worker.

    Parameters
    ----------
    client : distributed.Client
    arrays : dict of str -> array-like or None
        Row-aligned inputs: NumPy arrays or scipy.sparse matrices, or dask
        arrays/dataframes/series (dask arrays may have scipy.sparse blocks).
        Sparse input becomes a torch sparse CSR tensor in the shard, never dense.
        None entries are skipped.  When any entry is a dask collection, all
        must be dask collections with the same number of row blocks (dask
        arrays with known chunks are rechunked to match the first one).
    check : callable, optional
        ``check(dict of NumPy arrays) -> dict`` run on the workers on each row
        block of dask input before the shard is built (validation, casting).
        It is not applied to NumPy input, which the caller validates.
    device : {"auto", "cpu", "cuda"}
        Where each worker keeps its shard; "auto" uses CUDA when the worker has it.
    workers : list of str or callable, optional
        The workers to use; all workers by default.  A callable takes the
        number of rows and returns such a list (or None): dask input of
        unknown length is measured first, then placed where it says.
    transport : {"actors", "tasks"}, optional
        How rounds reach the shards; defaults to the dask config value
        ``dask-estimators.transport`` (``"actors"``).
    timeout : float, optional
        Seconds each per-shard call on the placement (:meth:`Placement.map`) may take.
    hosted : bool, default False
        For NumPy input with actors: each shard's actor is held by its worker's long-lived
        :class:`~._actor.ShardHost` (made at the client's first such placement on that worker), so the
        placement takes one direct call per worker and no scheduler round.  For the many small fits of a
        search; the shards and their calls are the same.

    Returns
    -------
    Placement

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import place, resolve_client
    >>> X = np.random.rand(100, 3); y = np.random.rand(100)
    >>> with place(resolve_client(), {"X": X, "y": y}) as p:  # doctest: +SKIP
    ...     p.n_samples
    100
    """

    transport = transport or _config.get("transport")
    arrays = {k: v for k, v in arrays.items() if v is not None}
    choose = workers if callable(workers) else None
    ws = _workers(client, None if choose else workers)
    lost: set = set()
    max_recoveries = int(_config.get("max-recoveries"))
    for attempt in range(max_recoveries + 1):
        try:
            placement = _place_once(client, arrays, check, device, ws, transport, timeout, hosted, choose)
            break
        except WorkerLostError as e:  # a worker died while the data was placed: place again on the others
            lost |= e.workers
            if attempt == max_recoveries or not e.workers:
                raise
            alive = _watch.alive_workers(client) - lost
            ws = [w for w in ws if w in alive] or sorted(alive)
            if not ws:
                raise WorkerLostError(lost, f"Lost the Dask worker(s) {sorted(lost)} while placing the data and "
                                      "no worker is left.") from e
    if placement.n_samples == 0:
        placement.release()
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    return placement


def _place_once(client, arrays, check, device, ws, transport, timeout, hosted=False, choose=None):

    shm = _config.get("shared-memory")
    try:
        return _place_once_with(client, arrays, check, device, ws, transport, timeout, shm, hosted, choose)
    except _shm.NotShared:  # a worker thought to share the client's memory could not open it: send the bytes
        if not shm:
            raise
        return _place_once_with(client, arrays, check, device, ws, transport, timeout, False, hosted, choose)


def _chosen(ws, choose, n_rows) -> list:
    """The workers of ``ws`` that ``choose(n_rows)`` names (all of ``ws`` without ``choose``, or where it names
    none of them)."""
    picked = choose(int(n_rows)) if choose is not None else None
    if picked is None:
        return ws
    return [w for w in ws if w in set(picked)] or ws


def _place_once_with(client, arrays, check, device, ws, transport, timeout, shm, hosted=False, choose=None):
    buffers: list = []
    actor_futures = None
    try:
        if any(is_dask_collection(a) for a in arrays.values()):
            shards, used, sources, ranges = _place_dask(client, arrays, check, device, ws, choose)
        else:
            if choose is not None:
                ws = _chosen(ws, choose, np.shape(next(iter(arrays.values())))[0])
            # the actors go in behind the shards they hold (Placement), or build them (actor_futures), and their
            # wait is the shards' wait
            actor_futures = [] if transport == "actors" else None
            shards, used, sources, ranges = _place_numpy(client, arrays, device, ws, buffers, shared_memory=shm,
                                                         wait_builds=transport != "actors",
                                                         actor_futures=actor_futures,
                                                         hosted=hosted and transport == "actors", timeout=timeout)
    except BaseException:
        _shm.release(buffers)
        raise
    try:
        placement = Placement(client, shards, used, transport, sources=sources, device=device, timeout=timeout,
                              buffers=buffers, row_ranges=ranges, actor_futures=actor_futures or None)
        if hosted and actor_futures:  # its shards live in the client's hosts
            placement._hosted = True
            hosts_used(client, 1)
        return placement
    except BaseException:
        _watch._cancel(client, shards)
        _shm.release(buffers)
        raise


def _place_numpy(client, arrays, device, ws, buffers, shared_memory=True, wait_builds=True, actor_futures=None,
                 hosted=False, timeout=None):
    """``actor_futures``: a list to fill, shard by shard, with the futures of actors that build their shards
    from the client's shared memory (the shard's entry is that future too), None for the other shards.
    ``hosted`` (with ``actor_futures``): every shard's actor held by its worker's :class:`ShardHost`
    (:func:`_place_hosted`)."""
    n = {k: np.shape(v)[0] for k, v in arrays.items()}
    check_lengths(n)
    n_rows = next(iter(n.values()))
    if n_rows == 0:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    n_parts = min(len(ws), n_rows)
    bounds = np.linspace(0, n_rows, n_parts + 1).astype(int)
    parts = _cut_rows(arrays, [(bounds[i], bounds[i + 1]) for i in range(n_parts)])  # views; sparse as CSR
    used = ws[:n_parts]
    ranges = [[(int(bounds[i]), int(bounds[i + 1]))] for i in range(n_parts)]
    sources = [("numpy", part) for part in parts]
    parts = [_owned(part) if _in_this_process(w) else part for part, w in zip(parts, used)]
    if hosted and actor_futures is not None:
        actor_futures[:] = _place_hosted(client, parts, used, device, buffers, shared_memory, timeout)
        return list(actor_futures), used, sources, ranges
    if shared_memory and actor_futures is not None:
        # nothing waits for the builds (their actors make them): only the workers known to share the client's
        # memory are handed it (a wrong guess fails the placement with NotShared: _place_once)
        from ._shared import shares_with_client

        shared = shares_with_client(client, used)
        shards = [None] * n_parts
        if any(shared):
            on = [i for i in range(n_parts) if shared[i]]
            for i, fut in zip(on, _place_shared(client, [parts[i] for i in on], [used[i] for i in on], device,
                                                buffers, actors=True)):
                shards[i] = fut
        actor_futures[:] = list(shards)
    else:
        shards = _place_shared(client, parts, used, device, buffers) if shared_memory else [None] * n_parts
    sent = [i for i in range(n_parts) if shards[i] is None]  # not on this host (or no memfd): send the bytes
    for i, fut in zip(sent, _scatter_parts(client, [parts[i] for i in sent], [used[i] for i in sent], device)):
        shards[i] = fut
    if wait_builds:
        _watch.wait_done(shards, client, used)  # the shards stay on the workers: never fetch them
        try:
            _dask_input.raise_first_error(shards)
        except BaseException:
            _watch._cancel(client, shards)
            raise
    return shards, used, sources, ranges


#: Per client (weakly), per worker: the future and proxy of its :class:`ShardHost`.
_HOSTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_HOSTS_LOCK = threading.Lock()
#: Per client (weakly): [placements holding shards in its hosts, times its hosts were asked for].
_HOST_USE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: Seconds a client's hosts stay once no placement holds shards in them: back-to-back small fits (a loop, a
#: search) reuse them, and then they go, so that Dask can retire their workers (it retires none that holds an
#: actor: an adaptive cluster could not scale down after a fit).
HOST_IDLE = 2.0


def shard_hosts(client, workers, timeout=None) -> list:
    """The :class:`ShardHost` proxy of each of ``workers``: kept while placements use them and
    :data:`HOST_IDLE` seconds more (:func:`hosts_used`), made for the workers that lack a live one (one
    scheduler round for all of them).  A host whose worker was lost is let go."""
    with _HOSTS_LOCK:  # fits in threads of one process share the hosts: one makes them, the others wait
        _HOST_USE.setdefault(client, [0, 0])[1] += 1  # asked for: an idle release planned before is off
        held = _HOSTS.setdefault(client, {})
        for w in [w for w, (f, _) in held.items() if f.status != "finished"]:
            with contextlib.suppress(Exception):
                held.pop(w)[0].release()
        missing = [w for w in dict.fromkeys(workers) if w not in held]
        if missing:
            futs = [client.submit(ShardHost, workers=[w], allow_other_workers=False, actor=True, pure=False)
                    for w in missing]
            with current(client):
                proxies = _watch.wait_results(futs, client, missing, timeout, cancel_on_error=futs)
            held.update((w, (f, proxy)) for w, f, proxy in zip(missing, futs, proxies))
        return [held[w][1] for w in workers]


def hosts_used(client, delta: int) -> None:
    """A placement holding shards in ``client``'s hosts begins (``delta`` 1) or ends (-1); when none is left,
    the hosts are released :data:`HOST_IDLE` seconds later unless asked for meanwhile."""
    with _HOSTS_LOCK:
        use = _HOST_USE.setdefault(client, [0, 0])
        use[0] = max(use[0] + delta, 0)
        if use[0] or delta > 0:
            return
        asked = use[1]
    timer = threading.Timer(HOST_IDLE, _release_idle_hosts, (weakref.ref(client), asked))
    timer.daemon = True
    timer.start()


def _release_idle_hosts(client_ref, asked) -> None:
    client = client_ref()
    if client is None:
        return
    with _HOSTS_LOCK:
        use = _HOST_USE.get(client)
        if use is None or use[0] or use[1] != asked:  # in use again, or asked for since
            return
        held = _HOSTS.pop(client, {})
    # cancelled, not released: the hosts' proxies may outlive this in reference cycles, which would keep the keys
    _watch._cancel(client, [fut for fut, _ in held.values()], cancel=True)


def _place_hosted(client, parts, workers, device, buffers, shared_memory, timeout):
    """Each part built into a :class:`ShardActor` held by its worker's :class:`ShardHost`: one direct call to
    each worker, all at once.  The bytes go through the client's shared memory where the worker can map it,
    else in the call.  Returns each shard's :class:`Resolved` future of its :class:`HostedShard`."""
    handles = [None] * len(parts)
    if shared_memory:
        from ._shared import shares_with_client

        for i, shared in enumerate(shares_with_client(client, workers)):
            handles[i] = _shm.write_parts(parts[i]) if shared else None
    builds = [Deferred(_build_shard_shared, device, h) if h is not None else Deferred(_build_shard, device, part)
              for h, part in zip(handles, parts)]
    try:
        hosted = _create_hosted(client, workers, builds, timeout)
    except BaseException:
        _shm.release([h for h in handles if h is not None])
        raise
    buffers.extend(h for h in handles if h is not None)
    return [Resolved(shard) for shard in hosted]


def _create_hosted(client, workers, builds, timeout) -> list:
    """The :class:`HostedShard` of each build on its worker's host; on failure, the ones built are let go."""
    hosts = shard_hosts(client, workers, timeout)
    tokens = [f"shard-{uuid.uuid4().hex}" for _ in builds]
    calls = []
    try:
        calls = [host.create(token, build) for host, token, build in zip(hosts, tokens, builds)]
        _watch.wait_results(calls, client, workers, timeout)
    except BaseException:
        for host, token, call in zip(hosts, tokens, calls):
            with contextlib.suppress(BaseException):
                if call.done() and not _watch._failed(call):
                    host.call(token, "close")
        raise
    return [HostedShard(host, token) for host, token in zip(hosts, tokens)]


def _cut_rows(arrays: dict, ranges) -> list:
    """One dict of rows ``[start, stop)`` of each client array per range: views (:func:`_rows_part`); sparse
    input as canonical CSR once."""
    arrays = {k: _worker.canonical_csr(v) if _worker.is_scipy_sparse(v) else v for k, v in arrays.items()}
    return [{k: _rows_part(v, a, b) for k, v in arrays.items()} for a, b in ranges]


def _in_this_process(worker) -> bool:
    """Whether ``worker`` is a thread of this process (distributed's ``inproc`` transport), which takes the objects
    sent to it as they are, not copies."""
    return str(worker).startswith("inproc://")


def _owned(part: dict) -> dict:
    """A copy of each array of ``part`` (a dict of :func:`_rows_part`): the shard of a worker in this process
    must not hold the caller's memory, which the caller may change after the fit while the shard is kept."""
    def own(a):
        if isinstance(a, _worker.CSRRows):
            return _worker.CSRRows(a.data.copy(), a.indices.copy(), a.indptr.copy(), a.shape)
        return a.copy() if isinstance(a, np.ndarray) else a

    return {k: own(a) for k, a in part.items()}


def _rows_part(a, start, stop):
    """Rows ``start:stop`` of a client array: a view of a NumPy array, or :class:`~._worker.CSRRows` of a CSR."""
    if _worker.is_scipy_sparse(a):
        return _worker.CSRRows.of(a, int(start), int(stop))
    return np.asarray(a[start:stop])


#: Parts sent at once by :func:`_scatter_parts` (each to its own worker).
_MAX_CONCURRENT_SENDS = 32


def _scatter_parts(client, parts, workers, device):
    """Each part to its worker, the sends at once: each goes over its own worker's link.

    One ``scatter`` call returns once its bytes are on the worker; in turn,
    the parts to W hosts took W times one link's time (docs/performance.md
    has the measurement).
    """
    if len(parts) <= 1:
        return [_scatter_part(client, p, w, device) for p, w in zip(parts, workers)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(len(parts), _MAX_CONCURRENT_SENDS), thread_name_prefix="dask-estimators-send") as pool:
        return list(pool.map(lambda pw: _scatter_part(client, pw[0], pw[1], device), zip(parts, workers)))


#: A part of more than two pieces' bytes is sent in pieces of about this size (:func:`_send_in_pieces`).
PIECE_BYTES = 32 << 20


def _scatter_part(client, part, w, device):
    if _in_pieces(part):
        return _send_in_pieces(client, part, w, device)
    [data] = _scatter_to(client, part, w)
    return client.submit(_build_shard_task, device, data, workers=[w], allow_other_workers=False, pure=False)


def _in_pieces(part) -> bool:
    """Whether ``part`` goes in pieces: dense numeric NumPy arrays of more than two pieces' bytes."""
    arrays = list(part.values())
    dense = all(isinstance(a, np.ndarray) and a.ndim >= 1 and a.dtype.kind in "iuf" for a in arrays)
    return dense and sum(a.nbytes for a in arrays) > 2 * PIECE_BYTES


def _send_in_pieces(client, part, w, device):
    """The future of ``part``'s shard on ``w``, its rows sent as messages of about :data:`PIECE_BYTES`.

    One message for the whole part is copied into the shard's aligned memory
    only once its last byte is in; in pieces, the worker copies each piece
    while the next one is on the wire.  The bytes sent are the same, once.
    """
    n = len(next(iter(part.values())))
    k = -(-sum(a.nbytes for a in part.values()) // PIECE_BYTES)
    bounds = np.linspace(0, n, k + 1).astype(int)
    pinned = {"workers": [w], "allow_other_workers": False, "pure": False}
    build = client.submit(_start_build, {name: (a.shape, a.dtype.str) for name, a in part.items()}, **pinned)
    fills = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        [piece] = _scatter_to(client, {name: a[lo:hi] for name, a in part.items()}, w)
        fills.append(client.submit(_fill_piece, build, int(lo), piece, **pinned))
    return client.submit(_finish_build, device, build, *fills, **pinned)


def _scatter_to(client, part, w) -> list:
    """``client.scatter([part])`` straight to ``w``; :class:`WorkerPausedError` where ``w`` stayed paused (a
    direct scatter goes to running workers only, and gives up after distributed's connect timeout)."""
    try:
        return client.scatter([part], workers=[w], hash=False, direct=True)
    except (TimeoutError, ValueError) as e:
        _watch.explain_paused(e, client, [w])
        raise


def _start_build(spec):
    """Task body: an empty :class:`~._worker.ShardBuild`, held by this worker (:mod:`._held`)."""
    return hold(_worker.ShardBuild(spec))


def _fill_piece(build, start, piece):
    """Task body: one piece of rows into a :class:`~._worker.ShardBuild` on this worker."""
    return _worker.resolve(build).fill(start, piece)


def _finish_build(device, build, *filled):
    """Task body: the :class:`~._worker.Shard` of a build whose pieces are all in, held by this worker."""
    _worker.setup_threads()
    return hold(_worker.resolve(build).shard(device))


def _build_from_source(client, source, worker, device, buffers, timeout=None):
    """A new shard future on ``worker`` built from a shard's source (after the loss of its worker).

    Shared memory it maps is added to ``buffers`` (the placement's).
    """

    kind, data = source
    if kind == "numpy":
        shm = _config.get("shared-memory")
        [fut] = _place_shared(client, [data], [worker], device, buffers) if shm else [None]
        if fut is None:
            fut = _scatter_part(client, data, worker, device)
        _watch.wait_done([fut], client, [worker], timeout)
        if _watch._failed(fut):
            fut.result()  # raises the task's error; a failed future holds no data
        return fut
    if kind == "stream":
        fut = _submit_streamed(client, worker, device, *data[:4])
    else:
        fut = _submit_dask_build(client, worker, device, data)
    try:
        _watch.wait_done([fut], client, [worker], timeout)
        if _watch._failed(fut):
            fut.result()
    except BaseException:
        _watch._cancel(client, [fut])
        raise
    return fut


def _submit_dask_build(client, worker, device, source):
    """The shard of a dask source computed again: its blocks from the input's graph, then the build task."""
    colls, names, check, segments, n, refs, n_blocks = source
    # the placement's own persist again (the same partitioning), keeping only this shard's blocks: the scheduler
    # forgets the others at once, so only these (and what they need) are computed; persisted input is not at all
    blocks = _dask_input.persist_blocks(client, colls)
    needed = [blocks[k][j] for k, j in refs]
    keep = {f.key for f in needed}
    for f in (f for fs in blocks.values() for f in fs):
        if f.key not in keep:
            f.release()
    for k, fs in blocks.items():
        if len(fs) != n_blocks[k]:  # the segments name blocks of the partitioning the shards were built from
            raise RuntimeError(
                f"{k} now has {len(fs)} row blocks where it had {n_blocks[k]} when the data was placed; "
                "its shard cannot be rebuilt after the loss of its worker."
            )
    return client.submit(_dask_input.build_shard_task, device, check, names, segments, n, *needed, workers=[worker],
                         allow_other_workers=False, pure=False)


def _place_shared(client, parts, workers, device, buffers, actors=False):
    """Hand each part to its worker through the client's shared memory when the worker can open it.

    A worker on the client's host maps the memory (page-aligned, so already
    aligned for BLAS) and keeps the mapping as its shard: the bytes are copied
    once, by the client, into a pooled memfd (:mod:`._shm`), instead of
    pickled through a socket.  The handles of the shards built are added to
    ``buffers``: the placement gives them back to the pool when it is
    released.  Parts whose worker cannot open the memory (another host,
    container or user) come back as None and are scattered instead.  With
    ``actors``, the futures of actors that build their shards
    (:class:`~._actor.Deferred`) come back at once, unwaited: a worker that
    cannot open the memory fails its actor with :class:`~._shm.NotShared`.
    """
    handles = []
    kept = []
    try:
        with ThreadPoolExecutor(min(len(parts), 4)) as pool:  # os.pwrite releases the GIL
            handles = list(pool.map(_shm.write_parts, parts))
        if any(h is None for h in handles):
            return [None] * len(parts)
        if actors:
            futs = [client.submit(ShardActor, Deferred(_build_shard_shared, device, h), workers=[w],
                                  allow_other_workers=False, actor=True, pure=False)
                    for h, w in zip(handles, workers)]
        else:
            futs = [
                client.submit(_build_shard_shared_task, device, h, workers=[w], allow_other_workers=False, pure=False)
                for h, w in zip(handles, workers)
            ]
        if actors:
            kept = handles
            return futs
        _watch.wait_done(futs, client, workers)
        out = []
        for f, h in zip(futs, handles):
            if f.status == "error" and isinstance(f.exception(), _shm.NotShared):
                f.release()
                out.append(None)
            else:
                out.append(f)
                kept.append(h)
        return out
    finally:
        buffers.extend(kept)
        _shm.release([h for h in handles if h is not None and not any(h is k for k in kept)])


def _build_shard_shared(device, handles):
    """Map the client's memfds and build the shard on them (an actor's :class:`~._actor.Deferred` build)."""
    _worker.setup_threads()
    return _worker.Shard(_shm.read_parts(handles), device=device)


def _build_shard_shared_task(device, handles):
    """Task body: :func:`_build_shard_shared`, the shard held by its worker (:mod:`._held`)."""
    return hold(_build_shard_shared(device, handles))


def check_lengths(n: dict) -> None:
    """scikit-learn's errors where the row counts ``n`` (name -> rows; X, then y, then the others) differ.

    X against y: ``check_consistent_length``'s message.  Another input
    against X: ``_check_sample_weight``'s (for ``sample_weight``, the only
    other one the estimators place).
    """
    names = list(n)
    first = n[names[0]]
    if "y" in n and n["y"] != first:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: [{first}, {n['y']}]")
    for k in names[1:]:
        if n[k] != first:
            raise ValueError(f"{k}.shape == ({n[k]},), expected ({first},)!")


def _place_streamed(client, colls, check, device, ws, choose=None):
    """Input no one has computed: each worker computes its partitions, a few at a time, into its shard.

    The partitions go to the workers in order, in runs of about equal rows
    (equal counts where the rows are not known before they are computed).
    A worker's peak memory is its shard and the partitions in flight (one a
    thread, :func:`~._dask_input.build_shard_streaming`), where computing
    every block first (:func:`_place_dask`'s way) holds all of them beside
    the shards.  None where the input is not streamed
    (:func:`~._dask_input.stream_parts`), where it has fewer partitions than
    there are workers (its rows are split between workers the other way),
    and where ``choose`` needs the rows before they are known.
    """
    names = list(colls)
    lengths = _dask_input.known_lengths(colls[names[0]])
    if choose is not None:
        if lengths is None:
            return None
        ws = _chosen(ws, choose, sum(lengths))
    plan = _dask_input.stream_parts(colls)
    if plan is None or len(plan[1]) < len(ws):
        return None
    graph, parts = plan
    runs = _dask_input.runs(lengths or [1] * len(parts), len(ws))
    shards, used, sources = [], [], []
    try:
        for w, (a, b) in zip(ws, runs):
            if a == b:
                continue
            mine = parts[a:b]
            sub = _dask_input.cull_parts(graph, mine)
            shards.append(_submit_streamed(client, w, device, sub, names, check, mine))
            used.append(w)
            sources.append((sub, names, check, mine))
        _watch.wait_done(shards, client, used)
        try:
            _dask_input.raise_first_error(shards)
        except _dask_input.Misaligned:
            _watch._cancel(client, shards)
            return None
        # watched: a worker lost now leaves its shard's task nowhere to run (it is pinned), never a hang
        # each on its shard's worker: a held shard is not where Dask would send its handle
        counts = [client.submit(_rows, s, workers=[w], allow_other_workers=False, pure=False)
                  for s, w in zip(shards, used)]
        rows = _watch.wait_results(counts, client, used)
    except BaseException:
        _watch._cancel(client, shards)
        raise
    starts = np.concatenate([[0], np.cumsum(rows)]).astype(int)
    keep = [i for i, n in enumerate(rows) if n]
    if len(keep) < len(shards):
        _watch._cancel(client, [s for i, s in enumerate(shards) if i not in keep])
    if not keep:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    ranges = [[(int(starts[i]), int(starts[i + 1]))] for i in keep]
    return ([shards[i] for i in keep], [used[i] for i in keep],
            [("stream", (*sources[i], int(rows[i]))) for i in keep], ranges)


def _submit_streamed(client, worker, device, graph, names, check, parts):
    """The task on ``worker`` that computes ``parts`` of ``graph`` into a shard (a stream source's four fields)."""
    return client.submit(_dask_input.build_shard_streaming, device, check, names, graph, parts, workers=[worker],
                         allow_other_workers=False, pure=False)


def _place_dask(client, arrays, check, device, ws, choose=None):
    """Dask input: blocks computed once where Dask puts them, one shard per worker built from them (``_dask_input``)."""
    for k, v in arrays.items():
        if not is_dask_collection(v):
            raise TypeError(
                f"{k} is a {type(v).__name__} while another input is a dask collection; "
                "pass all of X, y and sample_weight as dask collections (they may be partitioned differently)."
            )
    names = list(arrays)
    colls = {k: _dask_input.normalise(arrays[k]) for k in names}
    streamed = _place_streamed(client, colls, check, device, ws, choose)
    if streamed is not None:
        return streamed
    blocks = _dask_input.persist_blocks(client, colls)
    shards, counted = [], {}
    try:
        lengths = {k: _dask_input.known_lengths(colls[k]) for k in names}
        counted = {k: client.map(_dask_input.n_rows, blocks[k], pure=False) for k in names if lengths[k] is None}
        waited = blocks[names[0]] + [f for fs in counted.values() for f in fs]
        _watch.wait_done(waited, client, [])
        _dask_input.raise_first_error(waited)
        lengths.update({k: client.gather(fs) for k, fs in counted.items()})
        check_lengths({k: int(sum(lengths[k])) for k in names})
        ws = _chosen(ws, choose, sum(lengths[names[0]]))
        who = client.who_has(blocks[names[0]])
        holders = [list(who.get(f.key, ())) for f in blocks[names[0]]]
        offsets = {k: _dask_input.offsets_of(lengths[k]) for k in names}
        used, sources, row_ranges = [], [], []
        # the shards' sources hold the input's graph, never its data, in collections of their own (the same graph
        # and keys): a placement kept after its fit does not keep the caller's collection objects alive
        graphs = {k: copy.copy(c) for k, c in colls.items()}
        for w, ranges in _dask_input.plan(lengths[names[0]], holders, ws):
            row_ranges.append([(int(a), int(b)) for a, b in ranges])
            segments, refs = _dask_input.segments_for(ranges, offsets)
            n = sum(b - a for a, b in ranges)
            shards.append(client.submit(
                _dask_input.build_shard_task, device, check, names, segments, n, *(blocks[k][j] for k, j in refs),
                workers=[w], allow_other_workers=False, pure=False,
            ))
            used.append(w)
            sources.append((graphs, names, check, segments, n, refs, {k: len(v) for k, v in lengths.items()}))
        _watch.wait_done(shards, client, used)
        _dask_input.raise_first_error(shards)
    except BaseException:
        _watch._cancel(client, shards)
        raise
    finally:
        # the shards hold their own copies: Dask frees the blocks of an unpersisted graph once nobody wants them
        for fs in (*blocks.values(), *counted.values()):
            for f in fs:
                f.release()
    if not shards:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    return shards, used, [("dask", src) for src in sources], row_ranges

