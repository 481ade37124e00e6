"""Collective mode: one long-running call per shard that forms a ``torch.distributed`` group.

The rounds mode (:mod:`.evaluator`) keeps the optimizer on the client and pays
one round per step.  The collective mode moves the whole loop onto the
workers: every shard runs ``fn(shard, comm, *args)`` at the same time, the
calls join one process group (gloo on CPU, NCCL on CUDA) and exchange
gradients among themselves with an allreduce.  The client only waits, and
receives the events the workers send while they run.

- The rendezvous is served by rank 0 at its worker's own address (as the
  scheduler knows it, so the peers can reach it), on a port chosen free
  there at run time.  Each rank's gloo sockets bind to the interface of its
  own worker's address, never to what the host name resolves to.
- "One process per worker" is decided by :func:`process_identity` (boot id,
  pid namespace, pid), not by the bare pid, which containers repeat.
- A worker process holds one default process group at a time: a lock makes a
  second collective on the same worker wait (with a timeout) for the first.
- The group is destroyed when the call ends, also when it fails; after a
  call that succeeds, the hand-written ddp loop leaves that to a thread
  (:func:`process_group`'s ``teardown_behind``) and returns its result first.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
import weakref
from dataclasses import dataclass
from datetime import timedelta

from ... import config as _config
from ..cluster._watch import WorkerLostError

__all__ = ["Comm", "process_group", "run_collective", "free_port"]

_PG_LOCK = threading.Lock()
#: (placement key, shard index) -> the shard, on the worker holding it: how a rank finds its other shards
_REGISTRY: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _register(shard, key: str, index: int) -> None:
    _REGISTRY[(key, index)] = shard


def rank_groups(workers, identity=None) -> list:
    """The shards of each rank: shard indices grouped by process, ranks ordered by their first shard.

    ``identity`` maps each worker to its process (:func:`process_identity`);
    without it each worker is its own process.  A process holds one rank
    (torch.distributed allows one group per process), so the workers of a
    threads-based cluster make one rank that trains on all their shards.
    """
    groups: dict = {}
    for i, w in enumerate(workers):
        groups.setdefault(w if identity is None else identity[w], []).append(i)
    return sorted(groups.values())


def _timeout_s() -> float:
    return float(_config.get("collective-timeout"))


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Comm:
    """What one rank needs to join the group and to report progress.

    Attributes
    ----------
    rank, world_size : int
    host, port : str, int or None
        The rendezvous (a TCPStore served by rank 0); no port for a group of
        one rank, whose store is in its own process.
    topic : str or None
        The Dask event topic the client listens on.
    own_host : str or None
        This rank's own address (the host of its worker's address, which the
        peers can reach); gloo binds to its interface.
    timeout : float
        Seconds any rendezvous or collective may wait before failing.
    shards : tuple of int
        The placement's shards this rank trains on: its process's, in order
        (one per worker process, unless a worker took over the shard of a
        lost one; every shard of a threads-based cluster).
    registry : str or None
        Where this rank finds its other shards (:meth:`local_shards`).
    served : bool
        Whether rank 0's store was already listening when the ranks started
        (then the others connect at once, without looking for it first).
    """

    rank: int
    world_size: int
    host: str
    port: int | None
    topic: str | None = None
    timeout: float = 120.0
    worker: object = None
    own_host: str | None = None
    shards: tuple = ()
    registry: str | None = None
    served: bool = False  # rank 0's store listened before the ranks started (:func:`_identity_and_port`)
    sent: int = 0  # the messages this rank has reported

    def local_shards(self, shard) -> list:
        """This rank's shards: ``shard`` (the one its task runs on) and the others its process holds for it."""
        if len(self.shards) <= 1:
            return [shard]
        return [shard] + [_REGISTRY[(self.registry, i)] for i in self.shards[1:]]

    def report(self, msg: dict) -> None:
        """Send ``msg`` (a msgpack-able dict) to the client now, as a Dask event; a no-op without a listener.

        Numbered per rank, so that the client hands each rank's messages on in the order sent, and knows
        from the rank's result how many to wait for (see :class:`_Events`).
        """
        if self.topic is None or self.worker is None:
            return
        self.worker.log_event(self.topic, dict(msg, _rank=self.rank, _seq=self.sent))
        self.sent += 1

    def __getstate__(self):
        return dict(self.__dict__, worker=None)


@contextlib.contextmanager
def process_group(comm: Comm, device: str = "cpu", teardown_behind: bool = False):
    """Join the default ``torch.distributed`` group described by ``comm`` for the length of the block.

    With ``teardown_behind``, a block that ends without an error leaves the
    group's teardown to a thread of this process, and the call returns at
    once: destroying a gloo group takes a while (it joins its threads, with the
    GIL released; benchmarks/results/history/small-networks-and-partial-fit.md has the measurement), which
    would otherwise delay the result of every collective fit.  The worker's group lock stays held until the group is
    gone, so the next group on this worker waits for it.  Only for a group
    that nothing else holds once the block ends (the DDP wrapper's reducer
    does, see :func:`~dask_estimators.engine.ddp.train.ddp_rank`); a block that
    fails destroys its group before the error leaves.

    Yields the group's ``TCPStore``: a few small values go through it faster
    than through gloo's object collectives.
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("This torch build has no torch.distributed; use strategy='rounds'.")
    if not _PG_LOCK.acquire(timeout=comm.timeout):
        raise TimeoutError(
            f"Another collective fit held this worker's process group for more than {comm.timeout:g} s."
        )
    behind = False
    try:
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialised in this worker process by other code; "
                "use strategy='rounds'."
            )
        backend = "nccl" if str(device).startswith("cuda") else "gloo"
        td = timedelta(seconds=comm.timeout)
        if comm.world_size == 1:  # nobody to meet: an in-process store, no server, no port
            store = dist.HashStore()
        else:  # rank 0's listening since the client's round
            store = _SERVED.pop(comm.port, (None,))[0] if comm.rank == 0 else None
        if comm.rank != 0 and not comm.served:
            _wait_listening(comm.host, comm.port, comm.timeout, local=comm.own_host == comm.host)
        if store is None:
            # rank 0 does not wait in the constructor for the others to connect: that wait looks every 10 ms, while
            # the group's own rendezvous below waits on the store's keys and goes on as soon as the last rank is in
            store = dist.TCPStore(comm.host, comm.port, comm.world_size, comm.rank == 0, timeout=td,
                                  wait_for_workers=False)
        with _gloo_interface(comm.own_host if backend == "gloo" else None):
            dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.world_size, timeout=td)
        try:
            yield store
        except BaseException:
            dist.destroy_process_group()
            raise
        if teardown_behind and backend == "gloo":
            with contextlib.suppress(RuntimeError):  # no thread to be had: the teardown is done here
                threading.Thread(target=_destroy_and_unlock, args=([store],), name="dask-estimators-pg-teardown",
                                 daemon=True).start()
                behind = True
        if not behind:
            dist.destroy_process_group()
        del store
    finally:
        if not behind:
            _PG_LOCK.release()


def _destroy_and_unlock(held: list) -> None:
    """Destroy the default group, drop its store (``held``, emptied: rank 0's server), release the group lock."""
    import torch.distributed as dist

    try:
        dist.destroy_process_group()
        held.clear()
    finally:
        _PG_LOCK.release()


def _listening_here(port: int) -> bool:
    """Whether a TCP socket of this machine listens on ``port`` (``/proc/net/tcp`` and ``tcp6``; False where they
    cannot be read, and the caller goes on looking)."""
    suffix = f":{port:04X}"
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f, None)
                for line in f:
                    fields = line.split(None, 4)
                    if len(fields) > 3 and fields[1].endswith(suffix) and fields[3] == "0A":  # 0A: LISTEN
                        return True
        except OSError:
            continue
    return False


def _wait_listening(host: str, port: int, timeout: float, local: bool = False) -> None:
    """Return once ``host:port`` accepts a connection (rank 0's store), or after ``timeout`` seconds.

    A ``TCPStore`` client refused by a server not yet listening backs off
    before it tries again, and the other ranks wait with it (benchmarks/results/history/mlp-matrix.md
    has the cost): on a fresh cluster rank 0's task often starts a little after
    the others'.  Plain connections tried every 2 ms find the server at once;
    the store is made after (the probe's connection closes unused).

    With ``local`` (the server is on this machine) the kernel's table of
    listening sockets is read instead of connecting: each connection the
    store's server accepts costs it a reverse DNS lookup of the peer
    (torch logs the peer's name), and where the resolver drops a query that
    lookup waits out its 5 s timeout, holding the server (benchmarks/results/history/small-networks-and-partial-fit.md
    has how often a fit met it).
    """
    import time

    start = time.monotonic()
    while True:
        # the table shows this network namespace's sockets: a server it never shows (a store of the same
        # address in another namespace) is looked for by connecting after 2 s
        if local and time.monotonic() - start < 2.0:
            if _listening_here(port):
                return
        else:
            try:
                with socket.create_connection((host, port), timeout=1.0):
                    return
            except OSError:
                pass
        if time.monotonic() - start >= timeout:
            return  # the store's own connect reports the failure, with its message
        time.sleep(0.002)


def _body(shard, fn, comm, *args):
    from ..data._worker import _current_worker

    from distributed.comm import get_address_host

    comm.worker = getattr(shard, "worker", None) or _current_worker()
    if comm.own_host is None and getattr(comm.worker, "address", None):
        comm.own_host = get_address_host(comm.worker.address)
    return fn(shard, comm, *args), comm.sent  # the client waits for that many of this rank's messages


def run_collective(placement, fn, *args, on_event=None, timeout=None) -> list:
    """Run ``fn(shard, comm, *args)`` once per worker process, all at once; the results in rank order.

    A rank is a process: its task runs on its first shard, and
    ``comm.local_shards(shard)`` gives it all the shards its process holds
    (one per worker process, unless it took over a lost worker's shard; all
    of them on a threads-based cluster).  Ranks are ordered by their first shard.

    Parameters
    ----------
    placement : Placement
        The shards.
    fn : callable
        The per-rank body.  It joins the group with :func:`process_group`.
    on_event : callable, optional
        Called on the client with each ``msg`` a rank sends with
        ``comm.report(msg)``, each rank's in the order sent, and every one
        before the call returns.  Events travel through the scheduler: one
        may come after the results, and one sent before the scheduler has
        the client's subscription is never forwarded (the ranks are started
        through the actors, not the scheduler); those missing at the end are
        taken from the scheduler's log of the topic (at most
        ``dask-estimators.event-wait`` seconds, 10 by default).
    timeout : float, optional
        Seconds a rendezvous or collective may wait (default: the placement's
        ``timeout``, else the config ``dask-estimators.collective-timeout``, 120).

    Examples
    --------
    >>> def body(shard, comm):  # doctest: +SKIP
    ...     with process_group(comm):
    ...         ...
    >>> run_collective(placement, body)  # doctest: +SKIP
    """
    from distributed.comm import get_address_host

    client = placement.client
    if timeout is None:
        timeout = getattr(placement, "timeout", None)
    timeout = _timeout_s() if timeout is None else float(timeout)
    w0 = placement.workers[0]
    host = get_address_host(w0)
    if len(placement.shards) == 1:  # one rank: no process to name, no store to serve (process_group)
        groups, port, served = [[0]], None, False
    else:
        # one round for both: each worker's process, and the port of a store served by rank 0's worker
        found = client.run(_identity_and_port, w0, host, timeout, workers=sorted(set(placement.workers)))
        identity = {w: ident for w, (ident, _, _) in found.items()}
        port, served = found[w0][1:]
        # one rank per process; a worker holding two shards, or workers sharing a process, train on all of theirs
        groups = rank_groups(placement.workers, identity)
    topic = events = None
    if on_event is not None:
        topic = f"dask-estimators-{uuid.uuid4().hex[:12]}"
        events = _Events(on_event)
        client.subscribe_topic(topic, events)
    world = len(groups)
    registry = None
    if any(len(g) > 1 for g in groups):
        registry = f"{placement.token}-{uuid.uuid4().hex[:8]}"
        placement.map_each(_register, [(registry, i) for i in range(len(placement.shards))])
    try:
        futs = placement.submit_each(
            _body, [(fn, Comm(r, world, host, port, topic, timeout, shards=tuple(g), registry=registry, served=served),
                     *args) for r, g in enumerate(groups)],
            indices=[g[0] for g in groups],
        )
        # A rank that fails makes the others fail at their next collective (bounded by ``timeout``); the
        # wait itself returns at the first failure, and on the loss of a worker, of the scheduler or of
        # the client (a lost worker's rank would otherwise never answer).
        try:
            results, sent = zip(*placement.wait(futs, timeout=None))
            if events is not None:
                events.complete(client, topic, sent)
            return list(results)
        except Exception as e:
            from ._shm_allreduce import PeerAborted

            origin = None  # with PeerAborted: the error of the rank that failed and stopped the others
            if isinstance(e, WorkerLostError):
                lost = e.workers
            else:
                own = e
                if isinstance(e, PeerAborted):
                    own = origin = _first_error(futs, PeerAborted)
                # the surviving ranks may fail before the scheduler learns of a death (gloo: "Connection reset by
                # peer"), so such an error waits for its news a while; a rank's own error needs no wait
                lost = _lost_soon(placement, grace=3.0 if own is None or _may_tell_a_loss(own) else 0.0)
            if not lost:
                if origin is not None:
                    raise origin from None
                raise
            raise WorkerLostError(
                lost,
                f"Lost the Dask worker(s) {sorted(lost)} during a collective run; it was stopped "
                "(the other ranks leave their process group when they see the lost peer, at the latest "
                "after the collective timeout).",
            ) from e
    finally:
        if topic is not None:
            with contextlib.suppress(Exception):
                client.unsubscribe_topic(topic)


class _Events:
    """The client's end of a collective run's events: each message handed to ``on_event`` once, each rank's in
    the order :meth:`Comm.report` numbered them; one that comes early waits for those before it."""

    def __init__(self, on_event):
        self.on_event, self.waiting, self.next = on_event, {}, {}  # (rank, seq) -> message; rank -> next seq
        self.lock = threading.Lock()  # the client's event loop and :meth:`complete` both hand messages on

    def __call__(self, event):
        self.add([event])

    def add(self, events) -> None:
        with self.lock:
            for _, msg in events:
                rank, seq = msg["_rank"], msg["_seq"]
                if seq >= self.next.get(rank, 0):
                    self.waiting[rank, seq] = msg
                while (rank, self.next.get(rank, 0)) in self.waiting:
                    msg = self.waiting.pop((rank, self.next.get(rank, 0)))
                    self.next[rank] = msg["_seq"] + 1
                    self.on_event({k: v for k, v in msg.items() if k not in ("_rank", "_seq")})

    def missing(self, sent) -> bool:
        return any(self.next.get(rank, 0) < n for rank, n in enumerate(sent))

    def complete(self, client, topic: str, sent) -> None:
        """Hand on the messages not yet come (rank ``r`` sent ``sent[r]``) from the scheduler's log of
        ``topic``; at most the dask config ``dask-estimators.event-wait`` seconds (10): a scheduler that lost
        them delays the run's end, never stops it."""
        import time

        deadline = time.monotonic() + float(_config.get("event-wait"))
        while self.missing(sent):
            try:
                log = client.get_events(topic)
            except Exception:  # no scheduler to ask: the records come with the results anyway
                return
            self.add(log)
            if not self.missing(sent) or time.monotonic() >= deadline:
                return
            time.sleep(0.002)


#: port -> (a store server made by :func:`_identity_and_port` for rank 0's process group, when it expires)
_SERVED: dict = {}


def _identity_and_port(rank0: str, host: str, timeout: float = 120.0, dask_worker=None) -> tuple:
    """(:func:`process_identity`, a port on the worker ``rank0``, whether a ``TCPStore`` server listens on it
    already), run on every worker before the ranks start (the other workers: no port).

    Rank 0's :func:`process_group` takes the server; the other ranks connect
    at once.  Looking for a server made by rank 0 itself cost each of them
    reads of ``/proc/net/tcp`` (docs/design-measurements.md has the measurement), and rank 0
    waited for them.  A server no rank takes (its fit failed first) is dropped
    at the first call here after ``timeout`` seconds.  Where no server can be
    made here, a free port, and rank 0 serves it (as before).
    """
    import time
    from datetime import timedelta

    now = time.monotonic()
    for port in [p for p, (_, until) in _SERVED.items() if until < now]:
        _SERVED.pop(port, None)
    if dask_worker is None or dask_worker.address != rank0:
        return process_identity(), None, False
    try:
        import torch.distributed as dist

        store = dist.TCPStore(host, 0, None, True, timeout=timedelta(seconds=timeout), wait_for_workers=False)
        port = int(store.port)
    except Exception:  # no torch.distributed (process_group says so), or a torch that cannot serve port 0
        store = port = None
    if not port:
        return process_identity(), free_port(host), False
    _SERVED[port] = (store, now + timeout)
    return process_identity(), port, True


def _first_error(futs, echo, wait_s=5.0):
    """The error of the first of ``futs`` (in rank order, among those done) that failed with an error other than an
    ``echo`` of another rank's; None if none does within ``wait_s`` seconds (a rank that aborted returns its error
    right after it marked the abort; a rank whose worker died may never return)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        for f in futs:  # Dask futures or actor futures: only done() and result() are common to both
            if f.done():
                try:
                    f.result()  # done: returns or raises at once (an actor future times out at timeout=0)
                except echo:
                    continue
                except Exception as err:  # noqa: BLE001 - a rank's error that is not an echo
                    return err
        if all(f.done() for f in futs) or time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _may_tell_a_loss(err) -> bool:
    """Whether ``err``, a rank's error, may be how it saw a peer's worker die (a broken connection, a peer that
    stopped answering, a task the scheduler gave up on); not errors of the rank's own work (a ``ValueError`` in a
    callback, say), which no loss explains."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    if isinstance(err, (NotImplementedError, RecursionError)):
        return False
    return isinstance(err, (RuntimeError, OSError, KilledWorker, CancelledError))


def _lost_soon(placement, grace=3.0) -> set:
    """The placement's workers the scheduler drops within ``grace`` seconds (it may learn of a death late)."""
    import time

    deadline = time.monotonic() + grace
    while True:
        try:
            lost = placement.lost_workers()
        except Exception:
            return set()
        if lost or time.monotonic() >= deadline:
            return lost
        time.sleep(0.1)


def one_process_per_worker(client, workers) -> bool:
    """Whether no two of ``workers`` share an operating-system process (by :func:`process_identity`)."""
    ids = client.run(process_identity, workers=list(workers))
    return len(set(ids.values())) == len(set(workers))


#: Drawn once per process (a forked child draws its own, see ``os.register_at_fork`` below).
_PROCESS_NONCE = uuid.uuid4().hex


def _new_nonce() -> None:
    global _PROCESS_NONCE
    _PROCESS_NONCE = uuid.uuid4().hex


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_nonce)


def process_identity() -> str:
    """A name for this operating-system process that no process on another host or container shares.

    A bare pid is not one: two containers' workers are often both pid 1.  It
    is the kernel's boot id, the inode of the pid namespace and the pid,
    which together name one process on one machine; where ``/proc`` cannot
    be read, a random id drawn once per process.

    Examples
    --------
    >>> from dask_estimators.engine.ddp.collective import process_identity
    >>> process_identity() == process_identity()
    True
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return f"nonce:{_PROCESS_NONCE}"
    return f"{boot}:{pid_ns}:{os.getpid()}"


def interface_of(host: str) -> str | None:
    """The name of the network interface that holds the IP address ``host`` in this process's namespace.

    A host name is resolved first (a worker that registered as
    ``tcp://worker-0.svc:...``).  None when no interface holds the address (one
    of another namespace), the name does not resolve, or psutil cannot tell.
    """
    try:
        wanted = {host}
        with contextlib.suppress(OSError, UnicodeError):
            wanted |= {info[4][0] for info in socket.getaddrinfo(host, None)}
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address.split("%")[0] in wanted for a in addrs):
                return name
    except Exception:  # pragma: no cover - psutil without net_if_addrs support on this platform
        return None
    return None


@contextlib.contextmanager
def _gloo_interface(host: str | None):
    """Make gloo bind this rank's sockets to the interface of ``host`` (the worker's own address).

    Without it gloo binds to what the machine's host name resolves to, often
    127.0.0.1 (then the peers on other hosts cannot connect) or an address
    not present in a container.  ``GLOO_SOCKET_IFNAME`` is read once, when
    the group is made; a value the user set is kept.
    """
    name = "GLOO_SOCKET_IFNAME"
    iface = interface_of(host) if host else None
    if iface is None or os.environ.get(name):
        yield
        return
    os.environ[name] = iface
    try:
        yield
    finally:
        os.environ.pop(name, None)
