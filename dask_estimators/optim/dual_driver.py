"""The outer loop of the distributed dual method (CoCoA+ with "adding" aggregation) for the linear SVMs.

It sees one callable, ``evaluate(kernel, *args)``, which runs ``kernel(shard, *args)``
on every shard and returns the sum (a
:class:`~dask_estimators.engine.DistributedEvaluator` or
:class:`~dask_estimators.engine.LocalEvaluator`), and the kernels of
:mod:`dask_estimators.objectives.dual`.  One outer round is one reduction:
every shard runs its local dual coordinate ascent against the current
weights and returns its part ``v_k`` of the new weights; their sum is the
new ``W~``.  The dual variables never leave the workers.

Stopping follows LIBLINEAR, per output column (one-vs-rest class):
classification stops when the largest minus the smallest projected
gradient met in the round is at most ``tol``; regression when the sum of the
violations is at most ``tol`` times that of the first round.  ``nit`` is the
number of rounds of the column that needed the most (LIBLINEAR's
``n_iter_``, the largest over the classes).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from ..objectives import dual as _dual

__all__ = ["LIBLINEAR_WARNING", "dual_coordinate_ascent"]

#: scikit-learn's ConvergenceWarning text for LIBLINEAR (code and users match on it).
LIBLINEAR_WARNING = "Liblinear failed to converge, increase the number of iterations."


def _stopped(out, spec, it, first_violation, tol):
    """Which columns meet LIBLINEAR's stopping rule after round ``it`` (and the rule's value per column)."""
    stop = out["stop"]
    if spec.classification:
        with np.errstate(invalid="ignore"):
            hi = np.where(np.isnan(stop[:, 0, :]), -np.inf, stop[:, 0, :]).max(axis=0)
            lo = np.where(np.isnan(stop[:, 1, :]), np.inf, stop[:, 1, :]).min(axis=0)
            value = hi - lo
        value = np.where(np.isfinite(value), value, 0.0)  # no row visited: nothing to do
        return value <= tol, value
    total = stop[:, 1, :].sum(axis=0)
    if it == 0:
        first_violation[:] = total
    return total <= tol * first_violation, total


def dual_coordinate_ascent(evaluate, spec, *, tol=1e-4, max_iter=1000, seed=0, verbose=0):
    """Solve the dual SVM problem of ``spec`` by distributed dual coordinate ascent (CoCoA+).

    Parameters
    ----------
    evaluate : callable
        ``evaluate(kernel, *args)``: the sum over shards of ``kernel(shard, *args)``.
    spec : DualSpec
        The problem (``spec.n_shards`` must be the number of shards ``evaluate`` runs on).
    tol : float, default=1e-4
        LIBLINEAR's tolerance (see the module docstring).
    max_iter : int, default=1000
        Largest number of rounds; 0 returns the start (all zeros).
    seed : int, default=0
        Seeds the row order of every round.
    verbose : int, default=0
        Print each round's primal and dual objectives and the stopping value.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x``: ``W~`` of shape (n_outputs, n_features + 1); ``nit``: rounds (of the slowest column);
        ``nit_per_output``; ``fun``: the primal objective at ``x``; ``dual``: the dual objective at
        the final ``alpha``; ``gap``: ``fun - dual`` (per column in ``gap_per_output``); ``success``;
        ``history``: per round the primal and dual objectives at its start and the stopping value.

    Examples
    --------
    >>> from dask_estimators.objectives.dual import DualSpec  # doctest: +SKIP
    >>> res = dual_coordinate_ascent(evaluator, DualSpec("hinge", 30, n_shards=2), tol=1e-6)  # doctest: +SKIP
    >>> res.gap <= 1e-6 * res.fun  # doctest: +SKIP
    True
    """
    K, p1 = spec.n_outputs, spec.n_features + 1
    W = np.zeros((K, p1))
    active = np.ones(K, dtype=bool)
    nit = np.zeros(K, dtype=int)
    first = np.zeros(K)
    history = []
    base = int(seed) & 0x7FFFFFFF
    for it in range(max_iter):
        out = evaluate(_dual.dual_round, W, active.astype(np.float64), (base + 7919 * it) & 0x7FFFFFFF, spec)
        norm2 = np.einsum("ij,ij->i", W, W)
        done, value = _stopped(out, spec, it, first, tol)
        history.append({"primal": float((0.5 * norm2 + out["primal"]).sum()),
                        "dual": float((out["dual"] - 0.5 * norm2).sum()), "stop": value.copy()})
        if verbose:
            print(f"round {it + 1}: primal {history[-1]['primal']:.10g}, dual {history[-1]['dual']:.10g}, "
                  f"stopping value {np.max(value[active], initial=0.0):.3g}", flush=True)
        W = np.asarray(out["v"], dtype=np.float64).reshape(K, p1)
        nit[active] = it + 1
        active &= ~done
        if not active.any():
            break
    final = evaluate(_dual.dual_objective, W, spec)
    norm2 = np.einsum("ij,ij->i", W, W)
    primal = 0.5 * norm2 + final["primal"]
    v = np.asarray(final["v"]).reshape(K, p1)
    dual = final["dual"] - 0.5 * np.einsum("ij,ij->i", v, v)
    return optimize.OptimizeResult(
        x=W, nit=int(nit.max(initial=0)), nit_per_output=nit, fun=float(primal.sum()), dual=float(dual.sum()),
        gap=float((primal - dual).sum()), gap_per_output=primal - dual, success=not active.any(),
        status=0 if not active.any() else 1, history=history,
        message="Converged." if not active.any() else "Maximum number of rounds reached.",
    )
