"""Callbacks for the networks' training, as objects: ``MLPClassifier(callbacks=[EarlyStopping(patience=3)])``.

The MLPs and ``CharLSTM`` take them (``callbacks=``), with either strategy.

A callback gets ``on_train_begin`` once, ``on_epoch_end(history)`` after
every epoch (``history`` is the list of the epochs' records so far, the same
dicts as the fitted ``history_``), and ``on_train_end(history)``.  Where it
runs depends on what it does:

* **In the training loop** (the default): with ``strategy="rounds"`` on the
  client, with ``strategy="ddp"`` on every worker's rank.  Every rank sees the
  same losses and validation scores (they are summed over the ranks), so
  every rank takes the same decisions.  These callbacks may stop the
  training (``on_epoch_end`` returns True) and see the optimizer
  (``optimizer=`` in ``on_train_begin``).  They are pickled to the workers:
  decide from ``epoch``, ``loss`` and ``validation_score``, not from
  ``seconds``, which differ between ranks.
* **On the client** (``on_client = True``): files, bars, logs.  They get the
  records as they arrive from rank 0 and cannot stop the training.

scikit-learn's own parameters work through the same objects: ``tol`` with
``n_iter_no_change`` (and ``early_stopping``) is an :class:`EarlyStopping`
on the loss (or the validation score) that the estimator adds first,
``verbose`` a :class:`PrintLog` and ``progress=True`` a :class:`ProgressBar`.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

__all__ = ["Callback", "EarlyStopping", "LRScheduler", "Checkpoint", "ProgressBar", "PrintLog"]


class Callback:
    """The base class: every hook does nothing.

    Attributes
    ----------
    on_client : bool
        Run on the client from the epochs' records (True), or in the training
        loop (False, the default; see the module's description).
    needs_params : bool
        A client callback that reads the parameters: each record then also
        carries ``"params"``, the flat float64 parameters after that epoch.
    """

    on_client = False
    needs_params = False

    def on_train_begin(self, **info):
        """Called once before the first epoch.

        In the loop ``info`` has ``optimizer`` (the ``torch.optim`` optimizer);
        on the client ``spec`` (the network's architecture).
        """

    def on_epoch_end(self, history, **info):
        """Called after each epoch with the records so far; a loop callback returns True to stop the training."""

    def on_train_end(self, history):
        """Called once after the last epoch (loop callbacks: before they travel back from a rank)."""


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``tol`` for more than ``patience`` epochs (scikit-learn's rule).

    Parameters
    ----------
    monitor : {"loss", "validation_score"}, default="loss"
        The training loss (improves downward), or the score on the held-out
        validation rows (improves upward; needs ``early_stopping=True``, which
        sets those rows apart).
    tol : float, default=1e-4
        The least change that counts as an improvement.
    patience : int or inf, default=10
        Epochs without improvement tolerated: the training stops on the
        epoch that makes it ``patience + 1`` (never with ``math.inf``).
    restore_best : bool, default=True
        With ``monitor="validation_score"``, the fit ends with the parameters
        of the best epoch (as scikit-learn's ``early_stopping``).

    Attributes
    ----------
    best_loss, best_validation_score : float
    no_improvement_count : int
    best_params : ndarray or None
    loss_curve, validation_scores : list of float

    Examples
    --------
    >>> stop = EarlyStopping(tol=0.1, patience=1)
    >>> history = []
    >>> for epoch, loss in enumerate([1.0, 0.5, 0.45, 0.44], 1):
    ...     history.append({"epoch": epoch, "loss": loss, "validation_score": None})
    ...     if stop.on_epoch_end(history):
    ...         break
    >>> epoch
    4
    """

    def __init__(self, monitor="loss", tol=1e-4, patience=10, restore_best=True):
        if monitor not in ("loss", "validation_score"):
            raise ValueError(f"monitor must be 'loss' or 'validation_score', got {monitor!r}.")
        self.monitor, self.tol, self.restore_best = monitor, float(tol), restore_best
        self.patience = patience if patience == math.inf else int(patience)  # inf: never stop
        self.loss_curve, self.validation_scores = [], []
        self.best_loss, self.best_validation_score = math.inf, -math.inf
        self.no_improvement_count = 0
        self.best_params = None

    def __deepcopy__(self, memo):
        # the curves are lists of floats, one entry per epoch: copied as lists (a ddp rank keeps a copy of its
        # stopping rule at every epoch's end, where an element-wise deep copy made a long run quadratic)
        import copy

        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = list(v) if k in ("loss_curve", "validation_scores") else copy.deepcopy(v, memo)
        return new

    @property
    def early_stopping(self) -> bool:
        """Whether it watches the validation score."""
        return self.monitor == "validation_score"

    def update(self, loss: float, score, params) -> None:
        """Count the epoch's improvement (``params()`` is read when the score is the best so far)."""
        self.loss_curve.append(float(loss))
        if self.early_stopping:
            if score is None:
                raise ValueError("EarlyStopping(monitor='validation_score') needs a validation set: set "
                                 "early_stopping=True on the estimator (validation_fraction of the rows).")
            self.validation_scores.append(float(score))
            if score < self.best_validation_score + self.tol:
                self.no_improvement_count += 1
            else:
                self.no_improvement_count = 0
            if score > self.best_validation_score:
                self.best_validation_score = float(score)
                if self.restore_best and params is not None:
                    self.best_params = params()
        else:
            if loss > self.best_loss - self.tol:
                self.no_improvement_count += 1
            else:
                self.no_improvement_count = 0
            if loss < self.best_loss:
                self.best_loss = float(loss)

    def plateau(self) -> bool:
        """Whether the count has passed ``patience``."""
        return self.no_improvement_count > self.patience

    def on_epoch_end(self, history, params=None, **info):
        rec = history[-1]
        self.update(rec["loss"], rec.get("validation_score"), params)
        return self.plateau()


class LRScheduler(Callback):
    """A ``torch.optim.lr_scheduler`` stepped once per epoch: ``LRScheduler("StepLR", step_size=5, gamma=0.5)``.

    Parameters
    ----------
    policy : str or type
        A scheduler class of ``torch.optim.lr_scheduler``, or its name.
    **kwargs
        Its arguments (the optimizer is given).

    Examples
    --------
    >>> import torch
    >>> sched = LRScheduler("StepLR", step_size=1, gamma=0.5)
    >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched.on_train_begin(optimizer=opt)
    >>> sched.on_epoch_end([{"epoch": 1, "loss": 0.0}])
    >>> opt.param_groups[0]["lr"]
    0.5
    """

    def __init__(self, policy, **kwargs):
        self.policy, self.kwargs = policy, kwargs
        self._scheduler = None
        self._state = None  # a copy taken mid-run (a ddp rank's checkpoint) carries its scheduler's state

    def on_train_begin(self, optimizer=None, **info):
        import torch

        cls = getattr(torch.optim.lr_scheduler, self.policy) if isinstance(self.policy, str) else self.policy
        self._scheduler = cls(optimizer, **self.kwargs)
        if getattr(self, "_state", None) is not None:  # a run resumed from a checkpoint goes on with the schedule
            self._scheduler.load_state_dict(self._state)
            for group, lr in zip(optimizer.param_groups, self._scheduler.get_last_lr()):
                group["lr"] = lr  # a new scheduler's first step set the initial rate

    def on_epoch_end(self, history, **info):
        # the epoch's steps were taken, but not always through optimizer.step() (a rank's loop may update the
        # parameters itself): torch would then warn that the schedule stepped before the optimizer did
        self._scheduler.optimizer._opt_called = True
        self._scheduler.step()

    def on_train_end(self, history):
        self._scheduler = self._state = None  # holds the optimizer: not sent back from a rank

    def __getstate__(self):
        state = getattr(self, "_state", None) if self._scheduler is None else self._scheduler.state_dict()
        return {**self.__dict__, "_scheduler": None, "_state": state}


class Checkpoint(Callback):
    """Write the parameters of the best epoch so far to ``path`` (an ``.npz`` file), on the client.

    The file holds ``epoch``, ``loss``, ``validation_score`` (NaN without
    one) and the network's layers as ``coefs_0, ..., intercepts_0, ...``:
    what ``coefs_`` and ``intercepts_`` would be (float64).  It is written
    to a temporary name and renamed, so a reader never sees half a file.

    Parameters
    ----------
    path : str or os.PathLike
    monitor : {"loss", "validation_score"}, default="loss"
        Which record decides "best" (lowest loss, highest score).
    """

    on_client = True
    needs_params = True

    def __init__(self, path, monitor="loss"):
        if monitor not in ("loss", "validation_score"):
            raise ValueError(f"monitor must be 'loss' or 'validation_score', got {monitor!r}.")
        self.path, self.monitor = path, monitor
        self._best, self._spec = None, None
        self.saved_epochs = []

    def on_train_begin(self, spec=None, **info):
        self._spec, self._best = spec, None

    def on_epoch_end(self, history, **info):
        rec = history[-1]
        value = rec.get(self.monitor)
        if value is None or not math.isfinite(value):
            return
        key = -value if self.monitor == "loss" else value
        if self._best is not None and key <= self._best:
            return
        self._best = key
        from .objectives import module as M

        w = np.frombuffer(rec["params"], dtype=np.float64)
        coefs, intercepts = M.unflatten(self._spec, w)
        arrays = {f"coefs_{i}": c for i, c in enumerate(coefs)}
        arrays.update({f"intercepts_{i}": b for i, b in enumerate(intercepts)})
        score = rec.get("validation_score")
        tmp = f"{os.fspath(self.path)}.tmp.npz"
        np.savez(tmp, epoch=rec["epoch"], loss=rec["loss"], validation_score=np.nan if score is None else score,
                 **arrays)
        os.replace(tmp, self.path)
        self.saved_epochs.append(rec["epoch"])


class ProgressBar(Callback):
    """A tqdm bar of the epochs on stderr (needs tqdm); ``progress=True`` adds one."""

    on_client = True

    def __init__(self, total=None, desc="training"):
        self.total, self.desc = total, desc
        self._bar = None

    def on_train_begin(self, total=None, desc=None, **info):
        from ._progress import progress_bar

        self._bar = progress_bar(self.total or total, desc or self.desc, "epoch")

    def on_epoch_end(self, history, **info):
        if self._bar is None:
            return
        self._bar.update(1)
        self._bar.set_postfix(loss=f"{history[-1]['loss']:.5f}", refresh=False)

    def write(self, line):
        """Print ``line`` above the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def on_train_end(self, history):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class PrintLog(Callback):
    """One line per epoch on stdout, scikit-learn's ``verbose`` format: ``Iteration 3, loss = 0.41...``."""

    on_client = True

    def __init__(self, bar=None):
        self.bar = bar  # a ProgressBar to print above, if any

    def on_epoch_end(self, history, **info):
        rec = history[-1]
        line = f"Iteration {rec['epoch']}, loss = {rec['loss']:.8f}"
        if rec.get("validation_score") is not None:
            line += f", validation score = {rec['validation_score']:.6f}"
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)
