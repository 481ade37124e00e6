"""The splits' regularisation paths of a cross-validated search, over any evaluator.

A search (:mod:`dask_estimators.estimators.cv`) fits, for every split and
every grid point, the model on the split's training rows, each fit
warm-started from the one before on its path, and sums each fit's held-out
losses.  Everything here goes through ``evaluate(kernel, *args)``: a
distributed evaluator (one round per evaluation) or, for a small search, a
``LocalEvaluator`` of the one shard, with the whole of :func:`paths_and_heldout`
in one task on its worker (:func:`~dask_estimators.engine.solve_on_shard`).
So this module imports neither scikit-learn nor Dask: a worker never imports
scikit-learn for it (a worker's first search would pay for that import:
benchmarks/results/history/small-linear-fits.md).
"""

from __future__ import annotations

import numpy as np

from ..objectives import cv as CV
from ..objectives.linear import LinearObjective
from .batched import minimize_many
from .scipy_driver import minimize

__all__ = ["FoldProblem", "Penalties", "fold_paths", "independent_fits", "paths_and_heldout"]

#: :meth:`FoldProblem.share_quadratic_hessians` up to this many parameters (each split's Hessian comes back
#: from every worker: n_splits * n_params**2 float64 values).
SHARED_HESSIAN_MAX_PARAMS = 1000

#: At most this many runs share one lockstep (each round's pass holds an (n_rows, runs) product per shard).
LOCKSTEP_MAX_RUNS = 64


class FoldProblem:
    """One search's splits over ``evaluate``: each split's objective and its held-out sums.

    ``sums``: the weight sums (:func:`~dask_estimators.objectives.cv.prepare`
    summed over the shards), all rows' first and then each split's training
    rows'.
    """

    def __init__(self, evaluate, spec, sums, n_splits):
        self.evaluate, self.spec = evaluate, spec
        self.full_sums, self.fold_sums = sums[0], sums[1:]
        self.n_splits = n_splits
        self._hessians = {}  # a quadratic's Hessian of each split's rows, shared by its fits (forget_hessians)
        self._row_sums = {}  # fold_row_sums, summed over the shards, once needed (forget_hessians)

    def objective(self, k) -> LinearObjective:
        """The normalised objective of split k's training rows (k None: all rows); penalties set by the caller.

        The objectives of one split share its :attr:`~dask_estimators.objectives.linear.LinearObjective.hessian_cache`.
        With an intercept, its L-BFGS and Newton-CG fits solve in centred variables where a column lies far
        from zero, the intercepts measured at the split's mean row (:meth:`row_means`), as an estimator's own fit
        does: there they take a fraction of the iterations.  A path solved on one worker and one solved in
        rounds centre alike.
        """
        if k is None:
            obj = LinearObjective(self.evaluate, self.spec, weight_sums=tuple(self.full_sums))
        else:
            obj = LinearObjective(_OnFold(self.evaluate, k), self.spec, weight_sums=tuple(self.fold_sums[k]))
        obj.hessian_cache = self._hessians.setdefault(k, {})
        if self.spec.fit_intercept:
            obj.centre_intercepts = True
            obj._row_means_from = _SplitMeans(self._row_sums, k)  # every split's at once, at the first need
        return obj

    def row_means(self, k):
        """Split k's mean row of its training rows (k None: of all rows), weighted by the training weights, as
        its models see the rows: (n_outputs, n_features); None where its fits keep the stored variables
        (:class:`_SplitMeans`).  Every split's from one round
        (:func:`~dask_estimators.objectives.cv.fold_row_sums`), kept until :meth:`forget_hessians`.
        """
        return _SplitMeans(self._row_sums, k)(self.objective(None))

    def share_quadratic_hessians(self) -> None:
        """For the squared loss, every split's Hessian from one round
        (:func:`~dask_estimators.objectives.cv.quadratic_hessians`: one pass over X for all of them), kept for
        the split's fits; nothing for other losses, or above :data:`SHARED_HESSIAN_MAX_PARAMS` parameters."""
        if self.spec.loss != "squared" or self.spec.n_params > SHARED_HESSIAN_MAX_PARAMS:
            return
        if all("H" in self._hessians.get(k, {}) for k in range(self.n_splits)):  # shared already (a refit)
            return
        H = np.asarray(self.evaluate(CV.quadratic_hessians, self.spec), dtype=np.float64)
        for k in range(self.n_splits):
            self._hessians.setdefault(k, {})["H"] = H[k]

    def forget_hessians(self) -> None:
        """Drop the splits' kept Hessians and mean rows (the rows' roles or maps changed)."""
        self._hessians = {}
        self._row_sums = {}

    def heldout(self, k, ws, metric: str, weighted: bool = True, shift: float = 0.0) -> np.ndarray:
        """Split k's held-out sums at each row of ``ws`` (:func:`~dask_estimators.objectives.cv.heldout_sums`;
        ``weighted`` False: without the sample weights; ``shift``: subtracted from y in r2's sums)."""
        return np.asarray(self.evaluate(CV.heldout_sums, k, np.asarray(ws, dtype=np.float64), self.spec, metric,
                                        weighted, shift))

    def with_evaluator(self, evaluate) -> FoldProblem:
        """A plain :class:`FoldProblem` of the same splits that evaluates through ``evaluate`` (None: one to send
        to a worker, where :func:`~dask_estimators.engine.solve_on_shard` gives it its evaluator)."""
        new = FoldProblem(evaluate, self.spec, (self.full_sums, *self.fold_sums), self.n_splits)
        new._row_sums = dict(self._row_sums)
        return new


#: A split's fits solve in centred variables where a column's weighted mean is at least this many of its
#: standard deviations away from zero (:class:`_SplitMeans`).
CENTRE_FROM = 1.0


class _SplitMeans:
    """Split k's mean row (k None: all rows'), for an objective of the split that may solve in centred variables
    (:func:`~dask_estimators.optim.scipy_driver._centred` calls it with the objective), or None.

    Found at the first need through the objective's own evaluator (on the client, or on the worker it was sent
    to), every split's in that one round (:func:`~dask_estimators.objectives.cv.fold_row_sums`), and kept in
    ``shared``.  None (the stored variables) where the weights sum to zero, or where every column's weighted mean
    lies within :data:`CENTRE_FROM` of its standard deviations from zero: on scaled or zero-mean columns the
    intercept is barely coupled to the coefficients, and the fits then take the iterates of scikit-learn's
    searches, which do not centre, so that near-ties between grid points fall as in scikit-learn.
    """

    def __init__(self, shared: dict, k):
        self.shared, self.k = shared, k

    def __call__(self, objective):
        if "sums" not in self.shared:
            evaluate = objective.evaluate
            evaluate = evaluate.evaluate if isinstance(evaluate, _OnFold) else evaluate
            self.shared["sums"] = np.asarray(evaluate(CV.fold_row_sums), dtype=np.float64)
        sums = self.shared["sums"][0 if self.k is None else self.k + 1]
        d, K = (sums.shape[1] - 1) // 2, objective.spec.n_outputs
        total = sums[:, -1:]
        if sums.shape[0] not in (1, K) or not np.all(total > 0):
            return None
        mean = sums[:, :d] / total
        spread = np.sqrt(np.maximum(sums[:, d : 2 * d] / total - mean * mean, 0.0))
        if not np.any(np.abs(mean) > CENTRE_FROM * spread):
            return None
        return np.broadcast_to(mean, (K, d)).copy()


class _OnFold:
    """``evaluate`` restricted to split k's training rows (picklable, unlike a closure)."""

    def __init__(self, evaluate, k):
        self.evaluate, self.k = evaluate, k

    def __call__(self, kernel, *args):
        return self.evaluate(CV.on_fold, self.k, kernel, *args)


class Penalties:
    """A grid point's ``(l2, l1)`` strengths, for a split whose training weights sum to ``sw_sum``.

    ``"C"``: scikit-learn's ``LogisticRegression`` scale, ``1 / (C sw_sum)``
    split by ``l1_ratio``.  ``"alpha"``: ``ElasticNet``'s, ``alpha`` split by
    ``l1_ratio`` (the objective is already a mean).
    """

    def __init__(self, kind: str, l1_ratio: float):
        if kind not in ("C", "alpha"):
            raise ValueError(f"kind must be 'C' or 'alpha', got {kind!r}.")
        self.kind, self.l1_ratio = kind, float(l1_ratio)

    def __call__(self, point: float, sw_sum: float) -> tuple[float, float]:
        scale = 1.0 / (point * sw_sum) if self.kind == "C" else float(point)
        return (1.0 - self.l1_ratio) * scale, self.l1_ratio * scale


def fold_paths(problem, penalties, grid, folds, solvers, *, batched=False, tol=1e-4, max_iter=100):
    """Each split's regularisation path: the parameters and iterations at every grid point, warm-started.

    ``grid`` lists the grid points in path order and ``solvers`` the solver
    of each; ``batched``: the splits' L-BFGS runs go in lockstep
    (:func:`~dask_estimators.optim.batched.minimize_many`).  Returns
    ``(coefs (n_folds, n_points, n_params), n_iter (n_folds, n_points))``.
    """
    n_params = problem.spec.n_params
    coefs = np.zeros((len(folds), len(grid), n_params))
    n_iter = np.zeros((len(folds), len(grid)), dtype=np.int32)
    objectives = [problem.objective(k) for k in folds]
    if batched:
        w = np.zeros((len(folds), n_params))
        for j, point in enumerate(grid):
            for obj in objectives:
                obj.l2, obj.l1 = penalties(point, obj.sw_sum)
            results = minimize_many(problem.evaluate, problem.spec, folds, objectives, w, tol=tol, max_iter=max_iter)
            for i, res in enumerate(results):
                coefs[i, j], n_iter[i, j] = res.x, res.nit
            w = coefs[:, j].copy()
        return coefs, n_iter
    for i, obj in enumerate(objectives):
        w = np.zeros(n_params)
        for j, point in enumerate(grid):
            obj.l2, obj.l1 = penalties(point, obj.sw_sum)
            res = minimize(obj, w, solver=solvers[j], tol=tol, max_iter=max_iter)
            coefs[i, j], n_iter[i, j] = res.x, res.nit
            w = res.x
    return coefs, n_iter


def paths_and_heldout(problem, paths, metric, *, tol=1e-4, max_iter=100):
    """Every path of a search and, with ``metric``, each fit's held-out sums.

    ``paths``: one ``(penalties, grid, solvers, batched)`` per ``l1_ratio``,
    each run over all the splits by :func:`fold_paths`.  Returns ``(coefs
    (n_paths, n_folds, n_points, n_params), n_iter (n_paths, n_folds,
    n_points), sums (n_paths, n_folds, n_points, ...) or None)``: the sums are
    :func:`~dask_estimators.objectives.cv.heldout_sums`' (the metric's sum
    and the held-out weight first).
    """
    folds = list(range(problem.n_splits))
    out = [fold_paths(problem, pen, grid, folds, solvers, batched=batched, tol=tol, max_iter=max_iter)
           for pen, grid, solvers, batched in paths]
    coefs = np.stack([c for c, _ in out])
    n_iter = np.stack([n for _, n in out])
    if metric is None:
        return coefs, n_iter, None
    sums = np.stack([[problem.heldout(k, coefs[m, k], metric) for k in folds] for m in range(len(out))])
    return coefs, n_iter, sums


def independent_fits(problem, runs, *, batched=True, on_done=None, max_runs=LOCKSTEP_MAX_RUNS):
    """Fits that start from zero and ignore one another: one per ``(split, l2, l1, solver, tol, max_iter)`` of
    ``runs`` (split None: all rows), such as every candidate of a grid search on every split.

    ``batched``: the runs go in lockstep (:func:`~dask_estimators.optim.batched.minimize_many`, at most
    ``max_runs`` and :data:`LOCKSTEP_MAX_RUNS` at a time), one pass over X per round for all of them; each
    keeps the iterates, line search and stopping test it would have alone, as one after the other
    (``batched`` False) does.  Every
    evaluation goes through :func:`~dask_estimators.objectives.cv.fold_value_grad_many`, which evaluates a
    split seen through an affine map.
    Returns one ``(x, n_iter, solver)`` per run, ``solver`` the one that finished it (a Newton solver that
    went on with L-BFGS says so).  ``on_done()``, if given, is called as each run ends.
    """
    n_params = problem.spec.n_params
    objectives = []
    for k, l2, l1, *_ in runs:
        obj = problem.objective(k)
        obj.l2, obj.l1 = float(l2), float(l1)
        objectives.append(obj)
    results = [None] * len(runs)
    if batched:
        width = max(1, min(int(max_runs), LOCKSTEP_MAX_RUNS))
        for start in range(0, len(runs), width):
            idx = range(start, min(start + width, len(runs)))
            out = minimize_many(problem.evaluate, problem.spec, [runs[i][0] for i in idx],
                                [objectives[i] for i in idx], np.zeros((len(idx), n_params)),
                                solver=[runs[i][3] for i in idx], tol=[runs[i][4] for i in idx],
                                max_iter=[runs[i][5] for i in idx],
                                on_done=None if on_done is None else (lambda i: on_done()))
            for i, res in zip(idx, out):
                results[i] = res
    else:  # each alone, its evaluations still by fold_value_grad_many (a split may see X through an affine map)
        for i, (k, _, _, solver, tol, max_iter) in enumerate(runs):
            results[i] = minimize_many(problem.evaluate, problem.spec, [k], [objectives[i]], np.zeros((1, n_params)),
                                       solver=solver, tol=tol, max_iter=max_iter)[0]
            if on_done is not None:
                on_done()
    return [(np.asarray(r.x), int(r.nit), getattr(r, "solver", run[3])) for r, run in zip(results, runs)]
