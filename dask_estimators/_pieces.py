"""Large arrays read on the client in fixed pieces, by a few threads: their finiteness and their content's digest.

A fit on NumPy input reads X twice on the client before anything reaches a
worker: the finiteness check (:func:`dask_estimators._validation.assert_all_finite`)
and the hash that finds the shards an earlier fit kept
(:mod:`dask_estimators.session._kept`).  Both are bound by memory bandwidth,
which one core does not use up: NumPy's reductions and ``xxhash`` release the
GIL, so the pieces run in threads (benchmarks/results/history/streaming.md has
the measurement).  The pieces are cut at fixed byte offsets, whatever the
number of threads, so that a digest is the same on every machine.
"""

from __future__ import annotations

import os
import threading

import numpy as np

__all__ = ["digest", "flat_bytes", "map_pieces", "PIECE_BYTES"]

#: Bytes per piece: large enough that a thread's hand-off costs nothing beside it, small enough to share 100 MB.
PIECE_BYTES = 1 << 24
#: The most threads that read at once (memory bandwidth is used up well before more cores help).
MAX_THREADS = 8

_pool = None
_pool_lock = threading.Lock()


def _threads() -> int:
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(_threads(), thread_name_prefix="dask-estimators-read")
        return _pool


def _forget_pool() -> None:  # a forked child has the pool object but not its threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def flat_bytes(a):
    """``a``'s elements as one flat array view in memory order (C or Fortran), or None where they are not one
    contiguous run of memory."""
    a = np.asarray(a)
    if a.flags.c_contiguous:
        return a.reshape(-1)
    if a.flags.f_contiguous:
        return a.T.reshape(-1)
    return None


def map_pieces(fn, flat) -> list:
    """``[fn(piece) for piece in flat's pieces]``, the pieces of :data:`PIECE_BYTES` in order, run by threads
    where there is more than one piece (one array: ``[fn(flat)]``)."""
    step = max(1, PIECE_BYTES // max(flat.itemsize, 1))
    if flat.shape[0] <= step or _threads() == 1:
        return [fn(flat[a : a + step]) for a in range(0, max(flat.shape[0], 1), step)]
    return list(_executor().map(fn, [flat[a : a + step] for a in range(0, flat.shape[0], step)]))


def _xxh3(piece) -> bytes:
    import xxhash

    return xxhash.xxh3_128_digest(memoryview(piece).cast("B"))


def digest(a) -> str | None:
    """A 128-bit hash of ``a``'s content, its dtype, shape and memory order (hex), or None where ``a`` is not one
    contiguous NumPy array of plain values (then the caller names it otherwise).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(6.0).reshape(2, 3)
    >>> digest(x) == digest(x.copy()), digest(x) == digest(x.reshape(3, 2)), digest(x[:, :2])
    (True, False, None)
    """
    import xxhash

    if not isinstance(a, np.ndarray) or a.dtype.hasobject:
        return None
    flat = flat_bytes(a)
    if flat is None:
        return None
    order = "C" if a.flags.c_contiguous else "F"
    h = xxhash.xxh3_128(repr((a.dtype.str, a.shape, order)).encode())
    for part in map_pieces(_xxh3, flat.view(np.uint8)):
        h.update(part)
    return h.hexdigest()
