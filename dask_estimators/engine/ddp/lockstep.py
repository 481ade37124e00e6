"""Networks trained in lockstep on one worker: a search's candidates on one split, each step's batch read once.

A search over networks (``dask_estimators.model_selection``) fits many
candidates on the same split's rows.  Each is a small network, whose ddp fit
on several workers spends much of a step waiting for the others (the
allreduce) and in the optimizer.  Here one task on one worker trains a group
of candidates that take the same batches (the same seed, batch size,
shuffling and validation rows): each step gathers the batch's rows once,
and every candidate still running takes its gradient on them and steps its
own optimizer (its own rate, penalty and state).  Each candidate ends at
its own epoch, by its own stopping rules.

The numbers are those of a ddp fit of the candidate alone on one worker
holding the split's rows: the same shard (the split's rows copied from the
worker's whole X), the same preparation, batches, steps and epoch ends.
The epochs and optimizers come in as the ``training`` argument, as for
:func:`~.train.ddp_rank` (the engine imports no optimizer).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ... import _torch_api
from ...objectives import module as M
from .train import _numpy_state, _owned, leaf_views

__all__ = ["train_lockstep"]


class _Run:
    """A member's flat parameters and gradient, its optimizer on views of them, and its step."""

    def __init__(self, member, dev, training):
        spec, cfg = member.spec, member.cfg
        self.spec, self.cfg = spec, cfg
        self.w = torch.tensor(member.w0, dtype=spec.torch_dtype, device=dev)
        self.g = torch.zeros_like(self.w)
        self.params = leaf_views(self.w, self.g, [p.shape for p in spec.build("meta").parameters()])
        self.opt = training.optimizer(self.params, cfg)
        weights = [p for p, keep in zip(self.params, spec.weight_flags()) if keep]
        self.w_det = [p.detach() for p in weights]
        self.w_flat = [v.view(-1) for v in self.w_det]
        self.l2_grads = [p.grad for p in weights]
        self.step_opt, self.l2_in_step = training.fast_step(self.opt, l2=weights)
        self.work = {}  # the activations kept between steps

    def step(self, X, y, sw, n_b, w_b, add_):
        """This member's step on the batch (X, y, sw) of ``n_b`` rows and weight ``w_b``: its part of the epoch's
        loss sum, as a ddp rank's step on one worker."""
        alpha = self.cfg.alpha
        l2_value = 0.5 * alpha * sum(float(torch.dot(v, v)) for v in self.w_flat) / w_b if alpha else 0.0
        loss = float(self.spec.loss_grad_(self.w, X, y, sw, self.g, 1.0 / w_b, self.work))
        part = loss / w_b * self.spec.loss_scale
        decay = alpha / w_b if self.w_det and alpha else 0.0
        if decay and not self.l2_in_step:
            add_(self.l2_grads, self.w_det, decay)
        if self.l2_in_step:
            self.step_opt(decay)
        else:
            self.step_opt()
        return (part + l2_value) * n_b

    def flat(self) -> np.ndarray:
        return self.w.detach().to("cpu", torch.float64).numpy().copy()


def train_lockstep(shard, rows, y, sample_weight, members, training, device="cpu", through=None):
    """Task body: train ``members`` (the optimizer layer's ``LockstepMember``: a network, its starting point,
    configuration and stopping rule, and the batches it takes) in lockstep on the rows ``rows`` of this worker's
    X, with their targets ``y`` and weights ``sample_weight`` (None: unweighted), as given for those rows.

    ``shard`` holds the whole X (:meth:`~dask_estimators.session.DataSession.replicas`); the split's rows are
    copied into a shard of their own on ``device``, prepared for the first member's network
    (:func:`~dask_estimators.objectives.module.prepare`: targets encoded) and given its ``order``
    (:func:`~dask_estimators.objectives.module.set_batch_order`: the validation rows held out, the batches).
    ``training`` is the optimizer layer's (:data:`~dask_estimators.optim.torch_driver.TRAINING`).  Returns
    each member's result, in order: ``training.result``'s fields with ``w`` (the flat parameters, in the
    network's dtype) and ``opt_state`` as NumPy.  ``through``: a fitted transformer (a pipeline's scaler) whose
    ``transform`` makes the split's rows what the members see, or None.
    """
    from ..data._worker import Shard, setup_threads

    setup_threads()
    members = list(members)
    first = members[0]
    if any(m.batches() != first.batches() for m in members[1:]):
        raise ValueError("The members of a lockstep group take the same batches: they must share the batch size, "
                         "validation rows, seed, shuffling, steps, epochs so far, output and dtype.")
    cfg0 = first.cfg
    rows = np.asarray(rows, dtype=np.int64)
    X = shard.host("X")
    if X is not None:
        X = np.take(X, rows, axis=0)
        if through is not None:
            X = through.transform(X)
    else:  # on a GPU
        X = shard.get("X")
        X = torch.index_select(X, 0, torch.as_tensor(rows, device=X.device))
        if through is not None:
            X = torch.as_tensor(through.transform(X.cpu().numpy()), device=X.device)
    arrays = {"X": X, "y": y, "sample_weight": sample_weight}
    fold = Shard({k: v for k, v in arrays.items() if v is not None}, device=device)
    counts = M.prepare(fold, first.spec, 0)
    # the split's validation rows and batches, the members' fits' alone
    counts = M.set_batch_order(fold, first.order) or counts
    if counts["n_train"] != cfg0.n_train:
        raise ValueError(f"The split holds {counts['n_train']} training rows, not the {cfg0.n_train} its "
                         "configuration was made for.")
    dev = fold.device
    runs = [_Run(m, dev, training) for m in members]
    add_ = _torch_api.foreach_add_fn()
    Xs, ys, sws = fold.get("X"), fold.get("y"), fold.get("sample_weight")
    epoch_rows = {}
    batches = {}  # rows -> the batch's X, y and weights: kept tensors, gathered into once a step for every member

    def gather(idx):
        n = int(idx.shape[0])
        if n not in batches:
            batches[n] = tuple(None if a is None else torch.empty((n, *a.shape[1:]), dtype=a.dtype, device=a.device)
                               for a in (Xs, ys, sws))
        for a, out in zip((Xs, ys, sws), batches[n]):
            if a is not None:
                torch.index_select(a, 0, idx, out=out)
        return batches[n]

    def step(epoch, k, active):
        if k == 0:  # the epoch's batches: their rows, sizes and weights, worked out once
            epoch_rows.clear()
            for j in range(cfg0.n_steps):
                idx = M.batch_rows(fold, (cfg0.seed, epoch, j, cfg0.n_steps, cfg0.shuffle))
                w_b = float(idx.numel()) if sws is None else float(sws[idx].sum())
                epoch_rows[j] = (idx, float(idx.numel()), w_b)
        idx, n_b, w_b = epoch_rows[k]
        Xb, yb, swb = gather(idx)
        return [runs[i].step(Xb, yb, swb, n_b, w_b, add_) for i in active]

    def validator(run):
        return lambda: M.validation_score(run.spec, M.validation_stats(fold, run.w, run.spec).cpu().numpy())

    epoch_runs = [training.epoch_run(r.cfg, r.opt, m.monitor, validate=validator(r), params=r.flat)
                  for r, m in zip(runs, members)]
    t0 = time.perf_counter()
    results = training.epochs_together(step, epoch_runs, cfg0.epoch0)
    seconds = time.perf_counter() - t0
    out = []
    for r, res in zip(runs, results):
        res.w, res.opt_state = r.w.detach().to("cpu").numpy(), _numpy_state(r.opt)
        res.info["lockstep"] = {"lockstep_members": len(members), "lockstep_seconds": seconds,
                                "kernel": M.loss_grad_kernel(Xs)}
        out.append(_owned(res))
    return out
