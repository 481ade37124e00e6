"""The ddp strategy's rank loop: a task body that trains on every worker at once, inside a process group.

Each worker runs :func:`ddp_rank` on its own shard (through
:func:`~dask_estimators.engine.collective.run_collective`).  The epochs and
stopping rules are the optimizer layer's
(:func:`~dask_estimators.optim.torch_driver.run_epochs`, the same loop the
tree strategy runs on the client); what is here is what needs the process
group: the summed gradients (one flat allreduce, or
``DistributedDataParallel``), the ranks' shares of each global batch, the
shared-memory allreduce between ranks of one host, and the group's
lifetime.  The network is any :class:`~dask_estimators.objectives.module.NetworkProblem`.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import _torch_api
from ..objectives import module as M
from ..optim.torch_driver import Monitor, TrainConfig, fast_step, make_optimizer, run_epochs, torch_state
from . import _shm_allreduce

__all__ = ["ddp_rank"]


def ddp_rank(shard, comm, spec: M.NetworkProblem, w0: np.ndarray, cfg: TrainConfig, monitor: Monitor,
             opt_state=None, callbacks=()):
    """One rank of the ddp strategy: the whole training loop on this worker, inside a process group.

    Returns, on rank 0, the :class:`~dask_estimators.optim.torch_driver.TrainResult` (other ranks return None).
    ``callbacks`` are the loop callbacks (each rank runs its own copy, and all take the same decisions).

    The ``DistributedDataParallel`` wrapper lives in :func:`_ddp_loop`'s frame
    and is freed before the group is destroyed, also on failure: freed after
    it, its reducer drops the last reference to the gloo group while holding
    the GIL, and the group's destructor waits for a gloo thread that needs
    the GIL (a deadlock seen here about once in ten fits; cf. pytorch#56297).
    Only that wrapper needs the full collection (0.22 s in a worker process
    here): the hand-written path holds nothing of the group.
    """
    import gc
    import traceback

    import torch.distributed as dist

    from ..engine._worker import setup_threads
    from ..engine.collective import process_group

    setup_threads()
    with process_group(comm, shard.device):
        try:
            out = _ddp_loop(shard, comm, spec, w0, cfg, monitor, opt_state, callbacks)
            dist.barrier()  # no collective of this fit is still in flight
            return out
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)  # the loop's frame (and the wrapper) must not outlive the group
            raise
        finally:
            if not spec.hand_gradient:
                gc.collect()


def _ddp_loop(shard, comm, spec, w0, cfg, monitor, opt_state, callbacks):
    """The epoch loop of one ddp rank (see :func:`ddp_rank`).

    A problem with a hand-written gradient (``hand_gradient``, the MLPs) trains on
    one flat parameter buffer: the optimizer's per-layer parameters are views
    of it, the gradient is written into a twin buffer by the spec, and one
    allreduce of that buffer per step does what ``DistributedDataParallel``
    does with its one bucket, without the autograd graph and reducer hooks
    around it (a 128-row step of a 100-100-1 network, one thread: 0.26 ms
    against 0.60 ms with autograd, before DDP's own cost; docs/performance.md).
    Other problems (the character LSTM) train through ``DistributedDataParallel``.
    """
    from torch.nn.parallel import DistributedDataParallel

    dev = shard.device
    module = spec.build(dev)
    params = list(module.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(w0, dtype=spec.torch_dtype, device=dev), params)
    shm = None
    if not dev.startswith("cuda"):  # ranks on one host sum the gradients through shared memory, not gloo's TCP
        shm = _shm_allreduce.create(comm.rank, comm.world_size, sum(p.numel() * p.element_size() for p in params),
                                    comm.timeout)
    by_hand = spec.hand_gradient
    try:
        if by_hand:
            out = _ddp_epochs(shard, _FlatGradient(spec, params, shm), comm, spec, cfg, monitor, opt_state, callbacks)
        else:
            ddp = DistributedDataParallel(module, device_ids=[dev] if dev.startswith("cuda") else None)
            if shm is not None:
                ddp.register_comm_hook(shm, _shm_mean_hook)
            out = _ddp_epochs(shard, _DDPGradient(spec, ddp, params, comm), comm, spec, cfg, monitor, opt_state,
                                  callbacks)
        if out is not None:  # rank 0
            out.info["allreduce"] = "shared memory" if shm is not None else str(torch.distributed.get_backend())
            out.info["gradient"] = "hand-written" if by_hand else "DistributedDataParallel"
            if by_hand:
                out.info["kernel"] = M.loss_grad_kernel(shard.get("X"))
        return out
    finally:
        if shm is not None:
            shm.close()


def _shm_mean_hook(shm, bucket):
    """DDP communication hook: the mean of the bucket's gradients over the ranks, through shared memory."""
    buf = shm.allreduce_(bucket.buffer())
    buf.div_(shm.world)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


class _DDPGradient:
    """The step's gradient through ``DistributedDataParallel``: autograd, the mean over the ranks in its hooks."""

    work = None  # no kept buffers: autograd allocates its own

    def __init__(self, spec, ddp, params, comm):
        self.spec, self.ddp, self.params, self.world = spec, ddp, params, comm.world_size

    def __call__(self, X, y, sw, w_b):
        """Leave the gradient of the batch's total loss / ``w_b`` in ``.grad``; return this rank's loss sum."""
        for p in self.params:
            p.grad = None
        local = self.spec.loss(self.ddp(X), y, sw) if X.shape[0] else self.ddp(X).sum() * 0.0
        # DDP averages the ranks' gradients: scale the local sum by the world size
        (local * (self.world / w_b)).backward()
        return float(local.detach())

    def flat(self):
        return torch.nn.utils.parameters_to_vector(self.params).detach()


class _FlatGradient:
    """The step's gradient by the spec's own backward into one flat buffer, summed over the ranks in one allreduce.

    The optimizer gets leaf views of the flat parameters ``w`` shaped as the
    module's ``params`` (its per-layer layout, so its state is the same as
    with the other strategies), their ``.grad`` views of the gradient
    buffer, which every step overwrites.
    """

    def __init__(self, spec, params, shm):
        self.spec, self.shm, self.work = spec, shm, {}  # work: the activations kept between steps
        self.w = torch.nn.utils.parameters_to_vector(params).detach()
        self.g = torch.zeros_like(self.w)
        sizes, shapes = [p.numel() for p in params], [p.shape for p in params]
        self.params = [v.view(s).detach().requires_grad_() for v, s in zip(self.w.split(sizes), shapes)]
        for p, gv in zip(self.params, self.g.split(sizes)):
            p.grad = gv.view(p.shape)

    def __call__(self, X, y, sw, w_b):
        loss = self.spec.loss_grad_(self.w, X, y, sw, self.g, 1.0 / w_b, self.work)
        if self.shm is not None:
            self.shm.allreduce_(self.g)
        else:
            import torch.distributed as dist

            dist.all_reduce(self.g)
        return float(loss)

    def flat(self):
        return self.w


def _ddp_epochs(shard, gradient, comm, spec, cfg, monitor, opt_state, callbacks=()):
    """The epochs of one ddp rank; ``gradient`` computes each step's gradient (see :func:`_ddp_loop`)."""
    import torch.distributed as dist

    dev = shard.device
    params = gradient.params
    opt = make_optimizer(params, cfg)
    if opt_state is not None:
        opt.load_state_dict(torch_state(opt_state))
    weights = [p for p, keep in zip(params, spec.weight_flags()) if keep]
    w_det = [p.detach() for p in weights]  # views of the parameters, outside autograd
    w_flat = [v.view(-1) for v in w_det]
    # the flat path's gradients stay the same tensors between steps; DDP's are made anew by each backward
    step_opt = fast_step(opt) if isinstance(gradient, _FlatGradient) else opt.step
    f64 = torch.float64
    per_step = {}

    def allreduce(t):
        dist.all_reduce(t)
        return t

    def step(epoch, k):
        if k == 0:  # the global batch sizes of this epoch: one allreduce per epoch
            rows = torch.zeros(2, cfg.n_steps, dtype=f64, device=dev)
            for j in range(cfg.n_steps):
                idx = M.batch_rows(shard, (cfg.seed, epoch, j, cfg.n_steps, cfg.shuffle))
                rows[0, j] = idx.numel()
                sw = shard.get("sample_weight")
                rows[1, j] = idx.numel() if sw is None else sw[idx].sum()
            per_step["rows"] = allreduce(rows).cpu().numpy()
        n_b, w_b = per_step["rows"][:, k]
        X, y, sw = M.take(shard, M.batch_rows(shard, (cfg.seed, epoch, k, cfg.n_steps, cfg.shuffle)), gradient.work)
        part = gradient(X, y, sw, w_b) / w_b
        # the L2 term is the same on every rank: added after the sum; its value on one rank, each in turn
        if weights:
            _torch_api.foreach_add_([p.grad for p in weights], w_det, alpha=cfg.alpha / w_b)
        if k % comm.world_size == comm.rank and cfg.alpha:
            part += 0.5 * cfg.alpha * sum(float(torch.dot(v, v)) for v in w_flat) / w_b
        step_opt()
        return part * n_b

    def reduce_epoch(v):
        return float(allreduce(torch.tensor([v], dtype=f64, device=dev))[0])

    def flat():
        return gradient.flat().to("cpu", f64)

    def validate():
        stats = M.validation_stats(shard, gradient.flat(), spec).to(dev)
        return M.validation_score(spec, allreduce(stats).cpu().numpy())

    def report(rec):
        if comm.rank == 0:
            comm.report(rec)

    out = run_epochs(step, cfg, opt, monitor, reduce_epoch=reduce_epoch, validate=validate,
                     params=lambda: flat().numpy().copy(), report=report, callbacks=callbacks)
    if comm.rank != 0:
        return None
    state = opt.state_dict()
    state["state"] = {k: {n: (v.cpu() if torch.is_tensor(v) else v) for n, v in s.items()}
                      for k, s in state["state"].items()}
    out.w, out.opt_state = flat().numpy().copy(), state
    return out
