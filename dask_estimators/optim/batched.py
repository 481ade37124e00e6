"""Lockstep driver: several L-BFGS runs whose evaluations share one distributed round.

Cross-validation fits one model per split on the same shards.  Each
evaluation of a linear model reads all of X once (memory-bound), so
evaluating the splits' models one by one reads X once per split.  Here each
run is the registered ``"lbfgs"`` solver of :mod:`.scipy_driver`, unchanged,
in a thread of its own; its objective is a stand-in whose ``fun_and_grad``
posts the point and waits.  When every still-running solver has posted, one
round evaluates all the posted points at once (``batch(indices, points)``,
one pass over X for all of them), and each solver gets its own value and
gradient back.  So every run keeps its own line search, its own stopping
test and its own iterates, those it would take alone; a run that has
converged drops out and the others go on without waiting for it.  Requests
other than ``fun_and_grad`` (the dense Hessian of a Newton polish) are served
one by one by the run's own objective, in the same lockstep.

Only one thread at a time talks to the cluster: the one that completes a
round runs it.  Nothing here knows Dask.
"""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .scipy_driver import minimize

__all__ = ["Lockstep", "minimize_lockstep", "minimize_many"]


class _Raised:
    def __init__(self, exc):
        self.exc = exc


class Lockstep:
    """Collects the runs' requests; when every active run has one, serves them in one round.

    Parameters
    ----------
    objectives : list
        Each run's own objective (``fun_and_grad``, ``hess``, ``hessp``,
        ``finish(w, loss, grad)``, ``l1``, ``penalized``, ``n_params``).
    batch : callable
        ``batch(indices, points) -> (losses, grads)``: the raw sums of the
        runs ``indices`` at ``points`` (shape (m, n_params)), in one round.
    """

    def __init__(self, objectives, batch):
        self.objectives = list(objectives)
        self.batch = batch
        self.active = set(range(len(self.objectives)))
        self.pending: dict = {}
        self.results: dict = {}
        self.rounds = 0
        self._cond = threading.Condition()

    def call(self, i, kind, *args):
        """Run ``i``'s request; returns when its round is done."""
        with self._cond:
            self.pending[i] = (kind, args)
            self._maybe_serve()
            while i not in self.results:
                self._cond.wait()
            out = self.results.pop(i)
        if isinstance(out, _Raised):
            raise out.exc
        return out

    def done(self, i):
        """Run ``i`` has ended: the others no longer wait for it."""
        with self._cond:
            self.active.discard(i)
            self._maybe_serve()

    def _maybe_serve(self):
        if not self.pending or len(self.pending) < len(self.active):
            return
        pending, self.pending = self.pending, {}
        evals = sorted(i for i, (kind, _) in pending.items() if kind == "fun_and_grad")
        try:
            if evals:
                points = np.stack([np.asarray(pending[i][1][0], dtype=np.float64) for i in evals])
                losses, grads = self.batch(evals, points)
                self.rounds += 1
                for j, i in enumerate(evals):
                    self.results[i] = self.objectives[i].finish(points[j], float(losses[j]), np.asarray(grads[j]))
        except BaseException as e:  # every run of the round gets the error
            for i in evals:
                self.results[i] = _Raised(e)
        for i, (kind, args) in pending.items():
            if kind == "fun_and_grad":
                continue
            try:
                self.results[i] = getattr(self.objectives[i], kind)(*args)
            except BaseException as e:
                self.results[i] = _Raised(e)
        self._cond.notify_all()


class _Proxy:
    """Run ``i``'s objective as its solver sees it: every request goes through the lockstep."""

    def __init__(self, lockstep, i):
        obj = lockstep.objectives[i]
        self._lockstep, self._i = lockstep, i
        self.l1, self.l2, self.penalized, self.n_params = obj.l1, obj.l2, obj.penalized, obj.n_params
        # what the Newton solvers and the bounds of L-BFGS-B read, where the objective has it
        # and what solving in centred variables needs (scipy_driver._centred): the run's mean rows, found once
        for name in ("newton_fixed", "quadratic", "positive", "spec", "sw_sum", "centre_intercepts", "_row_means"):
            if hasattr(obj, name):
                setattr(self, name, getattr(obj, name))

    def fun_and_grad(self, w):
        return self._lockstep.call(self._i, "fun_and_grad", np.array(w, dtype=np.float64))

    def hessp(self, w, p):
        return self._lockstep.call(self._i, "hessp", np.array(w, dtype=np.float64), np.array(p, dtype=np.float64))

    def hess(self, w):
        return self._lockstep.call(self._i, "hess", np.array(w, dtype=np.float64))


def minimize_lockstep(objectives, batch, x0s, *, solver="lbfgs", tol=1e-4, max_iter=100, warn=True, on_done=None):
    """Minimise every objective from its ``x0s[i]`` with ``solver``, their evaluations in shared rounds.

    ``solver``, ``tol`` and ``max_iter`` are each one value for every run or
    a sequence of one per run.  ``on_done(i)``, if given, is called (in the
    run's thread) as each run ends.  Returns the list of :class:`scipy.optimize.OptimizeResult`, one per
    objective, and raises the first run's error if any failed.  The runs' ``ConvergenceWarning`` (``warn``)
    are raised here, in the caller's thread, once every run has ended: a warning raised in a run's own
    thread would point into the thread pool.

    Examples
    --------
    >>> import numpy as np
    >>> class Quad:  # f(w) = |w - c|^2 / 2
    ...     l1, l2, n_params = 0.0, 0.0, 2
    ...     penalized = np.ones(2, dtype=bool)
    ...     def __init__(self, c): self.c = np.asarray(c, dtype=float)
    ...     def finish(self, w, loss, grad): return loss, grad
    >>> objs = [Quad([1.0, 2.0]), Quad([-3.0, 0.5])]
    >>> def batch(idx, W):
    ...     r = W - np.stack([objs[i].c for i in idx])
    ...     return 0.5 * (r * r).sum(1), r
    >>> res = minimize_lockstep(objs, batch, np.zeros((2, 2)), solver="lbfgs", tol=1e-10)
    >>> [np.round(r.x, 6).tolist() for r in res]
    [[1.0, 2.0], [-3.0, 0.5]]
    """
    lock = Lockstep(objectives, batch)
    n = len(lock.objectives)
    results: list = [None] * n
    errors: list = [None] * n

    def per_run(value):
        return list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * n

    solvers, tols, max_iters = per_run(solver), per_run(tol), per_run(max_iter)
    caught = [[] for _ in range(n)]

    def run(i):
        try:
            results[i] = minimize(_Proxy(lock, i), x0s[i], solver=solvers[i], tol=tols[i], max_iter=max_iters[i],
                                  warn=caught[i] if warn else False)
        except BaseException as e:
            errors[i] = e
        finally:
            lock.done(i)
            if on_done is not None:
                on_done(i)

    if n == 1:
        run(0)
    else:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(run, range(n)))
    for e in errors:
        if e is not None:
            raise e
    for category, message in (w for run_caught in caught for w in run_caught):
        warnings.warn(message, category, stacklevel=2)
    for r in results:
        r.lockstep_rounds = lock.rounds
    return results


def minimize_many(evaluator, spec, folds, objectives, x0s, *, solver="lbfgs", tol=1e-4, max_iter=100, on_done=None):
    """:func:`minimize_lockstep` for the cross-validation splits ``folds`` of a linear model (L-BFGS by default).

    A split may appear more than once (several models on its rows, such as
    the candidates of a grid search); ``solver``, ``tol`` and ``max_iter``
    may be given per run, and ``on_done`` is :func:`minimize_lockstep`'s.

    ``evaluator(kernel, *args)`` runs a kernel on the shards (an engine
    evaluator); one round evaluates every waiting split with
    :func:`~dask_estimators.objectives.cv.fold_value_grad_many`.
    """
    from ..objectives.cv import fold_value_grad_many
    from .scipy_driver import CENTRED_SOLVERS

    folds = list(folds)
    solvers = list(solver) if isinstance(solver, (list, tuple)) else [solver] * len(objectives)
    for obj, name in zip(objectives, solvers):  # the splits' mean rows, where a run solves centred: found here,
        finder = getattr(obj, "_row_means_from", None)  # in one round, not in the runs' threads
        if name in CENTRED_SOLVERS and finder is not None and "_row_means" not in obj.__dict__:
            obj._row_means = finder(obj)

    def batch(idx, points):
        losses, grads = evaluator(fold_value_grad_many, [folds[i] for i in idx], points, spec)
        return np.atleast_1d(losses), np.atleast_2d(grads)

    return minimize_lockstep(objectives, batch, x0s, solver=solver, tol=tol, max_iter=max_iter, on_done=on_done)
