"""The long-lived per-worker actor: holds one shard and sums evaluations over a tree of actors.

With actors a round needs no scheduler: the client calls the root actor, the
root forwards the call to its children (worker to worker), every actor runs
the kernel on its own shard in its own thread, and each adds its children's
subtotals to its own before answering its parent: a fraction of the time
of the same tree built from tasks (see docs/performance.md).

A call's kernel and arguments travel as a :class:`Payload`, pickled once by
the client and unpickled inside the actor's method, where a failure (a
module the worker cannot import, a class of another version) becomes the
call's error.  Sent as plain objects, they would be unpickled while
distributed reads the message, and distributed (2025-2026) leaves the
caller's future unanswered when that fails: the fit would hang.
"""

from __future__ import annotations

import asyncio
import pickle
from concurrent.futures import ThreadPoolExecutor

from . import _shared, _worker


class Payload:
    """A kernel and its arguments, pickled by the sender; :meth:`unpack` unpickles them where they run.

    Large arrays among the arguments stay out-of-band buffers (pickle
    protocol 5): the payload wraps them without a copy, and distributed sends
    them as frames of their own.  An actor forwards a payload to its children
    as it came, without unpickling and pickling it again.

    Examples
    --------
    >>> import numpy as np
    >>> fn, args = Payload.pack(max, (np.arange(3.0),)).unpack()
    >>> fn is max, args[0].tolist()
    (True, [0.0, 1.0, 2.0])
    """

    __slots__ = ("data", "buffers")

    def __init__(self, data: bytes, buffers=()):
        self.data = data
        self.buffers = list(buffers)

    @classmethod
    def pack(cls, fn, args) -> "Payload":
        """``args``: a sequence, or a :class:`~._shared.Shared` tuple (its arrays travel as segment references)."""
        import cloudpickle  # importable functions by reference, the rest (a script's own) by value

        buffers: list = []
        args = args if isinstance(args, _shared.Shared) else tuple(args)
        data = cloudpickle.dumps((fn, args), protocol=5, buffer_callback=buffers.append)
        return cls(data, [b.raw() for b in buffers])

    def unpack(self, own: bool = False):
        """``(fn, args)``; raises what unpickling raises (say ``ModuleNotFoundError``) in the caller's call.

        The arrays are views of the payload's buffers, or with ``own`` of copies: an actor that forwards
        the payload to its children runs its kernel on copies, so that a kernel writing to its arguments
        cannot change what the children are sent.
        """
        buffers = [bytearray(b) for b in self.buffers] if own else self.buffers
        return pickle.loads(self.data, buffers=buffers)

    def __reduce__(self):
        return (Payload, (self.data, [pickle.PickleBuffer(b) for b in self.buffers]))


class Deferred:
    """A shard its actor builds itself: ``fn(*args)`` in :class:`ShardActor`'s constructor.

    One task then both builds the shard and starts its actor; a shard built
    by a task of its own, and its actor behind it, took the scheduler two
    rounds (docs/performance.md has their cost).
    """

    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __call__(self):
        return self.fn(*self.args)


class ShardActor:
    """Holds a worker's :class:`~dask_estimators.engine.data._worker.Shard` for the length of a fit.

    ``shard``: the shard, or a :class:`Deferred` that builds it here.
    """

    def __init__(self, shard):
        self.shard = shard() if isinstance(shard, Deferred) else _worker.resolve(shard)
        self.children: list = []
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dask-estimators-kernel")
        self._waiting: set = set()  # the children's calls a reduce waits for
        self.share = None  # "map"/"copy": hand the subtotal to a same-host parent/client through shared memory
        self._sent = None  # the last subtotal handed over in shared memory: its segments stay leased until the next

    def set_children(self, children, share=None) -> int:
        """Set the actors whose subtotals this actor adds (the tree below it).

        ``share`` (see :mod:`._shared`): ``"map"`` when the parent is a worker of this host, which maps the
        subtotal's large arrays in place, ``"copy"`` when this is the root and the client is on this host,
        which copies them out; None sends them in the message.  A subtotal handed over that way stays
        leased until this actor's next reduce, by which time its reader is done with it (the rounds of a
        fit are sequential).

        A reduce still waiting for the old children is stopped: after the
        loss of a worker its child's call never returns (distributed waits
        for the lost actor's key to come back), and the stuck call would keep
        this actor, and the client's handle to it, alive after the fit.
        """
        self._stop_waiting()
        self.children = list(children)
        self.share = share
        return len(self.children)

    def _stop_waiting(self):
        for t in list(self._waiting):  # called from the actor's thread: cancel on the tasks' own loop
            loop = t.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(t.cancel)

    async def _run(self, body, fn, args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, body, fn, self.shard, *args)

    async def reduce(self, payload: Payload):
        """Run ``fn(shard, *args)`` of the :class:`Payload` here and below, return the sum (NumPy float64)."""
        self._sent = None  # the last round's reader is done: its segments may go back to the pool
        # forwarded as it came, and unpacked in the kernel's thread: the event loop sends the children their
        # call while this actor maps its arguments (docs/performance.md has the cost)
        pending = [asyncio.ensure_future(c.reduce(payload)) for c in self.children]
        self._waiting.update(pending)
        try:
            loop = asyncio.get_running_loop()
            parts = [await loop.run_in_executor(self._pool, self._unpack_and_run, payload, bool(self.children))]
            for p in pending:
                try:
                    parts.append(_shared.unwrap(await p))
                except asyncio.CancelledError:
                    raise RuntimeError("The actor tree was relinked or closed during this round.") from None
            if self.share:  # summed straight into the segments the reader maps: one pass over the arrays
                out = self._sent = _shared.shared_sum(tuple(parts), self.share == "copy", _worker._add)
            else:
                out = _worker._add(*parts)
            return out
        finally:
            for p in pending:
                p.cancel()
            self._waiting.difference_update(pending)

    def _unpack_and_run(self, payload: Payload, own: bool):
        fn, args = payload.unpack(own=own)
        return _worker.run_kernel(fn, self.shard, *args)

    async def run(self, payload: Payload):
        """Run ``fn(shard, *args)`` of the :class:`Payload` on this shard only (results as NumPy float64)."""
        return await self._run(_worker.run_kernel, *payload.unpack())

    async def apply(self, payload: Payload):
        """Run ``fn(shard, *args)`` of the :class:`Payload` on this shard only; its result unchanged."""
        return await self._run(_worker.apply, *payload.unpack())

    def close(self) -> bool:
        """Drop the shard and the children (called when the fit ends); stop a reduce still waiting."""
        self._stop_waiting()
        self.shard = None
        self.children = []
        self._sent = None
        self._pool.shutdown(wait=False)
        return True


class ShardHost:
    """A worker's long-lived actor, made per client and kept while its placements run and a moment after
    (:data:`.placement.HOST_IDLE`): it holds the :class:`ShardActor` of each placement made through it
    (:class:`HostedShard`).

    A placement then starts with one direct call to its worker (:meth:`create`), where an actor of its own
    takes a task through the scheduler first; the hosted actor answers the same calls as one of its own.
    """

    #: Shards built by the hosts of this worker process, over its life (hosts come and go: :data:`.placement.HOST_IDLE`).
    made_here = 0

    def __init__(self):
        self.held: dict = {}
        self.made = 0  # shards built here, over the host's life

    def create(self, token: str, shard) -> None:
        """Hold a new :class:`ShardActor` of ``shard`` (a shard, or a :class:`Deferred` that builds it here) as
        ``token``.  Runs in the worker's actor thread, off the event loop, as a new actor's constructor does."""
        self.held[token] = ShardActor(shard)
        self.made += 1
        ShardHost.made_here += 1

    async def call(self, token: str, method: str, *args):
        """``method(*args)`` of the actor held as ``token``; ``close`` also lets it go."""
        actor = self.held.get(token)
        if actor is None:
            raise RuntimeError(f"No shard {token!r} is held on this worker: it was released, or its worker "
                               "restarted.")
        if method == "close":
            self.held.pop(token, None)
        out = getattr(actor, method)(*args)
        return await out if asyncio.iscoroutine(out) else out


class HostedShard:
    """The client's handle to a :class:`ShardActor` held by a :class:`ShardHost`: it answers what an actor's
    proxy answers (``apply``, ``run``, ``reduce``, ``set_children``, ``close``), each call a future.

    Picklable: a parent actor of a reduction tree calls it from its worker as it would an actor's proxy.
    """

    __slots__ = ("host", "token")

    def __init__(self, host, token: str):
        self.host, self.token = host, token

    def _call(self, method, *args):
        return self.host.call(self.token, method, *args)

    def apply(self, payload):
        return self._call("apply", payload)

    def run(self, payload):
        return self._call("run", payload)

    def reduce(self, payload):
        return self._call("reduce", payload)

    def set_children(self, children, share=None):
        return self._call("set_children", children, share)

    def close(self):
        return self._call("close")

    def __reduce__(self):
        return (HostedShard, (self.host, self.token))

    def __repr__(self) -> str:
        return f"HostedShard({self.token!r})"


class Resolved:
    """A future that is already done with ``value``: the shard future of a :class:`HostedShard`, whose build
    was waited for where it was made.  It holds no key of the scheduler's, so there is nothing to release."""

    __slots__ = ("value",)
    status = "finished"

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value

    def done(self) -> bool:
        return True

    def release(self) -> None:
        pass
