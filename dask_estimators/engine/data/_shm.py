"""Same-host hand-over of NumPy arrays through shared memory.

The client writes each array into a memfd (:mod:`._memfd`) taken from a pool
(``os.pwrite``, so running out of memory is a clean ``OSError``, never a
SIGBUS later); the worker opens ``/proc/<client pid>/fd/<fd>``, maps it
read-write and uses the mapping as its array: page-aligned, C-contiguous,
never pickled.  The client gives the memfd back to its pool when the
placement is released (:func:`release`), so the next fit of about the same
size writes into pages already in memory: a plain copy, without the page
allocation fresh ones cost (docs/performance.md has the measurement).  A
memfd has no name, so nothing is left behind even if a process dies.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np

from . import _memfd, _shared
from ._worker import CSRRows

SHM_DIR = "/dev/shm"
#: Arrays below this size are not worth shared memory: they travel with the task.
MIN_BYTES = 1 << 16
#: A pooled memfd is reused for an array of at least 1 / SLACK of its size.
SLACK = 1.25

#: The client's free memfds: at most 4 GiB, each closed after 30 s unused.
_POOL = _memfd.Pool("dask-estimators-data", max_bytes=4 << 30, idle_seconds=30.0)
_in_use: dict = {}  # path -> Memfd written for a placement that is not yet released


class NotShared(RuntimeError):
    """The worker cannot open the client's memory: it runs on another host, container or user."""


@dataclass(frozen=True)
class Handle:
    path: str
    shape: tuple
    dtype: str
    #: The writer's :func:`._shared.host_token`: ``path`` names its memfd only in a process that shares it.
    token: str | None = None


def _memfd_available() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def write(a: np.ndarray) -> Handle | None:
    """Copy ``a`` into a pooled memfd; None when that is not possible here."""
    a = np.ascontiguousarray(a)
    try:
        m = _POOL.take(a.nbytes, slack=SLACK)
    except OSError:
        return None
    try:
        view = memoryview(a.reshape(-1)).cast("B")
        offset = 0
        while offset < len(view):
            offset += os.pwrite(m.fd, view[offset : offset + (1 << 30)], offset)
    except OSError:
        m.close()
        return None
    _in_use[m.path] = m
    return Handle(m.path, tuple(a.shape), a.dtype.str, _shared.host_token())


def read(h: Handle) -> np.ndarray:
    """Map a client's array as a writable array (worker side)."""
    mine = _shared.host_token()
    if h.token is None or mine != h.token:
        # another host or pid namespace: /proc/<pid> there is another process (perhaps one that exists)
        raise NotShared(f"the client's memory is not visible from this process (host token {mine!r})")
    try:
        fd = os.open(h.path, os.O_RDWR)
    except OSError as e:
        raise NotShared(str(e)) from None
    try:
        dtype = np.dtype(h.dtype)
        nbytes = int(np.prod(h.shape, dtype=np.int64)) * dtype.itemsize
        mm = mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype=dtype).reshape(h.shape)


def write_parts(part: dict) -> dict | None:
    """Write every large numeric array of ``part``; small or non-numeric ones are kept inline.

    The rows of a sparse matrix (:class:`~._worker.CSRRows`) go as its three
    arrays, each written (or kept inline) as a dense array would be.
    """
    if not _memfd_available():
        return None
    out = {}
    for k, a in part.items():
        if isinstance(a, CSRRows):
            arrays = [_write_one(v) for v in (a.data, a.indices, a.indptr)]
            out[k] = CSRRows(*arrays, a.shape)
            if any(v is None for v in arrays):
                release(out)
                return None
            continue
        h = _write_one(a)
        if h is None:
            release(out)
            return None
        out[k] = h
    return out


def _write_one(a):
    """A large numeric array as a :class:`Handle` (None when it cannot be written); anything else as it is."""
    if isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.nbytes >= MIN_BYTES:
        return write(a)
    return a


def read_parts(handles: dict) -> dict:
    """The arrays behind :func:`write_parts`' handles (worker side); sparse rows stay :class:`~._worker.CSRRows`."""
    out = {}
    for k, v in handles.items():
        if isinstance(v, CSRRows):
            v = CSRRows(*(read(a) if isinstance(a, Handle) else a for a in (v.data, v.indices, v.indptr)), v.shape)
        elif isinstance(v, Handle):
            v = read(v)
        out[k] = v
    return out


def release(h) -> None:
    """Give the memfd(s) behind a handle, a dict or a list of them back to the pool (client side).

    The workers' mappings stay valid, but the next placement may write into
    the same memory: call it once nothing reads the shards any more.
    """
    if isinstance(h, dict):
        h = list(h.values())
    if isinstance(h, CSRRows):
        h = [h.data, h.indices, h.indptr]
    if isinstance(h, list):
        for v in h:
            release(v)
    elif isinstance(h, Handle):
        m = _in_use.pop(h.path, None)
        if m is not None:
            _POOL.give_back(m)
