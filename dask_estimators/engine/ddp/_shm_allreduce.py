"""Allreduce through shared memory, for the ranks of a process group that share one host.

gloo sums a tensor over TCP even between two processes of one machine.  For
the small gradients of an MLP step (10k numbers) that round trip, with the
threads it wakes, costs more than the step's arithmetic (see
benchmarks/results/history/small-networks-and-partial-fit.md).  Here every rank writes its tensor into its own slot of
one shared mapping, publishes a sequence number, waits until every rank
has published the same one, and adds the slots in rank order: every rank
gets the same bits, without a socket.

- Two sets of slots alternate between calls, so a rank may write call k + 1
  while a slower rank still reads call k; it cannot get further ahead,
  because call k + 2 waits for every rank's call k + 1.
- The wait yields the core between looks.  It checks that the other ranks'
  processes are still alive every 0.2 s and gives up after the group's timeout:
  a lost rank is a ``RuntimeError`` within a fraction of a second, never a hang.
  A rank that fails with its process alive (an error in its own code) marks
  itself aborted (:meth:`SharedMemoryAllreduce.abort`), and the others' waits
  raise at once instead of spinning out the timeout while holding their
  workers' process-group locks.
- The mapping is a memfd of rank 0's process (:mod:`._memfd`), which the
  other ranks open through ``/proc``: nothing is left behind by a rank that
  dies.  Rank 0 gives it back to a pool of its process when the run ends
  cleanly (:meth:`SharedMemoryAllreduce.close`), and the next group's rank 0
  takes it with its pages in memory: a fresh mapping costs page
  allocation, a pooled one mostly the ranks' exchange (benchmarks/results/history/mlp-matrix.md
  has the measurement).
- x86-64 only: its stores are seen by other cores in program order, so a
  published sequence number implies the data written before it.  Elsewhere,
  or when a rank cannot open the memfd (another host, pid namespace or
  user), or with ``dask-estimators.shared-memory`` off, :func:`create`
  returns None and the caller keeps gloo.
"""

from __future__ import annotations

import mmap
import os
import platform
import time

import numpy as np

from ... import config as _config
from ..data import _memfd, _shm

__all__ = ["PeerAborted", "SharedMemoryAllreduce", "create"]

_LINE = 64  # bytes per sequence number: one cache line each, so ranks never write the same line
_CHECK_EVERY = 0.2  # seconds between liveness checks of the other ranks while waiting
#: Rank 0's free mappings: at most 1 GiB, each closed after 30 s unused; one is reused for a group needing at
#: least 1 / _SLACK of its size.
_POOL = _memfd.Pool("dask-estimators-allreduce", max_bytes=1 << 30, idle_seconds=30.0)
_SLACK = 1.5


class PeerAborted(RuntimeError):
    """Another rank of the group failed (and said so with :meth:`SharedMemoryAllreduce.abort`): its own error is
    the one to report."""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")  # a killed process is a zombie until its parent reaps it
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # pragma: no cover - no /proc: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


class SharedMemoryAllreduce:
    """The sum of a tensor over the ranks of one host, in place (see the module docstring).

    Made by :func:`create` on every rank at once; :meth:`close` unmaps it.
    """

    def __init__(self, mm: mmap.mmap, rank: int, world: int, capacity: int, pids: list, timeout: float,
                 shared_bytes: int = 0, memfd=None):
        self.rank, self.world, self.capacity, self.pids, self.timeout = rank, world, capacity, pids, timeout
        self._mm, self._memfd = mm, memfd  # rank 0's memfd, whose mapping ``mm`` is: the pool's at the end
        head = world * _LINE
        words = np.frombuffer(mm, dtype=np.int64, count=head // 8)
        self._seqs = words[:: _LINE // 8]  # each rank's line: its sequence number, then its abort flag
        self._aborted = words[1 :: _LINE // 8]
        self._slots = np.frombuffer(mm, dtype=np.uint8, offset=head, count=2 * world * capacity).reshape(
            2, world, capacity)
        #: ``shared_bytes`` of the mapping for the caller's own use (64-byte aligned), or None.  Not zero-filled:
        #: a pooled mapping keeps the bytes of its last use.
        self.shared = np.frombuffer(mm, dtype=np.uint8, offset=_shared_offset(world, capacity),
                                    count=shared_bytes) if shared_bytes else None
        self._seq = 0
        self._views = {}  # (slot set, bytes, dtype) -> the slots as arrays of that dtype

    def allreduce_(self, t):
        """Replace the contiguous CPU tensor ``t`` by its sum over the ranks (the same bits on every rank)."""
        nbytes = t.numel() * t.element_size()
        if nbytes > self.capacity:
            raise ValueError(f"allreduce of {nbytes} bytes over slots of {self.capacity}")
        if self.world == 1:  # the sum of one rank's
            return t
        a = t.detach().numpy().reshape(-1)
        self._seq += 1
        key = (self._seq & 1, a.nbytes, a.dtype)
        slots = self._views.get(key)
        if slots is None:
            slots = self._views[key] = self._slots[key[0], :, : a.nbytes].view(a.dtype)
        slots[self.rank] = a
        self._seqs[self.rank] = self._seq  # published after the data (x86-64 keeps stores in order)
        self._wait(self._seq)
        if self.world > 1:
            np.add(slots[0], slots[1], out=a)  # in rank order, so every rank gets the same bits
            for r in range(2, self.world):
                a += slots[r]
        return t

    def barrier(self):
        """Wait until every rank has called this (or made the same number of calls to this and ``allreduce_``).

        What a rank wrote into :attr:`shared` before the call, every rank sees after it (x86-64 store order).
        """
        if self.world == 1:
            return
        self._seq += 1
        self._seqs[self.rank] = self._seq
        self._wait(self._seq)

    def abort(self):
        """Tell the other ranks that this one stops (it failed): their waits raise instead of waiting it out."""
        if self._aborted is not None:
            self._aborted[self.rank] = 1

    def _wait(self, seq):
        seqs = self._seqs
        if seqs.min() >= seq:
            return
        start = time.monotonic()
        next_check = start + _CHECK_EVERY
        while seqs.min() < seq:
            os.sched_yield()
            if self._aborted.any():
                raise PeerAborted(
                    f"Rank(s) {np.flatnonzero(self._aborted).tolist()} of the process group failed during a "
                    "shared-memory allreduce; this rank stops too."
                )
            now = time.monotonic()
            if now >= next_check:
                next_check = now + _CHECK_EVERY
                lost = [r for r, pid in enumerate(self.pids) if seqs[r] < seq and not _alive(pid)]
                if lost:
                    raise RuntimeError(
                        f"Rank(s) {lost} of the process group exited during a shared-memory allreduce."
                    )
                if now - start > self.timeout:
                    raise RuntimeError(
                        f"Shared-memory allreduce: rank(s) {[r for r in range(self.world) if seqs[r] < seq]} "
                        f"did not arrive within {self.timeout:g} s."
                    )

    def close(self, reuse: bool = False):
        """Unmap; rank 0's memfd goes back to its pool with ``reuse``, else is closed.

        Reuse only after a last :meth:`barrier` that every rank passed after its last use of the mapping, and
        with no view of it left (the next group's rank 0 writes into it).  On a failure, close without it.
        """
        self._seqs = self._aborted = self._slots = self.shared = None
        self._views = {}
        mm, self._mm = self._mm, None
        memfd, self._memfd = self._memfd, None
        if memfd is not None:
            if reuse:
                _POOL.give_back(memfd)
            else:
                memfd.close()
        elif mm is not None:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view still exported: the GC unmaps it later
                pass


def _shared_offset(world, capacity):
    return -(-(world * _LINE + 2 * world * capacity) // _LINE) * _LINE


def _exchange(store, key: str, rank: int, world: int, value: str) -> list[str]:
    """Every rank's ``value`` under ``key``, in rank order, through the group's store (each ``get`` waits for
    its rank's ``set``, up to the store's timeout)."""
    store.set(f"{key}/{rank}", value)
    return [value if r == rank else store.get(f"{key}/{r}").decode() for r in range(world)]


def create(rank: int, world: int, capacity: int, timeout: float, shared_bytes: int = 0, *, store):
    """Set up on every rank of the default process group at once; None (on every rank) where gloo must stay.

    ``shared_bytes``: the size of :attr:`SharedMemoryAllreduce.shared`, a region of the mapping every rank
    reads and writes (none by default).  ``store``: the group's store
    (:func:`~dask_estimators.engine.ddp.collective.process_group` yields it).
    Collective: the ranks exchange whether they share a host (:func:`._shared.host_token`), the path of rank
    0's memfd and whether each could map it, through the store (a few of its round trips, cheaper than gloo's
    object collectives; benchmarks/results/history/small-networks-and-partial-fit.md has the measurement).
    """

    from ..data import _shared

    usable = (
        platform.machine().lower() in ("x86_64", "amd64")
        and bool(_config.get("shared-memory"))
        and _shm._memfd_available()
    )
    nbytes = _shared_offset(world, capacity) + shared_bytes
    if world == 1 and usable:  # nobody to meet: the slots in anonymous memory, no memfd, no exchange
        return SharedMemoryAllreduce(mmap.mmap(-1, nbytes), rank, world, capacity, [os.getpid()], timeout,
                                     shared_bytes)
    # this group's n-th call on every rank (they call alike): its keys are its own
    key = f"dask-estimators-shm-{store.add(f'dask-estimators-shm-calls-{rank}', 1)}"
    flags = _exchange(store, f"{key}/host", rank, world, (_shared.host_token() or "") if usable else "")
    if not flags[0] or any(f != flags[0] for f in flags):  # off across hosts (or containers): gloo stays
        return None
    memfd = mm = None
    if rank == 0:
        path = ""
        try:
            memfd = _POOL.take(nbytes, slack=_SLACK)
            mm = memfd.mapping()
            mm[: world * _LINE] = bytes(world * _LINE)  # sequence numbers at 0, no abort (a pooled one too)
            path = memfd.path
        except OSError:  # no memfd to be had: every rank is told by the empty path
            if memfd is not None:
                memfd.close()
            memfd = mm = None
        store.set(f"{key}/name", path)
    else:
        path = store.get(f"{key}/name").decode()
        if not path:
            return None
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            finally:
                os.close(fd)
        except OSError:
            mm = None
    if rank == 0 and memfd is None:
        return None
    seen = [v.split() for v in _exchange(store, f"{key}/mapped", rank, world, f"{int(mm is not None)} {os.getpid()}")]
    if not all(ok == "1" for ok, _ in seen):
        if memfd is not None:
            _POOL.give_back(memfd)  # nobody else mapped it (the ranks that did close theirs now)
        elif mm is not None:
            mm.close()
        return None
    return SharedMemoryAllreduce(mm, rank, world, capacity, [int(pid) for _, pid in seen], timeout, shared_bytes,
                                 memfd=memfd)
