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
violations is at most ``tol`` times that of the first pass.  A round makes
``passes_per_round`` local passes over each shard (one by default); ``nit``
counts passes over the data of the column that needed the most (LIBLINEAR's
``n_iter_``, the largest over the classes), and ``max_iter`` bounds it.  With
one shard the passes are exactly LIBLINEAR's iterations (without its
shrinking), so the stopping rule is applied after each of them, on the worker.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import optimize

from .. import config as _config
from ..objectives import dual as _dual

__all__ = ["LIBLINEAR_WARNING", "ONE_SHARD_PASSES", "crammer_singer_ascent", "dual_coordinate_ascent",
           "one_shard_below"]

#: scikit-learn's ConvergenceWarning text for LIBLINEAR (code and users match on it).
LIBLINEAR_WARNING = "Liblinear failed to converge, increase the number of iterations."

#: Passes per round when the data is on one shard: LIBLINEAR's iterations, its stopping rule applied on
#: the worker after each, so a round trip serves up to this many of them.
ONE_SHARD_PASSES = 100


def one_shard_below() -> int:
    """The data size (stored values: rows x features, or non-zeros) under which the SVMs' dual method
    places the data on one worker: the dask config value ``dask-estimators.dual-one-shard-below``
    (default 2**21; 0 always spreads the data).

    A dual pass over small data costs less than a round's round trip (docs/design-measurements.md), and
    CoCoA+ over several shards needs more passes than LIBLINEAR's method on one: below this size one
    worker with many passes per round is faster (``benchmarks/bench_svm_dual.py`` measures the two).
    """

    return int(_config.get("dual-one-shard-below"))


def _stopped(out, spec, first, tol):
    """Which columns meet LIBLINEAR's stopping rule after a round (and the rule's value per column).

    The classifiers' rule is the spread of the rows' projected gradients, from 0 at the least: every shard
    starts its pass at the round's common point, so shards of one row each give the projected gradients at
    that point, which are all -1 at the start (no row stepped yet) and spread 0, where LIBLINEAR's passes, one
    row after another, see them change.  At the optimum they are all 0, and the rule is LIBLINEAR's."""
    stop = out["stop"]
    if spec.classification:
        with np.errstate(invalid="ignore"):
            hi = np.where(np.isnan(stop[:, 0, :]), -np.inf, stop[:, 0, :]).max(axis=0)
            lo = np.where(np.isnan(stop[:, 1, :]), np.inf, stop[:, 1, :]).min(axis=0)
            # no row visited (hi -inf, lo +inf): 0, nothing to do
            value = np.maximum(hi, 0.0) - np.minimum(lo, 0.0)
        return value <= tol, value
    total = stop[:, 1, :].sum(axis=0)
    return total <= tol * first, total


def _step(W, dW, out, spec):
    """The scale in [0, 1] of the summed step: 1 for CoCoA+'s adding (and one shard), else the minimiser
    of the quadratic bound of the dual objective along it (see :func:`~dask_estimators.objectives.dual.dual_round`)."""
    K = W.shape[0]
    if spec.aggregation == "add" or spec.n_shards == 1:
        return np.ones(K)
    a = np.einsum("ij,ij->i", W, dW) + np.asarray(out["lin"]).reshape(K)
    b = np.einsum("ij,ij->i", dW, dW) + np.asarray(out["quad"]).reshape(K)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(b > 0, -a / b, 1.0)
    g = np.nan_to_num(g, nan=0.0)
    if not spec.classification:
        # The bound of the regressors' |beta| term is loose where beta changes sign, and can stall the
        # step at 0.  1 / n_shards always descends: the average of the shards' own steps, each of which
        # minimises the dual over its rows alone (Jensen's inequality), as in the original CoCoA.
        g = np.maximum(g, 1.0 / spec.n_shards)
    return np.clip(g, 0.0, 1.0)


def dual_coordinate_ascent(evaluate, spec, *, max_iter=1000, seed=0, passes_per_round=1, verbose=0, callback=None):
    """Solve the dual SVM problem of ``spec`` by distributed dual coordinate ascent (CoCoA+).

    Parameters
    ----------
    evaluate : callable
        ``evaluate(kernel, *args)``: the sum over shards of ``kernel(shard, *args)``.
    spec : DualSpec
        The problem (``spec.n_shards`` must be the number of shards ``evaluate`` runs on;
        ``spec.tol`` is LIBLINEAR's tolerance, see the module docstring).
    max_iter : int, default=1000
        Largest number of passes over the data (LIBLINEAR's iterations); 0 returns the start (zeros).
    seed : int, default=0
        Seeds the row order of every pass.
    passes_per_round : int, default=1
        Local passes over each shard per round (CoCoA+'s ``H``).  More passes solve the local
        subproblems better but save far fewer rounds than they cost passes (docs/design-measurements.md
        has the measurement).
    verbose : int, default=0
        Print each round's primal and dual objectives and the stopping value.
    callback : callable, optional
        Called after each round with an :class:`~scipy.optimize.OptimizeResult` of ``nit`` (the
        passes so far, as the returned ``nit``), ``fun`` (the primal objective at the round's start), ``grad_max`` (the largest
        stopping value of the classes still running) and ``time``, as
        :class:`~dask_estimators._progress.IterationLog` takes it.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x``: ``W~`` of shape (n_outputs, n_features + 1); ``nit``: passes over the data (of the
        slowest column, LIBLINEAR's ``n_iter_``), per column in ``nit_per_output``; ``rounds``;
        ``fun``: the primal objective at ``x``; ``dual``: the dual objective at the final
        ``alpha``; ``gap``: ``fun - dual`` (per column in ``gap_per_output``); ``success``;
        ``history``: per round the primal and dual objectives at its start and the stopping value.

    Examples
    --------
    >>> from dask_estimators.objectives.dual import DualSpec  # doctest: +SKIP
    >>> res = dual_coordinate_ascent(evaluator, DualSpec("hinge", 30, n_shards=2, tol=1e-6))  # doctest: +SKIP
    >>> res.gap <= 1e-6 * res.fun  # doctest: +SKIP
    True
    """
    K, p1 = spec.n_outputs, spec.n_features + 1
    W = np.zeros((K, p1))
    active = np.ones(K, dtype=bool)
    nit = np.zeros(K, dtype=int)
    first = np.zeros(K)
    history = []
    per_round = max(1, int(passes_per_round))
    base = int(seed) & 0x7FFFFFFF
    rounds = 0
    gamma = np.ones(K)
    while active.any() and nit[active].max() < max_iter:
        passes = min(per_round, max_iter - int(nit[active].max()))
        out = evaluate(_dual.dual_round, W, gamma, active.astype(np.float64), first,
                       (base + 7919 * rounds) & 0x7FFFFFFF, passes, spec)
        if rounds == 0:
            first = np.asarray(out["first"], dtype=np.float64).reshape(K)
        rounds += 1
        W = np.asarray(out["v"], dtype=np.float64).reshape(K, p1)  # the shards' own sum: W stays w~(alpha)
        norm2 = np.einsum("ij,ij->i", W, W)
        done, value = _stopped(out, spec, first, spec.tol)
        history.append({"primal": float((0.5 * norm2 + out["primal"]).sum()),
                        "dual": float((out["dual"] - 0.5 * norm2).sum()), "stop": value.copy()})
        dW = np.asarray(out["u"], dtype=np.float64).reshape(K, p1)
        gamma = _step(W, dW, out, spec)
        history[-1]["step"] = gamma.copy()
        if verbose:
            print(f"round {rounds}: primal {history[-1]['primal']:.10g}, dual {history[-1]['dual']:.10g}, "
                  f"stopping value {np.max(value[active], initial=0.0):.3g}, step {np.min(gamma):.3g}", flush=True)
        W = W + gamma[:, None] * dW
        grad_max = float(np.max(value[active], initial=0.0))
        nit[active] += np.asarray(out["passes"]).reshape(-1, K).max(axis=0)[active].astype(int)
        if callback is not None:
            callback(optimize.OptimizeResult(nit=int(nit.max()), fun=history[-1]["primal"], grad_max=grad_max,
                                             time=time.perf_counter()))
        active &= ~done
    final = evaluate(_dual.dual_objective, W, gamma, spec)
    norm2 = np.einsum("ij,ij->i", W, W)
    primal = 0.5 * norm2 + final["primal"]
    v = np.asarray(final["v"]).reshape(K, p1)
    dual = final["dual"] - 0.5 * np.einsum("ij,ij->i", v, v)
    return optimize.OptimizeResult(
        x=W, nit=int(nit.max(initial=0)), nit_per_output=nit, rounds=rounds, fun=float(primal.sum()),
        dual=float(dual.sum()), gap=float((primal - dual).sum()), gap_per_output=primal - dual,
        success=not active.any(), status=0 if not active.any() else 1, history=history,
        message="Converged." if not active.any() else "Maximum number of iterations reached.",
    )


def crammer_singer_ascent(evaluate, spec, *, max_iter=1000, seed=0, passes_per_round=1, verbose=0, callback=None):
    """Solve Crammer and Singer's multi-class SVM (``spec``: a
    :class:`~dask_estimators.objectives.crammer_singer.CSSpec`) by distributed dual coordinate ascent.

    CoCoA+ with adding: each round every shard runs ``passes_per_round`` passes of the row steps against
    ``W~`` plus its own change (``sigma' = n_shards``) and returns the change; ``W~`` grows by their sum.
    It stops when the largest row stopping value of a round is at most ``spec.tol`` (LIBLINEAR's rule;
    with one shard checked on the worker after each pass).  ``evaluate``, ``max_iter``, ``seed``,
    ``verbose`` and ``callback`` are as in :func:`dual_coordinate_ascent`.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x``: ``W~`` (n_classes, n_features + 1); ``nit``: passes over the data; ``rounds``; ``fun``:
        the primal objective at ``x``; ``dual``: the dual objective (``-f(alpha)``); ``gap``; ``success``.
    """
    from ..objectives import crammer_singer as _cs

    K, p1 = spec.n_classes, spec.n_features + 1
    W = np.zeros((K, p1))
    nit, rounds, success = 0, 0, False
    per_round = max(1, int(passes_per_round))
    base = int(seed) & 0x7FFFFFFF
    while nit < max_iter:
        passes = min(per_round, max_iter - nit)
        out = evaluate(_cs.cs_round, W, (base + 7919 * rounds) & 0x7FFFFFFF, passes, spec)
        rounds += 1
        W = W + np.asarray(out["u"], dtype=np.float64).reshape(K, p1)
        nit += int(np.max(out["passes"]))
        value = float(np.max(out["stop"]))
        success = value <= spec.tol
        if verbose:
            print(f"round {rounds}: passes {nit}, stopping value {value:.3g}", flush=True)
        if callback is not None:
            callback(optimize.OptimizeResult(nit=nit, fun=float("nan"), grad_max=value, time=time.perf_counter()))
        if success:
            break
    final = evaluate(_cs.cs_objective, W, spec)
    norm2 = float(np.einsum("ij,ij->", W, W))
    primal = 0.5 * norm2 + float(final["loss"])
    dual = -(0.5 * norm2 + float(final["ealpha"]))
    return optimize.OptimizeResult(
        x=W, nit=nit, rounds=rounds, fun=primal, dual=dual, gap=primal - dual, success=success,
        status=0 if success else 1, message="Converged." if success else "Maximum number of iterations reached.",
    )
