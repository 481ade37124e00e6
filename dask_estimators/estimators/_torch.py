"""What every torch estimator shares: which strategy, the callbacks split, live progress."""

from __future__ import annotations

import sys
import warnings

__all__ = [
    "RENAMED_STRATEGIES",
    "STRATEGIES",
    "Progress",
    "renamed_strategy",
    "resolve_strategy",
    "split_callbacks",
    "strategy_constraint",
]

STRATEGIES = ("auto", "rounds", "ddp")

#: Old names of strategies, still accepted with a FutureWarning: {old name: (new name, renamed in, removed in)}.
RENAMED_STRATEGIES = {"tree": ("rounds", "0.2.0", "0.4.0")}


def strategy_constraint():
    """The ``strategy`` parameter's constraint for ``_parameter_constraints``: the strategies, and the old names
    (shown as deprecated in scikit-learn's error message)."""
    from sklearn.utils._param_validation import StrOptions

    return StrOptions({*STRATEGIES, *RENAMED_STRATEGIES}, deprecated=set(RENAMED_STRATEGIES))


def _user_stacklevel() -> int:
    """:func:`warnings.warn`'s ``stacklevel`` for the first caller (of the function calling this one) outside
    dask_estimators and scikit-learn's wrappers: a warning points at the user's ``fit``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in ("dask_estimators", "sklearn"):
        frame, level = frame.f_back, level + 1
    return level


def renamed_strategy(strategy: str) -> str:
    """``strategy`` under its current name; an old name (:data:`RENAMED_STRATEGIES`) gives a FutureWarning.

    Examples
    --------
    >>> import warnings
    >>> from dask_estimators.estimators._torch import renamed_strategy
    >>> renamed_strategy("ddp")
    'ddp'
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     renamed_strategy("tree")
    'rounds'
    >>> print(caught[0].message)
    strategy='tree' was renamed strategy='rounds' in 0.2.0 and will be removed in 0.4.0; use strategy='rounds'.
    """
    if strategy not in RENAMED_STRATEGIES:
        return strategy
    new, since, until = RENAMED_STRATEGIES[strategy]
    warnings.warn(
        f"strategy={strategy!r} was renamed strategy={new!r} in {since} and will be removed in {until}; "
        f"use strategy={new!r}.",
        FutureWarning,
        stacklevel=_user_stacklevel(),
    )
    return new


def resolve_strategy(strategy: str) -> str:
    """The strategy a fit runs: ``"auto"`` is "ddp" for minibatch training, on any cluster (one rank per worker
    process); an old name (``"tree"``) gives a FutureWarning and its new one (:func:`renamed_strategy`).

    ``"rounds"`` takes one engine round per batch, far slower for minibatches
    (docs/solvers.md); it serves full-batch L-BFGS, which the MLPs choose
    themselves.
    """
    strategy = renamed_strategy(strategy)
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
