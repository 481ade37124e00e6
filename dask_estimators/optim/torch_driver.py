"""Epochs of minibatch gradient steps driving a real ``torch.optim`` optimizer.

One epoch loop, :func:`run_epochs`, serves both strategies:

- **rounds** (:func:`train_rounds`): the optimizer lives on the client.  Each step
  is one engine round: every worker returns the raw gradient sum of its share
  of the global batch, the workers tree-sum them, the client divides, adds the
  L2 term and steps.
- **ddp** (:func:`dask_estimators.engine.ddp.train.ddp_rank`, in the engine, given :data:`TRAINING`: it is
  a task body inside a ``torch.distributed`` group): the loop runs on every
  worker at once, the gradients are summed over the ranks and every rank
  steps the same optimizer on the same numbers.

Both take the same seeded batches (each worker its share of each global batch, see
:class:`~dask_estimators.objectives.module.BatchOrder` and
:func:`~dask_estimators.objectives.module.batch_cuts`) and apply
scikit-learn's rules: the epoch loss, ``tol``/``n_iter_no_change``, the
validation score of ``early_stopping`` (best parameters restored), and the
``"invscaling"``/``"adaptive"`` learning rates of SGD.  Optimizer state is
kept in one layout (per layer, as ``module.parameters()``), so a
``partial_fit`` or a warm start can change strategy.  Both return a
:class:`TrainResult`.  A search's networks that take the same batches train
in lockstep on one worker (the engine's ``train_lockstep``): each keeps its
own epoch ends (:class:`EpochRun`), and :func:`run_epochs_together` steps
them all.  Nothing here sees Dask.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import _torch_api
from ..callbacks import EarlyStopping
from ..objectives import module as M

NON_FINITE_WEIGHTS = (
    "Solver produced non-finite parameter weights. The input data may contain large values and need to be "
    "preprocessed."
)

__all__ = ["TrainConfig", "Monitor", "TrainResult", "make_optimizer", "fast_step", "steps_in_parts", "AdamPartStep",
           "adam_zero_state", "run_epochs", "EpochRun", "run_epochs_together", "LockstepMember", "train_rounds",
           "torch_state", "minimize_lbfgs", "TorchTraining",
           "TRAINING"]


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
        try:  # one fused kernel per step: faster than the default on a small MLP (CPU; docs/design-measurements.md)
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
    profiling hook, per-parameter state look-ups, grouping by device): a
    noticeable share of a small MLP step on a rank (docs/design-measurements.md has the measurement).
    The first call goes through ``opt.step()``, which makes the state; later
    calls add 1 to the same step counters and call the same kernel on the
    same tensors with the group's current settings, so the numbers are torch.optim's
    to the bit (``test_fused_adam_step_equals_torch_optim``) and the
    optimizer and its ``state_dict`` stay torch.optim's.  Only for what it
    covers (:func:`fast_step`); a ``load_state_dict`` after the first call
    needs a new one.

    ``l2``: the parameters an L2 term applies to (the weights, not the
    biases).  A call with ``decay`` then steps as if ``decay * p`` had been
    added to each of their gradients first, but the kernel adds it as it
    reads them (its ``weight_decay``), which saves a pass over the
    parameters and the gradients a step; the gradients are left as they
    were.  The same bits as ``foreach_add_`` then ``opt.step()`` where
    torch's two kernels round alike (``test_fused_l2_equals_the_added_term``).
    """

    def __init__(self, opt, l2=()):
        self.opt, self.state, self.l2 = opt, None, {id(p) for p in l2}

    def __call__(self, decay=0.0):
        if self.state is None:
            params = self.opt.param_groups[0]["params"]
            decayed = [p for p in params if id(p) in self.l2]
            if decay:
                _torch_api.foreach_add_([p.grad for p in decayed], [p.detach() for p in decayed], decay)
            self.opt.step()
            st = self.opt.state
            # the step counters as views of one tensor: one add a step, cheaper than _foreach_add_ on four
            # (docs/design-measurements.md)
            counters = torch.stack([st[p]["step"] for p in params])
            for i, p in enumerate(params):
                st[p]["step"] = counters[i]
            self.counters = counters

            def kernel_args(ps):  # _fused_adam_'s tensor lists for the parameters ps
                return (ps, [p.grad for p in ps], [st[p]["exp_avg"] for p in ps], [st[p]["exp_avg_sq"] for p in ps],
                        [st[p]["step"] for p in ps])

            rest = [p for p in params if id(p) not in self.l2]
            # every parameter in one call (no decay); the weights with the decay and the rest without
            self.state = (kernel_args(params), [(True, kernel_args(decayed)), (False, kernel_args(rest))])
            return
        whole, split = self.state
        self.counters.add_(1)
        _fused_adam_calls(self.opt.param_groups[0], whole, split, decay)


def _fused_adam_calls(group, whole, split, decay):
    """``torch._fused_adam_`` with ``group``'s settings: once on ``whole`` without ``decay``, else on each of ``split``.

    ``whole``: the kernel's five tensor lists (parameters, gradients,
    ``exp_avg``, ``exp_avg_sq``, step counters); ``split``: ``(is_decayed,
    lists)`` pairs, the L2 ``decay`` added to the weight decay of the
    decayed ones.  Empty lists are skipped.
    """
    kw = dict(lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1], eps=group["eps"], amsgrad=False,
              maximize=False)
    for is_decayed, lists in ([(False, whole)] if not decay else split):
        if lists and lists[0]:
            params, grads, m, v, steps = lists
            torch._fused_adam_(params, grads, m, v, [], steps,
                               weight_decay=group["weight_decay"] + (decay if is_decayed else 0.0), **kw)


def _plain_fused_adam(opt) -> bool:
    """Whether ``opt.step()`` is exactly one ``torch._fused_adam_`` call that :class:`_FusedAdamStep` may make."""
    from torch.optim import optimizer as _optimizer

    hooks = (getattr(opt, "_optimizer_step_pre_hooks", None), getattr(opt, "_optimizer_step_post_hooks", None),
             getattr(_optimizer, "_global_optimizer_pre_hooks", None),
             getattr(_optimizer, "_global_optimizer_post_hooks", None))
    return (
        type(opt) is torch.optim.Adam
        and _torch_api.has("torch._fused_adam_")
        and _torch_api.has("torch._foreach_add_")
        and len(opt.param_groups) == 1
        and bool(opt.defaults.get("fused"))
        and not any(opt.defaults.get(k) for k in ("amsgrad", "maximize", "capturable", "differentiable",
                                                    "decoupled_weight_decay", "weight_decay"))
        and not isinstance(opt.defaults.get("lr"), torch.Tensor)
        and all(h is not None and not h for h in hooks)
    )


def fast_step(opt, l2=()):
    """A callable doing ``opt.step()``: :class:`_FusedAdamStep` for a plain fused Adam, else ``opt.step`` itself.

    The gradients must stay the same tensors between steps (updated in place).
    ``l2``: the parameters a ``decay`` argument of the fused step applies to;
    ``opt.step`` takes no such argument, so a caller tells them apart with
    ``isinstance(step, _FusedAdamStep)`` (:meth:`TorchTraining.fast_step` does).
    """
    return _FusedAdamStep(opt, l2) if _plain_fused_adam(opt) else opt.step


def steps_in_parts(cfg: TrainConfig) -> bool:
    """Whether :func:`make_optimizer`'s optimizer for ``cfg`` can be stepped in parts (:class:`AdamPartStep`)."""
    return cfg.solver == "adam" and _plain_fused_adam(make_optimizer([torch.zeros(1, requires_grad=True)], cfg))


class AdamPartStep:
    """``opt.step()`` of a plain fused ``torch.optim.Adam`` (:func:`steps_in_parts`) on one part of its numbers.

    The part is the range ``[lo, hi)`` of the parameters laid end to end
    (``parameters_to_vector``'s order).  Adam is elementwise, so steps of
    parts that cover the parameters are one ``opt.step()``; to the bit
    where each cut falls on a multiple of 64 elements from the start of
    the parameter it cuts (the kernel's vector loop then meets the same
    elements; other cuts round a few elements differently,
    ``test_adam_in_parts_equals_torch_optim``).  This is how ranks that
    share one copy of the parameters and of Adam's state step them, each
    its own part (``engine/ddp/train.py``).  The optimizer's state must exist
    (made by ``load_state_dict``, see :func:`adam_zero_state`); each call
    adds 1 to every step counter (every rank keeps its own counters) and
    calls the fused kernel on the part's slices of the parameters, their
    gradients and ``exp_avg``/``exp_avg_sq``.  ``l2`` and ``decay`` are
    :class:`_FusedAdamStep`'s.
    """

    def __init__(self, opt, lo, hi, l2=()):
        self.opt = opt
        st, decayed_ids = opt.state, {id(p) for p in l2}
        params = opt.param_groups[0]["params"]
        self.steps = [st[p]["step"] for p in params]
        decayed, rest = [], []
        pos = 0
        for p in params:
            a, b = max(pos, lo) - pos, min(pos + p.numel(), hi) - pos
            if a < b:
                (decayed if id(p) in decayed_ids else rest).append(
                    (p.detach().view(-1)[a:b], p.grad.view(-1)[a:b], st[p]["exp_avg"].view(-1)[a:b],
                     st[p]["exp_avg_sq"].view(-1)[a:b], st[p]["step"]))
            pos += p.numel()
        self._split = [(True, [list(t) for t in zip(*decayed)]), (False, [list(t) for t in zip(*rest)])]
        self._whole = [list(t) for t in zip(*(decayed + rest))]

    def __call__(self, decay=0.0):
        torch._foreach_add_(self.steps, 1)
        _fused_adam_calls(self.opt.param_groups[0], self._whole, self._split, decay)


def adam_zero_state(opt, moments=None) -> None:
    """Give a torch.optim.Adam without state the state its first ``step()`` would start from, by ``load_state_dict``.

    ``moments(i, p)``: parameter ``i``'s ``exp_avg`` and ``exp_avg_sq``, zero-filled tensors shaped as ``p``
    (new ones by default).
    """
    if opt.state:
        return
    sd = opt.state_dict()
    params = opt.param_groups[0]["params"]
    moments = moments or (lambda i, p: (torch.zeros_like(p), torch.zeros_like(p)))
    sd["state"] = {}
    for i, p in enumerate(params):
        m, v = moments(i, p)
        sd["state"][i] = {"step": torch.tensor(0.0), "exp_avg": m, "exp_avg_sq": v}
    opt.load_state_dict(sd)


def _set_lr(opt, lr):
    """Set ``opt``'s learning rate to ``lr`` (scikit-learn's schedules: ``"invscaling"``, ``"adaptive"``).

    SGD's momentum goes on as scikit-learn's: its velocity holds past steps
    already multiplied by the rate they were taken at, so a new rate applies
    to new gradients only.  ``torch.optim.SGD``'s buffer holds the past
    gradients, which each step multiplies by the current rate: the buffer is
    rescaled by old / new rate, which keeps rate times buffer, scikit-learn's
    velocity, as it was.
    """
    sgd = isinstance(opt, torch.optim.SGD)
    for g in opt.param_groups:
        old, g["lr"] = g["lr"], lr
        if sgd and g.get("momentum") and old != lr and lr > 0:
            for p in g["params"]:
                buf = opt.state.get(p, {}).get("momentum_buffer")
                if buf is not None:
                    buf.mul_(old / lr)


class Monitor(EarlyStopping):
    """scikit-learn's stopping rule of the MLPs (``_update_no_improvement_count``), as a loop callback.

    An :class:`~dask_estimators.callbacks.EarlyStopping` on the training loss,
    or on the validation score with ``early_stopping`` (the best epoch's
    parameters kept), whose patience is ``n_iter_no_change``; with SGD's
    ``"adaptive"`` learning rate a plateau first divides the rate by 5 (down
    to 1e-6) and starts counting again.  The estimators add it before the
    user's callbacks.
    """

    def __init__(self, tol, n_iter_no_change, early_stopping):
        super().__init__("validation_score" if early_stopping else "loss", tol, n_iter_no_change)

    def on_epoch_end(self, history, params=None, optimizer=None, config=None, **info):
        if not super().on_epoch_end(history, params=params, **info):  # EarlyStopping's count and best state
            return False
        lr = optimizer.param_groups[0]["lr"]
        if config is not None and config.solver == "sgd" and config.learning_rate == "adaptive" and lr > 1e-6:
            _set_lr(optimizer, lr / 5.0)
            self.no_improvement_count = 0
            return False
        return True


@dataclass
class TrainResult:
    """What a training run returns, with either strategy (as ``scipy.optimize.OptimizeResult`` for the solvers)."""

    history: list  # one record per epoch: epoch, loss, validation_score, seconds, samples_per_s
    stopped: bool  # the stopping rule ended the run before its last epoch
    t: int  # samples seen, warm starts included (SGD's "invscaling" rate)
    n_epochs: int  # epochs run
    monitor: Monitor  # the stopping rule's state and the curves
    w: np.ndarray | None = None  # the flat parameters at the end (ddp: in the network's dtype)
    opt_state: dict | None = None  # the optimizer's state dict (NumPy-free, torch tensors on the CPU)
    info: dict = field(default_factory=dict)  # how it ran: "allreduce", "gradient", "kernel" (ddp)
    callbacks: list = field(default_factory=list)  # the loop callbacks as the run left them (rank 0's with ddp)


def run_epochs(step, cfg: TrainConfig, opt, monitor: Monitor, *, reduce_epoch=None, validate=None,
               params=None, report=None, callbacks=(), checkpoint=None) -> TrainResult:
    """The epoch loop shared by both strategies.

    Parameters
    ----------
    step : callable ``(epoch, k) -> (batch_loss, batch_rows)``
        Computes the gradient of global batch ``k`` of ``epoch`` and steps the
        optimizer; returns this process's part of ``batch_loss * batch_rows``
        (the whole value in the rounds strategy).
    reduce_epoch : callable, optional
        Sums a float over the ranks (DDP); identity by default.
    validate : callable, optional
        The validation score (``early_stopping``).
    params : callable
        The current parameters as a flat NumPy vector (kept when the score is best).
    report : callable, optional
        Called with each epoch's record.
    callbacks : sequence of Callback, optional
        Loop callbacks run after ``monitor`` (scikit-learn's rule) at every
        epoch's end; any of them returning True stops the run.
    checkpoint : callable ``(history, stopped, t) -> None``, optional
        Called at the very end of every epoch, after the callbacks decided,
        with the records so far, whether the run stops there, and the samples
        seen: what a run resumed after this epoch needs besides the
        optimizer's, the stopping rule's and the callbacks' state.
    """
    run = EpochRun(cfg, opt, monitor, reduce_epoch=reduce_epoch, validate=validate, params=params, report=report,
                   callbacks=callbacks, checkpoint=checkpoint)
    for it in range(run.n_epochs):
        epoch = cfg.epoch0 + it
        t_start = time.perf_counter()
        acc = 0.0
        for k in range(cfg.n_steps):
            acc += step(epoch, k)
        if run.end_epoch(epoch, acc, time.perf_counter() - t_start):
            break
    return run.result()


class EpochRun:
    """What :func:`run_epochs` does around one run's steps: the callbacks' start, each epoch's end (its loss,
    validation score, record, learning rate and stopping rules) and the result.

    :func:`run_epochs_together` keeps one per run, for runs that step in lockstep on the same batches.
    The arguments are :func:`run_epochs`'.
    """

    def __init__(self, cfg: TrainConfig, opt, monitor: Monitor, *, reduce_epoch=None, validate=None, params=None,
                 report=None, callbacks=(), checkpoint=None):
        self.cfg, self.opt, self.monitor = cfg, opt, monitor
        self.reduce_epoch = reduce_epoch or (lambda v: v)
        self.validate, self.params, self.report, self.checkpoint = validate, params, report, checkpoint
        self.callbacks = list(callbacks)
        self.history, self.stopped, self.t_seen = [], False, cfg.t0
        self.loop = [monitor, *self.callbacks]
        for cb in self.loop:
            cb.on_train_begin(optimizer=opt)
        #: The epochs this run takes at most.
        self.n_epochs = 1 if cfg.incremental else cfg.max_iter

    def end_epoch(self, epoch: int, acc: float, seconds: float) -> bool:
        """Close ``epoch`` (its steps' summed ``acc`` of :func:`run_epochs`' ``step``, over ``seconds``): True
        where the run stops there."""
        cfg, opt = self.cfg, self.opt
        loss = self.reduce_epoch(acc) / cfg.n_train
        if not math.isfinite(loss) and not cfg.early_stopping and not np.all(np.isfinite(self.params())):
            # diverged: non-finite weights stay non-finite, and without early stopping no earlier weights are
            # kept, so the fit ends in scikit-learn's error now rather than after max_iter epochs
            raise ValueError(NON_FINITE_WEIGHTS)
        score = self.validate() if cfg.early_stopping else None
        self.t_seen += cfg.n_train
        if cfg.solver == "sgd" and cfg.learning_rate == "invscaling":
            _set_lr(opt, cfg.learning_rate_init / (self.t_seen + 1) ** cfg.power_t)
        rec = {
            "epoch": epoch + 1,
            "loss": loss,
            "validation_score": score,
            "seconds": seconds,
            "samples_per_s": cfg.n_train / seconds if seconds > 0 else float("inf"),
        }
        history = self.history
        history.append(rec)
        if self.report is not None:
            self.report(dict(rec, params=self.params().astype(np.float64).tobytes()) if cfg.send_params else rec)
        # every callback sees every epoch (no short cut): scikit-learn's rule first, then the user's
        stops = [cb.on_epoch_end(history, params=self.params, optimizer=opt, config=cfg) for cb in self.loop]
        self.stopped = any(stops)
        if self.checkpoint is not None:
            self.checkpoint(history, self.stopped, self.t_seen)
        return self.stopped or len(history) >= self.n_epochs

    def result(self) -> TrainResult:
        """The run's :class:`TrainResult` (its callbacks' ``on_train_end`` called)."""
        for cb in self.loop:
            cb.on_train_end(self.history)
        return TrainResult(history=self.history, stopped=self.stopped, t=self.t_seen, n_epochs=len(self.history),
                           monitor=self.monitor, callbacks=self.callbacks)


def run_epochs_together(step, runs: list, epoch0: int = 0) -> list:
    """Several runs' epochs in lockstep on the same batches: :func:`run_epochs` for each, one loop for all.

    ``runs``: an :class:`EpochRun` per run, all of the same ``n_steps``.  ``step(epoch, k, active)`` computes
    batch ``k`` of ``epoch`` for the runs of the indices ``active`` (those not yet stopped) and steps their
    optimizers; it returns each one's part of ``batch_loss * batch_rows``, in ``active``'s order.  A run
    stops at its own epoch (its stopping rules, its ``max_iter``), and the others go on without it.  Each
    epoch's seconds are the lockstep's.  Returns the runs' :class:`TrainResult` in order.
    """
    n_steps = {r.cfg.n_steps for r in runs}
    if len(n_steps) != 1:
        raise ValueError(f"Runs in lockstep take the same batches; their n_steps differ: {sorted(n_steps)}.")
    (n_steps,) = n_steps
    active = list(range(len(runs)))
    epoch = epoch0
    while active:
        t_start = time.perf_counter()
        acc = [0.0] * len(active)
        for k in range(n_steps):
            for j, v in enumerate(step(epoch, k, active)):
                acc[j] += v
        seconds = time.perf_counter() - t_start
        active = [i for i, a in zip(active, acc) if not runs[i].end_epoch(epoch, a, seconds)]
        epoch += 1
    return [r.result() for r in runs]


class LockstepMember:
    """One network of a lockstep group: its problem, starting point, configuration and stopping rule.

    ``spec`` a :class:`~dask_estimators.objectives.module.NetworkProblem` with a hand-written gradient
    (``loss_grad_``); ``cfg`` and ``monitor`` the optimizer layer's (its ``TrainConfig`` and ``Monitor``);
    ``batch_size`` the rows of its global batches, ``validation_fraction`` the share of rows it holds out
    (with ``cfg.early_stopping``), ``order`` the objective layer's ``BatchOrder`` over the split's rows (its
    validation rows, its batches).  The members of one group take the same batches: they share the batch size
    and validation fraction, ``cfg.seed`` and ``order.shuffle_state``, ``shuffle``, ``n_steps``, ``n_train``,
    ``early_stopping`` and ``epoch0``, and the network's output and dtype (the engine's ``train_lockstep``
    checks).
    """

    def __init__(self, spec, w0, cfg, monitor, batch_size, validation_fraction=0.0, *, order):
        self.spec, self.w0, self.cfg, self.monitor = spec, np.asarray(w0), cfg, monitor
        self.order = order  # the split's objectives-layer BatchOrder (its validation rows, its batches)
        self.batch_size = int(batch_size)
        self.validation_fraction = float(validation_fraction) if cfg.early_stopping else 0.0

    def batches(self) -> tuple:
        """What the members of one group share."""
        c = self.cfg
        shuffles = self.order.shuffle_state  # where the epochs' shuffles start
        return (self.batch_size, self.validation_fraction, (c.seed, shuffles), c.shuffle, c.n_steps, c.n_train,
                c.early_stopping, c.epoch0, self.spec.out, self.spec.dtype)


def torch_state(state):
    """An optimizer state dict whose tensors came back as NumPy arrays (from a worker) as torch tensors again."""
    if isinstance(state, dict):
        return {k: torch_state(v) for k, v in state.items()}
    if isinstance(state, list):
        return [torch_state(v) for v in state]
    if isinstance(state, np.ndarray):
        return torch.from_numpy(state.copy())
    return state


class TorchTraining:
    """This module's part of a ddp rank's loop, handed to the engine as an argument.

    The engine's rank loop (:mod:`dask_estimators.engine.ddp.train`) owns
    what needs the process group: the summed gradients, the ranks' shares
    of each batch, the shared memory between ranks of one host.  The
    optimizer, its steps, its state and the epochs with their stopping
    rules are this module's; the engine imports no optimizer, and reaches
    them only through the object it is given, :data:`TRAINING`, an instance
    of this class (sent to the workers with the task, by reference).
    """

    @staticmethod
    def optimizer(params, cfg: TrainConfig, state=None) -> torch.optim.Optimizer:
        """:func:`make_optimizer`'s optimizer for ``cfg``, with ``state`` (a ``state_dict``, maybe of NumPy
        arrays: :func:`torch_state`) loaded when given."""
        opt = make_optimizer(params, cfg)
        if state is not None:
            opt.load_state_dict(torch_state(state))
        return opt

    @staticmethod
    def fast_step(opt, l2=()):
        """(:func:`fast_step`'s step, whether it takes the L2 term's ``decay`` as its argument: the fused Adam
        adds it to the gradients of ``l2`` as it reads them; ``opt.step`` takes no argument)."""
        step = fast_step(opt, l2)
        return step, isinstance(step, _FusedAdamStep)

    @staticmethod
    def in_parts(cfg: TrainConfig) -> bool:
        """:func:`steps_in_parts`: whether ranks may step parts of the parameters (:meth:`part_step`)."""
        return steps_in_parts(cfg)

    @staticmethod
    def part_step(opt, lo, hi, l2=()):
        """:class:`AdamPartStep`: ``opt``'s step on the range ``[lo, hi)`` of the flat parameters."""
        return AdamPartStep(opt, lo, hi, l2=l2)

    @staticmethod
    def zero_state(opt, moments=None) -> None:
        """:func:`adam_zero_state`."""
        adam_zero_state(opt, moments)

    @staticmethod
    def epochs(step, cfg: TrainConfig, opt, monitor: Monitor, **kwargs) -> TrainResult:
        """:func:`run_epochs`."""
        return run_epochs(step, cfg, opt, monitor, **kwargs)

    @staticmethod
    def epoch_run(cfg: TrainConfig, opt, monitor: Monitor, **kwargs) -> EpochRun:
        """:class:`EpochRun`: one run's epoch ends, for :meth:`epochs_together`."""
        return EpochRun(cfg, opt, monitor, **kwargs)

    @staticmethod
    def epochs_together(step, runs, epoch0: int = 0) -> list:
        """:func:`run_epochs_together`."""
        return run_epochs_together(step, runs, epoch0)

    @staticmethod
    def result(**fields) -> TrainResult:
        """A :class:`TrainResult` of ``fields`` (a run resumed after its last epoch)."""
        return TrainResult(**fields)


#: What the engine's ddp rank loop is given (:class:`TorchTraining`).
TRAINING = TorchTraining()


def _grads_into(params, g):
    pos = 0
    for p in params:
        n = p.numel()
        p.grad = g[pos : pos + n].view_as(p).to(p.dtype)
        pos += n


def train_rounds(evaluator, spec: M.MLPSpec, w0: np.ndarray, cfg: TrainConfig, monitor: Monitor, opt_state=None,
               report=None, callbacks=()) -> TrainResult:
    """The rounds strategy: the optimizer on the client, one engine round per global batch.

    ``evaluator(kernel, *args)`` sums a kernel over the shards (see
    :class:`~dask_estimators.engine.DistributedEvaluator`).
    """
    module = spec.build("cpu", torch.float64)
    params = list(module.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(w0, dtype=torch.float64), params)
    opt = make_optimizer(params, cfg)
    if opt_state is not None:
        opt.load_state_dict(torch_state(opt_state))
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
        batch_loss = spec.loss_scale * loss / sw + 0.5 * cfg.alpha * float(wm @ wm) / sw  # inf, NaN: see run_epochs
        _grads_into(params, g)
        opt.step()
        return batch_loss * n

    def validate():
        return M.validation_score(spec, evaluator(M.validation_stats, flat().numpy(), spec))

    out = run_epochs(step, cfg, opt, monitor, validate=validate, params=lambda: flat().numpy().copy(),
                     report=report, callbacks=callbacks)
    out.w, out.opt_state = flat().numpy().copy(), opt.state_dict()
    return out


def minimize_lbfgs(evaluator, spec: M.MLPSpec, w0: np.ndarray, *, alpha, max_iter, max_fun, tol, report=None):
    """Full-batch L-BFGS-B (scipy), one engine round per evaluation, as scikit-learn's ``solver="lbfgs"``.

    ``spec.loss_scale`` multiplies the data term of the value, not of the gradient, as scikit-learn's does for
    the squared error of several outputs (its value is the mean over the outputs, its gradient that of the
    sum): the same pair goes to L-BFGS-B, so the iterations are scikit-learn's.
    """
    from scipy import optimize

    mask = spec.penalty_mask()
    state = {"sw": None}

    def fun(w):
        loss, g, sw, _ = evaluator(M.value_grad, w, spec, None)
        wm = w * mask
        # inf or NaN: L-BFGS-B backtracks or stops, as in sklearn
        f = spec.loss_scale * loss / sw + 0.5 * alpha * float(wm @ wm) / sw
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
