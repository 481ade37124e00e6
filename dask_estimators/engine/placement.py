"""Placement: named row-aligned arrays -> one aligned shard per worker.

* NumPy input (pandas is converted by the estimator's validation) is split by
  rows on the client and each part goes straight to its worker: through a
  file in /dev/shm that the worker maps when it runs on the client's host
  (one memcpy, no pickling), else by ``scatter``.
* Dask arrays and dataframes are persisted block by block; ``who_has`` tells
  where each block lives, and one pinned task per worker concatenates the
  blocks it already holds.  The data never passes through the client, and
  unknown chunk sizes work because blocks are paired by index, not by size.

Either way each worker ends up with one :class:`~dask_estimators.engine._worker.Shard`
whose arrays are C-contiguous, 64-byte aligned copies on the worker's device.
The shards stay on the workers until :meth:`Placement.release`.
"""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections import defaultdict

import numpy as np
from distributed import wait as _dask_wait

from . import _shm, _worker
from ._actor import ShardActor

#: How a round reaches the shards: long-lived actors (direct worker-to-worker
#: calls, no scheduler) or plain tasks (scatter, pinned tasks, tree of add tasks).
TRANSPORTS = ("actors", "tasks")

__all__ = ["TRANSPORTS", "Placement", "place", "is_dask_collection"]


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


def wait(futs, client=None):
    """``distributed.wait`` on the futures' own client (which need not be the default one)."""
    futs = list(futs)
    if not futs:
        return
    client = client or futs[0].client
    with client.as_current():
        _dask_wait(futs)


def _block_to_numpy(b):
    if b is None:
        return None
    if hasattr(b, "to_numpy"):  # pandas DataFrame / Series
        b = b.to_numpy()
    return np.asarray(b)


def _pack(names, check, *blocks):
    """Task body: one row block of every input, converted, checked, as a dict of NumPy arrays."""
    arrays = {n: _block_to_numpy(b) for n, b in zip(names, blocks)}
    lengths = {n: a.shape[0] for n, a in arrays.items() if a is not None}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"Found input variables with inconsistent numbers of samples in one partition: {lengths}")
    if check is not None:
        arrays = check(arrays)
    return arrays


def _concat(parts: list[dict]) -> dict:
    parts = [p for p in parts if p is not None]
    names = list(parts[0])
    out = {}
    for n in names:
        blocks = [p[n] for p in parts if p[n] is not None]
        if not blocks:
            out[n] = None
        elif len(blocks) == 1:
            out[n] = blocks[0]
        else:
            out[n] = np.concatenate(blocks, axis=0)
    return out


def _build_shard(device, *parts):
    """Task body: concatenate this worker's parts into one aligned shard on its device."""
    _worker.setup_threads()
    arrays = _concat(list(parts))
    return _worker.Shard(arrays, device=device)


def _rows(shard) -> int:
    return int(shard.n_rows or 0)


def _row_blocks(name, a, ref_chunks):
    """A dask collection -> list of delayed row blocks (columns merged into one block)."""
    if hasattr(a, "chunks") and hasattr(a, "rechunk"):  # dask array
        if a.ndim == 2 and a.numblocks[1] > 1:
            a = a.rechunk({1: -1})
        if ref_chunks is not None and not any(np.isnan(c) for c in a.chunks[0]) and a.chunks[0] != ref_chunks:
            a = a.rechunk({0: ref_chunks})
        blocks = a.to_delayed()
        return list(blocks.reshape(blocks.shape[0], -1)[:, 0]) if blocks.ndim > 1 else list(blocks)
    return list(a.to_delayed())  # dask dataframe / series


class Placement:
    """Shards placed on the workers for one fit.

    Attributes
    ----------
    client : distributed.Client
    shards : list of distributed.Future
        One future per worker holding a :class:`Shard`.
    workers : list of str
        The worker address of each shard.
    n_rows : list of int
        Rows in each shard.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import place, resolve_client
    >>> with place(resolve_client(), {"X": np.ones((100, 3))}) as p:  # doctest: +SKIP
    ...     p.n_rows, p.map(lambda shard: float(shard.get("X").sum()))
    ([50, 50], [150.0, 150.0])
    """

    def __init__(self, client, shards, workers, transport="actors"):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}.")
        self.client = client
        self.shards = list(shards)
        self.workers = list(workers)
        self.transport = transport
        self.token = uuid.uuid4().hex[:8]
        self._actor_futures: list = []
        self.actors: list = []
        if transport == "actors":
            self._actor_futures = [
                client.submit(ShardActor, s, workers=[w], allow_other_workers=False, actor=True, pure=False)
                for s, w in zip(self.shards, self.workers)
            ]
            with client.as_current():
                self.actors = [f.result() for f in self._actor_futures]
        self.n_rows = self.map(_rows)
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
            if self.actors:
                self.actors = [self.actors[i] for i in keep]
                self._actor_futures = [self._actor_futures[i] for i in keep]

    @staticmethod
    def _close_actors(actors, timeout=10):
        pending = []
        for a in actors:
            with contextlib.suppress(Exception):
                pending.append(a.close())
        for f in pending:
            with contextlib.suppress(Exception):
                f.result(timeout)

    @property
    def n_samples(self) -> int:
        """Rows over all shards."""
        return int(sum(self.n_rows))

    def map(self, fn, *args, timeout=None) -> list:
        """Run ``fn(shard, *args)`` on every shard, on its own worker, and return the results in shard order."""
        if self.actors:
            futs = [a.apply(fn, args) for a in self.actors]
            return [f.result(timeout) for f in futs]
        futs = [
            self.client.submit(_worker.apply, fn, s, *args, workers=[w], allow_other_workers=False, pure=False)
            for s, w in zip(self.shards, self.workers)
        ]
        return self.client.gather(futs, errors="raise") if timeout is None else [f.result(timeout) for f in futs]

    def submit_each(self, fn, per_shard_args) -> list:
        """Start ``fn(shard, *args_i)`` on every shard at once (``args_i`` from ``per_shard_args``).

        Returns one future-like object per shard (``.result(timeout)``), in
        shard order.  All calls run concurrently, which a collective (an
        allreduce among the shards) needs.
        """
        per_shard_args = list(per_shard_args)
        if len(per_shard_args) != len(self.shards):
            raise ValueError(f"Expected {len(self.shards)} argument tuples, got {len(per_shard_args)}.")
        if self.actors:
            return [a.apply(fn, tuple(args)) for a, args in zip(self.actors, per_shard_args)]
        return [
            self.client.submit(_worker.apply, fn, s, *args, workers=[w], allow_other_workers=False, pure=False)
            for s, w, args in zip(self.shards, self.workers, per_shard_args)
        ]

    def map_each(self, fn, per_shard_args, timeout=None) -> list:
        """Like :meth:`map`, with its own arguments for each shard (for example its rank)."""
        return [f.result(timeout) for f in self.submit_each(fn, per_shard_args)]

    def release(self) -> None:
        """Drop the shards (and their actors) from the workers."""
        actors, self.actors = self.actors, []
        self._close_actors(actors)
        futs = self._actor_futures + self.shards
        self._actor_futures, self.shards = [], []
        if futs:
            self.client.cancel(futs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self) -> str:
        return f"Placement(n_shards={len(self.shards)}, n_rows={self.n_rows})"


def _workers(client, workers=None) -> list[str]:
    if workers is not None:
        return list(workers)
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    ws = sorted(info["workers"])
    if not ws:
        client.wait_for_workers(1, timeout=30)
        ws = sorted(client.scheduler_info()["workers"])
    return ws


def _accepts_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def place(
    client, arrays: dict, *, check=None, device: str = "auto", workers=None, transport: str | None = None
) -> Placement:
    """Place named, row-aligned arrays on the cluster as one shard per worker.

    Parameters
    ----------
    client : distributed.Client
    arrays : dict of str -> array-like or None
        Row-aligned inputs: NumPy arrays, or dask arrays/dataframes/series.
        None entries are skipped.  When any entry is a dask collection, all
        must be dask collections with the same number of row blocks (dask
        arrays with known chunks are rechunked to match the first one).
    check : callable, optional
        ``check(dict of NumPy arrays) -> dict`` run on the workers on each row
        block of dask input before the shard is built (validation, casting).
        It is not applied to NumPy input, which the caller validates.
    device : {"auto", "cpu", "cuda"}
        Where each worker keeps its shard; "auto" uses CUDA when the worker has it.
    workers : list of str, optional
        The workers to use; all workers by default.
    transport : {"actors", "tasks"}, optional
        How rounds reach the shards; defaults to the dask config value
        ``dask-estimators.transport`` (``"actors"``).

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
    import dask

    transport = transport or dask.config.get("dask-estimators.transport", "actors")
    arrays = {k: v for k, v in arrays.items() if v is not None}
    ws = _workers(client, workers)
    if any(is_dask_collection(a) for a in arrays.values()):
        shards, used = _place_dask(client, arrays, check, device, ws)
    else:
        shm = dask.config.get("dask-estimators.shared-memory", True)
        shards, used = _place_numpy(client, arrays, device, ws, shared_memory=shm)
    placement = Placement(client, shards, used, transport)
    if placement.n_samples == 0:
        placement.release()
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    return placement


def _place_numpy(client, arrays, device, ws, shared_memory=True):
    n = {k: np.shape(v)[0] for k, v in arrays.items()}
    if len(set(n.values())) != 1:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: {n}")
    n_rows = next(iter(n.values()))
    if n_rows == 0:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    n_parts = min(len(ws), n_rows)
    bounds = np.linspace(0, n_rows, n_parts + 1).astype(int)
    parts = [{k: np.asarray(v[bounds[i] : bounds[i + 1]]) for k, v in arrays.items()} for i in range(n_parts)]
    used = ws[:n_parts]
    shards = _place_shared(client, parts, used, device) if shared_memory else [None] * n_parts
    for i, (part, w) in enumerate(zip(parts, used)):
        if shards[i] is None:  # not on this host (or no /dev/shm): send the bytes
            [data] = client.scatter([part], workers=[w], hash=False, direct=True)
            shards[i] = client.submit(
                _build_shard, device, data, workers=[w], allow_other_workers=False, pure=False
            )
            del data
    wait(shards)
    return shards, used


def _place_shared(client, parts, workers, device):
    """Hand each part to its worker through a file in /dev/shm when the worker can open it.

    A worker on the client's host maps the file (page-aligned, so already
    aligned for BLAS) and keeps the mapping as its shard: the bytes are copied
    once, by the client, instead of pickled through a socket.  The files are
    unlinked as soon as the shards are built; the workers' mappings live on
    until the shards are released.  Parts whose worker cannot open the file
    (another host or container) come back as None and are scattered instead.
    """
    handles = []
    try:
        with ThreadPoolExecutor(min(len(parts), 4)) as pool:  # os.write releases the GIL
            handles = list(pool.map(_shm.write_parts, parts))
        if any(h is None for h in handles):
            return [None] * len(parts)
        futs = [
            client.submit(_build_shard_shared, device, h, workers=[w], allow_other_workers=False, pure=False)
            for h, w in zip(handles, workers)
        ]
        wait(futs)
        out = []
        for f in futs:
            if f.status == "error" and isinstance(f.exception(), _shm.NotShared):
                f.release()
                out.append(None)
            else:
                out.append(f)
        return out
    finally:
        for h in handles:
            if h is not None:
                _shm.unlink(h)


def _build_shard_shared(device, handles):
    """Task body: map the client's /dev/shm files and build the shard on them."""
    _worker.setup_threads()
    return _worker.Shard(_shm.read_parts(handles), device=device)


def _place_dask(client, arrays, check, device, ws):
    from dask import delayed

    for k, v in arrays.items():
        if not is_dask_collection(v):
            raise TypeError(
                f"{k} is a {type(v).__name__} while another input is a dask collection; "
                "pass all of X, y and sample_weight as dask collections partitioned alike."
            )
    names = list(arrays)
    first = arrays[names[0]]
    ref = first.chunks[0] if hasattr(first, "chunks") and not any(np.isnan(c) for c in first.chunks[0]) else None
    blocks = {k: _row_blocks(k, v, ref) for k, v in arrays.items()}
    counts = {k: len(b) for k, b in blocks.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(
            f"Inputs have different numbers of row partitions {counts}; partition X, y and sample_weight alike."
        )
    packed = [
        delayed(_pack, pure=False)(names, check, *(blocks[k][i] for k in names))
        for i in range(next(iter(counts.values())))
    ]
    futs = client.compute(packed)
    wait(futs)
    failed = [f for f in futs if f.status == "error"]
    if failed:
        exc, tb = failed[0].exception(), failed[0].traceback()
        client.cancel(futs)
        del futs, failed
        raise exc.with_traceback(tb)
    who = client.who_has(futs)
    by_worker: dict[str, list] = defaultdict(list)
    for f in futs:
        holders = [w for w in who.get(f.key, ()) if w in ws] or list(who.get(f.key, ()))
        by_worker[holders[0] if holders else ws[0]].append(f)
    shards, used = [], []
    for w in sorted(by_worker):
        shards.append(
            client.submit(_build_shard, device, *by_worker[w], workers=[w], allow_other_workers=False, pure=False)
        )
        used.append(w)
    wait(shards)
    for f in shards:
        if f.status == "error":
            f.result()
    return shards, used
