"""Shards kept by their worker beside Dask's data store, out of reach of its spilling.

A task that builds a shard returns a :class:`HeldShard`, a handle of a few
bytes, as its result; the shard itself stays in the worker's
:class:`ShardKeeper` under that task's key, and goes when Dask releases the
key (the placement's release, the client's end, the worker's close).

Why: a worker writes its task results to disk once its process memory
passes ``distributed.worker.memory.spill`` (70% of its limit by default),
oldest first.  A shard is most of its worker's memory and is read every
round: written to disk it costs a pickled copy, and the next task that names
it reads it back into a second one, while the actor that holds it keeps the
first (the worker of data half its memory limit then passed 95% and was
restarted).  Held here, Dask counts the shard as the worker's unmanaged
memory: it still pauses the worker at 80% and restarts it at 95%, but it
never spills or moves the shard.  A handle that Dask moves to another worker
(``retire_workers``) finds nothing there: :class:`ShardGone`, and the
placement builds that shard again from its source.
"""

from __future__ import annotations

import threading
import weakref

from distributed.diagnostics.plugin import WorkerPlugin

#: the keeper's name among the worker's plugins
NAME = "dask-estimators-shards"

_lock = threading.Lock()
_KEEPERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # worker -> its ShardKeeper


class ShardGone(RuntimeError):
    """The shard a :class:`HeldShard` names is not on this worker (Dask moved the handle, or dropped the key)."""


class ShardKeeper(WorkerPlugin):
    """A worker's held shards: the key of the task that built each -> the shard.

    A worker plugin so that it hears when Dask releases a key
    (:meth:`transition` from ``"memory"``) and when the worker closes
    (:meth:`teardown`).
    """

    def __init__(self):
        self.held: dict = {}

    def transition(self, key, start, finish, **kwargs) -> None:
        # the key's result released ("memory" -> "released"), or a task cancelled while it ran, whose result Dask
        # drops as it ends ("cancelled" -> "memory" is the cancelled task's release): what it held goes with it
        if self.held and start in ("memory", "cancelled"):
            self.held.pop(key, None)

    def teardown(self, worker) -> None:
        self.held.clear()


class HeldShard:
    """The task result standing for a shard held by its worker (see the module's docstring)."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __sizeof__(self) -> int:  # Dask's count of its managed memory: the shard is not its to spill
        return 64

    def __reduce__(self):
        return HeldShard, (self.key,)

    def __repr__(self) -> str:
        return f"HeldShard({self.key!r})"


def _keeper(worker) -> ShardKeeper:
    """``worker``'s keeper, made and added to its plugins at the first use (on the worker's event loop, before
    the calling task's result is stored, so before Dask can release its key)."""
    with _lock:
        keeper = _KEEPERS.get(worker)
        if keeper is None:
            keeper = _KEEPERS[worker] = ShardKeeper()
            worker.loop.add_callback(worker.plugin_add, keeper, NAME)
        return keeper


def _task_worker():
    """The worker running the calling task and the task's key, or (None, None) outside a Dask task."""
    try:
        from distributed import get_worker

        worker = get_worker()
        return worker, worker.get_current_task()
    except (ValueError, KeyError, ImportError):
        return None, None


def hold(shard):
    """In a task: keep ``shard`` on this worker under the task's key and return its :class:`HeldShard` (the task's
    result); outside a task, ``shard`` itself."""
    worker, key = _task_worker()
    if worker is None or not hasattr(worker, "plugin_add"):
        return shard
    _keeper(worker).held[key] = shard
    return HeldShard(key)


def held(shard):
    """The shard a :class:`HeldShard` names, from this worker's keeper; anything else as it is.

    Raises :class:`ShardGone` where this worker does not hold it.
    """
    if not isinstance(shard, HeldShard):
        return shard
    worker, _ = _task_worker()
    keeper = None if worker is None else _KEEPERS.get(worker)  # a lookup adds no keeper
    found = None if keeper is None else keeper.held.get(shard.key)
    if found is None:
        where = "outside a Dask task" if worker is None else f"on worker {worker.address}"
        raise ShardGone(f"The shard of {shard.key!r} is not held {where}: Dask moved its handle or released it.")
    return found


def is_held_here(shard) -> bool:
    """In a task: whether this worker holds the shard a :class:`HeldShard` names (anything else: True)."""
    try:
        held(shard)
    except ShardGone:
        return False
    return True


def held_keys(worker) -> list:
    """The keys of the shards ``worker`` holds (for tests and leak checks)."""
    keeper = _KEEPERS.get(worker)
    return [] if keeper is None else list(keeper.held)
