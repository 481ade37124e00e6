"""Which Dask client a fit uses.

Resolution order, at fit time:

1. ``client=`` given: a :class:`distributed.Client`, or a scheduler address
   string (one client per address is opened and reused).
2. The active client: the default client of this process or, inside a Dask
   task, the worker's client (the task secedes from the worker's thread pool
   while it waits, so a fit inside a task cannot starve its own cluster).
3. Otherwise an embedded :class:`distributed.LocalCluster`: worker processes,
   one thread each, bound to 127.0.0.1, no dashboard.  It is started once per
   process on first use, reused by every later fit, and closed at exit.

Estimators never keep the client: it is resolved for each call and dropped.

The embedded cluster's scheduler runs in this process; each worker runs with
its nanny in a subprocess of its own (:mod:`._nanny`), started as
``python -m dask_estimators.engine.cluster._nanny_process``.  A LocalCluster's own nannies
would start their workers with multiprocessing's spawn method, which imports
the user's ``__main__`` again in every worker, so a script without an
``if __name__ == "__main__":`` guard would fail ("Nanny failed to start").
Our worker processes never import the user's script, so no guard is needed.
They exit with this process, even when it is killed (SIGKILL): see
:mod:`._nanny`.  A worker that dies is restarted by its nanny.  While the
cluster starts, the estimators validate their data (:func:`prestart`).  On
Linux one process, the zygote, imports the engine (torch, numba, the
kernels) once, from the moment the estimators are first imported, and forks
every nanny, which forks its worker (:mod:`._zygote`,
:func:`._nanny_process.fork_workers`); elsewhere every worker imports them as it
starts, before it registers (:mod:`._warm`).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import sys
import threading
import weakref

import distributed
from threadpoolctl import ThreadpoolController

from ... import config as _config

__all__ = ["resolve_client", "client_context", "current", "get_embedded_client", "close_embedded_cluster", "prestart"]

_lock = threading.RLock()
_embedded: dict = {}
#: Clusters whose workers import the engine as they start (the embedded cluster's): no client warms them
_STARTS_WARM: weakref.WeakSet = weakref.WeakSet()
_by_address: dict[str, distributed.Client] = {}


def _default_n_workers() -> int:
    n = _config.get("embedded-workers")
    if n is not None:
        return int(n)
    return max(1, min(os.cpu_count() or 1, 8))


def _check_running_as_asked(cluster, n_workers, dashboard) -> None:
    """Warn where the embedded cluster, already running, is not what the call asks for (it is returned as it is)."""
    if cluster is None:
        return
    import warnings

    unlike = []
    running = len(getattr(cluster, "workers", {}))
    if n_workers is not None and running and n_workers != running:
        unlike.append(f"{running} worker(s), not {n_workers}")
    if dashboard and not _embedded.get("dashboard"):
        unlike.append("no dashboard")
    if unlike:
        warnings.warn(
            f"The embedded Dask cluster already runs, with {' and '.join(unlike)}: it is returned as it is. "
            "Call dask_estimators.engine.close_embedded_cluster() first to start it with other settings.",
            UserWarning,
            stacklevel=3,
        )


def get_embedded_client(n_workers: int | None = None, dashboard: bool = False) -> distributed.Client:
    """Return the embedded LocalCluster's client, starting it on first use.

    Parameters
    ----------
    n_workers : int, optional
        Worker processes for a cluster started by this call.  Defaults to the
        dask config value ``dask-estimators.embedded-workers``, else the number
        of cores (at most 8).  Ignored when the cluster already runs.
    dashboard : bool, default False
        Serve the dashboard on 127.0.0.1 (a free port) when True.

    Returns
    -------
    distributed.Client

    Examples
    --------
    >>> from dask_estimators.engine import get_embedded_client
    >>> client = get_embedded_client(n_workers=2)  # doctest: +SKIP
    >>> get_embedded_client() is client  # doctest: +SKIP
    True
    """
    with _lock:
        client = _embedded.get("client")
        if client is not None and client.status == "running":
            _check_running_as_asked(_embedded.get("cluster"), n_workers, dashboard)
            return client
        old = _embedded.get("cluster")
        if old is not None and old.status.name == "running":
            _check_running_as_asked(old, n_workers, dashboard)
            client = distributed.Client(old, set_as_default=False)
            _embedded["client"] = client
            return client
        from ._nanny import SubprocessNanny

        n = n_workers or _default_n_workers()
        cluster = distributed.LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            worker_class=SubprocessNanny,  # see the module docstring: no worker imports the user's __main__
            preload=["dask_estimators.engine.cluster._warm"],  # each worker imports the engine while the client validates
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0" if dashboard else None,
            # the scheduler's small HTTP server (health, metrics) stays on loopback, on a free port
            scheduler_kwargs={} if dashboard else {"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        )
        _STARTS_WARM.add(cluster)
        try:
            client = distributed.Client(cluster, set_as_default=False)
            _wait_for_workers(client, cluster, n)
        except BaseException:
            with contextlib.suppress(Exception):
                cluster.close()
            raise
        _embedded.update(cluster=cluster, client=client, dashboard=bool(dashboard))
        return client


#: Seconds the embedded cluster's workers have to start and connect (far longer on a loaded machine than on an
#: idle one; docs/design-measurements.md has the measurement).
START_TIMEOUT = 180.0


def _wait_for_workers(client: distributed.Client, cluster, n: int) -> None:
    """Wait until ``n`` workers have connected; fail in one line when a nanny process exits or time runs out."""
    import time

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            client.wait_for_workers(n, timeout=0.5)
            return
        except TimeoutError:
            pass
        exited = [w.returncode for w in cluster.workers.values() if getattr(w, "returncode", None) is not None]
        if exited or time.monotonic() > deadline:
            why = (
                f"a worker process exited with code {exited[0]} (its error is printed above)"
                if exited
                else f"its workers did not connect within {START_TIMEOUT:g} s"
            )
            raise RuntimeError(
                f"The embedded Dask cluster did not start: {why}. Start a cluster yourself "
                "(distributed.LocalCluster) and pass it to the estimator as client=."
            )


def _start_in_background() -> None:
    with contextlib.suppress(Exception):  # the fit that needs the cluster reports the error
        get_embedded_client()


def prestart(client=None) -> None:
    """Start the embedded cluster in a background thread if ``client`` will need it.

    Called by ``fit`` before it validates its data, so that the workers start
    meanwhile; the fit's :func:`client_context` then waits for them.  It does
    nothing when ``client`` is given, a client is active, or the embedded
    cluster already runs.

    Parameters
    ----------
    client : distributed.Client, str or None
        The estimator's ``client`` parameter.

    Examples
    --------
    >>> from dask_estimators.engine.cluster.client import prestart
    >>> prestart(None)  # doctest: +SKIP
    """
    if client is not None or _embedded.get("cluster") is not None or _INHERITED[0] is not None or _lock_is_held():
        return
    try:
        distributed.get_client()
        return
    except ValueError:
        pass
    threading.Thread(target=_start_in_background, name="dask-estimators-prestart", daemon=True).start()


def _lock_is_held() -> bool:
    """Whether some thread is starting the embedded cluster now."""
    if _lock.acquire(blocking=False):
        _lock.release()
        return False
    return True


def close_embedded_cluster() -> None:
    """Close the embedded cluster and every client opened from an address.

    It runs at exit on its own; call it to free the worker processes sooner.
    The next fit that needs the embedded cluster starts a new one.

    Examples
    --------
    >>> from dask_estimators.engine import close_embedded_cluster, get_embedded_client
    >>> client = get_embedded_client()  # doctest: +SKIP
    >>> close_embedded_cluster()  # doctest: +SKIP
    >>> client.status  # doctest: +SKIP
    'closed'
    """
    with _lock:
        client = _embedded.pop("client", None)
        cluster = _embedded.pop("cluster", None)
        _embedded.pop("dashboard", None)
        for c in [client, *_by_address.values()]:
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        _by_address.clear()
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()


def _close_at_exit() -> None:
    """At interpreter exit: the workers hold nothing that outlives this process (no fit keeps data on
    them), so they are killed at once instead of closed gracefully (a graceful close was a large share of a
    three-line script's time; docs/design-measurements.md has the measurement), then the cluster is closed."""
    import logging
    import signal

    cluster = _embedded.get("cluster")
    if cluster is not None or _by_address:
        # the scheduler and the client notice the killed workers' closed connections, and a client opened from an
        # address whose cluster has closed since logs its failed reconnection as it closes: nothing a user should
        # read at exit (tracebacks at INFO and ERROR level from distributed, now and then)
        for name in ("distributed", "distributed.client"):  # distributed's config gives the client a level
            logging.getLogger(name).setLevel(logging.CRITICAL)
        for address, c in list(_by_address.items()):
            if c.status != "running":  # reconnecting to a cluster closed since: its close would wait that out
                del _by_address[address]
        for w in list(getattr(cluster, "workers", {}).values()):
            pid = getattr(w, "pid", None)
            if not pid:
                continue
            with contextlib.suppress(Exception):
                import psutil

                procs = psutil.Process(pid).children(recursive=True) + [psutil.Process(pid)]
                for proc in procs:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        proc.send_signal(signal.SIGKILL)
    close_embedded_cluster()
    from . import _zygote

    _zygote.close()


atexit.register(_close_at_exit)


def _after_fork_in_child() -> None:
    """In a child made by ``fork``: the clients inherited from the parent have no event loop here (it was a
    thread of the parent's), so each fit on them waited out its probes and raised ``ClusterLostError``.  They
    are dropped (not closed: they are the parent's), and the child's fits use the parent's embedded cluster by
    its address, as a child that was sent an estimator does (:func:`adopt_sender`), else a cluster of their own."""
    global _lock, _warm_lock, _BLAS_LOCK
    _lock = threading.RLock()  # another thread of the parent may have held them at the fork
    _warm_lock = threading.Lock()
    _BLAS_LOCK = threading.Lock()
    limiter, _BLAS_HELD[:] = _BLAS_HELD[1], [0, None]  # the fits of the parent's other threads are not here
    if limiter is not None:
        with contextlib.suppress(Exception):
            limiter.restore_original_limits()
    address = None
    client = _embedded.get("client")
    if client is not None:
        with contextlib.suppress(Exception):
            address = client.scheduler.address
    _embedded.clear()
    _by_address.clear()
    _BORROWED.clear()
    if address is not None:
        _INHERITED[0] = address
    # the user's clients too (the active one, or one given as client=): a fit on one of them uses a client of
    # this process to the same scheduler (resolve_client)
    _FORKED.clear()
    with contextlib.suppress(Exception):
        from distributed.client import _global_clients

        for c in list(_global_clients.values()):
            _FORKED.add(c)


#: The clients this process inherited from its parent by ``fork`` (:func:`_after_fork_in_child`): unusable here.
_FORKED: "weakref.WeakSet" = weakref.WeakSet()


def _forked_address(client) -> str | None:
    """The scheduler address of ``client`` where it is the parent's (this process a forked child), else None."""
    if client is None or not _FORKED or client not in _FORKED:
        return None
    try:
        return client.scheduler.address
    except Exception:  # noqa: BLE001 - no address known: the caller goes on as without
        return None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: Seconds to connect to a scheduler given by address, or for a client that lost its scheduler to reconnect.
CONNECT_TIMEOUT = 10.0


def _check_running(client: distributed.Client) -> distributed.Client:
    import time

    if getattr(client, "asynchronous", False):  # True only in the thread of the client's own event loop
        raise RuntimeError(
            "The Dask client is asynchronous and this fit runs in its event loop, which a fit would block. Run "
            "the fit in another thread (await asyncio.to_thread(est.fit, X, y)), or pass a synchronous client."
        )

    deadline = time.monotonic() + CONNECT_TIMEOUT
    while client.status in ("connecting", "newly-created") and time.monotonic() < deadline:
        time.sleep(0.1)  # a client that lost its scheduler tries to reconnect: give it a moment
    if client.status == "connecting":
        from ._watch import ClusterLostError

        raise ClusterLostError(
            f"The Dask client has lost its scheduler at {client.scheduler.address} and did not reconnect "
            f"within {CONNECT_TIMEOUT:g} s."
        )
    if client.status != "running":
        raise RuntimeError(
            f"The Dask client is {client.status!r}; pass a running client or "
            "client=None to use the active or embedded cluster."
        )
    return client


def resolve_client(client=None) -> distributed.Client:
    """Return the client a fit should use (see the module docstring).

    Parameters
    ----------
    client : distributed.Client, str or None
        A client, a scheduler address such as ``"tcp://127.0.0.1:8786"``, or
        None for the active client or else the embedded cluster.

    Returns
    -------
    distributed.Client

    Examples
    --------
    >>> from dask_estimators.engine import resolve_client
    >>> client = resolve_client()  # doctest: +SKIP
    """
    if client is not None:
        _discard_zygote()
        if isinstance(client, str):
            with _lock:
                c = _by_address.get(client)
                if c is None or c.status != "running":
                    try:
                        c = distributed.Client(client, set_as_default=False, timeout=CONNECT_TIMEOUT)
                    except OSError as e:  # includes TimeoutError
                        raise OSError(
                            f"Could not connect to the Dask scheduler at {client!r} within {CONNECT_TIMEOUT:g} s: {e}"
                        ) from e
                    _by_address[client] = c
                return c
        if isinstance(client, distributed.Client):
            address = _forked_address(client)
            return _check_running(client) if address is None else resolve_client(address)
        raise TypeError(
            f"client must be a distributed.Client, a scheduler address or None, got {type(client).__name__}."
        )
    try:
        active = distributed.get_client()
    except ValueError:
        active = None
    address = _forked_address(active)
    if address is not None:  # the parent's client (this a forked child): one of this process to its scheduler
        return resolve_client(address)
    if active is not None and active.status in ("running", "connecting"):
        # a client that lost its scheduler and tries to reconnect is still the user's: the fit waits for it or
        # raises ClusterLostError (it ran on a new embedded cluster, silently)
        _discard_zygote()
        return _check_running(active)
    inherited = _INHERITED[0]
    if inherited is not None:
        try:
            return resolve_client(inherited)
        except OSError:  # the parent's cluster is gone: this process's own, as without it
            _INHERITED[0] = None
    return get_embedded_client()


#: The scheduler address the parent process's fits use, when it sent this process estimators (adopt_sender).
_INHERITED: list = [None]
#: id of a client of that address -> fits running on it (_borrowed)
_BORROWED: dict = {}


@contextlib.contextmanager
def _borrowed(client):
    """A client of the parent's scheduler (:func:`adopt_sender`) is closed when the last fit running on it ends.

    Kept open, it outlived the parent's cluster in the parent's idle joblib
    workers, and logged its failed reconnection as errors when the parent
    exited.  A new one connects quickly; the close, which takes longer, runs
    in a thread of its own (docs/design-measurements.md has both).
    """
    address = _INHERITED[0]
    if client is None or address is None or _by_address.get(address) is not client:
        yield
        return
    with _lock:
        _BORROWED[id(client)] = _BORROWED.get(id(client), 0) + 1
    try:
        yield
    finally:
        with _lock:
            _BORROWED[id(client)] -= 1
            last = _BORROWED[id(client)] == 0
            if last:
                del _BORROWED[id(client)]
                if _by_address.get(address) is client:
                    del _by_address[address]
        if last:
            threading.Thread(target=_close_quietly, args=(client,), name="dask-estimators-close", daemon=True).start()


def _close_quietly(client) -> None:
    with contextlib.suppress(Exception):
        client.close()


def sender_address(client=None) -> str | None:
    """The address of the scheduler a fit with ``client`` would use in this process now, without starting one.

    ``client`` as :func:`resolve_client`'s; for None, this process's default client's, else the running
    embedded cluster's; None where no cluster runs yet.  It connects nothing: inside a Dask task, where
    ``distributed.get_client`` would connect the worker's client, only a default client counts.
    """
    try:
        if isinstance(client, str):
            return client
        if client is None:
            try:
                client = distributed.default_client()
            except ValueError:
                client = _embedded.get("client") or (_INHERITED[0] and _by_address.get(_INHERITED[0]))
        if isinstance(client, distributed.Client) and client.status == "running":
            return client.scheduler.address
    except Exception:  # noqa: BLE001 - a client closing meanwhile: no address
        pass
    return None


def adopt_sender(address: str | None, pid: int) -> None:
    """An estimator unpickled here came from process ``pid``, whose fits used the scheduler at ``address``.

    When ``pid`` is this process's parent (the workers of joblib's process
    backends: a scikit-learn search with ``n_jobs``, ``cross_val_score``),
    this process's fits without a client of their own use that scheduler
    instead of each starting an embedded cluster (:func:`resolve_client`):
    a ``GridSearchCV(n_jobs=2)`` of 9 small fits took far longer than with
    ``n_jobs=1`` and left processes behind (benchmarks/results/history/search-n-jobs.md, "A search with ``n_jobs``").
    A client active here still comes first.
    """
    if pid == os.getppid():  # None: the parent runs no cluster now (one it ran before has gone)
        _INHERITED[0] = address or None


def _discard_zygote() -> None:
    """A fit on another cluster: stop the zygote started for an embedded cluster, unless it has one already."""
    if "cluster" not in _embedded:
        from . import _zygote

        _zygote.discard_unused()


def _in_task() -> bool:
    try:
        distributed.get_worker()
    except ValueError:
        return False
    try:  # private: the key of the task this thread runs (docs/private-apis.md)
        from distributed.utils import thread_state
    except ImportError:  # a distributed without it: inside a worker process, count it as a task
        return True
    return getattr(thread_state, "key", None) is not None


#: the client's ThreadpoolController, and len(sys.modules) when it was made (see _one_blas_thread)
_BLAS: list = [None, -1]


@contextlib.contextmanager
def _one_blas_thread():
    """``threadpool_limits(limits=1, user_api="blas")`` while fits run, through a controller kept between fits.

    Making a controller scans the process's libraries, a cost each fit paid
    in a client that has fitted a network (docs/design-measurements.md has the
    measurement).  One is made again after modules were
    imported since (a BLAS loaded later is found then).  Fits that run at
    once (threads) share one limit, set by the first and lifted by the last
    to end: each fit's own limit restored what it found, the limit of the fit
    that began before it, and the process's BLAS stayed at one thread.
    """
    with _BLAS_LOCK:
        if _BLAS_HELD[0] == 0:
            n = len(sys.modules)
            if _BLAS[0] is None or _BLAS[1] != n:
                _BLAS[:] = [ThreadpoolController(), n]
            _BLAS_HELD[1] = _BLAS[0].limit(limits=1, user_api="blas")
        _BLAS_HELD[0] += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_HELD[0] -= 1
            if _BLAS_HELD[0] == 0:
                limiter, _BLAS_HELD[1] = _BLAS_HELD[1], None
                limiter.restore_original_limits()


_BLAS_LOCK = threading.Lock()
#: fits inside :func:`_one_blas_thread` now, and the limit the first of them set
_BLAS_HELD: list = [0, None]


#: Guards the warm-ups' records below, held for no more than an update: a client's preload takes it on the
#: client's event loop, while the thread that makes the client may hold :data:`_lock` and wait for that loop.
_warm_lock = threading.Lock()
#: client id -> the workers known warm or asked to warm up through it (warm_ahead)
_WARMED: dict = {}
#: (client id, networks) of the clients whose every worker was asked at once (warm_ahead with workers=None)
_ASKED_ALL: set = set()


def warm_ahead(client, workers=None, using=(), networks=False) -> None:
    """Ask ``workers`` to import the engine and load the linear kernels now, without waiting; each once per client.

    A small fit runs on one worker, the workers in turn.  On a cluster
    started without the package's preload (a plain ``Client()``) each
    worker's first fit imported torch and numba first, which made a fresh
    cluster's first two fits slow (benchmarks/results/history/first-fit.md).  Asked while
    a fit runs on another worker, the next one imports meanwhile.  ``using``:
    workers the caller's own tasks warm up (marked, not asked).  The
    embedded cluster's workers start warm (:mod:`._warm`): nothing is sent.
    ``workers=None``: every worker the scheduler has, looked up on the
    client's event loop too, so the caller waits for no round trip.

    With ``networks`` (a network's fit asks the workers it does not use),
    the networks' first uses too, on the embedded cluster as well: its
    workers start without them when the session's first estimator was a
    linear one (:func:`._zygote.prewarm`), and a network fit takes the
    workers in turn.
    """
    if client is _embedded.get("client") and not networks:
        return
    key = (getattr(client, "id", None), networks)
    if workers is None:  # every worker: asked once per client (a worker that joins later warms in its first task)
        with _warm_lock:
            if key in _ASKED_ALL:
                return
            _ASKED_ALL.add(key)
    else:
        workers = _mark_warmed(key, workers, using)
        if not workers:
            return
    if getattr(client, "status", None) != "running":
        return
    import asyncio

    # on the client's event loop, not waited for: the fit goes on at once, also when a worker is slow to answer
    # (a worker gone, a client closing: its first task warms it up)
    run = _warm_cold(client, key, workers, using)
    try:
        asyncio.run_coroutine_threadsafe(run, client.loop.asyncio_loop).add_done_callback(_retrieved)
    except Exception:  # noqa: BLE001 - not sent
        run.close()


def _mark_warmed(key, workers, using) -> list:
    """Record ``workers`` and ``using`` as warm (or asked) under ``key``; returns the ``workers`` not recorded
    before, nor in ``using``."""
    with _warm_lock:
        known = _WARMED.setdefault(key, set())
        cold = [w for w in workers if w not in known and w not in using]
        known.update(cold, using)
    return cold


def warm_active_client(networks: bool = False) -> None:
    """:func:`warm_ahead` on every worker of this process's active client, where it has one (a cluster the user
    started), without importing distributed where it is not imported yet (then there is none).

    Called when user code first reads an estimator class (``de.LogisticRegression``): the workers import the
    engine and load the kernels while the user's code goes on to its data.  Not in a Dask worker.
    """
    from ._zygote import in_dask_worker

    client_module = sys.modules.get("distributed.client")
    if client_module is None or in_dask_worker():
        return
    try:
        client = client_module.default_client()
    except ValueError:  # no client
        return
    warm_ahead(client, networks=networks)


def watch_new_clients() -> None:
    """Have each :class:`distributed.Client` made from now on in this process ask its workers to warm up as it
    connects (:func:`warm_new_client`), through Dask's client preload: ``dask_estimators.preload`` becomes the
    default of ``distributed.client.preload``.

    A preload list of the user's own (a YAML file, an environment variable, ``dask.config.set``) stays as it
    is: then new clients warm their workers at the first class read or fit, as without this.  Called where
    the package is imported, or an estimator class first read, in a process that has imported distributed
    (a client comes after that); not in a Dask worker.  Once per process.
    """
    with _warm_lock:
        if _WATCHING[0]:
            return
        _WATCHING[0] = True
    import dask.config

    dask.config.update_defaults({"distributed": {"client": {"preload": [CLIENT_PRELOAD]}}})


#: The client preload (:func:`watch_new_clients`), and the worker preload of the package's public name.
CLIENT_PRELOAD = "dask_estimators.preload"
#: Whether the client preload is among Dask's defaults (:func:`watch_new_clients`).
_WATCHING = [False]


def warm_new_client(client) -> None:
    """The client preload (:func:`watch_new_clients`): :func:`warm_ahead` on every worker the new client's
    scheduler has, without waiting, while the user's code goes on to its data.  The linear models' modules
    only: torch (2 s of a worker's time, and its memory) comes with a network's class read or fit.

    Nothing in a Dask worker, for the embedded cluster's client (its workers start warm), or where
    ``dask-estimators.warm-clients`` is false; it never fails the client's start (a worker that could
    not warm up warms in its first task).
    """
    try:
        from ._zygote import in_dask_worker

        if in_dask_worker() or getattr(client, "cluster", None) in _STARTS_WARM or not _config.get("warm-clients"):
            return
        warm_ahead(client)
    except Exception:  # noqa: BLE001 - the fits warm the workers up themselves
        import logging

        logging.getLogger(__name__).debug("the new client's workers were not asked to warm up", exc_info=True)


async def _warm_cold(client, key, workers, using) -> None:
    from ._warm import warm_running

    if workers is None:
        ncores = await client.scheduler.ncores()
        if not ncores:  # none yet (a client made before its workers): a later class read or fit asks again
            with _warm_lock:
                _ASKED_ALL.discard(key)
            return
        workers = _mark_warmed(key, ncores, using)
    if workers:
        await client.run(warm_running, key[1], workers=workers, wait=False, asynchronous=True)


def _retrieved(future) -> None:
    """Done callback: take a background call's outcome (an error there is the worker's first task's to report)."""
    if not future.cancelled():
        future.exception()


#: client's message stream -> [fits running on it, its interval before the first] (see _prompt_sends)
_PROMPT: dict = {}
_PROMPT_LOCK = threading.Lock()


def _send_interval() -> float:
    """``dask-estimators.send-interval`` in seconds (default 1 ms); None where it is off (``None`` or ``False``)."""
    from dask.utils import parse_timedelta

    v = _config.get("send-interval")
    if v is None or v is False:
        return None
    return float(parse_timedelta(v, default="ms"))


@contextlib.contextmanager
def _prompt_sends(client):
    """While fits run on ``client``, its messages to the scheduler leave within ``dask-estimators.send-interval``.

    A client batches what it sends the scheduler (tasks, released keys):
    a message sent within 10 ms (distributed's interval) of the previous
    one waits out the rest of them.  A fit's few messages then wait: the
    release at one fit's end delays the next fit's first task, so each of
    the back-to-back small fits of a search paid a longer round trip than
    with a short interval (benchmarks/results/history/small-linear-fits.md).  The interval goes back to
    the client's own when the last fit running on it ends.
    """
    comm = getattr(client, "scheduler_comm", None)
    interval = _send_interval()
    if interval is None or not isinstance(getattr(comm, "interval", None), (int, float)):
        yield
        return
    with _PROMPT_LOCK:
        entry = _PROMPT.get(id(comm))
        if entry is None:
            entry = _PROMPT[id(comm)] = [0, comm.interval]
            comm.interval = min(comm.interval, interval)
        entry[0] += 1
    try:
        yield
    finally:
        with _PROMPT_LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                _PROMPT.pop(id(comm), None)
                comm.interval = entry[1]


@contextlib.contextmanager
def client_context(client=None):
    """Resolve the client for the duration of one fit.

    Inside a Dask task the task secedes from the worker's thread pool while
    the fit runs, and rejoins afterwards, like :func:`distributed.worker_client`.
    Outside one, the client's BLAS runs one thread for the duration, so that
    its idle threads do not spin on the workers' cores.  Either way the
    client sends its messages to the scheduler promptly for the duration
    (:func:`_prompt_sends`).

    Parameters
    ----------
    client : distributed.Client, str or None
        As for :func:`resolve_client`.

    Yields
    ------
    distributed.Client
        The resolved client, current (:func:`current`) inside the block.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import client_context, place
    >>> with client_context() as client:  # doctest: +SKIP
    ...     with place(client, {"X": np.ones((10, 2))}) as p:
    ...         p.n_samples
    10
    """
    _config.check_keys(stacklevel=4)  # a misspelt dask-estimators key: one warning, at the fit that meets it
    c = resolve_client(client)
    if not _in_task():
        # The client's own work in a fit is vector arithmetic on the parameters; a multi-threaded BLAS
        # there leaves its threads spinning after each call, on the cores the workers compute on, which
        # slows the later rounds of a large fit (docs/design-measurements.md has the measurement).  One BLAS
        # thread on the client while it fits.
        with _one_blas_thread(), _prompt_sends(c), _borrowed(c if client is None else None), current(c):
            yield c
        return
    if _seceded():  # the task left the worker's thread pool already (worker_client, secede): it stays out
        with _prompt_sends(c), current(c):
            yield c
        return
    distributed.secede()
    try:
        with _prompt_sends(c), current(c):
            yield c
    finally:
        distributed.rejoin()


def _seceded() -> bool:
    """Whether this task's thread has left its worker's thread pool (``secede``, as ``worker_client`` does): a
    second ``secede`` raises a bare ``KeyError``, and the ``rejoin`` is the caller's."""
    from distributed.threadpoolexecutor import thread_state

    return getattr(thread_state, "proceed", True) is False


def _current_var():
    """distributed's context variable behind ``Client.current()``, or None where it has none (private)."""
    var = getattr(getattr(distributed, "client", None), "_current_client", None)
    return var if isinstance(var, contextvars.ContextVar) else None


#: one thread at a time in distributed's ``Client.as_current`` (the fallback of :func:`current`)
_AS_CURRENT_LOCK = threading.RLock()


@contextlib.contextmanager
def current(client):
    """``client`` is ``Client.current()`` in this thread (and task) inside the block; ``dask.config`` is untouched.

    distributed's ``Client.as_current`` also sets the global ``scheduler``
    config for the block, and ``dask.config.set`` restores on exit what it
    found on entry: two threads whose blocks overlap (fits in a threaded
    Dask graph, as dask-ml's searches run them) leave the config at
    ``"dask.distributed"``, and every later ``dask.compute`` of the user's
    then asks for a client that is not there.  This sets only the context
    variable behind ``Client.current()`` (private: ``docs/private-apis.md``);
    where a distributed lacks it, ``as_current`` runs one thread at a time,
    which leaves the config as it found it.
    """
    var = _current_var()
    if var is not None:
        token = var.set(client)
        try:
            yield
        finally:
            var.reset(token)
        return
    with _AS_CURRENT_LOCK, client.as_current():
        yield
