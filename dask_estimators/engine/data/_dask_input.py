"""Dask input -> one shard per worker, built where the blocks are, in one pass over the data.

1. **Blocks.** Every input's row blocks become futures with one ``persist``
   of all inputs together: blocks already in memory are not computed again,
   and a graph that X and y share is computed once.
2. **Plan** (:func:`plan`, no Dask).  X's rows go to the worker that holds
   their block, up to ``imbalance`` times the mean rows per worker; the rest
   fills the workers with the fewest rows.  The other inputs follow by row
   position, so y and sample_weight may be partitioned differently from X
   (Dask's optimizer fuses a one-column projection into fewer partitions).
3. **Build** (:func:`build_shard`, one pinned task per worker).  The task
   takes its blocks (Dask moves the few that are elsewhere, worker to worker).
   X's blocks that the kernels can read as they are (C-contiguous float NumPy
   of the checked dtype) become the shard's X where they lie
   (:class:`~._worker.RowSegments`), checked without a copy; other blocks are
   validated in cache-sized row chunks, each copied into the shard's aligned
   buffer right after its check: the data is read once.  The buffers come
   from a per-worker pool of memory (:mod:`._memfd`), so a later fit of about
   the same size does not pay for fresh pages.

The block futures are dropped once the shards exist: the blocks of an
unpersisted graph are then freed by Dask itself (or live on as a shard's X),
and a persisted input stays the caller's.  The shards' sources for recovery hold the input's graph, never
its data.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import mmap
import sys
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..._in_order import in_order
from . import _memfd, _worker
from ._held import hold

#: A worker's shard may hold up to this many times the mean rows before its own blocks are moved elsewhere.
IMBALANCE = 1.25
#: Rows are validated and copied in chunks of about this many bytes of X (they stay in cache in between).
CHUNK_BYTES = 1 << 24
#: Input streamed partition by partition may share at most this many tasks (and bytes of data in them) between its
#: partitions: constants each worker computes again for itself.
MAX_SHARED_TASKS = 16
MAX_SHARED_BYTES = 8 << 20
#: Shard buffers below this size are plain aligned allocations, not pooled memory.
MIN_POOLED_BYTES = 1 << 20

#: The worker's free shard buffers: at most 2 GiB, each closed after 30 s unused.
_POOL = _memfd.Pool("dask-estimators-shard", max_bytes=2 << 30, idle_seconds=30.0)

__all__ = ["Segment", "plan", "build_shard", "build_shard_task", "pooled_empty", "InputRejected"]


@dataclass(frozen=True)
class Segment:
    """``rows`` consecutive rows, taken for each input ``name`` from ``(argument index, first row)``."""

    rows: int
    starts: tuple  # ((name, arg_index, first_row), ...)


def offsets_of(lengths) -> np.ndarray:
    """Global first row of each block, and the total at the end."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


def plan(lengths: dict, holders: list, workers: list, imbalance: float = IMBALANCE) -> list:
    """Which rows each worker's shard takes, as ``[(worker, [(start, stop), ...]), ...]`` of global rows.

    Parameters
    ----------
    lengths : list of int
        Rows of each block of the first input (X), in row order.
    holders : list of list of str
        The workers holding each of those blocks.
    workers : list of str
        The workers to place on.
    imbalance : float
        A worker keeps the rows of its own blocks up to ``imbalance`` times
        the mean rows per worker; rows past that, and blocks no worker of
        ``workers`` holds, go to the workers with the fewest rows, which are
        filled up to the mean.

    Examples
    --------
    All four blocks on one worker: half of them move.

    >>> from dask_estimators.engine.data._dask_input import plan
    >>> plan([10, 10, 10, 10], [["a"]] * 4, ["a", "b"])
    [('a', [(0, 25)]), ('b', [(25, 40)])]
    >>> plan([10, 10, 10, 10], [["a"], ["b"], ["a"], ["b"]], ["a", "b"])
    [('a', [(0, 10), (20, 30)]), ('b', [(10, 20), (30, 40)])]
    """
    workers = list(workers)
    offsets = offsets_of(lengths)
    total = int(offsets[-1])
    mean = total / len(workers)
    cap = max(1, math.ceil(mean * imbalance))
    load = dict.fromkeys(workers, 0)
    ranges: dict = {w: [] for w in workers}
    pending = []
    for j, n in enumerate(lengths):
        g0, n = int(offsets[j]), int(n)
        if n == 0:
            continue
        local = [w for w in holders[j] if w in load]
        take = 0
        if local:
            w = min(local, key=lambda v: (load[v], v))
            take = min(n, max(0, cap - load[w]))
            if take:
                ranges[w].append((g0, g0 + take))
                load[w] += take
        if take < n:
            pending.append((g0 + take, g0 + n))
    target = math.ceil(mean)
    for a, b in pending:
        while a < b:
            w = min(workers, key=lambda v: (load[v], v))
            take = min(b - a, max(1, target - load[w]))
            ranges[w].append((a, a + take))
            load[w] += take
            a += take
    out = []
    for w in workers:
        merged: list = []
        for a, b in sorted(ranges[w]):
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        if merged:
            out.append((w, merged))
    return out


def segments_for(ranges, offsets: dict) -> tuple[list, list]:
    """The segments of global row ``ranges`` over every input's blocks, and the blocks they use.

    Returns ``(segments, blocks)``: ``blocks`` lists ``(name, block index)``
    in argument order, and each :class:`Segment` names its argument indices.

    Examples
    --------
    X in blocks of 4 and 4 rows, y in one block of 8: rows 2-6 are two segments.

    >>> from dask_estimators.engine.data._dask_input import segments_for, offsets_of
    >>> segs, blocks = segments_for([(2, 6)], {"X": offsets_of([4, 4]), "y": offsets_of([8])})
    >>> [(s.rows, s.starts) for s in segs], blocks
    ([(2, (('X', 0, 2), ('y', 1, 2))), (2, (('X', 2, 0), ('y', 1, 4)))], [('X', 0), ('y', 0), ('X', 1)])
    """
    args: dict = {}
    segments = []
    for a, b in ranges:
        cuts = {a, b}
        for off in offsets.values():  # the block starts inside (a, b)
            cuts.update(off[np.searchsorted(off, a, side="right") : np.searchsorted(off, b, side="left")].tolist())
        cuts = sorted(cuts)
        for s, e in zip(cuts[:-1], cuts[1:]):
            starts = []
            for name, off in offsets.items():
                blk = int(np.searchsorted(off, s, side="right")) - 1
                idx = args.setdefault((name, blk), len(args))
                starts.append((name, idx, s - int(off[blk])))
            segments.append(Segment(e - s, tuple(starts)))
    return segments, list(args)


# --------------------------------------------------------------------- worker side
def pooled_empty(shape, dtype) -> np.ndarray:
    """An uninitialised, page-aligned array in this process's pool of shard memory.

    The memory goes back to the pool when the last view of the array is
    gone (the shard was released), for the next shard of about that size.
    Small arrays, and processes without memfd, get a plain aligned allocation.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < MIN_POOLED_BYTES or not hasattr(_memfd.os, "memfd_create"):
        return _worker.aligned_empty(shape, dtype)
    try:
        seg = _POOL.take(nbytes, slack=1.25)
        base = np.frombuffer(seg.mapping(), dtype=np.uint8)
    except OSError:
        return _worker.aligned_empty(shape, dtype)
    weakref.finalize(base, _POOL.give_back, seg).atexit = False  # at exit the process frees it
    return base[:nbytes].view(dtype).reshape(shape)


def n_rows(block) -> int:
    """Task body: the rows of one block (NumPy, pandas, scipy.sparse)."""
    return int(block.shape[0]) if hasattr(block, "shape") else len(block)


def _rows_of(block, a: int, b: int):
    if hasattr(block, "iloc"):
        return block.iloc[a:b]
    if _worker.is_scipy_sparse(block) and block.format != "csr":  # COO cannot be sliced, CSC slowly by rows
        block = block.tocsr()
    return block[a:b]


def to_numpy(b):
    """A block (or part of one) as NumPy: pandas through ``to_numpy``; scipy.sparse stays sparse (canonical CSR)."""
    if b is None:
        return None
    if _worker.is_scipy_sparse(b):
        return _worker.canonical_csr(b)
    if hasattr(b, "to_numpy"):
        b = b.to_numpy()
    return np.asarray(b)


class _Buffers:
    """The shard's arrays, filled chunk by chunk: numeric ones in pooled memory, others concatenated.

    Sparse pieces (scipy CSR) are kept as they come and joined once at the
    end into one CSR (their three arrays concatenated), never densified.
    """

    def __init__(self, n_rows: int):
        self.n_rows = n_rows
        self.done = 0
        self.numeric: dict = {}
        self.other: dict = {}
        self.sparse: dict = {}

    def reserve(self, name: str, shape, dtype):
        """The rows of numeric input ``name`` that the next :meth:`write` fills, to be filled by the caller first.

        None where ``name`` cannot be written in place (another dtype or shape than earlier rows).
        """
        buf = self.numeric.get(name)
        if buf is None and name not in self.other and name not in self.sparse:
            buf = self.numeric[name] = self._new(tuple(shape[1:]), dtype, shape[0])
        if buf is None or buf.dtype != dtype or buf.shape[1:] != tuple(shape[1:]):
            return None
        self._room(buf, shape[0])
        return buf[self.done : self.done + shape[0]]

    def _new(self, tail: tuple, dtype, rows: int):
        """Storage for a numeric input of rows shaped ``tail``; ``rows`` are about to be written."""
        return pooled_empty((self.n_rows,) + tail, dtype)

    def _room(self, buf, rows: int) -> None:
        """Make ``buf`` hold ``rows`` more rows past those written (the planned size always does)."""

    def write(self, piece: dict, rows: int | None = None) -> None:
        """Append the rows of ``piece`` (``rows`` of them: inputs written in place with :meth:`reserve` included)."""
        m = rows
        for name, a in piece.items():
            sparse = _worker.is_scipy_sparse(a)
            if sparse or name in self.sparse:
                if not sparse or name in self.numeric or name in self.other:
                    raise ValueError(f"The blocks of {name!r} mix sparse and dense arrays; make them all one kind.")
                a = _worker.canonical_csr(a)
            else:
                a = np.asarray(a)
            m = a.shape[0] if m is None else m
            if a.shape[0] != m:
                raise ValueError(
                    "Found input variables with inconsistent numbers of samples in one partition: "
                    f"{ {k: np.shape(v)[0] for k, v in piece.items()} }"
                )
            if sparse:
                kept = self.sparse.setdefault(name, [])
                if kept and kept[0].shape[1] != a.shape[1]:
                    raise ValueError(
                        f"The blocks of {name!r} have different shapes: {kept[0].shape[1:]} and {a.shape[1:]}."
                    )
                kept.append(a)
                continue
            if a.dtype.kind not in "iuf" or name in self.other:
                self.other.setdefault(name, []).append(a)
                continue
            buf = self.numeric.get(name)
            if buf is not None and (buf.shape[1:] != a.shape[1:]):
                raise ValueError(f"The blocks of {name!r} have different shapes: {buf.shape[1:]} and {a.shape[1:]}.")
            if buf is None or np.result_type(buf.dtype, a.dtype) != buf.dtype:
                dtype = a.dtype if buf is None else np.result_type(buf.dtype, a.dtype)
                new = self._new(tuple(a.shape[1:]), dtype, self.done + m)
                if buf is not None:
                    self._room(new, 0)
                    new[: self.done] = buf[: self.done]
                buf = self.numeric[name] = new
            self._room(buf, m)
            buf[self.done : self.done + m] = a
        self.done += m or 0

    def arrays(self) -> dict:
        if self.done != self.n_rows:
            raise RuntimeError(f"A shard was planned with {self.n_rows} rows but its blocks gave {self.done}.")
        out = {k: self._final(v) for k, v in self.numeric.items()}
        out.update({k: np.concatenate(v, axis=0) for k, v in self.other.items()})
        out.update({k: _worker.CSRRows.concat(v, v[0].shape[1]) for k, v in self.sparse.items()})
        return out

    def _final(self, buf):
        return buf


def _anonymous(nbytes: int):
    """A private anonymous mapping of ``nbytes`` (the rows of a shard being streamed in).

    Private, not shared: no other process maps a shard's rows, and a first
    write into private anonymous pages faulted in faster than into shared
    ones, whose pages the kernel keeps as shared memory
    (benchmarks/results/history/streaming.md).  Where ``MAP_PRIVATE`` is not
    offered, :class:`mmap.mmap`'s default.
    """
    private = getattr(mmap, "MAP_PRIVATE", None)
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if private is None or anonymous is None:
        return mmap.mmap(-1, nbytes)
    return mmap.mmap(-1, nbytes, flags=private | anonymous)


class _Growing:
    """A numeric array that rows are appended to, in anonymous memory reserved ahead.

    Reserved pages cost nothing until written, so the reservation can be
    generous; past it, the mapping grows in place or moves (``mremap``),
    without copying the rows through this process.  Views are made per
    access (``buf[a:b]``) and must be dropped before the next growth.
    """

    def __init__(self, tail: tuple, dtype, rows: int):
        self.tail, self.dtype = tuple(tail), np.dtype(dtype)
        self.row_bytes = max(1, int(np.prod(self.tail, dtype=np.int64)) * self.dtype.itemsize)
        self.rows = max(1, int(rows))
        self.mm = _anonymous(self.rows * self.row_bytes)
        self.used = 0  # rows written (the caller's count, told through ensure)

    @property
    def shape(self) -> tuple:
        return (self.rows,) + self.tail

    def _view(self) -> np.ndarray:
        return np.frombuffer(self.mm, dtype=self.dtype, count=self.rows * (self.row_bytes // self.dtype.itemsize)
                             ).reshape(self.shape)

    def ensure(self, rows: int) -> None:
        """Room for ``rows`` rows in all."""
        if rows <= self.rows:
            return
        new = max(int(rows), int(self.rows * 1.5) + 1)
        try:
            self.mm.resize(new * self.row_bytes)
        except (BufferError, OSError, SystemError):  # a view is still alive, or no mremap: move the rows over
            mm = _anonymous(new * self.row_bytes)
            mm[: self.rows * self.row_bytes] = self.mm[: self.rows * self.row_bytes]
            self.mm = mm
        self.rows = new

    def __getitem__(self, idx):
        return self._view()[idx]

    def __setitem__(self, idx, value) -> None:
        self._view()[idx] = value

    def final(self, rows: int) -> np.ndarray:
        """The first ``rows`` rows as an array (the reservation past them given back)."""
        if rows == 0:
            return np.empty((0,) + self.tail, self.dtype)
        try:
            self.mm.resize(rows * self.row_bytes)
            self.rows = rows
        except (BufferError, OSError, SystemError):
            pass
        return self._view()[:rows]


class _GrowingBuffers(_Buffers):
    """:class:`_Buffers` for rows whose count is known only once they have all come (a dask graph computed
    partition by partition on the worker).  ``hint`` is the rows still expected, reserved at the first write."""

    def __init__(self):
        super().__init__(None)
        self.hint = 0

    def _new(self, tail, dtype, rows):
        return _Growing(tail, dtype, max(int(rows), self.done + int(self.hint)))

    def _room(self, buf, rows):
        buf.ensure(self.done + rows)

    def _final(self, buf):
        return buf.final(self.done)

    def arrays(self) -> dict:
        self.n_rows = self.done
        return super().arrays()


class InputRejected(Exception):
    """A block failed its input check on a worker; ``args[0]`` is the check's own error (scikit-learn's).

    The client raises that error again as it is (:func:`raise_first_error`),
    once.  distributed logs every failed task with its traceback on the
    worker; for this exception it does not (:class:`_QuietRejections`): the
    user's bad input is an answer, not a crash of ours.
    """


class _QuietRejections(logging.Filter):
    """Drops distributed's "Compute Failed" record of a task that raised :class:`InputRejected`, or
    :class:`Misaligned` (the client then places the input the other way: an answer, not a failure)."""

    def filter(self, record) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (
            isinstance(record.msg, str) and record.msg.startswith("Compute Failed") and len(args) >= 4
            and str(args[3]).startswith(("InputRejected(", "Misaligned("))
        )


_QUIET: list = []


def _quiet_rejections() -> None:
    """Install :class:`_QuietRejections` on this worker's task logger, once."""
    if not _QUIET:
        _QUIET.append(_QuietRejections())
        logging.getLogger("distributed.worker").addFilter(_QUIET[0])


def _checked(check):
    """``check`` whose errors (ValueError, TypeError: bad input) are raised as :class:`InputRejected`."""

    def run(piece):
        try:
            return check(piece)
        except (ValueError, TypeError) as e:
            raise InputRejected(e) from None

    return run


def raise_first_error(futs) -> None:
    """Raise the exception of the first failed future: a rejected input's own error, else with its traceback."""
    for f in futs:
        if f.status == "error":
            exc, tb = f.exception(), f.traceback()
            if isinstance(exc, InputRejected) and exc.args and isinstance(exc.args[0], BaseException):
                raise exc.args[0] from None
            raise exc.with_traceback(tb)


def build_shard_task(device, check, names, segments, n_rows, *blocks):
    """Task body of :func:`build_shard`: a block that fails ``check`` fails the task with :class:`InputRejected`,
    which the worker does not log."""
    _quiet_rejections()
    return hold(build_shard(device, None if check is None else _checked(check), names, segments, n_rows, *blocks))


def build_shard(device, check, names, segments, n_rows, *blocks):
    """Task body: validate this worker's rows of every input and write them into one aligned shard.

    ``blocks`` are the input blocks the segments name (Dask brings the ones
    held elsewhere).  ``check`` (validation and casting, the estimator's own)
    sees every segment.  A float NumPy X already of the checked dtype is
    copied into the shard and checked for NaN and infinity in one pass
    (:func:`_write_checked_fast`); other input (pandas, other dtypes) goes
    through ``check`` in row chunks of about :data:`CHUNK_BYTES` of X, each
    copied into the shard right after.
    """
    _worker.setup_threads()
    if check is not None and _worker.choose_device(device) == "cpu":
        shard = _build_reading_x(device, check, names, segments, n_rows, blocks)
        if shard is not None:
            return shard
    out = _Buffers(int(n_rows))
    for seg in segments:
        _write_rows(out, names[0], {name: _rows_of(blocks[i], s, s + seg.rows) for name, i, s in seg.starts}, check)
    return _worker.Shard(out.arrays(), device=device)


def _x_runs(first: str, segments) -> list:
    """X's rows of ``segments`` as ``[[argument index, first row, stop], ...]``, consecutive rows of one block
    joined (segments are also cut where y's or the weights' blocks end)."""
    runs: list = []
    for seg in segments:
        i, a = next((i, a) for name, i, a in seg.starts if name == first)
        if runs and runs[-1][0] == i and runs[-1][2] == a:
            runs[-1][2] += seg.rows
        else:
            runs.append([i, a, a + seg.rows])
    return runs


def _build_reading_x(device, check, names, segments, n_rows, blocks):
    """The shard with X read where its blocks lie (:class:`~._worker.RowSegments`), the other inputs copied; None
    where X's blocks are not what the kernels read as they are.

    X's blocks must be C-contiguous 2-D float NumPy of the dtype ``check``
    gives X (a dask array persisted by the user, or computed for this fit);
    each is checked for NaN and infinity by a sum, without a copy.  A block
    that gives this shard less than half its rows is copied instead: a view
    would keep all of it alive.  The worker then holds X once where it held
    the user's blocks and a copy of them (benchmarks/bench_memory.py,
    ``--source persisted``).
    """
    from ..._validation import all_finite

    first = names[0]
    runs = _x_runs(first, segments)
    for i, a, b in runs:
        blk = blocks[i]
        if type(blk) is not np.ndarray or blk.ndim != 2 or blk.dtype.kind != "f" or not blk.flags.c_contiguous:
            return None
    out = _Buffers(int(n_rows))
    for seg in segments:
        piece = {name: _rows_of(blocks[i], s, s + seg.rows) for name, i, s in seg.starts}
        x = piece[first]
        rest = check({**piece, first: x[:0]})
        if rest[first].dtype != x.dtype:
            return None  # X is cast (float32 to float64, or the other way): copied as it is cast
        if not all_finite(x):
            check(piece)  # raises the check's own error for NaN or infinity; a check that allows them goes on
        del rest[first]
        out.write(rest, rows=seg.rows)
    parts = []
    for i, a, b in runs:
        rows = blocks[i][a:b]
        parts.append(rows if 2 * (b - a) >= blocks[i].shape[0] else _worker.aligned_copy(rows))
    return _worker.Shard({first: _worker.RowSegments(parts), **out.arrays()}, device=device)


def _write_rows(out, first: str, whole: dict, check) -> None:
    """Check the row-aligned blocks ``whole`` (name -> block, ``first`` is X) and append them to ``out``."""
    if check is not None and _write_checked_fast(out, first, whole, check):
        return
    # chunks of about CHUNK_BYTES: the conversions' temporaries stay small
    rows = n_rows(whole[first])
    step = max(1, CHUNK_BYTES // _row_bytes(whole[first]))
    for a in range(0, rows, step):
        piece = {name: _rows_of(b, a, a + step) for name, b in whole.items()}
        out.write(check(piece) if check is not None else {k: to_numpy(v) for k, v in piece.items()})


class Misaligned(Exception):
    """The inputs' blocks of one partition have different numbers of rows: they cannot be streamed together."""


def build_shard_streaming(device, check, names, graph, parts):
    """Task body: this worker's shard computed partition by partition from ``graph`` (a :class:`Graph`, see
    :func:`stream_parts`).

    ``parts`` lists, for each partition, the key of each input's block in
    ``names`` order.  Each partition's blocks are computed here, in this
    task (the graph holds them and what they need, nothing else), checked
    and appended to the shard, then dropped: the worker holds the shard and
    the partitions in flight, never all of its blocks at once.  As many
    partitions are computed at a time as the worker has threads, and
    appended in order.  A partition whose blocks differ in rows raises
    :class:`Misaligned` (the client then places the input the other way).
    """
    from concurrent.futures import ThreadPoolExecutor

    _quiet_rejections()
    threads = _worker.setup_threads()
    check = None if check is None else _checked(check)
    out = _GrowingBuffers()
    # one thread: the task's own, as the partitions are computed one after another anyway (a pool thread of its own
    # raised the peak: benchmarks/results/history/streaming.md)
    pool = (_InThisThread() if threads <= 1
            else ThreadPoolExecutor(threads, thread_name_prefix="dask-estimators-stream"))
    with _lean_arrow_pool(), pool:
        pending = [pool.submit(_compute_part, graph, keys) for keys in parts[: max(1, threads)]]
        try:
            for i in range(len(parts)):
                blocks = pending.pop(0).result()
                rows = {n_rows(b) for b in blocks}
                if len(rows) > 1:
                    raise Misaligned(f"partition {i} has blocks of {sorted(rows)} rows")
                out.hint = rows.pop() * (len(parts) - i)  # reserved at the first write, grown if the rest are longer
                _write_rows(out, names[0], dict(zip(names, blocks)), check)
                del blocks
                _give_back_freed()
                # the next partition starts once this one is written and freed: `threads` partitions live at a time
                if i + len(pending) + 1 < len(parts):
                    pending.append(pool.submit(_compute_part, graph, parts[i + len(pending) + 1]))
        except BaseException:
            for f in pending:  # the partitions not started are not computed
                f.cancel()
            raise
    return hold(_worker.Shard(out.arrays(), device=device))


class _InThisThread:
    """An executor that runs each call when it is submitted, in the calling thread."""

    def submit(self, fn, *args):
        from concurrent.futures import Future

        f = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:
            f.set_exception(e)
        return f

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _compute_part(graph, keys) -> list:
    """One partition's blocks, computed in this thread from the tasks of ``graph`` they need."""
    from dask._task_spec import cull
    from dask.local import get_sync

    return get_sync(cull(graph.tasks, list(keys)), list(keys))


def _give_back_freed(*pools) -> None:
    """Return the memory a partition's reading freed to the system: Arrow's allocator keeps it otherwise.

    ``pools`` are the Arrow pools to release (Arrow's default pool where none is given); then the C heap is
    trimmed (glibc's ``malloc_trim``; nothing elsewhere).
    """
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        for pool in pools or (pa.default_memory_pool(),):
            release = getattr(pool, "release_unused", None)  # pyarrow 9 and later
            if release is not None:
                release()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another system, or a C library without it: musl)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_POOL_LOCK = threading.Lock()
_POOL_STATE: dict = {"users": 0, "default": None}  # stream tasks running, and the default pool to restore


@contextlib.contextmanager
def _lean_arrow_pool():
    """Arrow allocates from jemalloc, where pyarrow has it, while the block runs; the default pool is restored after.

    Reading a parquet partition passes through Arrow about three times its
    size (the file's bytes, the decoded table, pandas' block).  Arrow's
    default pool on Linux, mimalloc, keeps what those freed resident until
    the read ends; jemalloc raised the peak least of the three allocators
    (``benchmarks/results/history/streaming.md`` has the measurement).
    Buffers remember their pool, so those made here are freed to it later;
    other tasks of the worker that allocate meanwhile get jemalloc too.  Only
    where pyarrow is already imported (dataframe input imports it).
    """
    pa = sys.modules.get("pyarrow")
    try:
        lean = pa.jemalloc_memory_pool() if pa is not None else None
    except (NotImplementedError, AttributeError):  # a pyarrow built without jemalloc (Windows)
        lean = None
    if lean is None:
        yield
        return
    with _POOL_LOCK:
        if _POOL_STATE["users"] == 0:
            _POOL_STATE["default"] = pa.default_memory_pool()
            pa.set_memory_pool(lean)
        _POOL_STATE["users"] += 1
    try:
        yield
    finally:
        with _POOL_LOCK:
            _POOL_STATE["users"] -= 1
            if _POOL_STATE["users"] == 0:
                pa.set_memory_pool(_POOL_STATE["default"])
                _POOL_STATE["default"] = None
        _give_back_freed(lean, pa.default_memory_pool())  # and the default pool's (Arrow's own, beside the read's)


def stream_parts(colls: dict):
    """The graph of ``colls`` and each partition's keys, where every partition can be computed on its own.

    Returns ``(graph, parts)``, ``parts[i]`` being the keys of partition
    ``i``'s block of each input (in ``colls`` order), or None where the
    input cannot be streamed:

    - a collection holds futures (data the user persisted: its blocks are
      taken where they are, :func:`persist_blocks`);
    - the inputs have different numbers of row blocks, or blocks of other
      rows where those are known (an in-memory y cut in equal blocks beside a
      dataframe);
    - two partitions need the same task (a reduction over all rows, an array
      made by ``from_array`` from one NumPy array): computing each partition
      on its own would compute that task again on every worker.

    The inputs are optimised together, as ``persist`` would (a parquet file
    that gives X and y is read once per partition).
    """
    from dask._task_spec import convert_legacy_graph
    from distributed import futures_of

    if any(futures_of(c) for c in colls.values()):
        return None
    known = [known_lengths(c) for c in colls.values()]
    if any(k is not None for k in known) and any(k != known[0] for k in known):
        return None  # rows cut differently (or known for some only): aligned by position, the other way
    expr, keys = optimised(list(colls.values()))
    if keys is None:
        return None
    graph = convert_legacy_graph(dict(expr.__dask_graph__()))
    if len({len(k) for k in keys}) != 1:
        return None
    parts = [tuple(ks) for ks in zip(*keys)]
    reach: dict = {}  # each task: the partitions that need it
    shared: set = set()
    for i, part in enumerate(parts):
        for k in _needed(graph, part):
            if k not in graph:  # a key held elsewhere (a future inside a graph)
                return None
            r = reach.setdefault(k, set())
            r.add(i)
            if len(r) > 1:
                shared.add(k)
                if len(shared) > MAX_SHARED_TASKS:
                    return None
    # a task several partitions need is computed again for each of them: only data, or a slice of data, gives the
    # same value every time.  Anything else (a user's function: a random draw not marked pure gave each shard
    # another projection of its rows; a merge's or a p2p shuffle's tasks, which run only on the cluster) is
    # computed once, by the other way (persist)
    if not all(_constant(graph[k]) for k in shared):
        return None
    # and it is a constant they all use (an array multiplied into every block), not another partition's rows (a
    # reduction over all rows needs every block: each partition would compute them all)
    hit: dict = {}
    for i, part in enumerate(parts):
        for k in _needed(graph, part, stop=shared):
            if k in shared:
                hit.setdefault(k, set()).add(i)
    if any(hit[k] != reach[k] for k in hit) or _embedded_bytes(graph[k] for k in shared) > MAX_SHARED_BYTES:
        return None
    return graph, parts


#: dask's functions that slice an array held in the graph: the same value wherever they run
_SLICES = frozenset({"getter", "getter_nofancy", "getter_inline", "getitem"})


def _constant(task) -> bool:
    """Whether ``task`` gives the same value each time it is computed: data, an alias, or a slice of data by
    dask's own getters (its dependencies are checked as tasks of their own)."""
    from dask._task_spec import Alias, DataNode

    if isinstance(task, (DataNode, Alias)):
        return True
    if getattr(task, "has_subgraph", lambda: False)():  # tasks fused into one: each of them
        inner = task.args[0] if task.args else None
        return isinstance(inner, dict) and all(_constant(t) for t in inner.values())
    func = getattr(task, "func", None)
    module = getattr(func, "__module__", "") or ""
    return getattr(func, "__name__", None) in _SLICES and module.startswith(("dask.", "operator", "_operator"))


def _needed(graph: dict, roots, stop=frozenset()):
    """Each key that ``roots`` need in ``graph``, once: their dependencies followed, except past a key of ``stop``
    or one the graph does not hold (both given, not followed)."""
    work, seen = list(roots), set()
    while work:
        k = work.pop()
        if k in seen:
            continue
        seen.add(k)
        yield k
        if k in graph and k not in stop:
            work.extend(graph[k].dependencies)


def _embedded_bytes(tasks) -> int:
    """The bytes of data held in ``tasks`` themselves (a NumPy array in a graph), as pickled."""
    import cloudpickle
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    total = 0
    for t in tasks:
        if isinstance(t, DataNode):
            total += sizeof(t.value)
            continue
        try:  # as distributed sends it: a function defined in a function or a lambda is pickled by value
            total += len(cloudpickle.dumps(t, protocol=5))
        except Exception:  # noqa: BLE001 - what cannot be sent cannot be streamed: the other way
            return MAX_SHARED_BYTES + 1
    return total


def runs(lengths, n: int) -> list:
    """``n`` runs of consecutive blocks, ``[(first, stop), ...]``, of about equal rows (``lengths``: each block's).

    Examples
    --------
    >>> from dask_estimators.engine.data._dask_input import runs
    >>> runs([10] * 6, 2), runs([40, 10, 10, 10, 10], 2), runs([1, 9, 1], 3)
    ([(0, 3), (3, 6)], [(0, 1), (1, 5)], [(0, 1), (1, 2), (2, 3)])
    """
    offsets = offsets_of(lengths)
    total = int(offsets[-1])
    cuts = [0]
    for i in range(1, n):
        # the block boundary nearest to i/n of the rows, after the previous cut
        j = int(np.abs(offsets - total * i / n).argmin())
        low, high = cuts[-1] + 1, len(lengths) - (n - i)  # each run one block at least, where there are enough
        cuts.append(min(len(lengths), max(j, cuts[-1])) if low > high else min(high, max(low, j)))
    cuts.append(len(lengths))
    return list(itertools.pairwise(cuts))


class Graph:
    """The tasks of a graph, carried as one opaque argument.

    Dask reads the tasks inside a task's arguments as part of its own graph
    (their keys as dependencies); these are computed by the task itself.
    """

    __slots__ = ("tasks",)

    def __init__(self, tasks: dict):
        self.tasks = tasks

    def __reduce__(self):
        return (Graph, (self.tasks,))

    def __sizeof__(self) -> int:
        return 1000 * len(self.tasks)


def cull_parts(graph: dict, parts) -> Graph:
    """The tasks of ``graph`` that the blocks of ``parts`` need (what one worker's stream task computes)."""
    from dask._task_spec import cull

    return Graph(cull(graph, [k for keys in parts for k in keys]))


def _flat_rows(ks) -> list:
    """A collection's keys, one per row block (a dask array's other axes are one chunk)."""
    out = []
    for k in ks:
        while isinstance(k, list):
            k = k[0]
        out.append(k)
    return out


def _float_matrix(a):
    """``a`` as a 2-D float NumPy array without a copy, else None: an ndarray, or a pandas frame of one float dtype."""
    if type(a) is np.ndarray:
        return a if a.ndim == 2 and a.dtype.kind == "f" else None
    dtypes = getattr(a, "dtypes", None)
    if dtypes is None or getattr(a, "ndim", 0) != 2 or len(dtypes) == 0:
        return None
    first = dtypes.iloc[0]
    if not isinstance(first, np.dtype) or first.kind != "f" or any(dt != first for dt in dtypes):
        return None
    return a.to_numpy()  # a view of a frame of one block (parquet gives those); a copy otherwise, as check_array makes


def _write_checked_fast(out, first, piece, check) -> bool:
    """Copy a float ``first`` input and check it is finite in one pass; check the rest with ``check``.

    ``check`` still sees every block, with ``first`` as a view of no rows, so
    its rules on dtype and shape apply; the whole piece goes through ``check``
    (for its error message) where the copy finds NaN or infinity.  Returns
    False, having written nothing, where the fast way does not apply: ``first``
    is not a 2-D float array (NumPy, or a pandas frame of one float block)
    of the dtype ``check`` gives it.
    """
    from ..._validation import copy_if_finite

    a = _float_matrix(piece[first])
    if a is None:
        return False
    rest = check({**piece, first: a[:0]})
    if rest[first].dtype != a.dtype:
        return False
    dst = out.reserve(first, a.shape, a.dtype)
    if dst is None:
        return False
    if not copy_if_finite(a, dst):
        check(piece)  # raises the check's own error for NaN or infinity; a check that allows them keeps the copy
    del rest[first]
    out.write(rest, rows=a.shape[0])
    return True


def _row_bytes(block) -> int:
    """Bytes per row of a block (an estimate for pandas: its columns' memory)."""
    rows = max(1, n_rows(block))
    if _worker.is_scipy_sparse(block):  # what its arrays hold, not rows x columns
        nbytes = sum(int(getattr(block, k).nbytes) for k in ("data", "indices", "indptr") if hasattr(block, k))
        nbytes = nbytes or int(block.nnz) * (block.dtype.itemsize + 8)
    elif hasattr(block, "memory_usage"):
        nbytes = block.memory_usage(index=False)
        nbytes = int(nbytes.sum() if hasattr(nbytes, "sum") else nbytes)
    else:
        nbytes = int(getattr(block, "nbytes", 0) or 0)
    return max(1, nbytes // rows)


# --------------------------------------------------------------------- client side
def normalise(a):
    """A dask collection with one block per row range (a dask array's other axes in one chunk).

    A dask array of scipy.sparse blocks chunked along its columns is joined
    the same way: Dask's ``rechunk`` concatenates sparse blocks as sparse
    (``scipy.sparse.hstack``), never densifying them.
    """
    if hasattr(a, "chunks") and hasattr(a, "rechunk") and a.ndim > 1 and any(n > 1 for n in a.numblocks[1:]):
        a = a.rechunk({i: -1 for i in range(1, a.ndim)})
    return a


def optimised(items: list):
    """``items`` optimised together, as ``persist`` would, and each one's row-block keys, in ``items``' and row order.

    Returns ``(expr, keys)``, ``keys[i]`` being the keys of ``items[i]``'s
    row blocks in the optimised expression (a parquet read that gives X and
    y once, its files fused into fewer blocks), or None where a key does not
    name its block's position.  Dask (2026.11) lists the keys of arrays and
    dataframes given together grouped by kind, and a dataframe's keys there
    in no fixed order: X from ``to_dask_array()`` beside y a series paired
    one block's rows with another's targets.  So the kinds go in grouped
    (:func:`in_order`), and each collection's keys are put in the order of
    their block index.
    """
    from dask.base import collections_to_expr

    made = []

    def keys_of(xs):
        made.append(collections_to_expr(xs, True).optimize())
        return made[0].__dask_keys__()

    keys = [_flat_rows(ks) for ks in in_order(keys_of, items)]
    if not all(isinstance(k, tuple) and len(k) > 1 and isinstance(k[1], int) for ks in keys for k in ks):
        return made[0], None
    keys = [sorted(ks, key=lambda k: k[1]) for ks in keys]
    if any([k[1] for k in ks] != list(range(len(ks))) for ks in keys):
        return made[0], None
    return made[0], keys


def persist_blocks(client, colls: dict) -> dict:
    """Each collection's row blocks as futures, in row order, computed in one call for them all.

    All inputs go to Dask together, optimised together (:func:`optimised`):
    a graph they share is computed once, and blocks already in memory are
    not computed again.  The futures are taken for the optimised
    expression's own keys, not through ``Client.persist``'s collections: a
    persisted parquet read whose files Dask fused into fewer blocks named
    blocks that had no future (dask/dask#12488).  The futures are new ones,
    so releasing them frees nobody else's data.  The same call gives the
    same partitioning again when a shard is rebuilt.
    """
    names = list(colls)
    expr, keys = optimised([colls[k] for k in names])
    if keys is None:
        raise RuntimeError("Dask gave the input's row blocks keys that do not name their positions; "
                           "pass it as a dask array or dataframe with one block per row range.")
    flat = [k for ks in keys for k in ks]
    futures = dict(zip(flat, client.get(expr, flat, sync=False)))
    return {name: [futures[k] for k in ks] for name, ks in zip(names, keys)}


def known_lengths(a):
    """Rows of each row block when the collection knows them (dask arrays with known chunks), else None."""
    chunks = getattr(a, "chunks", None)
    if chunks is None or any(math.isnan(c) for c in chunks[0]):
        return None
    return [int(c) for c in chunks[0]]
