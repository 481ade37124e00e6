"""What every torch estimator shares: which strategy, the callbacks split, live progress."""

from __future__ import annotations

__all__ = ["STRATEGIES", "Progress", "resolve_strategy", "split_callbacks"]

STRATEGIES = ("auto", "tree", "ddp")


def resolve_strategy(strategy: str) -> str:
    """``"auto"``: "ddp" for minibatch training, on any cluster (one rank per worker process).

    ``"tree"`` takes one engine round per batch, far slower for minibatches
    (docs/solvers.md); it serves full-batch L-BFGS, which the MLPs choose
    themselves.
    """
    return "ddp" if strategy == "auto" else strategy


def split_callbacks(callbacks):
    """(loop callbacks, client callbacks) of an estimator's ``callbacks``, checked to be Callback instances."""
    from ..callbacks import Callback

    loop, client = [], []
    for cb in callbacks or ():
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be dask_estimators.callbacks.Callback instances, got {cb!r}.")
        (client if cb.on_client else loop).append(cb)
    return loop, client


class Progress:
    """The client's side of a run: the records as they arrive (``history_``), given to the client callbacks.

    ``verbose`` adds a :class:`~dask_estimators.callbacks.PrintLog` and
    ``progress`` a :class:`~dask_estimators.callbacks.ProgressBar` (counting
    to ``total``).  The last record each callback sees carries the epoch's
    parameters where the run sends them (a callback that ``needs_params``).
    """

    def __init__(self, verbose, total, desc, progress=False, callbacks=(), spec=None):
        from ..callbacks import PrintLog, ProgressBar

        self.records = []
        bar = ProgressBar(total, desc) if progress else None
        self.client = ([bar] if bar is not None else []) + ([PrintLog(bar)] if verbose else []) + list(callbacks)
        for cb in self.client:
            cb.on_train_begin(spec=spec, total=total, desc=desc)

    def __call__(self, rec):
        self.records.append({k: v for k, v in rec.items() if k != "params"})
        view = self.records[:-1] + [rec]  # the last record as sent: with its parameters where asked for
        for cb in self.client:
            cb.on_epoch_end(view)

    @property
    def listening(self) -> bool:
        """Whether any client callback (a bar, the verbose log, the user's) takes the records as they come."""
        return bool(self.client)

    def keep(self, n):
        """A ddp run resumes after its ``n``-th epoch: the records after it will come again."""
        del self.records[n:]

    def close(self):
        for cb in self.client:
            cb.on_train_end(self.records)
        self.client = []
