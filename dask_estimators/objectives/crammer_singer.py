"""Crammer and Singer's multi-class SVM by dual coordinate ascent, one shard at a time (CoCoA+'s local solver).

The problem is LIBLINEAR's ``MCSVM_CS`` (scikit-learn's
``LinearSVC(multi_class="crammer_singer")``): one weight vector per class,
``W~`` of shape (K, p + 1) with LIBLINEAR's bias feature ``x~_i = [x_i, s]``
(``s = intercept_scaling``, 0 without intercept), and the primal::

    P(W~) = 1/2 ||W~||^2 + sum_i C_i * max_m (e_im + w~_m . x~_i - w~_{y_i} . x~_i)

with ``e_im = 0`` for ``m = y_i`` and 1 otherwise, and ``C_i = C * s_i``
(the sample weight times its class's weight).  The dual, one vector
``alpha_i`` of K variables per row, minimises::

    f(alpha) = 1/2 ||W~(alpha)||^2 + sum_i e_i . alpha_i,   W~(alpha)_m = sum_i alpha_im x~_i,
    subject to  sum_m alpha_im = 0,  alpha_im <= C_i [m = y_i],

and ``P(W~(alpha)) + f(alpha) >= 0`` is the duality gap, 0 at the optimum.

A coordinate step takes one row's ``alpha_i`` to the minimiser of ``f``
over it: with the scores' gradient ``G_m = w~_m . x~_i + e_im``, the
curvature ``A = sigma' ||x~_i||^2`` and ``B_m = G_m - A alpha_im``, the new
``alpha_im = min(C_im, (beta - B_m) / A)``, where ``beta`` solves
``sum_m min(D_m, beta) = sum_m B_m`` for ``D_m = B_m + A C_im`` (a
piecewise-linear increasing function of ``beta``: sort ``D`` and walk down
it).  The stopping value of a row is the spread of ``G`` over the classes it
may still move (``max_m G_m - min over m with alpha_im < C_im of G_m``).

A round (:func:`cs_round`) runs passes of these steps over the shard's rows
against the local weights ``W~ + sigma' u`` (``u`` the shard's change this
round, ``sigma' = n_shards``: CoCoA+'s adding) and returns ``u``; the new
global weights are ``W~ + sum of the u``.  With one shard it is LIBLINEAR's
method without shrinking, its stopping rule (the largest row value at most
``tol``) checked after each pass on the worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._jit import lazy_njit
from . import _host as _shard
from .dual import (_dual_ahead, _host, _host_x, _prefetch, _prefetch_row, _row_add, _row_dot, _row_sqnorms,
                   layout_args)

__all__ = ["CSSpec", "cs_objective", "cs_round", "cs_state"]


@dataclass(frozen=True)
class CSSpec:
    """The Crammer-Singer problem: shapes, C, the bias feature's value, the number of shards and ``tol``."""

    n_features: int
    n_classes: int
    C: float = 1.0
    bias: float = 0.0
    n_shards: int = 1
    tol: float = 1e-4

    def __post_init__(self):
        if not (0 < self.C < math.inf):
            raise ValueError(f"The dual method needs a finite positive C, got {self.C!r}.")
        if self.n_classes < 2 or self.n_shards < 1:
            raise ValueError("n_classes must be at least 2 and n_shards positive.")


@lazy_njit(nogil=True, boundscheck=False)
def _cs_pass(X, data, indices, indptr, dense, y, c, alpha, sqnorm, W, U, bias, sigma, perm,
             ahead):  # pragma: no cover
    """One pass of the row steps over ``perm``; ``W`` (K, p + 1) local weights and ``U`` the round's change
    (both updated in place).  ``X, data, indices, indptr, dense``: :func:`~.dual.layout_args`.  Returns the
    largest stopping value met (0 when no row was visited).  ``ahead``: :func:`~.dual._dual_ahead`'s (a
    dense X's)."""
    K = W.shape[0]
    G = np.empty(K)
    B = np.empty(K)
    D = np.empty(K)
    new = np.empty(K)
    worst = 0.0
    m_rows = perm.shape[0]
    for t in range(m_rows):
        if ahead is not None and t + ahead < m_rows:  # the row `ahead` steps on (dual._svc_pass's comment)
            k = perm[t + ahead]
            _prefetch_row(X, k)
            _prefetch_row(alpha, k)
            _prefetch(c, k)
            _prefetch(sqnorm, k)
            _prefetch(y, k)
        i = perm[t]
        ci = c[i]
        if not ci > 0.0:  # a row of weight 0 is not part of the problem
            continue
        A = sigma * sqnorm[i]
        yi = y[i]
        for m in range(K):
            G[m] = _row_dot(X, data, indices, indptr, dense, i, W[m], bias) + (0.0 if m == yi else 1.0)
        g_max, g_min = -np.inf, np.inf
        for m in range(K):
            g_max = max(g_max, G[m])
            upper = ci if m == yi else 0.0
            if alpha[i, m] < upper:
                g_min = min(g_min, G[m])
        viol = g_max - g_min if g_min < np.inf else 0.0
        worst = max(worst, viol)
        if not (viol > 1e-12 and A > 0.0):
            continue
        total = 0.0
        for m in range(K):
            B[m] = G[m] - A * alpha[i, m]
            D[m] = B[m] + (A * ci if m == yi else 0.0)
            total += B[m]
        # beta solves sum_m min(D_m, beta) = total: D sorted down, beta in [D_(r), D_(r-1)] with r above it
        for a in range(1, K):  # insertion sort, descending (K is small)
            v = D[a]
            b = a - 1
            while b >= 0 and D[b] < v:
                D[b + 1] = D[b]
                b -= 1
            D[b + 1] = v
        rest = 0.0
        for m in range(K):
            rest += D[m]
        beta = D[0]
        for r in range(1, K + 1):
            rest -= D[r - 1]  # the sum of D_(r), ..., D_(K-1)
            beta = (total - rest) / r
            if r == K or beta >= D[r]:
                break
        for m in range(K):
            upper = ci if m == yi else 0.0
            new[m] = min(upper, (beta - B[m]) / A)
        for m in range(K):
            d = new[m] - alpha[i, m]
            if d == 0.0:
                continue
            alpha[i, m] = new[m]
            _row_add(X, data, indices, indptr, dense, i, d, sigma, W[m], U[m], bias)
    return worst


def cs_state(shard, spec: CSSpec) -> dict:
    """The shard's state, made on first use: X in host memory (CSR stays CSR), the class codes, ``C_i``,
    ``||x~_i||^2`` and ``alpha`` (n, K) at 0.  Expects the targets as codes and the class weights folded
    into the sample weights (the ``"multinomial"`` encoding of
    :func:`~dask_estimators.objectives.targets.prepare_targets`)."""
    st = shard.cache.get("cs_state")
    key = (spec.n_classes, spec.C, spec.bias)
    if st is not None and st["key"] == key:
        return st
    X = _host_x(_shard.array(shard, "X"))
    n = X.shape[0]
    y = np.asarray(_host(_shard.array(shard, "y"))).reshape(n).astype(np.int64)
    s = _host(_shard.array(shard, "sample_weight"))
    s = np.ones(n) if s is None else np.asarray(s, dtype=np.float64).reshape(n)
    st = {"X": X, "y": y, "c": spec.C * s, "sqnorm": _row_sqnorms(X) + spec.bias**2,
          "alpha": np.zeros((n, spec.n_classes)), "key": key}
    shard.cache["cs_state"] = st
    return st


def cs_round(shard, W, seed, passes, spec: CSSpec):
    """Kernel: one CoCoA+ round on this shard (module docstring).

    Returns raw sums: ``"u"`` (K, p + 1), the shard's change of ``W~(alpha)``; ``"stop"`` (n_shards,),
    in this shard's slot its stopping value (of the first pass when the data is spread, of the last
    with one shard); ``"passes"`` (n_shards,), in its slot the passes made.
    """
    from .dual import _shard_index

    st = cs_state(shard, spec)
    K, p = spec.n_classes, spec.n_features
    w = np.array(_host(W), dtype=np.float64).reshape(K, p + 1)
    U = np.zeros((K, p + 1))
    index = _shard_index(shard)
    stop, done = np.zeros(spec.n_shards), np.zeros(spec.n_shards)
    alone = spec.n_shards == 1
    sigma = float(spec.n_shards)
    args = layout_args(st["X"])
    ahead = _dual_ahead(st["X"]) if isinstance(st["X"], np.ndarray) else None  # a CSR pass does not ask
    n = st["y"].shape[0]
    rng = np.random.default_rng([int(seed) & 0x7FFFFFFF, index])
    for h in range(int(passes)):
        perm = rng.permutation(n).astype(np.int64)
        worst = _cs_pass(*args, st["y"], st["c"], st["alpha"], st["sqnorm"], w, U, spec.bias, sigma, perm, ahead)
        if h == 0 or alone:
            stop[index] = worst
        done[index] = h + 1
        if alone and worst <= spec.tol:  # LIBLINEAR's rule, after each of its iterations
            break
    return {"u": U, "stop": stop, "passes": done}


def cs_objective(shard, W, spec: CSSpec):
    """Kernel: ``{"loss": sum_i C_i max_m (e_im + margins), "ealpha": sum_i e_i . alpha_i}`` at ``W~``."""
    st = cs_state(shard, spec)
    K, p = spec.n_classes, spec.n_features
    W = np.asarray(_host(W), dtype=np.float64).reshape(K, p + 1)
    X, y, c, alpha = st["X"], st["y"], st["c"], st["alpha"]
    Z = np.asarray(X @ W[:, :p].T) + spec.bias * W[:, p]  # (n, K)
    rows = np.arange(y.shape[0])
    E = np.ones_like(Z)
    E[rows, y] = 0.0
    hinge = (E + Z - Z[rows, y][:, None]).max(axis=1)
    live = c > 0
    return {"loss": float(np.where(live, c * hinge, 0.0).sum()),
            "ealpha": float(np.where(live[:, None], E * alpha, 0.0).sum())}


#: These kernels read their arguments as NumPy (``_host``): the engine's ``run_kernel`` passes them as they are.
for _kernel in (cs_round, cs_objective):
    _kernel.host_args = True
