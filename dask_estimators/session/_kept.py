"""Placed input kept between fits: the next fit on the same data reuses the shards.

A fit's :class:`~dask_estimators.session.DataSession` asks :func:`take` for a
placement of its arrays before it places them.  The key is what the shards
are made of: the client, the device, the transport, the workers asked for,
each array's dask token (for a dask collection its graph's name: the same
keys give the same data; for NumPy, pandas and scipy.sparse input a hash of
its content, so that a copy finds it), and the check each block passed on
its worker.  Shards that live in their actors (NumPy input workers on the
client's host took from its shared memory) are not kept: Dask would not
retire their workers.  A placement is kept pinned
(:meth:`~dask_estimators.engine.data.placement.Placement.pin`); a fit on it
changes its shards (the targets' encoding, the rounds' state), and
:func:`give_back` restores them when the fit's session closes.  Between fits
the shards have no actors, only their task results, which Dask may move
when it retires a worker (it does not retire a worker holding an actor);
:func:`take` makes new actors where the shards are, and rebuilds a shard
whose worker was lost from its source.  One fit uses
a kept placement at a time: a fit that finds it in use places its own.

Kept placements are bounded by the dask config ``dask-estimators.keep-placed``
(a share of the memory limit of the workers holding them; 0 keeps none), the
least recently used released first, and a dask collection's placements are
released when that collection is garbage-collected on the client, or found
on a closed client.  A placement of NumPy input keeps no reference to the
client's arrays between fits: each fit on it lends its own (:func:`take`),
from which a shard lost meanwhile is rebuilt.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from .. import config as _config
from .._pieces import digest
from ..engine.cluster._watch import workers_info
from ..engine.data.placement import client_input_may_be_kept, is_dask_collection

__all__ = ["KeptData", "active_handle", "key_of", "take", "make_room", "keep", "give_back", "drop", "held",
           "release_all"]

_lock = threading.RLock()
#: key -> _Kept, least recently used first
_KEPT: OrderedDict = OrderedDict()


@dataclass
class _Kept:
    placement: object
    nbytes: int
    budget: int
    busy: bool = True
    dropped: bool = False
    #: known by its content (NumPy, pandas, scipy.sparse input): its sources are lent by each fit on it
    by_content: bool = False
    finalizers: list = field(default_factory=list)
    #: held for a :class:`KeptData`: never evicted to make room, kept whatever the budget, until it is released
    pinned: bool = False


#: The KeptData whose fit runs in this context (:meth:`KeptData.in_use`), or None.
_ACTIVE = contextvars.ContextVar("dask_estimators_kept_data", default=None)


def active_handle():
    """The :class:`KeptData` of the fit running in this context (``est.fit(kept)``), or None."""
    return _ACTIVE.get()


class KeptData:
    """X, y and sample weights whose placement on the workers stays there for every fit on them until released.

    ``est.fit(kept)`` fits any estimator of this package on ``kept.X``,
    ``kept.y`` and ``kept.sample_weight``.  The first fit places them as
    usual; their shards then stay on the workers, whatever the dask config
    ``dask-estimators.keep-placed`` (0 included) and never evicted to make
    room for other data, and every later fit that validates them the same
    way (any classifier, any regressor of this package, other
    hyperparameters, ``warm_start``) reuses them:
    ``fit_stats_["placement"]`` is ``"reused"``.  :meth:`release` (or the
    end of a ``with`` block) frees them.  This is XGBoost's ``DaskDMatrix``
    for scikit-learn's estimators: placed once, fitted many times, released
    when you say so.

    What is placed is what a fit places: dask arrays and dataframes, and
    NumPy, pandas or scipy.sparse input sent to the workers.  NumPy input
    that workers on the client's host take from its shared memory is not
    kept (each fit hands it over again, a copy into shared memory: see the
    documentation's performance page for its cost), nor is a small
    problem that runs on one worker (``dask-estimators.worker-solve-below``).

    Parameters
    ----------
    X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)
    y : array-like or dask collection of shape (n_samples,) or (n_samples, n_targets), default=None
    sample_weight : array-like or dask collection of shape (n_samples,), default=None

    Examples
    --------
    >>> import dask.array as da
    >>> from dask_estimators import KeptData, LogisticRegression
    >>> X = da.random.normal(size=(100_000, 20), chunks=25_000)  # doctest: +SKIP
    >>> y = (X[:, 0] > 0).astype(int)  # doctest: +SKIP
    >>> with KeptData(X, y) as data:  # doctest: +SKIP
    ...     models = [LogisticRegression(C=C).fit(data) for C in (0.1, 1.0, 10.0)]
    >>> models[-1].fit_stats_["placement"]  # doctest: +SKIP
    'reused'
    """

    def __init__(self, X, y=None, sample_weight=None):
        self.X, self.y, self.sample_weight = X, y, sample_weight
        self._keys: set = set()
        self.released = False
        _HOLDERS.add(self)

    @contextlib.contextmanager
    def in_use(self):
        """The context of one fit on this data: the placements its session makes or finds are held for it."""
        if self.released:
            raise ValueError("This KeptData was released; make a new one to fit on its data again.")
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def _hold(self, key) -> None:
        """Hold the placement kept under ``key`` for this data (see :func:`keep` and :func:`take`)."""
        with _lock:
            self._keys.add(key)
            kept = _KEPT.get(key)
            if kept is not None:
                kept.pinned = True

    @property
    def nbytes(self) -> int:
        """The bytes its placements hold on the workers now."""
        with _lock:
            return sum(_KEPT[k].nbytes for k in self._keys if k in _KEPT)

    def release(self) -> None:
        """Free its placements on the workers now (one in use by a fit goes when that fit ends)."""
        self.released = True
        with _lock:
            keys, self._keys = list(self._keys), set()
            others = {k for h in _holders() if h is not self for k in h._keys}
        for key in keys:
            if key not in others:
                drop(key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else f"{len(self._keys)} placement(s), {self.nbytes:,} bytes"
        return f"KeptData(X of shape {tuple(getattr(self.X, 'shape', ()))}, {state})"


#: The live KeptData objects (held weakly): a placement two of them share goes with the last one's release.
_HOLDERS: weakref.WeakSet = weakref.WeakSet()


def _holders() -> list:
    return list(_HOLDERS)


def share() -> float:
    """The share of the workers' memory kept placements may take (``dask-estimators.keep-placed``)."""
    return float(_config.get("keep-placed") or 0.0)


def key_of(client, arrays: dict, check, device: str, transport: str, workers=None):
    """The key of ``arrays`` placed with ``check`` on ``workers`` (a tuple; None: all): None where they cannot be
    kept (dask collections mixed with other input, the client's arrays that workers take from its shared memory,
    input whose token is not deterministic, or a check's).

    Dask collections are known by their keys; NumPy, pandas and scipy.sparse input by its content, so that a
    copy of the same data, such as the same fold of a search cut again for the next candidate, finds the same
    placement.  A NumPy array (its values in C order where it is strided), the arrays of a CSR or CSC matrix,
    and an object array of strings and numbers are hashed by :func:`_content_token` (xxh3, by threads: a few
    times faster than dask's token, benchmarks/results/history/streaming.md); anything else by dask's token
    where dask hashes with a fast hash (not kept where it falls back to SHA-1).
    """
    from dask.base import tokenize

    if (share() <= 0 and active_handle() is None) or not arrays:
        return None
    dask_input = [is_dask_collection(a) for a in arrays.values()]
    by_content = not any(dask_input)
    if not (all(dask_input) or by_content):
        return None
    if by_content and not client_input_may_be_kept(client, workers, transport):
        return None  # placed anew by every fit: not hashed at all
    try:
        check_token = tokenize(check, ensure_deterministic=True)
        tokens = tuple((k, _content_token(v) if by_content else tokenize(v, ensure_deterministic=True))
                       for k, v in sorted(arrays.items()))
    except Exception:  # noqa: BLE001 - something dask cannot name: its placements are not kept
        return None
    return (getattr(client, "id", id(client)), device, transport, tokens, check_token, workers,
            "content" if by_content else "keys")


def _content_token(v):
    """A name for the content of the client's array ``v``: :func:`~dask_estimators._pieces.digest` of a NumPy
    array (of a C-ordered copy of a strided one) or of a CSR or CSC matrix's arrays, :func:`_objects_digest` of
    an object array, else dask's token where dask hashes bytes with a fast hash; raises ValueError where it
    would be SHA-1 (too slow to hash every fit's input with)."""
    from dask.base import tokenize

    named = digest(v)
    if named is not None:
        return "xxh3", named
    if getattr(v, "format", None) in ("csr", "csc"):
        parts = [digest(a) for a in (v.data, v.indices, v.indptr)]
        if None not in parts:
            return ("xxh3", v.format, tuple(v.shape), *parts)
    if isinstance(v, np.ndarray):
        # dask's token of a strided array hashes its memory order without its strides (X[:, ::2] and its
        # transpose met), and of an object array its strings joined by "-" (["a-b", "c"] and ["a", "b-c"] met)
        if v.dtype.hasobject:
            return "objects", _objects_digest(v)
        named = digest(np.ascontiguousarray(v))
        if named is not None:
            return "xxh3", named
    if not _fast_hash():
        raise ValueError("no fast hash for this input")
    return tokenize(v, ensure_deterministic=True)


#: The element types an object array may hold to be known by its content (:func:`_objects_digest`).
_PLAIN = (str, bytes, int, float, bool, type(None))


def _objects_digest(v) -> str:
    """xxh3 of an object array of plain values (strings, numbers, None) and its shape: their pickle, which tells
    every value from every other; ValueError for other objects (their pickles may not)."""
    import pickle

    import xxhash

    values = v.ravel().tolist()
    if not all(type(x) in _PLAIN for x in values):
        raise ValueError("objects other than strings and numbers are not known by their content")
    h = xxhash.xxh3_128(repr(v.shape).encode())
    h.update(pickle.dumps(values, protocol=5))
    return h.hexdigest()


def _fast_hash() -> bool:
    """Whether dask hashes bytes with a fast hash (``xxhash`` or ``cityhash``), not SHA-1."""
    from dask import hashing

    return bool(hashing.hashers) and hashing.hashers[0] is not hashing._hash_sha1


def take(key, arrays=None):
    """The kept placement of ``key``, marked in use, or None (none kept, in use by another fit, or its client
    closed: then it is forgotten).  ``arrays``: the fit's input, whose rows are the sources of a placement known
    by its content while the fit runs (a shard lost is rebuilt from them)."""
    if key is None:
        return None
    with _lock:
        kept = _KEPT.get(key)
        if kept is None or kept.busy:
            return None
        if getattr(kept.placement.client, "status", None) != "running":
            _forget(key)
            return None
        kept.busy = True
        _KEPT.move_to_end(key)
    handle = active_handle()
    if handle is not None:
        handle._hold(key)
    try:
        if kept.by_content:
            sources = kept.placement.cut_sources(arrays or {})
            if sources is None:
                raise ValueError("no sources")
            kept.placement.sources = sources
        kept.placement.attach()  # its actors again, where its shards are now (rebuilt where lost)
    except Exception:  # noqa: BLE001 - unusable: released, and the fit places its data anew
        with _lock:
            kept.busy = False
            _forget(key)
        return None
    return kept.placement


def keep(key, placement, owners=()) -> bool:
    """Keep ``placement`` (just placed, in use by its fit) under ``key``; pinned here.  Whether it is kept: not
    when it alone exceeds the budget, where ``key`` is already kept (another fit's), or where its shards live in
    their actors (NumPy input handed to workers through the client's shared memory: Dask could not retire
    those workers while it is kept).  ``owners``: the collections whose garbage collection releases it."""
    if key is None or not placement.detachable():
        return False
    handle = active_handle()
    budget = _budget(placement)
    with _lock:
        if key in _KEPT:
            return False
    nbytes = placement.nbytes()
    if nbytes > budget and handle is None:
        return False
    placement.pin()
    kept = _Kept(placement, nbytes, budget, by_content=key[-1] == "content", pinned=handle is not None)
    for o in owners:
        try:
            kept.finalizers.append(weakref.finalize(o, drop, key))
        except TypeError:  # not weakly referenceable: the budget and the client bound it
            pass
    with _lock:
        if key in _KEPT:
            return False
        _KEPT[key] = kept
    if handle is not None:
        handle._hold(key)
    _evict(budget)
    return True


def give_back(key, placement) -> None:
    """The fit on the kept ``placement`` is over: its shards restored, and free for the next fit (released
    instead when it was dropped meanwhile, or cannot be restored)."""
    with _lock:
        kept = _KEPT.get(key)
    if kept is None or kept.placement is not placement:
        placement.release()
        return
    try:
        if not kept.dropped:
            placement.restore()
            placement.detach()  # no actor between fits: Dask can retire the workers (and moves the shards)
    except Exception:  # noqa: BLE001 - a worker lost for good, a closed client: not kept
        kept.dropped = True
    if kept.by_content:
        placement.sources = None  # the fit's arrays, lent while it ran: the client may free them
    with _lock:
        kept.busy = False
        if kept.dropped:
            _forget(key)
            return
    _evict(kept.budget)


def drop(key) -> None:
    """Release the placement kept under ``key`` (at once, or when its fit ends)."""
    with _lock:
        kept = _KEPT.get(key)
        if kept is None:
            return
        if kept.busy:
            kept.dropped = True
            return
        _forget(key)


def _scheduler_of(client) -> str | None:
    """The scheduler address of ``client`` (a ``Client``, or an address as the estimators take one)."""
    if isinstance(client, str):
        return client
    try:
        return client.scheduler.address
    except Exception:  # noqa: BLE001 - a client closed meanwhile: no address
        return None


def release_all(client=None) -> None:
    """Release every kept placement (of ``client`` only, when given: a ``Client``, or a scheduler address, whose
    every client's placements go); one in use goes when its fit ends."""
    cid = None if client is None else getattr(client, "id", id(client))
    address = None if client is None else _scheduler_of(client)
    with _lock:
        keys = [k for k, kept in _KEPT.items()
                if cid is None or k[0] == cid
                or (address is not None and _scheduler_of(kept.placement.client) == address)]
    for k in keys:
        drop(k)


def held() -> list:
    """(key, bytes, in use) of each kept placement, least recently used first."""
    with _lock:
        return [(k, v.nbytes, v.busy) for k, v in _KEPT.items()]


def _forget(key) -> None:
    kept = _KEPT.pop(key, None)
    if kept is None:
        return
    for f in kept.finalizers:
        f.detach()
    try:
        kept.placement.release()
    except Exception:  # noqa: BLE001 - a closed client holds nothing to release
        pass


def _evict(budget: int) -> None:
    """Release the least recently used free placements while all kept ones take more than ``budget``."""
    with _lock:
        total = sum(k.nbytes for k in _KEPT.values())
        for key in list(_KEPT):
            if total <= budget:
                break
            kept = _KEPT[key]
            if kept.busy or kept.pinned:
                continue
            total -= kept.nbytes
            _forget(key)


def _budget(placement) -> int:
    """The bytes kept placements may take: :func:`share` of the memory limits of the workers that hold them
    (a worker without a limit counts its host's memory)."""
    return int(share() * _limits(placement.client, placement.workers))


def _limits(client, workers=None) -> int:
    """The memory limits of ``workers`` (None: all the client's workers), summed."""
    import psutil

    info = workers_info(client)
    total = 0
    for w in set(info if workers is None else workers):
        limit = int((info.get(w) or {}).get("memory_limit") or 0)
        total += limit if limit > 0 else psutil.virtual_memory().total
    return total


def make_room(client, arrays: dict) -> None:
    """Before ``arrays`` are placed: release the least recently used free kept placements until they and the
    arrays' shards fit the budget (:func:`share` of all the workers' memory limits).  Data kept from earlier
    fits then never adds to the peak of a fit on other data near the size of the workers' memory.  Input of
    unknown size (a dask dataframe's rows) makes no room before, only after (:func:`keep`)."""
    with _lock:
        if all(k.busy or k.pinned for k in _KEPT.values()):  # nothing kept, or nothing that could go
            return
    sizes = [_shard_bytes(a) for a in arrays.values()]
    if any(n is None for n in sizes):
        return
    _evict(max(int(share() * _limits(client)) - sum(sizes), 0))


def _shard_bytes(a) -> int | None:
    """About the bytes ``a`` takes in the shards (8 a value; a sparse matrix's non-zeros and their columns,
    and its row pointers); None where its shape is not known."""
    import math

    shape = getattr(a, "shape", None)
    if shape is None or not all(isinstance(n, int) or hasattr(n, "__index__") for n in shape):
        return None
    if hasattr(a, "nnz") and not is_dask_collection(a):
        return int(a.nnz) * 12 + (int(shape[0]) + 1) * 8
    return 8 * math.prod(int(n) for n in shape)
