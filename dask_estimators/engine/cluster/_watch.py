"""Waiting on the cluster without ever hanging: loss of a worker, of the scheduler or of the client.

Every blocking wait of the engine (a round, a per-shard map, a collective)
goes through :func:`wait_results`.  It waits on the futures in slices of
``SLICE`` seconds; a finished future returns at once, so a round costs no
extra latency.  Between slices it checks that

* the client is still running and connected to its scheduler (a client that
  lost its scheduler reconnects for ``distributed.comm.timeouts.connect``;
  we give up after ``SCHEDULER_GRACE`` seconds with :class:`ClusterLostError`);
* every worker holding one of the shards is still in the cluster (a worker
  that died raises :class:`WorkerLostError`, which the evaluator answers by
  re-placing the lost shards, see :meth:`Placement.recover`);
* no task of the wait is held back by a worker that Dask paused (its memory
  above ``distributed.worker.memory.pause``): a paused worker starts no task,
  so one that stays paused for ``dask-estimators.paused-wait`` seconds while
  a task waits for it raises :class:`WorkerPausedError` (actor calls run on
  a paused worker, so a round through actors goes on);
* no other future of the same wait has failed already (one failed rank of a
  collective fails the whole call at once).

Without this, a round whose worker died would wait forever: Dask keeps a task
pinned to a dead worker in "no-worker", and an actor call to a dead worker
waits for the actor to be recreated.
"""

from __future__ import annotations

import asyncio
import threading
import time

__all__ = ["WorkerLostError", "WorkerLostWarning", "WorkerPausedError", "ClusterLostError", "wait_results", "wait_done",
           "alive_workers", "workers_info", "check_client", "explain_paused"]

#: Seconds between health checks while a wait goes on.
SLICE = 1.0
#: Seconds a client may spend reconnecting to its scheduler before the fit gives up.
SCHEDULER_GRACE = 5.0
#: Seconds one health-check request to the scheduler may take.
PROBE_TIMEOUT = 5.0


class WorkerLostWarning(UserWarning):
    """A worker holding part of the data was lost and the fit went on: its shards were placed again on the
    surviving workers from the input, and the result is the one an undisturbed fit gives.

    One warning per recovery, in place of the tracebacks a lost connection leaves in distributed's log.

    Examples
    --------
    >>> import warnings
    >>> from dask_estimators.engine import WorkerLostWarning
    >>> warnings.simplefilter("ignore", WorkerLostWarning)  # a user who does not want to hear of it
    """


class WorkerLostError(RuntimeError):
    """A worker holding a shard left the cluster (its process died or was closed).

    Attributes
    ----------
    workers : set of str
        The addresses of the lost workers.

    Examples
    --------
    >>> from dask_estimators.engine import WorkerLostError
    >>> err = WorkerLostError({"tcp://10.0.0.7:40331"})
    >>> sorted(err.workers)
    ['tcp://10.0.0.7:40331']
    """

    def __init__(self, workers, message=None):
        self.workers = set(workers)
        super().__init__(
            message or f"Lost the Dask worker(s) {sorted(self.workers)} holding part of the training data."
        )


class WorkerPausedError(MemoryError):
    """A worker the fit needs stayed paused by Dask: its memory passed ``distributed.worker.memory.pause`` of its
    ``memory_limit``, and a paused worker starts no task.

    Raised once a task of the fit has waited ``dask-estimators.paused-wait`` seconds for the worker, in place of
    waiting for memory that may never be freed.

    Attributes
    ----------
    workers : set of str
        The addresses of the paused workers.

    Examples
    --------
    >>> from dask_estimators.engine import WorkerPausedError
    >>> err = WorkerPausedError({"tcp://10.0.0.7:40331"}, "paused")
    >>> sorted(err.workers), isinstance(err, MemoryError)
    (['tcp://10.0.0.7:40331'], True)
    """

    def __init__(self, workers, message):
        self.workers = set(workers)
        super().__init__(message)


class ClusterLostError(RuntimeError):
    """The client was closed or lost its scheduler during a fit.

    Examples
    --------
    >>> from dask_estimators import LogisticRegression
    >>> from dask_estimators.engine import ClusterLostError
    >>> try:  # doctest: +SKIP
    ...     LogisticRegression().fit(X, y)
    ... except ClusterLostError:
    ...     print("the scheduler went away; refit on a new cluster")
    """


def _scheduler_address(client) -> str:
    try:
        return client.scheduler.address
    except Exception:  # pragma: no cover - a client without a scheduler rpc
        return "?"


def check_client(client, since=None) -> None:
    """Raise :class:`ClusterLostError` when ``client`` is closed or has lost its scheduler for too long.

    ``since`` is a dict shared across checks that remembers when the client
    was first seen reconnecting.
    """
    status = client.status
    if status in ("closing", "closed"):
        raise ClusterLostError(
            f"The Dask client is {status!r}: it was closed during the fit. Pass a running client, or "
            "client=None to use the active or embedded cluster."
        )
    if status == "connecting":
        now = time.monotonic()
        first = now if since is None else since.setdefault("connecting", now)
        if now - first >= SCHEDULER_GRACE:
            raise ClusterLostError(
                f"Lost the connection to the Dask scheduler at {_scheduler_address(client)} "
                f"(no reconnection within {SCHEDULER_GRACE:g} s); the fit was stopped."
            )
    elif since is not None:
        since.pop("connecting", None)


def _scheduler(client):
    """``client``'s connection to its scheduler; :class:`ClusterLostError` where it has none: the client was
    closed (:func:`check_client`'s words), or its cluster was closed under it."""
    rpc = getattr(client, "scheduler", None)
    if rpc is None:
        check_client(client)
        raise ClusterLostError("The Dask client has no scheduler any more: its cluster was closed during the fit. "
                               "Refit on a running cluster.")
    return rpc


def alive_workers(client, timeout=PROBE_TIMEOUT) -> set:
    """The addresses of the workers the scheduler knows now (one request, bounded by ``timeout``)."""
    try:
        ncores = client.sync(_scheduler(client).ncores, callback_timeout=timeout)
    except (OSError, asyncio.TimeoutError, TimeoutError) as e:
        raise ClusterLostError(
            f"The Dask scheduler at {_scheduler_address(client)} did not answer within {timeout:g} s ({e!r})."
        ) from e
    return set(ncores)


def workers_info(client, timeout=PROBE_TIMEOUT) -> dict:
    """The scheduler's record of each of its workers now: address -> dict (``"name"``, ``"memory_limit"``, ...).

    One request, bounded by ``timeout``.  Not ``client.scheduler_info()``: that returns the client's shared
    cache, which the client's own periodic refresh (a record without workers) may overwrite between the
    request and the return.
    """
    import inspect

    kw = {"n_workers": -1} if "n_workers" in inspect.signature(client.scheduler_info).parameters else {}
    try:
        info = client.sync(_scheduler(client).identity, **kw, callback_timeout=timeout)
    except (OSError, asyncio.TimeoutError, TimeoutError) as e:
        raise ClusterLostError(
            f"The Dask scheduler at {_scheduler_address(client)} did not answer within {timeout:g} s ({e!r})."
        ) from e
    return dict(info["workers"])


def _paused_wait() -> float:
    from ... import config as _config

    return float(_config.get("paused-wait"))


def _mib(n) -> str:
    return f"{float(n or 0) / 2**20:,.0f} MiB"


def _paused_in(info, workers) -> set:
    """The workers of ``workers`` that the scheduler's record ``info`` (:func:`workers_info`) says are paused."""
    return {w for w in workers if (info.get(w) or {}).get("status") == "paused"}


def _paused_error(info, paused, waited: str) -> WorkerPausedError:
    """The error for ``paused`` workers, with each one's memory and limit from ``info`` (:func:`workers_info`)."""
    import dask.config

    each = "; ".join(
        f"{w}: {_mib(((info.get(w) or {}).get('metrics') or {}).get('memory'))} of a "
        f"memory_limit of {_mib((info.get(w) or {}).get('memory_limit'))}"
        for w in sorted(paused)
    )
    share = dask.config.get("distributed.worker.memory.pause", None)
    above = f"above {share:.0%} of their memory limit" if isinstance(share, (int, float)) else "near their memory limit"
    return WorkerPausedError(
        paused,
        f"The Dask worker(s) {sorted(paused)} are paused: their memory is {above} "
        f"(distributed.worker.memory.pause), and a paused worker starts no task. The fit waited {waited} for "
        f"them and stopped ({each}). Give the workers more memory (memory_limit) "
        "or add workers, or fit less data at once.",
    )


def _paused_since(client, workers, alive, since, pending) -> None:
    """Raise :class:`WorkerPausedError` when a task of ``pending`` (unfinished Dask futures) has waited
    ``paused-wait`` seconds for workers that stayed paused all that time.

    A task placed on workers that are all paused waits in the scheduler's ``no-worker`` state: it is stuck once a
    worker of ``workers`` (those the wait needs) is paused, or every worker of the cluster (``alive``) where
    ``workers`` is empty (tasks that may run anywhere).  A task that may run anywhere waits ``queued`` also while
    the running workers are busy: it is stuck only once every worker is paused.  ``since["paused"]`` remembers
    when each worker was first seen not running.
    """
    running = set(client.sync(_scheduler(client).ncores_running, callback_timeout=PROBE_TIMEOUT))
    first = since.setdefault("paused", {})
    now = time.monotonic()
    for w in list(first):
        if w in running or w not in alive:
            del first[w]
    for w in alive - running:
        first.setdefault(w, now)
    wait = _paused_wait()
    long = {w for w, t in first.items() if now - t >= wait}
    everyone = bool(alive) and alive <= long
    needed = long & set(workers) if workers else (long if everyone else set())
    if not needed:
        return
    keys = [f.key for f in pending]
    states = set(client.sync(_scheduler(client).get_task_status, keys=keys, callback_timeout=PROBE_TIMEOUT).values())
    if "no-worker" not in states and not ("queued" in states and everyone) and not (
            "processing" in states and _unstarted_on(client, needed, keys)):
        return
    info = workers_info(client)
    paused = _paused_in(info, needed)
    if paused:
        raise _paused_error(info, paused, f"{wait:g} s (dask-estimators.paused-wait)")


def _unstarted_on(client, workers, keys) -> bool:
    """Whether a task of ``keys`` was handed to one of the paused ``workers`` before it paused and waits there
    unstarted (the scheduler says ``processing``; a paused worker starts nothing).  A task it runs already goes
    on, and its end is waited for."""
    try:
        found = client.run(_unstarted, keys, workers=sorted(workers))
    except Exception:  # noqa: BLE001 - a worker that does not answer: the other checks of the wait see it
        return False
    return any(found.values())


def _unstarted(keys, dask_worker=None) -> bool:
    """On a worker: whether one of ``keys`` is among its tasks, not yet running (``client.run``'s target)."""
    tasks = dask_worker.state.tasks
    return any(getattr(tasks.get(k), "state", None) in ("ready", "constrained", "waiting", "fetch", "flight")
               for k in keys)


def explain_paused(exc, client, workers) -> None:
    """After distributed's ``scatter`` to ``workers`` gave up (``TimeoutError("No valid workers found")``: it
    sends to running workers only): raise :class:`WorkerPausedError` when they are paused."""
    if "No valid workers" not in str(exc):
        return
    info = workers_info(client)
    paused = _paused_in(info, workers)
    if paused:
        raise _paused_error(info, paused, "as long as distributed's scatter waits (its client's timeout)") from exc


def _health(client, workers, since, pending=()) -> None:
    """Between two slices of a wait: the client, the scheduler, the lost workers, and (when Dask futures of the
    wait, ``pending``, are not done) the paused ones."""
    check_client(client, since)
    pending = [f for f in pending if _is_task(f) and not f.done()]
    if client.status != "running" or not (workers or pending):
        return
    alive = alive_workers(client)
    lost = set(workers) - alive
    if lost:
        raise WorkerLostError(lost)
    if pending:
        _paused_since(client, workers, alive, since, pending)


def _is_task(f) -> bool:
    """Whether ``f`` is a Dask future (a task's), not an actor's."""
    from distributed import Future

    return isinstance(f, Future)


#: Errors that may mean "the worker is gone" rather than "the kernel failed".
def _maybe_lost(exc) -> bool:
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    if isinstance(exc, (OSError, KilledWorker, FutureCancelledError, asyncio.CancelledError)):
        return True
    # an actor proxy whose worker is known lost: a RuntimeError in distributed 2026, a ValueError before (2025.4)
    return isinstance(exc, (RuntimeError, ValueError)) and "Worker holding Actor was lost" in str(exc)


def diagnose(exc, client, workers, grace=SCHEDULER_GRACE):
    """After ``exc`` from a future: raise :class:`WorkerLostError` if a worker of ``workers`` is gone.

    The scheduler may learn of a dead worker a moment after a direct
    connection to it broke, so this polls for up to ``grace`` seconds.
    Returns when every worker is alive (``exc`` is then the caller's to raise).
    """
    if isinstance(exc, (WorkerLostError, ClusterLostError)) or not _maybe_lost(exc):
        return
    deadline = time.monotonic() + grace
    since: dict = {}
    while True:
        check_client(client, since)
        if client.status == "running":
            lost = set(workers) - alive_workers(client)
            if lost:
                raise WorkerLostError(lost) from exc
        if time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def explain(exc, client, workers) -> None:
    """Raise the clear error behind ``exc`` (closed client, lost scheduler or worker), if there is one."""
    if isinstance(exc, (WorkerLostError, ClusterLostError)):
        return
    check_client(client)
    diagnose(exc, client, workers)


class _Done:
    """Set once every Dask future given is finished, failed or cancelled: distributed's done callbacks, no polling.

    ``Future.result(timeout)`` that times out leaves a waiter on the client's
    event loop that keeps the future (and so its data on the workers) alive:
    measured, a placement whose waits timed out kept every row block on the
    workers for the whole fit.  A done callback holds its future only until
    the future is done (a wait that gives up cancels or releases the futures).
    Polled instead (``done()`` every 0.5-10 ms), a small fit's placement took
    longer: the poll woke late (docs/design-measurements.md has the measurement).
    """

    def __init__(self, futures):
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._left = 1  # until every callback is in: one that runs at once must not set the event early
        self._futures = list(futures)
        for f in self._futures:
            if f.done():
                continue
            with self._lock:
                self._left += 1
            try:
                f.add_done_callback(self._one)
            except Exception:  # a client that takes no callback (closed): its futures are looked at, a slice apart
                pass
        self._one(None)

    def _one(self, _f) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._event.set()

    def wait(self, timeout) -> bool:
        """True once every future is done; False after ``timeout`` seconds."""
        # at the slice's end the futures themselves: a callback held up (distributed runs them in one thread) or
        # never registered
        return self._event.wait(timeout) or all(f.done() for f in self._futures)


def _result(f, timeout, done=None):
    """``f.result(timeout)``; for a Dask future, its wait on ``done`` (its :class:`_Done`, made here if None)."""
    if timeout is None or not hasattr(f, "key"):
        return f.result(timeout=timeout)
    if not f.done() and not (done or _Done([f])).wait(timeout):
        raise TimeoutError(f"timed out after {timeout} s.")
    return f.result()


def wait_results(futures, client, workers, timeout=None, cancel_on_error=None) -> list:
    """The results of ``futures`` (Dask futures or actor futures), in order, without ever hanging.

    Parameters
    ----------
    futures : list
        Objects with ``result(timeout)`` and ``done()``.
    client : distributed.Client
    workers : iterable of str
        The workers the futures need; losing one raises :class:`WorkerLostError`.
    timeout : float, optional
        Seconds the whole wait may take before :class:`TimeoutError`.
    cancel_on_error : list, optional
        Dask futures to cancel when the wait fails (the pending parts of a round).
    """
    futures = list(futures)
    workers = list(workers)
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    since: dict = {}
    out = []
    try:
        for f in futures:
            done = _Done([f]) if hasattr(f, "key") and not f.done() else None  # once per future, not per slice
            while True:
                slice_ = SLICE if deadline is None else max(0.0, min(SLICE, deadline - time.monotonic()))
                try:
                    out.append(_result(f, slice_, done))
                    break
                except (asyncio.TimeoutError, TimeoutError) as e:
                    if f.done():  # finished just now, or the call itself raised a TimeoutError
                        try:
                            out.append(_result(f, None))
                            break
                        except Exception as e2:
                            diagnose(e2, client, workers)
                            raise
                    if deadline is not None and time.monotonic() >= deadline:
                        raise TimeoutError(
                            f"A distributed round took longer than timeout={timeout:g} s."
                        ) from e
                    for g in futures:  # another part failed already: fail now
                        if g is not f and g.done() and _failed(g):
                            _result(g, 0)
                    _health(client, workers, since, futures)
                except BaseException as e:
                    if isinstance(e, Exception):
                        diagnose(e, client, workers)
                    raise
    except BaseException:
        if cancel_on_error:
            _cancel(client, cancel_on_error)
        raise
    return out


def wait_done(futures, client, workers, timeout=None) -> None:
    """Wait until every Dask future in ``futures`` is finished or failed, without fetching any result.

    For futures whose results must stay on the workers (shards): their done
    callbacks (:class:`_Done`) are local, so nothing travels and no waiter is
    left behind.  The health of the client, the scheduler and ``workers`` is
    checked every :data:`SLICE` seconds, as in :func:`wait_results`.
    """
    futures = list(futures)
    workers = list(workers)
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    since: dict = {}
    done = _Done(futures)
    while True:
        slice_ = SLICE if deadline is None else max(0.0, min(SLICE, deadline - time.monotonic()))
        if done.wait(slice_):
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"Placing the data took longer than timeout={timeout:g} s.")
        _health(client, workers, since, futures)


def _failed(f) -> bool:
    status = getattr(f, "status", None)
    if status is not None:  # a Dask future
        return status in ("error", "cancelled", "lost")
    try:
        f.result(0)
    except (asyncio.TimeoutError, TimeoutError):
        return False
    except BaseException:
        return True
    return False


def _cancel(client, futures, cancel=False) -> None:
    """Let go of Dask futures: release them (default), or cancel them when ``cancel`` and the client runs.

    The failure paths only release: cancelling keys whose dependencies were
    lost with a worker trips an assertion in the scheduler
    (``stimulus_cancel``: ``assert ts.who_wants``) that breaks the client's
    connection.  Released keys that nothing else holds are forgotten.
    """
    futures = [f for f in futures if hasattr(f, "key") and hasattr(f, "release")]
    if not futures:
        return
    if cancel and client.status == "running" and not client.asynchronous:  # in its loop: a coroutine
        try:
            client.cancel(futures)
            return
        except Exception:
            pass
    for f in futures:
        try:
            f.release()
        except Exception:
            pass
