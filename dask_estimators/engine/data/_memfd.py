"""Pools of anonymous shared memory (memfd) that other processes of the host open through /proc.

A :class:`Memfd` is memory with a file descriptor and no name: another
process of the same host, pid namespace and user opens
``/proc/<pid>/fd/<fd>`` and maps it.  It lives as long as the process that
made it holds the descriptor, so a process that dies leaves nothing behind
(a file in /dev/shm would stay until the next boot).

A :class:`Pool` keeps freed ones for the next user of about the same size:
their pages are already in memory, and writing into them is a plain copy.
Allocating fresh pages is what costs, far more than writing into pages
already there (docs/performance.md has the measurement).  Free ones are closed after
``idle_seconds`` without use, or when the pool holds more than ``max_bytes``.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import weakref

_POOLS: "weakref.WeakSet[Pool]" = weakref.WeakSet()


def close_free_pools() -> int:
    """Close the free memfds of every pool of this process now (they are closed after their idle time anyway).

    Returns the bytes given back to the system.
    """
    return sum(pool.clear() for pool in list(_POOLS))


def _forget_after_fork() -> None:
    """In a forked child: every pool starts empty.  The child's copies of the parent's free memfds name the same
    memory as the parent's, which the parent goes on writing into for its own fits: a child that took one for its
    own data gave its workers (and its parent's) each other's X, and wrong models.  Their descriptors are closed
    here (the parent keeps its own); the locks and timers are the child's own again."""
    for pool in list(_POOLS):
        free, pool._free = pool._free, []
        pool._lock, pool._timer = threading.Lock(), None
        for m, _ in free:
            try:
                m.close()
            except Exception:  # noqa: BLE001 - the child's copy of a descriptor: nothing else to do
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class Memfd:
    """``size`` bytes of anonymous shared memory; :meth:`mapping` maps them in this process once."""

    def __init__(self, size: int, name: str = "dask-estimators"):
        self.size = int(size)
        self.pid = os.getpid()  # a forked child shares the memory of its parent's memfds: it must not reuse them
        self.fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
        self._mm = None
        try:
            os.ftruncate(self.fd, self.size)
        except BaseException:
            os.close(self.fd)
            raise

    @property
    def path(self) -> str:
        """Where another process of this host opens it."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def mapping(self) -> mmap.mmap:
        """This process's mapping of the whole memfd (read-write, shared, populated)."""
        if self._mm is None:
            self._mm = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        return self._mm

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # an array still views it: leave it to the process's exit
                return
        os.close(self.fd)


class Pool:
    """Freed :class:`Memfd` objects kept for reuse (or, with ``make``, other blocks of memory: any object with a
    ``size`` in bytes and a ``close()``, made by ``make(size)``).

    Examples
    --------
    >>> from dask_estimators.engine.data._memfd import Pool
    >>> pool = Pool("example", max_bytes=1 << 20, idle_seconds=10)
    >>> m = pool.take(4096)
    >>> pool.give_back(m)
    >>> pool.take(4000, slack=1.25) is m  # big enough, and at most 1.25 times bigger: reused
    True
    """

    def __init__(self, name: str, max_bytes: int, idle_seconds: float, make=None):
        self.name, self.max_bytes, self.idle_seconds = name, max_bytes, idle_seconds
        self._make = make if make is not None else (lambda size: Memfd(size, name))
        self._lock = threading.Lock()
        self._free: list = []  # (Memfd, monotonic time it was freed), oldest first
        self._timer = None
        _POOLS.add(self)

    def clear(self) -> int:
        """Close every free memfd now; returns their bytes."""
        with self._lock:
            free, self._free = self._free, []
        for m, _ in free:
            m.close()
        return sum(m.size for m, _ in free)

    def take(self, nbytes: int, slack: float = 1.0):
        """A memfd (or block) of at least ``nbytes`` and at most ``slack`` times that: a free one if any fits, else
        a new one."""
        with self._lock:
            for i in range(len(self._free) - 1, -1, -1):
                m = self._free[i][0]
                if nbytes <= m.size <= max(nbytes, int(slack * nbytes)):
                    del self._free[i]
                    return m
        return self._make(max(nbytes, 1))

    def give_back(self, m: Memfd) -> None:
        if getattr(m, "pid", os.getpid()) != os.getpid():  # the parent's, in a forked child: never reused here
            m.close()
            return
        with self._lock:
            self._free.append((m, time.monotonic()))
            self._trim()
            if self._free and self._timer is None:
                self._arm()

    def _arm(self) -> None:
        """Start the timer that closes idle memfds (not possible while the interpreter shuts down: then none)."""
        timer = threading.Timer(self.idle_seconds, self._expire)
        timer.daemon = True
        try:
            timer.start()
        except RuntimeError:
            return
        self._timer = timer

    def free_bytes(self) -> int:
        with self._lock:
            return sum(m.size for m, _ in self._free)

    def _trim(self, older_than: float | None = None) -> None:
        """Close the oldest free ones while over ``max_bytes``, and those freed before ``older_than``."""
        total = sum(m.size for m, _ in self._free)
        keep = []
        for m, t in self._free:
            if total > self.max_bytes or (older_than is not None and t < older_than):
                total -= m.size
                m.close()
            else:
                keep.append((m, t))
        self._free = keep

    def _expire(self) -> None:
        with self._lock:
            self._timer = None
            self._trim(older_than=time.monotonic() - self.idle_seconds)
            if self._free:
                self._arm()
