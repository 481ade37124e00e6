"""Epochs of minibatch gradient steps driving a real ``torch.optim`` optimizer.

One epoch loop, :func:`run_epochs`, serves both strategies:

- **tree** (:func:`train_tree`): the optimizer lives on the client.  Each step
  is one engine round: every worker returns the raw gradient sum of its share
  of the global batch, the workers tree-sum them, the client divides, adds the
  L2 term and steps.
- **ddp** (:func:`ddp_rank`): the loop runs on every worker at once inside a
  ``torch.distributed`` group; ``DistributedDataParallel`` allreduces the
  gradients and every rank steps the same optimizer on the same numbers.

Both take the same seeded batches (each worker its share of each global batch,
see :func:`~dask_estimators.objectives.module.batch_cuts` and ``batch_slice``) and apply
scikit-learn's rules: the epoch loss, ``tol``/``n_iter_no_change``, the
validation score of ``early_stopping`` (best parameters restored), and the
``"invscaling"``/``"adaptive"`` learning rates of SGD.  Optimizer state is
kept in one layout (per layer, as ``module.parameters()``), so a
``partial_fit`` or a warm start can change strategy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine import _shm_allreduce
from ..objectives import module as M

NON_FINITE_WEIGHTS = (
    "Solver produced non-finite parameter weights. The input data may contain large values and need to be "
    "preprocessed."
)

__all__ = ["TrainConfig", "Monitor", "make_optimizer", "fast_step", "run_epochs", "train_tree", "ddp_rank",
           "minimize_lbfgs"]


@dataclass
class TrainConfig:
    """The stochastic solver's settings, scikit-learn's names and meanings."""

    solver: str = "adam"
    learning_rate_init: float = 1e-3
    learning_rate: str = "constant"
    power_t: float = 0.5
    momentum: float = 0.9
    nesterovs_momentum: bool = True
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8
    alpha: float = 1e-4
    max_iter: int = 200
    tol: float = 1e-4
    n_iter_no_change: int = 10
    early_stopping: bool = False
    shuffle: bool = True
    seed: int = 0
    n_steps: int = 1  # global batches per epoch
    n_train: int = 1  # training rows over all shards
    epoch0: int = 0  # epochs already done (warm start, partial_fit): seeds later epochs afresh
    t0: int = 0  # samples seen so far (invscaling)
    incremental: bool = False  # partial_fit: one epoch
    send_params: bool = False  # add the flat parameters (float64 bytes) to each reported record (checkpoints)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``torch.optim.Adam`` or ``SGD`` (momentum, Nesterov) with scikit-learn's settings."""
    if cfg.solver == "adam":
        params = list(params)
        kw = dict(lr=cfg.learning_rate_init, betas=(cfg.beta_1, cfg.beta_2), eps=cfg.epsilon)
        try:  # one fused kernel per step: measured 2.5x faster than the default on a 10k-parameter MLP (CPU)
            return torch.optim.Adam(params, fused=True, **kw)
        except (RuntimeError, TypeError, ValueError):
            return torch.optim.Adam(params, **kw)
    if cfg.solver == "sgd":
        return torch.optim.SGD(
            params,
            lr=cfg.learning_rate_init,
            momentum=cfg.momentum,
            nesterov=bool(cfg.nesterovs_momentum and cfg.momentum > 0),
        )
    raise ValueError(f"Unknown stochastic solver {cfg.solver!r}.")


class _FusedAdamStep:
    """``opt.step()`` of a fused ``torch.optim.Adam``, its kernel called directly on its own state.

    torch.optim wraps its one ``torch._fused_adam_`` call in Python (the
    profiling hook, per-parameter state look-ups, grouping by device): about
    0.1 ms of a 0.5 ms 128-row MLP step on a rank, measured in the ddp loop.
    The first call goes through ``opt.step()``, which makes the state; later
    calls add 1 to the same step counters and call the same kernel on the
    same tensors with the group's current settings, so the numbers are torch.optim's
    to the bit (``test_fused_adam_step_equals_torch_optim``) and the
    optimizer and its ``state_dict`` stay torch.optim's.  Only for what it
    covers (:func:`fast_step`); a ``load_state_dict`` after the first call
    needs a new one.
    """

    def __init__(self, opt):
        self.opt, self.state = opt, None

    def __call__(self):
        if self.state is None:
            self.opt.step()
            params = self.opt.param_groups[0]["params"]
            st = [self.opt.state[p] for p in params]
            self.state = (params, [p.grad for p in params], [s["exp_avg"] for s in st],
                          [s["exp_avg_sq"] for s in st], [s["step"] for s in st])
            return
        g = self.opt.param_groups[0]
        params, grads, m, v, steps = self.state
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(params, grads, m, v, [], steps, lr=g["lr"], beta1=g["betas"][0], beta2=g["betas"][1],
                           weight_decay=g["weight_decay"], eps=g["eps"], amsgrad=False, maximize=False)


def fast_step(opt):
    """A callable doing ``opt.step()``: :class:`_FusedAdamStep` for a plain fused Adam, else ``opt.step`` itself.

    The gradients must stay the same tensors between steps (updated in place).
    """
    from torch.optim import optimizer as _optimizer

    hooks = (getattr(opt, "_optimizer_step_pre_hooks", None), getattr(opt, "_optimizer_step_post_hooks", None),
             getattr(_optimizer, "_global_optimizer_pre_hooks", None),
             getattr(_optimizer, "_global_optimizer_post_hooks", None))
    if (
        type(opt) is torch.optim.Adam
        and hasattr(torch, "_fused_adam_")
        and len(opt.param_groups) == 1
        and opt.defaults.get("fused")
        and not any(opt.defaults.get(k) for k in ("amsgrad", "maximize", "capturable", "differentiable",
                                                    "decoupled_weight_decay", "weight_decay"))
        and not isinstance(opt.defaults.get("lr"), torch.Tensor)
        and all(h is not None and not h for h in hooks)
    ):
        return _FusedAdamStep(opt)
    return opt.step


def _set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


@dataclass
class Monitor:
    """scikit-learn's stopping rule (``_update_no_improvement_count``) and the fitted curves."""

    tol: float
    n_iter_no_change: int
    early_stopping: bool
    loss_curve: list = field(default_factory=list)
    validation_scores: list = field(default_factory=list)
    best_loss: float = math.inf
    best_validation_score: float = -math.inf
    no_improvement_count: int = 0
    best_params: np.ndarray | None = None

    def update(self, loss: float, score: float | None, params) -> None:
        self.loss_curve.append(float(loss))
        if self.early_stopping:
            self.validation_scores.append(float(score))
            if score < self.best_validation_score + self.tol:
                self.no_improvement_count += 1
            else:
                self.no_improvement_count = 0
            if score > self.best_validation_score:
                self.best_validation_score = float(score)
                self.best_params = params()
        else:
            if loss > self.best_loss - self.tol:
                self.no_improvement_count += 1
            else:
                self.no_improvement_count = 0
            if loss < self.best_loss:
                self.best_loss = float(loss)


def run_epochs(step, cfg: TrainConfig, opt, monitor: Monitor, *, reduce_epoch=None, validate=None,
               params=None, report=None) -> dict:
    """The epoch loop shared by both strategies.

    Parameters
    ----------
    step : callable ``(epoch, k) -> (batch_loss, batch_rows)``
        Computes the gradient of global batch ``k`` of ``epoch`` and steps the
        optimizer; returns this process's part of ``batch_loss * batch_rows``
        (the whole value in the tree strategy).
    reduce_epoch : callable, optional
        Sums a float over the ranks (DDP); identity by default.
    validate : callable, optional
        The validation score (``early_stopping``).
    params : callable
        The current parameters as a flat NumPy vector (kept when the score is best).
    report : callable, optional
        Called with each epoch's record.
    """
    reduce_epoch = reduce_epoch or (lambda v: v)
    history, stopped, t_seen = [], False, cfg.t0
    n_epochs = 1 if cfg.incremental else cfg.max_iter
    for it in range(n_epochs):
        epoch = cfg.epoch0 + it
        t_start = time.perf_counter()
        acc = 0.0
        for k in range(cfg.n_steps):
            acc += step(epoch, k)
        loss = reduce_epoch(acc) / cfg.n_train
        if not math.isfinite(loss) and not cfg.early_stopping and not np.all(np.isfinite(params())):
            # diverged: non-finite weights stay non-finite, and without early stopping no earlier weights are
            # kept, so the fit ends in scikit-learn's error now rather than after max_iter epochs
            raise ValueError(NON_FINITE_WEIGHTS)
        score = validate() if cfg.early_stopping else None
        monitor.update(loss, score, params)
        t_seen += cfg.n_train
        if cfg.solver == "sgd" and cfg.learning_rate == "invscaling":
            _set_lr(opt, cfg.learning_rate_init / (t_seen + 1) ** cfg.power_t)
        seconds = time.perf_counter() - t_start
        rec = {
            "epoch": epoch + 1,
            "loss": loss,
            "validation_score": score,
            "seconds": seconds,
            "samples_per_s": cfg.n_train / seconds if seconds > 0 else float("inf"),
        }
        history.append(rec)
        if report is not None:
            report(dict(rec, params=params().astype(np.float64).tobytes()) if cfg.send_params else rec)
        if monitor.no_improvement_count > cfg.n_iter_no_change:
            lr = opt.param_groups[0]["lr"]
            if cfg.solver == "sgd" and cfg.learning_rate == "adaptive" and lr > 1e-6:
                _set_lr(opt, lr / 5.0)
                monitor.no_improvement_count = 0
            else:
                stopped = True
                break
    return {"history": history, "stopped": stopped, "t": t_seen, "n_epochs": len(history)}


def _torch_state(state):
    """An optimizer state dict whose tensors came back as NumPy arrays (from a worker) as torch tensors again."""
    if isinstance(state, dict):
        return {k: _torch_state(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_torch_state(v) for v in state]
    if isinstance(state, np.ndarray):
        return torch.from_numpy(state.copy())
    return state


def _grads_into(params, g):
    pos = 0
    for p in params:
        n = p.numel()
        p.grad = g[pos : pos + n].view_as(p).to(p.dtype)
        pos += n


def train_tree(evaluator, spec: M.MLPSpec, w0: np.ndarray, cfg: TrainConfig, monitor: Monitor, opt_state=None,
               report=None) -> dict:
    """The tree strategy: the optimizer on the client, one engine round per global batch.

    ``evaluator(kernel, *args)`` sums a kernel over the shards (see
    :class:`~dask_estimators.engine.DistributedEvaluator`).
    """
    module = spec.build("cpu", torch.float64)
    params = list(module.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(w0, dtype=torch.float64), params)
    opt = make_optimizer(params, cfg)
    if opt_state is not None:
        opt.load_state_dict(_torch_state(opt_state))
    mask = torch.as_tensor(spec.penalty_mask())

    def flat():
        return torch.nn.utils.parameters_to_vector(params).detach()

    def step(epoch, k):
        w = flat()
        loss, g, sw, n = evaluator(M.value_grad, w.numpy(), spec, (cfg.seed, epoch, k, cfg.n_steps, cfg.shuffle))
        if n == 0 or sw <= 0:
            return 0.0
        wm = w * mask
        g = torch.as_tensor(g) / sw + cfg.alpha * wm / sw
        batch_loss = loss / sw + 0.5 * cfg.alpha * float(wm @ wm) / sw  # may be inf or NaN: see run_epochs
        _grads_into(params, g)
        opt.step()
        return batch_loss * n

    def validate():
        return M.validation_score(spec, evaluator(M.validation_stats, flat().numpy(), spec))

    out = run_epochs(step, cfg, opt, monitor, validate=validate, params=lambda: flat().numpy().copy(),
                     report=report)
    out.update(w=flat().numpy().copy(), monitor=monitor, opt_state=opt.state_dict())
    return out


def ddp_rank(shard, comm, spec: M.MLPSpec, w0: np.ndarray, cfg: TrainConfig, monitor: Monitor, opt_state=None):
    """One rank of the ddp strategy: the whole training loop on this worker, inside a process group.

    Returns, on rank 0, the result dict of :func:`train_tree` (other ranks return None).

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
            out = _ddp_loop(shard, comm, spec, w0, cfg, monitor, opt_state)
            dist.barrier()  # no collective of this fit is still in flight
            return out
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)  # the loop's frame (and the wrapper) must not outlive the group
            raise
        finally:
            if not hasattr(spec, "loss_grad_"):
                gc.collect()


def _ddp_loop(shard, comm, spec, w0, cfg, monitor, opt_state):
    """The epoch loop of one ddp rank (see :func:`ddp_rank`).

    A spec with a hand-written gradient (``loss_grad_``, the MLPs) trains on
    one flat parameter buffer: the optimizer's per-layer parameters are views
    of it, the gradient is written into a twin buffer by the spec, and one
    allreduce of that buffer per step does what ``DistributedDataParallel``
    does with its one bucket, without the autograd graph and reducer hooks
    around it (a 128-row step of a 100-100-1 network, one thread: 0.26 ms
    against 0.60 ms with autograd, before DDP's own cost; docs/performance.md).
    Other specs (the character LSTM) train through ``DistributedDataParallel``.
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
    by_hand = hasattr(spec, "loss_grad_")
    try:
        if by_hand:
            out = _ddp_epochs(shard, _FlatGradient(spec, params, shm), comm, spec, cfg, monitor, opt_state)
        else:
            ddp = DistributedDataParallel(module, device_ids=[dev] if dev.startswith("cuda") else None)
            if shm is not None:
                ddp.register_comm_hook(shm, _shm_mean_hook)
            out = _ddp_epochs(shard, _DDPGradient(spec, ddp, params, comm), comm, spec, cfg, monitor, opt_state)
        if out is not None:  # rank 0
            out["allreduce"] = "shared memory" if shm is not None else str(torch.distributed.get_backend())
            out["gradient"] = "hand-written" if by_hand else "DistributedDataParallel"
            if by_hand:
                out["kernel"] = M.loss_grad_kernel(shard.get("X"))
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


def _ddp_epochs(shard, gradient, comm, spec, cfg, monitor, opt_state):
    """The epochs of one ddp rank; ``gradient`` computes each step's gradient (see :func:`_ddp_loop`)."""
    import torch.distributed as dist

    dev = shard.device
    params = gradient.params
    opt = make_optimizer(params, cfg)
    if opt_state is not None:
        opt.load_state_dict(_torch_state(opt_state))
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
            torch._foreach_add_([p.grad for p in weights], w_det, alpha=cfg.alpha / w_b)
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
                     params=lambda: flat().numpy().copy(), report=report)
    if comm.rank != 0:
        return None
    state = opt.state_dict()
    state["state"] = {k: {n: (v.cpu() if torch.is_tensor(v) else v) for n, v in s.items()}
                      for k, s in state["state"].items()}
    out.update(w=flat().numpy().copy(), monitor=monitor, opt_state=state)
    return out


def minimize_lbfgs(evaluator, spec: M.MLPSpec, w0: np.ndarray, *, alpha, max_iter, max_fun, tol, report=None):
    """Full-batch L-BFGS-B (scipy), one engine round per evaluation, as scikit-learn's ``solver="lbfgs"``."""
    from scipy import optimize

    mask = spec.penalty_mask()
    state = {"sw": None}

    def fun(w):
        loss, g, sw, _ = evaluator(M.value_grad, w, spec, None)
        wm = w * mask
        f = loss / sw + 0.5 * alpha * float(wm @ wm) / sw  # inf or NaN: L-BFGS-B backtracks or stops, as in sklearn
        state["sw"] = sw
        return f, np.asarray(g) / sw + alpha * wm / sw

    curve = []

    def callback(intermediate_result):
        curve.append(float(intermediate_result.fun))
        if report is not None:
            report({"epoch": len(curve), "loss": curve[-1]})

    res = optimize.minimize(
        fun, w0, jac=True, method="L-BFGS-B", callback=callback,
        options={"maxfun": max_fun, "maxiter": max_iter, "gtol": tol},
    )
    return res, curve
