"""Same-host hand-over of the tree-sum's partial sums through shared memory.

An add of the tree (:func:`~dask_estimators.engine.rounds.reduce.tree_sum`) whose
consumer runs on the same host writes its sum into memory segments (memfd)
and returns a :class:`Shared` for Dask to hold.  Pickled, a ``Shared`` is only
a few numbers per array: the producer's pid, the segment's file descriptor
and a random lease id.  The consumer (the next add, or the client for the
total) opens ``/proc/<pid>/fd/<fd>`` and maps the segment: the bytes never
cross a socket.  A worker's add reads the mapping in place; the client copies
the total out, so what it returns is its own memory.

Segments stay with their process and are reused: once nothing in the
producer refers to a segment's memory any more (Dask released the key), it
goes back to a per-process pool (:mod:`._memfd`), and the next tree's add of
the same size takes it with its pages already in memory (a fresh segment
costs page allocation, a reused one nothing; docs/performance.md has the
measurement).  A dead worker leaves nothing behind.  Each lease
writes a random id into the segment's header and the reference carries it:
a reference to a segment that was reused since is an error, never another
sum's numbers.

Whether two processes can do this is decided by :func:`host_token`: the same
kernel boot, the same pid namespace and the same user.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ... import config as _config
from . import _memfd

#: Arrays below this many bytes travel with the message as before.
MIN_BYTES = 1 << 20
#: Bytes of the segment before the array: the lease id, padded to keep the array 64-byte aligned.
HEADER = 64

#: Free segments of this process: at most 1 GiB, each closed after 30 s unused.
_POOL = _memfd.Pool("dask-estimators-sum", max_bytes=1 << 30, idle_seconds=30.0)
_lock = threading.Lock()
_live: dict = {}  # (fd, lease) -> weakref to the base array of a segment in use


class SharedMemoryError(RuntimeError):
    """A shared partial sum could not be mapped, or its segment was reused since it was made."""


def host_token():
    """What two processes must share to map each other's segments: boot, pid namespace, user.

    None where this process cannot make segments (no memfd, no /proc).

    Examples
    --------
    >>> from dask_estimators.engine.data._shared import host_token
    >>> host_token() == host_token()
    True
    """
    if not hasattr(os, "memfd_create"):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}:{pid_ns}:{os.getuid()}"


def _give_back(seg, key) -> None:
    with _lock:
        _live.pop(key, None)
    _POOL.give_back(seg)


def _take(nbytes: int) -> tuple:
    """A segment for ``nbytes`` (pooled when one fits), its lease id, and the base array that keeps it leased."""
    seg = _POOL.take(HEADER + nbytes)
    lease = int.from_bytes(os.urandom(8), "little")
    base = np.frombuffer(seg.mapping(), dtype=np.uint8)
    base[:8] = np.frombuffer(struct.pack("<Q", lease), dtype=np.uint8)
    key = (seg.fd, lease)
    weakref.finalize(base, _give_back, seg, key).atexit = False  # at exit the process frees it
    with _lock:
        _live[key] = weakref.ref(base)
    return seg, lease, base


@dataclass(frozen=True)
class _Ref:
    pid: int
    fd: int
    lease: int
    shape: tuple
    dtype: str


class _Leaf:
    """A shared array of a nested result: its view in this process and the reference a receiver maps."""

    __slots__ = ("view", "ref")

    def __init__(self, view, ref):
        self.view, self.ref = view, ref


def _is_big(a, min_bytes: int = MIN_BYTES) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.nbytes >= min_bytes


def _map(fn, *nested):
    """``fn`` over the leaves of ``nested`` (the same shape: tuples, lists and dicts), in step."""
    first = nested[0]
    if isinstance(first, (tuple, list)):
        return type(first)(_map(fn, *items) for items in zip(*nested))
    if isinstance(first, dict):
        return {k: _map(fn, *(t[k] for t in nested)) for k in first}
    return fn(*nested)


class Shared:
    """A nested result whose large arrays live in this process's segments; pickles as references to them.

    ``copy`` says whether the receiver copies the arrays out (the client: the
    total must stay valid after the segments are reused) or maps them in place
    (a worker's add, which is done with them before Dask releases the key).
    ``private`` maps them copy-on-write (a round's arguments, see
    :func:`share_args`): every reader sees the sender's bytes, and one that
    writes to its arrays changes only its own pages.
    """

    def __init__(self, leaves, copy: bool, private: bool = False):
        self._leaves = leaves  # the nested result, with each shared array as a _Leaf
        self.copy = copy
        self.private = private

    @property
    def nested(self):
        """The plain nested result (tuples, lists, dicts): shared arrays as views of the segments (which keep them
        leased)."""
        return _map(lambda x: x.view if isinstance(x, _Leaf) else x, self._leaves)

    def __reduce__(self):
        return _open, (_map(lambda x: x.ref if isinstance(x, _Leaf) else x, self._leaves), self.copy, self.private)

    def __sizeof__(self) -> int:  # Dask's memory accounting: the arrays are this process's memory
        sizes = []
        _map(lambda x: sizes.append(x.view.nbytes if isinstance(x, _Leaf) else 0), self._leaves)
        return 200 + sum(sizes)

    def update(self, nested, copy: bool) -> "Shared":
        """This object for ``nested``, a sum written into its own arrays; leaves that are new objects are kept as
        is."""
        self._leaves = _map(lambda old, new: old if isinstance(old, _Leaf) and new is old.view else new,
                            self._leaves, nested)
        self.copy = copy
        return self


def _shared_leaf(parts, add, min_bytes=MIN_BYTES):
    """The sum of one leaf of the parts: into a fresh segment when it is an array of ``min_bytes`` or more that can
    hold it."""
    first = parts[0]
    if not (_is_big(first, min_bytes) and all(isinstance(p, np.ndarray) and p.shape == first.shape for p in parts)
            and np.result_type(*parts) == first.dtype):
        return add(*parts)
    seg, lease, base = _take(first.nbytes)
    view = base[HEADER : HEADER + first.nbytes].view(first.dtype).reshape(first.shape)
    if len(parts) == 1:
        np.copyto(view, first)
    else:
        np.add(first, parts[1], out=view)
        for p in parts[2:]:
            np.add(view, p, out=view)
    return _Leaf(view, _Ref(os.getpid(), seg.fd, lease, tuple(first.shape), first.dtype.str))


def shared_sum(parts, copy: bool, add, private: bool = False, min_bytes: int = MIN_BYTES) -> Shared:
    """The sum of the nested results ``parts``, its arrays of ``min_bytes`` or more written into segments; ``add``
    sums other leaves."""
    return Shared(_map(lambda *leaves: _shared_leaf(leaves, add, min_bytes), *parts), copy, private)


def share_args(args: tuple, add) -> Shared:
    """A round's arguments with their large arrays copied into segments of this process, for readers on this
    host to map copy-on-write (the evaluator's parameters: 8 MB at 2^20 features no longer crosses a socket
    to every worker).  They stay leased while the returned object lives.

    Examples
    --------
    >>> import pickle, numpy as np
    >>> from dask_estimators.engine.data._shared import share_args
    >>> w = np.arange(1 << 18, dtype=np.float64)
    >>> shared = share_args((w, "spec"), lambda x: x)
    >>> got, spec = pickle.loads(pickle.dumps(shared))  # as a reader on this host gets them
    >>> bool((got == w).all()), spec, len(pickle.dumps(shared)) < 1000
    (True, 'spec', True)
    """
    return shared_sum((tuple(args),), False, add, private=True)


def unwrap(x):
    """The plain nested result of a :class:`Shared`; anything else as it is."""
    return x.nested if isinstance(x, Shared) else x


def copied(x):
    """The plain nested result of a :class:`Shared` not pickled on its way (its reader in this process), its
    arrays copied out of the segments; anything else as it is."""
    if isinstance(x, Shared):
        return _map(lambda a: a.copy() if isinstance(a, np.ndarray) else a, x.nested)
    return x


def _open_one(ref: _Ref, copy: bool, private: bool = False):
    dtype = np.dtype(ref.dtype)
    nbytes = int(np.prod(ref.shape, dtype=np.int64)) * dtype.itemsize
    if ref.pid == os.getpid():  # our own segment (a key unspilled by Dask): use it in place if still leased
        with _lock:
            base = _live.get((ref.fd, ref.lease), lambda: None)()
        if base is None:
            raise SharedMemoryError("A shared partial sum's segment was reused after its key was released.")
        out = base[HEADER : HEADER + nbytes].view(dtype).reshape(ref.shape)
        return out.copy() if copy or private else out
    path = f"/proc/{ref.pid}/fd/{ref.fd}"
    try:
        fd = os.open(path, os.O_RDONLY if copy or private else os.O_RDWR)
    except OSError as e:
        raise SharedMemoryError(
            f"Cannot map a partial sum held by process {ref.pid} ({e}). The tree-sum hands sums over through shared "
            f"memory only between processes of the same host, pid namespace and user; set the Dask config "
            f"'dask-estimators.shared-memory' to False to send them over the network instead."
        ) from None
    try:
        prot = mmap.PROT_READ if copy else mmap.PROT_READ | mmap.PROT_WRITE
        flags = (mmap.MAP_PRIVATE if private else mmap.MAP_SHARED) | getattr(mmap, "MAP_POPULATE", 0)
        mm = mmap.mmap(fd, HEADER + nbytes, flags=flags, prot=prot)
    finally:
        os.close(fd)
    base = np.frombuffer(mm, dtype=np.uint8)
    if struct.unpack("<Q", base[:8].tobytes())[0] != ref.lease:
        raise SharedMemoryError("A shared partial sum's segment was reused after its key was released.")
    out = base[HEADER : HEADER + nbytes].view(dtype).reshape(ref.shape)
    if copy:
        out = out.copy()
        del base
        mm.close()
    return out


def _open(refs, copy: bool, private: bool = False):
    """Unpickle a :class:`Shared` in the receiving process: the plain nested result, its arrays mapped (or copied)."""
    return _map(lambda r: _open_one(r, copy, private) if isinstance(r, _Ref) else r, refs)


_IDS: dict = {}  # worker address -> (host_token, pid) of its process; a worker's address is its process's


def identity():
    """This process's identity: (host token, pid)."""
    return host_token(), os.getpid()


def identities(client, workers) -> dict:
    """``{worker: (host_token, pid)}``, one ``client.run`` for the workers not seen before ((None, None) for
    a worker that cannot answer: nothing is shared with it)."""
    missing = [w for w in workers if w not in _IDS]
    if missing:
        try:
            _IDS.update(client.run(identity, workers=missing))
        except Exception:  # a worker that cannot answer: send its sums over the network, as before
            _IDS.update({w: (None, None) for w in missing if w not in _IDS})
    return {w: _IDS.get(w, (None, None)) for w in workers}


def shares_memory(a, b) -> bool:
    """Whether the processes of identities ``a`` and ``b`` (``(host_token, pid)``) hand sums over in shared
    memory: the same host token (boot, pid namespace, user) and two processes.  Workers that are threads of
    one process (or of the client's) hand their results over as objects already."""
    return a[0] is not None and a[0] == b[0] and a[1] is not None and b[1] is not None and a[1] != b[1]


def shares_with_client(client, workers) -> list:
    """Per worker of ``workers``, whether its process and this one (the client) hand arrays over through shared
    memory (:func:`shares_memory`); all False where the dask config ``dask-estimators.shared-memory`` is off."""

    workers = list(workers)
    if not _config.get("shared-memory"):
        return [False] * len(workers)
    ids, me = identities(client, sorted(set(workers))), identity()
    return [shares_memory(ids[w], me) for w in workers]
