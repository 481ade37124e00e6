"""The ddp strategy's rank loop: a task body that trains on every worker at once, inside a process group.

Each worker runs :func:`ddp_rank` on its own shard (through
:func:`~dask_estimators.engine.ddp.collective.run_collective`).  The epochs and
stopping rules are the optimizer layer's (the same loop the rounds strategy
runs on the client), and they come in as the ``training`` argument
(:class:`Training`; the optimizer layer's is
:data:`~dask_estimators.optim.torch_driver.TRAINING`): the engine imports no
optimizer.  What is here is what needs the process group: the summed
gradients (one flat allreduce, or ``DistributedDataParallel``), the ranks'
shares of each global batch, the shared-memory allreduce between ranks of
one host, and the group's lifetime.  The network is any
:class:`~dask_estimators.objectives.module.NetworkProblem`.

:func:`train_ddp` is the client's side: it runs the ranks, and when a worker
is lost it resumes from the last epoch every rank finished (each rank keeps
a copy of the run's state at each epoch's end, :class:`_Checkpoints`), on
the workers left, with the lost shards re-placed from their sources.
"""

from __future__ import annotations

import contextlib
import time
import weakref

import numpy as np
import torch

from typing import Protocol

from ... import _torch_api
from ... import config as _config
from ...objectives import module as M
from ..data import _memfd, _shared
from . import _shm_allreduce

__all__ = ["Training", "ddp_rank", "train_ddp"]


class Training(Protocol):
    """What a rank's loop needs of the optimizer layer, given to it as an argument (the engine imports no
    optimizer).  ``cfg`` is the run's configuration and ``monitor`` its stopping rule, both the optimizer
    layer's (its ``TrainConfig`` and ``Monitor``); the loop reads ``cfg.n_steps``, ``alpha``, ``seed``,
    ``shuffle``, ``max_iter``, ``epoch0``, ``incremental`` and ``t0``."""

    def optimizer(self, params, cfg, state=None):
        """A ``torch.optim`` optimizer of ``params`` for ``cfg``, with the ``state_dict`` ``state`` loaded."""

    def fast_step(self, opt, l2=()):
        """(a callable stepping ``opt``, whether it takes the L2 term's ``decay`` of the parameters ``l2``)."""

    def in_parts(self, cfg) -> bool:
        """Whether ranks may each step a part of the parameters (:meth:`part_step`)."""

    def part_step(self, opt, lo, hi, l2=()):
        """A callable ``(decay)`` stepping ``opt`` on the range ``[lo, hi)`` of its flat parameters."""

    def zero_state(self, opt, moments=None) -> None:
        """Give ``opt`` the state its first step starts from; ``moments(i, p)`` gives parameter ``i``'s."""

    def epochs(self, step, cfg, opt, monitor, **kwargs):
        """Run the epochs: ``step(epoch, k)`` takes step ``k`` and returns its loss sum; returns the result."""

    def result(self, **fields):
        """The run's result (its ``TrainResult``) made of ``fields``."""

    def epoch_run(self, cfg, opt, monitor, **kwargs):
        """One run's epoch ends (its ``EpochRun``), for :meth:`epochs_together` (the lockstep, :mod:`.lockstep`)."""

    def epochs_together(self, step, runs, epoch0=0):
        """Run several runs' epochs in lockstep: ``step(epoch, k, active)`` takes step ``k`` of the runs ``active``
        and returns their loss sums; returns their results."""

#: fit key -> the state at the end of the last epoch this rank finished (see _Checkpoints), on each worker
_CHECKPOINTS: dict = {}
#: rank 0's shard -> its last result handed to the client through shared memory (:func:`_shipped_rank`)
_HANDED = weakref.WeakKeyDictionary()
#: Rank 0's result arrays of this many bytes or more go to a client of the same host through shared memory (the
#: message carries the rest).  Lower than the tree-sum's: a 784-100-10 network's fit spent less time outside
#: its epochs with its three largest arrays through shared memory than in the message, and arrays of a few
#: hundred KB gained nothing (benchmarks/results/history/mlp-matrix.md has the measurement).
RESULT_MIN_BYTES = 1 << 18
#: fit key -> the blocks its _Checkpoints keeps its two sets in, given back to _BLOCKS when the rank returns
_KEPT_BLOCKS: dict = {}


class _Block:
    """``size`` bytes of CPU memory that :class:`_Checkpoints` carves one set of buffers from."""

    def __init__(self, size: int):
        self.size = int(size)
        self.data = torch.empty(self.size, dtype=torch.uint8)

    @staticmethod
    def _span(t) -> int:
        """The bytes ``t`` takes in a block: its own, up to the next 64-byte boundary."""
        return -(-(t.numel() * t.element_size()) // 64) * 64

    def carve(self, like) -> list:
        """Tensors shaped and typed as the tensors ``like``, each at a 64-byte boundary of the block."""
        out, at = [], 0
        for t in like:
            out.append(self.data[at:at + t.numel() * t.element_size()].view(t.dtype).view(t.shape))
            at += self._span(t)
        return out

    @classmethod
    def nbytes(cls, like) -> int:
        return sum(cls._span(t) for t in like)

    def close(self) -> None:
        self.data = None


#: The blocks of finished runs' checkpoints in this process, for the next run's (fresh pages cost their page
#: faults; docs/design-measurements.md has the measurement): at most 1 GiB, each freed after 30 s unused.
_BLOCKS = _memfd.Pool("dask-estimators-checkpoints", max_bytes=1 << 30, idle_seconds=30.0, make=_Block)


def ddp_rank(shard, comm, spec: M.NetworkProblem, w0: np.ndarray, cfg, monitor, opt_state=None, callbacks=(),
             checkpoint_key=None, checkpoint_share=None, finish=None, *, training: Training):
    """One rank of the ddp strategy: the whole training loop on this worker, inside a process group.

    ``training`` is the optimizer layer's part (:class:`Training`), ``cfg`` and ``monitor`` its configuration
    and stopping rule.  Returns, on rank 0, the run's result (``training.result``; other ranks return None).
    ``callbacks`` are the loop callbacks (each rank runs its own copy, and all take the same decisions).
    With ``checkpoint_key`` the rank keeps the run's state at an epoch's end in this worker's memory, within
    ``checkpoint_share`` of the run's time (:class:`_Checkpoints`); :func:`train_ddp` resumes from it after a
    worker loss, and a rank that returns drops it.
    ``finish``, when given, is called on rank 0 with the result while the run's buffers live, its parameters
    and optimizer state views of them where they are (maybe the ranks' shared mapping, which the next run
    reuses); it returns what the rank returns, and must keep no view of those arrays.  Without it, rank 0
    returns arrays of its own.

    The ``DistributedDataParallel`` wrapper lives in :func:`_ddp_loop`'s frame
    and is freed before the group is destroyed, also on failure: freed after
    it, its reducer drops the last reference to the gloo group while holding
    the GIL, and the group's destructor waits for a gloo thread that needs
    the GIL (a deadlock seen here about once in ten fits; cf. pytorch#56297).
    Only that wrapper needs the full collection, which is slow in a worker
    process (docs/design-measurements.md has the measurement): the hand-written path holds nothing of the group.
    """
    import gc
    import traceback

    from ..data._worker import setup_threads
    from .collective import process_group

    setup_threads()
    shards = comm.local_shards(shard)
    # nothing holds the group after a hand-written loop: its teardown need not delay the result
    with process_group(comm, shard.device, teardown_behind=spec.hand_gradient) as store:
        try:
            out = _ddp_loop(shards, comm, spec, w0, cfg, monitor, opt_state, callbacks, checkpoint_key,
                            checkpoint_share, store, finish, training)
            _CHECKPOINTS.pop(checkpoint_key, None)
            for block in _KEPT_BLOCKS.pop(checkpoint_key, ()):  # nothing refers to them now: the next run's
                if block is not None:
                    _BLOCKS.give_back(block)
            return out
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)  # the loop's frame (and the wrapper) must not outlive the group
            raise
        finally:
            if not spec.hand_gradient:
                gc.collect()


def _shipped_rank(shard, comm, share, spec, start, cfg, monitor, callbacks, checkpoint_key, checkpoint_share,
                  training):
    """:func:`ddp_rank` as :func:`train_ddp` runs it: ``start`` is ``(w0, opt_state)``, maybe a
    :class:`~._shared.Shared` the client made (:func:`_shares`); rank 0's result is packed by :func:`_ship`.

    With ``share`` ("copy": the client shares this host) the result's large arrays go to the client through
    shared memory (:mod:`._shared`), which copies them out: for a million float64 parameters and Adam's
    state that is far faster than through the actor's message (docs/design-measurements.md has the measurement).
    Their segments stay leased while the shard lives: the client has read them before
    it releases the fit's placement.
    """
    w0, opt_state = _shared.unwrap(start)

    def finish(out):  # rank 0's arrays, read where the run left them, copied once: into segments or the message
        msg = _ship(out)
        big = share and any(_shared._is_big(a, RESULT_MIN_BYTES) for a in msg["arrays"].values())
        out.info["result_transfer"] = "shared memory" if big else "network"
        if big:
            from ..data._worker import _add

            msg["arrays"] = _HANDED[shard] = _shared.shared_sum((msg["arrays"],), True, _add,
                                                                min_bytes=RESULT_MIN_BYTES)
        else:
            msg["arrays"] = {k: np.array(a, copy=True) for k, a in msg["arrays"].items()}
        return msg

    return ddp_rank(shard, comm, spec, w0, cfg, monitor, opt_state, callbacks, checkpoint_key, checkpoint_share,
                    finish, training=training)


def _shares(placement) -> tuple:
    """(whether the client and every rank's worker share memory, whether the client and rank 0's do), as
    :func:`~..data._shared.shares_with_client` says (rank 0 trains on the first shard)."""
    from ..data._shared import shares_with_client

    same = shares_with_client(placement.client, placement.workers)
    return all(same), same[0]


def _ship(out):
    """Rank 0's result as Dask sends it fastest: its arrays (the parameters, the optimizer's state) apart,
    in a flat dict with string keys, which Dask serializes array by array, and the rest of the result.

    Inside the result object (pickled, its arrays as pickle's out-of-band buffers) the arrays went from a
    worker's actor to the client far slower than as a flat dict of arrays (benchmarks/results/history/mlp-matrix.md
    has the measurement).
    :func:`_unship` puts them back.
    """
    arrays, paths = {"w": out.w}, []
    out.w = None
    for k, s in out.opt_state["state"].items():
        for name, v in s.items():
            if isinstance(v, np.ndarray) and v.ndim:
                paths.append((k, name))
                arrays[str(len(paths))] = v
                s[name] = None
    return {"result": out, "paths": paths, "arrays": arrays}


def _unship(msg):
    out, arrays = msg["result"], _shared.copied(msg["arrays"])  # rank 0 in this process: copied
    out.w = arrays["w"]
    for i, (k, name) in enumerate(msg["paths"], start=1):
        out.opt_state["state"][k][name] = arrays[str(i)]
    return out


def _shared_optimizer_bytes() -> int:
    """The least size of the parameters (bytes) for which ranks on one host share them and Adam's state.

    The dask config ``dask-estimators.shared-optimizer-bytes``, 256 KiB by default: below it the second
    barrier of each step costs more than the halved passes save (docs/design-measurements.md has the measurement).
    """

    return int(_config.get("shared-optimizer-bytes"))


def _owned(out):
    """``out`` with its parameters and optimizer state copied out of the run's buffers (the shared mapping, which
    the next run reuses, and the live tensors)."""
    out.w = out.w.copy()
    for s in out.opt_state["state"].values():
        for k, v in s.items():
            if isinstance(v, np.ndarray):
                s[k] = v.copy()
    return out


def _checkpoint_share():
    """The most of a ddp run's time that keeping its epochs' state may take (:class:`_Checkpoints`).

    The dask config ``dask-estimators.checkpoint-share``, 0.05 by default; 0 or less keeps every epoch.
    """

    share = float(_config.get("checkpoint-share"))
    return share if share > 0 else None


#: The least capacity of the shared-memory slots: the validation sums (3 per output of a regressor, plus one).
_SMALL_SUM_BYTES = 4096


def _ddp_loop(shards, comm, spec, w0, cfg, monitor, opt_state, callbacks, checkpoint_key, checkpoint_share,
              store, finish, training):
    """The epoch loop of one ddp rank (see :func:`ddp_rank`).

    A problem with a hand-written gradient (``hand_gradient``, the MLPs) trains on
    one flat parameter buffer: the optimizer's per-layer parameters are views
    of it, the gradient is written into a twin buffer by the spec, and one
    allreduce of that buffer per step does what ``DistributedDataParallel``
    does with its one bucket, without the autograd graph and reducer hooks
    around it (faster than autograd on a small step, before DDP's own cost;
    docs/design-measurements.md has the measurement).  With Adam and parameters of 256 KiB or
    more, ranks that share a host share the parameters and Adam's state
    instead, and each sums and steps its part (:class:`_SharedAdam`).
    Other problems (the character LSTM) train through ``DistributedDataParallel``.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    shard = shards[0]
    dev = shard.device
    by_hand = spec.hand_gradient
    if by_hand:  # one flat buffer trains (_FlatGradient), w0 copied into it: the module gives only the shapes
        params = list(spec.build("meta").parameters())
    else:
        module = _built_empty(spec, dev)
        params = list(module.parameters())
        torch.nn.utils.vector_to_parameters(torch.tensor(w0, dtype=spec.torch_dtype, device=dev), params)
    shm = shared = None
    if not dev.startswith("cuda"):  # ranks on one host sum the gradients through shared memory, not gloo's TCP
        p_bytes = sum(p.numel() * p.element_size() for p in params)
        # a hand-written Adam run on several ranks shares its parameters and Adam's state (_SharedAdam); the slots
        # then hold the epoch's batch sizes (3 x n_steps float64) and the other small sums; else the gradient too
        in_parts = (by_hand and comm.world_size > 1 and p_bytes >= _shared_optimizer_bytes()
                    and training.in_parts(cfg))
        small = max(24 * cfg.n_steps, _SMALL_SUM_BYTES)
        shm = _shm_allreduce.create(comm.rank, comm.world_size, small if in_parts else max(p_bytes, small),
                                    comm.timeout, shared_bytes=_SharedAdam.nbytes(params, comm.world_size)
                                    if in_parts else 0, store=store)
        if shm is not None and in_parts:
            shared = _SharedAdam(shm, params, training)
    try:
        if by_hand:
            gradient = _FlatGradient(spec, params, w0, dev, shm, shared)
        else:
            ddp = DistributedDataParallel(module, device_ids=[dev] if dev.startswith("cuda") else None)
            if shm is not None:
                ddp.register_comm_hook(shm, _shm_mean_hook)
            gradient = _DDPGradient(spec, ddp, params, comm)
        out = _ddp_epochs(shards, gradient, comm, spec, cfg, monitor, opt_state, training, callbacks,
                          checkpoint_key, checkpoint_share=checkpoint_share, small_sums=shm if by_hand else None)
        if out is not None:  # rank 0
            out.info["allreduce"] = "shared memory" if shm is not None else str(torch.distributed.get_backend())
            out.info["gradient"] = "hand-written" if by_hand else "DistributedDataParallel"
            out.info["optimizer"] = "in parts, state shared" if shared is not None else "whole on every rank"
            if by_hand:
                out.info["kernel"] = M.loss_grad_kernel(shard.get("X"))
            out = finish(out) if finish is not None else _owned(out)
        dist.barrier()  # no collective of this fit is still in flight, and no rank reads the mapping any more
        if shm is not None:  # rank 0's may serve the next group
            shm.close(reuse=True)
        return out
    except BaseException:
        if shm is not None:  # the other ranks stop at their next sum, not after the collective timeout
            shm.abort()
        raise
    finally:
        if shm is not None:
            shm.close()


def _built_empty(spec, dev):
    """``spec``'s module on ``dev`` without its own initialisation, which the run's starting point overwrites (a
    large module's default draws slow a rank's start; docs/design-measurements.md); a module with buffers, which
    no starting point sets, is built as it comes."""
    meta = spec.build("meta")
    if any(True for _ in meta.buffers()):
        return spec.build(dev)
    return meta.to_empty(device=dev)


def _shm_mean_hook(shm, bucket):
    """DDP communication hook: the mean of the bucket's gradients over the ranks, through shared memory."""
    buf = shm.allreduce_(bucket.buffer())
    buf.div_(shm.world)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


class _DDPGradient:
    """The step's gradient through ``DistributedDataParallel``: autograd, the mean over the ranks in its hooks."""

    def __init__(self, spec, ddp, params, comm):
        self.spec, self.ddp, self.params, self.world = spec, ddp, params, comm.world_size
        self.allreduce_s = None  # the sums happen inside the backward: no time of their own to report

    def __call__(self, parts, w_b):
        """Leave the gradient of the batch's total loss / ``w_b`` in ``.grad``; return this rank's loss sum.

        ``parts``: this rank's (X, y, sw) of the batch, one per shard; the
        gradients of all but the last add up locally (``no_sync``).
        """
        for p in self.params:
            p.grad = None
        total = 0.0
        for i, (X, y, sw) in enumerate(parts):
            with self.ddp.no_sync() if i < len(parts) - 1 else contextlib.nullcontext():
                local = self.spec.loss(self.ddp(X), y, sw) if X.shape[0] else self.ddp(X).sum() * 0.0
                # DDP averages the ranks' gradients: scale the local sum by the world size
                (local * (self.world / w_b)).backward()
            total += float(local.detach())
        return total

    def flat(self):
        return torch.nn.utils.parameters_to_vector(self.params).detach()


class _SharedAdam:
    """The ranks of one host share one copy of the parameters and of Adam's state, and each steps its own part.

    ZeRO's first stage, in one shared-memory mapping (the allreduce's
    :attr:`~._shm_allreduce.SharedMemoryAllreduce.shared`): a gradient slot
    per rank, the flat parameters, Adam's ``exp_avg`` and ``exp_avg_sq``.
    A step is: every rank writes its gradient into its slot; a barrier;
    each rank sums its own part of the slots (in rank order) and steps that
    part of the parameters and of Adam's state (``training.part_step``); a
    barrier, after which every rank reads the new parameters where they
    are.  Against every rank copying its gradient into a slot, summing all
    the slots and stepping everything, each rank moves under half the
    memory a step; those passes are memory-bound, and the ranks of one
    host share its memory bandwidth (benchmarks/results/history/mlp-matrix.md).

    Each element is summed and stepped by one rank, so every rank sees the
    same numbers.  The parts are cut at multiples of 64 elements from a
    parameter's start, where the fused kernel steps a slice as it steps the
    whole tensor: the same bits as one ``opt.step()``.
    """

    ALIGN = 64  # elements

    def __init__(self, shm, params, training):
        world, n = shm.world, sum(p.numel() for p in params)
        self.shm, self.training = shm, training
        dtype = params[0].dtype
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        stride = self._stride(n, np_dtype.itemsize)
        flat = torch.from_numpy(shm.shared[: (world + 3) * stride * np_dtype.itemsize].view(np_dtype))
        self.slots = flat[: world * stride].view(world, stride)[:, :n]
        self.w, self.m, self.v = (flat[(world + i) * stride:][:n] for i in range(3))
        cuts = self.cuts([p.numel() for p in params], world)
        self.lo, self.hi = cuts[shm.rank], cuts[shm.rank + 1]

    @staticmethod
    def _stride(n, itemsize):  # each array starts on a cache line of its own
        per_line = max(1, 64 // itemsize)
        return -(-n // per_line) * per_line

    @classmethod
    def nbytes(cls, params, world):
        itemsize = params[0].element_size()
        return (world + 3) * cls._stride(sum(p.numel() for p in params), itemsize) * itemsize

    @classmethod
    def cuts(cls, sizes, world):
        """The ranks' parts of the flat parameters: ``world + 1`` bounds, each near an equal share."""
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        n = int(starts[-1])
        out = [0]
        for r in range(1, world):
            target = n * r // world
            i = int(np.searchsorted(starts, target, side="right")) - 1  # the parameter holding the target
            out.append(max(out[-1], int(starts[i]) + (target - int(starts[i])) // cls.ALIGN * cls.ALIGN))
        return out + [n]

    def sum_part_(self, g):
        """Write this rank's part of the ranks' summed gradient into ``g`` (the other parts are left as they are)."""
        lo, hi, slots = self.lo, self.hi, self.slots
        torch.add(slots[0, lo:hi], slots[1, lo:hi], out=g[lo:hi])
        for r in range(2, self.shm.world):
            g[lo:hi] += slots[r, lo:hi]

    def adopt(self, opt, l2):
        """Put ``opt``'s Adam state into the shared arrays (this rank writes its part) and return its part's step.

        Without state (a fresh run), the state a first ``step()`` starts from: the shared arrays zeroed, each
        rank its part, not new tensors copied in (16 MB for a million float64 parameters).
        A barrier ends it: the parameters and the state are then whole for every rank.
        """
        params = opt.param_groups[0]["params"]
        fresh = not opt.state
        starts = np.cumsum([0] + [p.numel() for p in params]).tolist()
        self.training.zero_state(opt, lambda i, p: (self.m[starts[i]:starts[i + 1]].view(p.shape),
                                           self.v[starts[i]:starts[i + 1]].view(p.shape)))
        lo, hi = self.lo, self.hi
        for p, pos in zip(params, starts):
            st, k = opt.state[p], p.numel()
            a, b = max(pos, lo), min(pos + k, hi)
            for key, flat in (("exp_avg", self.m), ("exp_avg_sq", self.v)):
                mine = flat[pos:pos + k]
                if a < b:
                    if fresh:
                        mine[a - pos:b - pos] = 0
                    else:
                        mine[a - pos:b - pos] = st[key].reshape(-1)[a - pos:b - pos]
                st[key] = mine.view(p.shape)
        self.shm.barrier()
        return self.training.part_step(opt, lo, hi, l2=l2)


class _FlatGradient:
    """The step's gradient by the spec's own backward into one flat buffer, summed over the ranks in one allreduce.

    The optimizer gets leaf views of the flat parameters ``w`` shaped as the
    module's ``params`` (its per-layer layout, so its state is the same as
    with the other strategies), their ``.grad`` views of the gradient
    buffer, which every step overwrites.  With ``shared`` (a
    :class:`_SharedAdam`), ``w`` is the ranks' shared copy, each rank's
    gradient goes into its slot, and the step sums only this rank's part
    of the gradient buffer.
    """

    def __init__(self, spec, params, w0, dev, shm, shared=None):
        """``params``: the module's parameters, for their shapes (they may be on ``meta``); ``w0``: the flat
        starting point (NumPy), copied into ``w`` on ``dev``."""
        self.spec, self.shm, self.shared, self.work = spec, shm, shared, {}  # work: activations kept between steps
        self.allreduce_s = 0.0  # seconds in the allreduce, over the run
        if shared is None:
            self.w = torch.tensor(w0, dtype=params[0].dtype, device=dev)
        else:  # this rank's part of the starting point (every rank has the same); adopt()'s barrier completes it
            self.w = shared.w
            lo, hi = shared.lo, shared.hi
            self.w[lo:hi].numpy()[:] = w0[lo:hi]
        self.g = torch.zeros_like(self.w)
        self.local = self.g if shared is None else shared.slots[shm.rank]  # where this rank's gradient goes
        self.params = leaf_views(self.w, self.g, [p.shape for p in params])

    def __call__(self, parts, w_b):
        """``parts``: each shard's (X, y, sw, rows), the batch being those rows (gathered by the spec)."""
        (X, y, sw, rows), rest = parts[0], parts[1:]
        g = self.local
        loss = float(self.spec.loss_grad_(self.w, X, y, sw, g, 1.0 / w_b, self.work, rows))
        if rest:  # a rank holding several shards: their parts of the batch add up here first
            part_g = torch.empty_like(g)
            for X, y, sw, rows in rest:
                loss += float(self.spec.loss_grad_(self.w, X, y, sw, part_g, 1.0 / w_b, None, rows))
                g.add_(part_g)
        t0 = time.perf_counter()
        if self.shared is not None:
            self.shm.barrier()
            self.shared.sum_part_(self.g)
        elif self.shm is not None:
            self.shm.allreduce_(g)
        else:
            import torch.distributed as dist

            dist.all_reduce(g)
        self.allreduce_s += time.perf_counter() - t0
        return float(loss)

    def flat(self):
        return self.w


def leaf_views(w, g, shapes) -> list:
    """Leaf parameters of ``shapes``, views of the flat parameters ``w``, whose ``.grad`` are the same views of the
    flat gradient ``g``: the optimizer steps ``w`` in place and reads what is written into ``g``."""
    sizes = [int(np.prod(s)) for s in shapes]
    params = [v.view(s).detach().requires_grad_() for v, s in zip(w.split(sizes), shapes)]
    for p, gv in zip(params, g.split(sizes)):
        p.grad = gv.view(p.shape)
    return params


def _ddp_epochs(shards, gradient, comm, spec, cfg, monitor, opt_state, training, callbacks=(), checkpoint_key=None,
                small_sums=None, checkpoint_share=None):
    """The epochs of one ddp rank; ``gradient`` computes each step's gradient (see :func:`_ddp_loop`),
    ``training`` gives the optimizer, its step and the epoch loop (:class:`Training`).

    ``small_sums``: the ranks' shared-memory allreduce, which also sums the epoch's batch sizes, its loss and
    the validation sums (a gloo allreduce of a few numbers took longer than an epoch of a small network's
    steps; benchmarks/results/history/small-networks-and-partial-fit.md has the measurement); None: they go
    through the process group.
    """
    import torch.distributed as dist

    dev = shards[0].device
    params = gradient.params
    opt = training.optimizer(params, cfg, opt_state)
    weights = [p for p, keep in zip(params, spec.weight_flags()) if keep]
    w_det = [p.detach() for p in weights]  # views of the parameters, outside autograd
    w_flat = [v.view(-1) for v in w_det]
    # the flat path's gradients stay the same tensors between steps; DDP's are made anew by each backward
    kept_grads = isinstance(gradient, _FlatGradient)
    shared = gradient.shared if kept_grads else None
    # l2_in_step: the step adds the L2 term to the weights' gradients as it reads them (no pass of its own)
    if shared is not None:  # each rank steps its part; the barrier after it makes the new parameters whole
        step_part, l2_in_step = shared.adopt(opt, weights), True

        def step_opt(decay):
            step_part(decay)
            shared.shm.barrier()
    elif kept_grads:
        step_opt, l2_in_step = training.fast_step(opt, l2=weights)
    else:
        step_opt, l2_in_step = opt.step, False
    add_ = _torch_api.foreach_add_fn()
    l2_grads = [p.grad for p in weights] if kept_grads else None
    f64 = torch.float64
    per_step = {}
    clock = time.perf_counter
    spent = [0.0, 0.0, 0.0, 0.0]  # this rank's seconds in the steps' batch, gradient, L2 term and optimizer

    def allreduce(t):
        if small_sums is not None and t.is_contiguous() and t.numel() * t.element_size() <= small_sums.capacity:
            return small_sums.allreduce_(t)  # the same size on every rank, so every rank takes the same road
        dist.all_reduce(t)
        return t

    def step(epoch, k):
        t0 = clock()
        if k == 0:  # the epoch's batches, worked out once: their rows, and their global sizes in one allreduce
            counts, wsums = [0] * cfg.n_steps, [0.0] * cfg.n_steps  # Python numbers: no tensor op per step
            rows_of = [[] for _ in range(cfg.n_steps)]  # step -> each shard's rows of that batch
            weighted = 0.0
            for shard in shards:
                sw = shard.get("sample_weight")
                weighted += sw is not None
                for j in range(cfg.n_steps):
                    idx = M.batch_rows(shard, (cfg.seed, epoch, j, cfg.n_steps, cfg.shuffle))
                    rows_of[j].append(idx)
                    counts[j] += idx.numel()
                    wsums[j] += idx.numel() if sw is None else float(sw[idx].sum())
            # every global batch holds the same number of rows every epoch (a shard's share may change): without
            # sample weights anywhere (every rank learns that from the first epoch's sum) the sizes are the first
            # epoch's again
            if not per_step.get("same_sizes"):
                n_w = allreduce(torch.tensor([counts, wsums, [weighted] * cfg.n_steps], dtype=f64,
                                             device=dev)).cpu().numpy()
                per_step["n_w"] = list(zip(n_w[0].tolist(), n_w[1].tolist()))
                per_step["same_sizes"] = not n_w[2].any()
            if kept_grads:  # the spec gathers the batch's rows itself: each step's arguments, ready
                data = [(s.get("X"), s.get("y"), s.get("sample_weight")) for s in shards]
                per_step["parts"] = [[(*a, idx) for a, idx in zip(data, rows)] for rows in rows_of]
            else:
                per_step["rows_of"] = rows_of
        n_b, w_b = per_step["n_w"][k]
        if kept_grads:
            parts = per_step["parts"][k]
        else:
            parts = [M.take(s, idx) for s, idx in zip(shards, per_step["rows_of"][k])]
        t1 = clock()
        # the L2 term's value, on one rank, each in turn; taken before the gradient, while no rank changes the
        # parameters (ranks that share them step their parts after the gradient's barrier)
        l2_value = 0.0
        if cfg.alpha and k % comm.world_size == comm.rank:
            l2_value = 0.5 * cfg.alpha * sum(float(torch.dot(v, v)) for v in w_flat) / w_b
        t2 = clock()
        part = gradient(parts, w_b) / w_b * spec.loss_scale  # 1.0: the bits of the plain mean
        t3 = clock()
        # the L2 term is the same on every rank: added after the sum
        decay = cfg.alpha / w_b if weights and cfg.alpha else 0.0
        if decay and not l2_in_step:
            add_(l2_grads if kept_grads else [p.grad for p in weights], w_det, decay)
        part += l2_value
        t4 = clock()
        if l2_in_step:
            step_opt(decay)
        else:
            step_opt()
        spent[0] += t1 - t0
        spent[1] += t3 - t2
        spent[2] += (t2 - t1) + (t4 - t3)
        spent[3] += clock() - t4
        return part * n_b

    def reduce_epoch(v):
        return float(allreduce(torch.tensor([v], dtype=f64, device=dev))[0])

    def flat():
        return gradient.flat().to("cpu", f64)

    def validate():
        w = gradient.flat()
        stats = sum(M.validation_stats(s, w, spec).to(dev) for s in shards)
        return M.validation_score(spec, allreduce(stats).cpu().numpy())

    def report(rec):
        if comm.rank == 0:
            comm.report(rec)

    def snapshot():  # the flat parameters as float64 NumPy, not a view of the live ones
        return flat().numpy().copy()

    keep = None if checkpoint_key is None else _Checkpoints(checkpoint_key, opt, monitor, callbacks, gradient.flat,
                                                            share=checkpoint_share)
    out = training.epochs(step, cfg, opt, monitor, reduce_epoch=reduce_epoch, validate=validate,
                          params=snapshot, report=report, callbacks=callbacks, checkpoint=keep)
    if comm.rank != 0:
        return None
    # the run is over: its arrays are views of the live tensors (_ddp_loop copies them once, where they go); the
    # parameters in their own dtype (half the bytes to send back of a float32 network's; the estimator takes
    # them as float64)
    out.w, out.opt_state = gradient.flat().detach().to("cpu").numpy(), _numpy_state(opt)
    out.info["step_seconds"] = _step_seconds(spent, gradient.allreduce_s)
    if keep is not None:
        out.info["epochs_kept"] = keep.kept  # the epochs whose state this rank kept for a resumed run
    return out


def _step_seconds(spent, allreduce_s):
    """Where a rank's steps spent their time: seconds in each part, over the run (see ``fit_stats_``).

    ``allreduce_s``: the gradient's seconds in its allreduce, reported apart from the rest of the gradient;
    None where the two cannot be told apart (``DistributedDataParallel`` sums inside its backward).
    """
    batch, grad, l2, opt = spent
    out = {"batch": batch, "gradient": grad, "allreduce": None, "l2": l2, "optimizer": opt}
    if allreduce_s is not None:
        out["gradient"], out["allreduce"] = grad - allreduce_s, allreduce_s
    return out


def _numpy_state(opt) -> dict:
    """The optimizer's ``state_dict`` with its tensors as NumPy arrays on the CPU (views of the live ones where
    they are there already: :func:`_owned` or a ``finish`` copies them).

    NumPy, because a torch tensor inside a pickled object has its bytes copied into the stream: Adam's state
    serializes and loads far faster as arrays than as tensors (benchmarks/results/history/mlp-matrix.md has the
    measurement);
    :func:`_ship` then sends the arrays apart from the result.  The client's ``torch_state`` takes either.
    """
    state = opt.state_dict()
    state["state"] = {k: {n: (v.detach().to("cpu").numpy() if torch.is_tensor(v) else v)
                          for n, v in s.items()} for k, s in state["state"].items()}
    return state


class _Checkpoints:
    """Keeps, in this worker's memory under ``key``, the run's state at the end of each epoch.

    What a run resumed after that epoch needs: the records, the parameters,
    the optimizer's state, the stopping rule and the loop callbacks (copies),
    the samples seen and whether the run stopped there.  Every rank keeps the
    same (they step alike), so any survivor of a worker loss has it.

    The parameters and the optimizer's tensors are copied into two sets of
    CPU buffers in turn, in their own dtype, made at the first epoch's end:
    an epoch's end then costs copies only, not new arrays and a float64
    conversion (benchmarks/results/history/mlp-matrix.md, "A lighter epoch-end state", has the
    measurement).  The set an
    epoch writes is never the one ``_CHECKPOINTS`` points to, so a
    survivor's state read after a loss (:func:`_checkpoint`, on the worker's
    event loop) is always a whole epoch's: to write the other set again the
    rank would have to finish another epoch, which needs the lost peer.

    With ``share``, an epoch's end keeps the state only where the last
    keeping took at most ``share`` of the time since it ended (the first
    epoch's is always kept): keeping then costs at most that share of the
    run, and a resumed run repeats at most ``1 / share`` times one keeping's
    cost, or one epoch.  On a small network one keeping is a large share of
    an epoch (docs/design-measurements.md has the measurement); on a large
    one every epoch is kept.  ``share=None`` keeps every epoch.
    """

    def __init__(self, key, opt, monitor, callbacks, flat, share=None, clock=time.perf_counter):
        self.key, self.opt, self.monitor, self.callbacks, self.flat = key, opt, monitor, list(callbacks), flat
        self._sets, self._turn = [None, None], 0
        self._blocks = _KEPT_BLOCKS[key] = [None, None]  # each set's block (pooled: see ddp_rank)
        self._records = []  # copies of the run's records: each copied once, at the end of the epoch kept
        self.share, self.clock = share, clock
        self._cost, self._since = None, clock()  # the last keeping's seconds, and when it ended
        self.kept = 0  # epochs kept

    def __call__(self, history, stopped, t):
        now = self.clock()
        if self.share is not None and self._cost is not None and self._cost > self.share * (now - self._since):
            return
        self._keep(history, stopped, t)
        self._since = self.clock()
        self._cost = self._since - now
        self.kept += 1

    def _keep(self, history, stopped, t):
        import copy

        w, state = self.flat(), self.opt.state_dict()
        live = [v for s in state["state"].values() for v in s.values() if torch.is_tensor(v)]
        kept = self._sets[self._turn]
        # the optimizer's very tensors as at this set's last copy: the same layout, known without comparing it
        same = kept is not None and len(kept["live"]) == len(live) and all(a is b for a, b in zip(kept["live"], live))
        if not (same or (kept is not None and _same_layout(kept, w, state["state"]))):
            kept = self._sets[self._turn] = self._new_set(w, state["state"], live)
        if not same:  # where each of the optimizer's tensors goes (in live's order), and its other values
            kept["dst"] = [kept["state"][k][n] for k, s in state["state"].items() for n, v in s.items()
                           if torch.is_tensor(v)]
            kept["other"] = [(k, n) for k, s in state["state"].items() for n, v in s.items() if not torch.is_tensor(v)]
            kept["live"] = live
        _torch_api.foreach_copy_([kept["w"]] + kept["dst"], [w] + live)  # a new set's first values too
        for k, n in kept["other"]:
            kept["state"][k][n] = state["state"][k][n]
        self._turn ^= 1
        # earlier records are not changed after their epoch (the callbacks that may touch a record run before
        # this), so those of epochs not kept are copied as they were
        self._records += [dict(r) for r in history[len(self._records):]]
        _CHECKPOINTS[self.key] = {
            "history": self._records[:], "stopped": stopped, "t": t, "w": kept["w"],
            "opt_state": {"state": kept["state"], "param_groups": [_group_copy(g) for g in state["param_groups"]]},
            "monitor": copy.deepcopy(self.monitor), "callbacks": copy.deepcopy(self.callbacks),
        }

    def _new_set(self, w, state, live):
        """Buffers for ``w`` and the optimizer's tensors ``live`` (in ``state``'s order), carved from one block of
        the pool (this set's earlier block goes back first); their values come with the next copy."""
        like = [w] + live
        old, self._blocks[self._turn] = self._blocks[self._turn], None
        if old is not None:
            _BLOCKS.give_back(old)
        block = self._blocks[self._turn] = _BLOCKS.take(_Block.nbytes(like), slack=1.25)
        bufs = iter(block.carve(like))
        w_buf = next(bufs)
        return {"w": w_buf, "state": {k: {n: next(bufs) if torch.is_tensor(v) else v for n, v in s.items()}
                                      for k, s in state.items()}}


_SCALARS = (int, float, bool, str, type(None))


def _group_copy(group):
    """A copy of an optimizer's param group from ``state_dict()`` that no later step or schedule changes.

    Its numbers and tuples of numbers are kept as they are (they cannot change in place), the rest deep-copied:
    a ``copy.deepcopy`` of the whole group took longer an epoch than copying a small network's tensors
    (docs/design-measurements.md has the measurement).
    """
    import copy

    return {k: v if isinstance(v, _SCALARS) or (isinstance(v, tuple) and all(isinstance(x, _SCALARS) for x in v))
            else copy.deepcopy(v) for k, v in group.items()}


def _cpu_copy(t):
    return t.detach().to("cpu", copy=True)


def _same_layout(kept, w, state) -> bool:
    """Whether the buffers ``kept`` fit the parameters ``w`` and the optimizer's ``state`` (same keys, shapes)."""
    if kept["w"].shape != w.shape or kept["w"].dtype != w.dtype or kept["state"].keys() != state.keys():
        return False
    for k, s in state.items():
        mine = kept["state"][k]
        if mine.keys() != s.keys():
            return False
        for n, v in s.items():
            if torch.is_tensor(v) != torch.is_tensor(mine[n]) or (
                    torch.is_tensor(v) and (v.shape != mine[n].shape or v.dtype != mine[n].dtype)):
                return False
    return True


def _checkpoint(key):
    """The state kept under ``key`` as a resumed run takes it: copies, the parameters as NumPy."""
    c = _CHECKPOINTS.get(key)
    if c is None:
        return None
    state = c["opt_state"]
    return dict(c, w=c["w"].numpy().copy(), opt_state={
        "state": {k: {n: v.clone() if torch.is_tensor(v) else v for n, v in s.items()}
                  for k, s in state["state"].items()},
        "param_groups": state["param_groups"]})


def _drop_checkpoints(prefix):
    for k in [k for k in _CHECKPOINTS if k.startswith(prefix)]:
        del _CHECKPOINTS[k]
    for k in [k for k in _KEPT_BLOCKS if k.startswith(prefix)]:  # not reused: a failed rank may still hold them
        _KEPT_BLOCKS.pop(k, None)


def train_ddp(placement, spec, w0, cfg, monitor, opt_state=None, callbacks=(), on_event=None, on_resume=None, *,
              training: Training):
    """The ddp strategy from the client: :func:`ddp_rank` on every worker; after a worker loss, resume.

    When a worker is lost, the run goes on from the last epoch the ranks
    finished: that epoch's parameters, optimizer state, stopping rule and
    loop callbacks (kept by every rank, fetched from a survivor), on the
    workers left, the lost shards re-placed from their sources
    (:meth:`~dask_estimators.engine.Placement.recover`; a worker may then
    train on two shards).  Batches are drawn per shard and per epoch from
    the seed, so the resumed run takes the same steps as an undisturbed one,
    to the rounding of sums taken over other groupings.  A loss before the
    first epoch's end starts again from ``w0``.  At most the dask config
    ``dask-estimators.max-recoveries`` (3) resumptions; ``on_resume(n)`` is
    called with the epochs kept before each.  ``training``, ``cfg`` and
    ``monitor`` as :func:`ddp_rank`'s.  Returns rank 0's result
    (``training.result``) with the kept epochs' records first and
    ``info["resumed"]`` (one record per resumption).
    """
    import dataclasses
    import uuid

    from ..cluster._watch import WorkerLostError, alive_workers
    from .collective import run_collective

    base = f"dask-estimators-ddp-{uuid.uuid4().hex[:12]}"
    # the ranks take the parameters in the network's dtype: send them so (half the bytes of float64 for float32)
    w0 = np.asarray(w0, dtype=torch.empty(0, dtype=spec.torch_dtype).numpy().dtype)
    max_resumes = int(_config.get("max-recoveries"))
    share = _checkpoint_share()  # the client's config: the ranks take it from here
    prefix, last, resumed = [], None, []  # epochs kept so far, the checkpoint they end with, the resumptions
    state = dict(w0=w0, opt_state=opt_state, monitor=monitor, callbacks=list(callbacks), t0=cfg.t0)
    clean = False  # every rank returned at the first attempt, and dropped its checkpoint
    try:
        for attempt in range(max_resumes + 1):
            e = len(prefix)
            n_epochs = 1 if cfg.incremental else cfg.max_iter
            if last is not None and (last["stopped"] or e >= n_epochs):  # the loss came after the last epoch
                for cb in last["callbacks"]:
                    cb.on_train_end(prefix)
                return training.result(history=prefix, stopped=last["stopped"], t=last["t"], n_epochs=e,
                                   monitor=last["monitor"], w=last["w"], opt_state=last["opt_state"],
                                   info={"resumed": resumed}, callbacks=last["callbacks"])
            run_cfg = dataclasses.replace(cfg, epoch0=cfg.epoch0 + e, max_iter=cfg.max_iter - e, t0=state["t0"])
            key = f"{base}-{attempt}"
            start, (to_all, to_client) = (state["w0"], state["opt_state"]), _shares(placement)
            if to_all:  # every rank maps the start's arrays of 1 MB or more from this process's segments
                from ..data._worker import _add

                start = _shared.share_args(start, _add)  # leased until this attempt returns
            try:
                out = _unship(run_collective(placement, _shipped_rank, "copy" if to_client else None, spec, start,
                                             run_cfg, state["monitor"], state["callbacks"], key, share,
                                             training, on_event=on_event)[0])
            except WorkerLostError as err:
                if attempt == max_resumes:
                    raise
                lost = set(err.workers)
                survivors = sorted(set(placement.workers) - lost & alive_workers(placement.client))
                found = placement.client.run(_checkpoint, key, workers=survivors, on_error="return") if survivors \
                    else {}
                found = [c for c in found.values() if isinstance(c, dict)]
                ckpt = max(found, key=lambda c: len(c["history"]), default=None)
                placement.recover(lost)  # raises WorkerLostError when no worker is left
                if ckpt is not None:
                    prefix += ckpt["history"]
                    last = ckpt
                    state = dict(w0=ckpt["w"], opt_state=ckpt["opt_state"], monitor=ckpt["monitor"],
                                 callbacks=ckpt["callbacks"], t0=ckpt["t"])
                resumed.append({"after_epoch": cfg.epoch0 + len(prefix), "lost": sorted(lost),
                                "workers": len(set(placement.workers))})
                if on_resume is not None:
                    on_resume(len(prefix))
                continue
            out.history = prefix + out.history
            out.n_epochs = len(out.history)
            if resumed:
                out.info["resumed"] = resumed
            clean = not resumed
            return out
    finally:
        if not clean:  # a failed run's ranks keep their checkpoints (a survivor's is what resumes): drop them
            with contextlib.suppress(Exception):
                placement.client.run(_drop_checkpoints, base, on_error="ignore")
