"""Collective mode: one long-running call per shard that forms a ``torch.distributed`` group.

The tree mode (:mod:`.evaluator`) keeps the optimizer on the client and pays
one round per step.  The collective mode moves the whole loop onto the
workers: every shard runs ``fn(shard, comm, *args)`` at the same time, the
calls join one process group (gloo on CPU, NCCL on CUDA) and exchange
gradients among themselves with an allreduce.  The client only waits, and
receives the events the workers send while they run.

- The rendezvous port is chosen free at run time on the rank-0 worker's host.
- A worker process holds one default process group at a time: a lock makes a
  second collective on the same worker wait (with a timeout) for the first.
- The group is destroyed when the call ends, also when it fails.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta

import dask.config

from ._watch import WorkerLostError

__all__ = ["Comm", "process_group", "run_collective", "free_port"]

_PG_LOCK = threading.Lock()


def _timeout_s() -> float:
    return float(dask.config.get("dask-estimators.collective-timeout", 120))


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
    host, port : str, int
        The rendezvous (a TCPStore served by rank 0).
    topic : str or None
        The Dask event topic the client listens on.
    timeout : float
        Seconds any rendezvous or collective may wait before failing.
    """

    rank: int
    world_size: int
    host: str
    port: int
    topic: str | None = None
    timeout: float = 120.0
    worker: object = None

    def report(self, msg: dict) -> None:
        """Send ``msg`` (msgpack-able) to the client now, as a Dask event; a no-op without a listener."""
        if self.topic is None or self.worker is None:
            return
        self.worker.log_event(self.topic, msg)

    def __getstate__(self):
        return dict(self.__dict__, worker=None)


@contextlib.contextmanager
def process_group(comm: Comm, device: str = "cpu"):
    """Join the default ``torch.distributed`` group described by ``comm`` for the length of the block."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("This torch build has no torch.distributed; use strategy='tree'.")
    if not _PG_LOCK.acquire(timeout=comm.timeout):
        raise TimeoutError(
            f"Another collective fit held this worker's process group for more than {comm.timeout:g} s."
        )
    try:
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialised in this worker process by other code; "
                "use strategy='tree'."
            )
        backend = "nccl" if str(device).startswith("cuda") else "gloo"
        td = timedelta(seconds=comm.timeout)
        store = dist.TCPStore(comm.host, comm.port, comm.world_size, comm.rank == 0, timeout=td)
        dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.world_size, timeout=td)
        try:
            yield
        finally:
            dist.destroy_process_group()
            del store
    finally:
        _PG_LOCK.release()


def _body(shard, fn, comm, *args):
    from ._worker import _current_worker

    comm.worker = getattr(shard, "worker", None) or _current_worker()
    return fn(shard, comm, *args)


def run_collective(placement, fn, *args, on_event=None, timeout=None) -> list:
    """Run ``fn(shard, comm, *args)`` on every shard at once and return the results in shard order.

    Parameters
    ----------
    placement : Placement
        The shards; each must live in its own worker process.
    fn : callable
        The per-rank body.  It joins the group with :func:`process_group`.
    on_event : callable, optional
        Called on the client with each ``msg`` a rank sends with
        ``comm.report(msg)``, while the ranks run.
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
    _check_one_process_per_shard(client, placement.workers)
    w0 = placement.workers[0]
    host = get_address_host(w0)
    [port] = placement.wait([client.submit(free_port, host, workers=[w0], allow_other_workers=False, pure=False)],
                            timeout=timeout)
    topic = None
    if on_event is not None:
        topic = f"dask-estimators-{uuid.uuid4().hex[:12]}"
        client.subscribe_topic(topic, lambda event: on_event(event[1]))
    world = len(placement.shards)
    try:
        futs = placement.submit_each(
            _body, [(fn, Comm(r, world, host, port, topic, timeout), *args) for r in range(world)]
        )
        # A rank that fails makes the others fail at their next collective (bounded by ``timeout``); the
        # wait itself returns at the first failure, and on the loss of a worker, of the scheduler or of
        # the client (a lost worker's rank would otherwise never answer).
        try:
            return placement.wait(futs, timeout=None)
        except Exception as e:
            # the surviving ranks fail first (gloo: "Connection reset by peer"): was a worker lost?
            lost = e.workers if isinstance(e, WorkerLostError) else _lost_soon(placement)
            if not lost:
                raise
            raise WorkerLostError(
                lost,
                f"Lost the Dask worker(s) {sorted(lost)} during a strategy='ddp' fit; the fit was stopped "
                "(the other ranks leave their process group when they see the lost peer, at the latest "
                "after the collective timeout). Fit again, or use strategy='tree', which re-places the "
                "lost shards and goes on.",
            ) from e
    finally:
        if topic is not None:
            with contextlib.suppress(Exception):
                client.unsubscribe_topic(topic)


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


def _check_one_process_per_shard(client, workers) -> None:
    pids = client.run(_pid, workers=list(workers))
    if len(set(pids.values())) < len(set(workers)):
        raise RuntimeError(
            "strategy='ddp' needs every worker in its own process (torch.distributed allows one group "
            "per process); this cluster runs several workers in one process. Use strategy='tree' or a "
            "LocalCluster(processes=True)."
        )


def _pid() -> int:
    import os

    return os.getpid()
