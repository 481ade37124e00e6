"""Dual coordinate ascent for the linear SVMs, one shard at a time (the local solver of CoCoA+).

The problems are LIBLINEAR's (scikit-learn's ``LinearSVC`` and
``LinearSVR``).  With the intercept, each row gets LIBLINEAR's bias feature
``x~_i = [x_i, s]`` (``s = intercept_scaling``) and the intercept is
``s * w_b``: it is penalised with the coefficients, as in LIBLINEAR.  Per
output column (one-vs-rest class, or the regression target) the primal is::

    P(w) = 1/2 ||w~||^2 + sum_i C_i * loss_i(w~ . x~_i)

with ``C_i = C * s_i`` (``s_i`` the sample weight times the class weight),
and the dual over ``alpha`` (one variable per row and column)::

    SVC:  D(alpha) = sum_i (alpha_i - d_i / 2 * alpha_i^2) - 1/2 ||w~(alpha)||^2,
          w~(alpha) = sum_i alpha_i y_i x~_i,   0 <= alpha_i <= U_i
    SVR:  D(beta)  = sum_i (y_i beta_i - epsilon |beta_i| - d_i / 2 * beta_i^2) - 1/2 ||w~(beta)||^2,
          w~(beta) = sum_i beta_i x~_i,          -U_i <= beta_i <= U_i

For the L1 losses (``"hinge"``, ``"epsilon_insensitive"``) ``d_i = 0`` and
``U_i = C_i``; for the squared losses ``d_i = 1 / (2 C_i)`` and ``U_i = inf``.
Weak duality gives ``D(alpha) <= P(w~)`` for every feasible ``alpha`` and
every ``w~``; at the optimum they are equal and ``w~* = w~(alpha*)``.

A round (:func:`dual_round`) receives the global ``W~ = sum over shards of
v_k``, where each shard keeps its own ``alpha_k`` and ``v_k = w~(alpha_k)``
in ``shard.cache`` between rounds.  It returns, as raw sums over its rows:
its ``v_k`` after the local update (so the sum over shards is the new
``W~`` exactly, which makes CoCoA+'s "adding" aggregation a plain sum), the
loss and dual pieces at the round's starting point, and the stopping
quantities of LIBLINEAR.  The local update is CoCoA+'s subproblem with
``sigma' = n_shards``: coordinate ascent as LIBLINEAR's (``solve_l2r_l1l2_svc``
and ``solve_l2r_l1l2_svr`` without shrinking), against the local
weights ``W~ + sigma' * u`` (``u`` the shard's change so far this round) and
the curvature ``sigma' * ||x~_i||^2 + d_i``.  With one shard it is exactly
one pass of LIBLINEAR's method.  The row loop is a numba kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._jit import lazy_global, lazy_njit
from . import _host as _shard
from ._sparse import index_array

__all__ = ["DUAL_LOSSES", "DualSpec", "dual_round", "dual_objective", "dual_state", "set_shard_index"]

#: loss -> (classification?, squared?)
DUAL_LOSSES = {
    "hinge": (True, False),
    "squared_hinge": (True, True),
    "epsilon_insensitive": (False, False),
    "squared_epsilon_insensitive": (False, True),
}


@dataclass(frozen=True)
class DualSpec:
    """What the dual kernels need: the loss, shapes, C, epsilon, bias feature and the CoCoA+ constants.

    Parameters
    ----------
    loss : {"hinge", "squared_hinge", "epsilon_insensitive", "squared_epsilon_insensitive"}
    n_features : int
    n_outputs : int
        Columns solved together (one-vs-rest classes, or 1).
    C : float
        Finite and positive.
    bias : float
        The value of the bias feature (``intercept_scaling``), 0 without intercept.
    epsilon : float
        Half-width of the insensitive tube (regression).
    n_shards : int
        ``sigma'`` of CoCoA+ and the number of stopping slots.
    tol : float
        LIBLINEAR's tolerance, used within a round when there is one shard (see :func:`dual_round`).
    aggregation : {"line-search", "add"}
        How the shards' updates combine.  ``"add"``: CoCoA+'s adding with ``sigma' = n_shards``
        (safe for any data; step 1).  ``"line-search"``: local subproblems with ``sigma' = 1``
        (each shard's plain dual coordinate ascent) and the sum of their steps scaled by the
        ``gamma`` in [0, 1] that minimises a quadratic upper bound of the dual objective along it
        (exact for the classifiers), formed from raw sums; one shard takes step 1 (LIBLINEAR).
    """

    loss: str
    n_features: int
    n_outputs: int = 1
    C: float = 1.0
    bias: float = 0.0
    epsilon: float = 0.0
    n_shards: int = 1
    tol: float = 1e-4
    aggregation: str = "line-search"

    def __post_init__(self):
        if self.loss not in DUAL_LOSSES:
            raise ValueError(f"loss must be one of {sorted(DUAL_LOSSES)} for the dual method, got {self.loss!r}.")
        if not (0 < self.C < math.inf):
            raise ValueError(f"The dual method needs a finite positive C, got {self.C!r}.")
        if self.n_shards < 1:
            raise ValueError("n_shards must be positive.")
        if self.aggregation not in ("line-search", "add"):
            raise ValueError(f"aggregation must be 'line-search' or 'add', got {self.aggregation!r}.")

    @property
    def sigma(self) -> float:
        """CoCoA+'s ``sigma'``: the weight of the shard's own change in its local subproblem."""
        return float(self.n_shards) if self.aggregation == "add" else 1.0

    @property
    def classification(self) -> bool:
        return DUAL_LOSSES[self.loss][0]

    @property
    def squared(self) -> bool:
        return DUAL_LOSSES[self.loss][1]


# ---------------------------------------------------------------- numba kernels
# Prefetching.  A pass visits the rows in a random order, which the hardware
# prefetchers cannot follow: on a shard larger than the caches, each row's
# loads (its X, and its entries of c, sqnorm, alpha and y) wait on memory one
# after the other.  A pass over a shard of at least ``_DUAL_AHEAD_BYTES``
# (a CSR's values and indices) asks for the row ``_DUAL_AHEAD`` steps on in
# its order while it works on the row at hand, and a CSR pass for the row
# pointers of the row twice as far on, which it reads to find that row
# (docs/design-measurements.md has the measurement); a smaller one is
# compiled without asking (``ahead`` None: numba prunes the branch).
_prefetch = lazy_global("dask_estimators.objectives._prefetch", "prefetch")
_prefetch_row = lazy_global("dask_estimators.objectives._prefetch", "prefetch_row")
_prefetch_span = lazy_global("dask_estimators.objectives._prefetch", "prefetch_span")

#: How many rows ahead, in a pass's order, a dense pass asks for; the X bytes from which it asks.
_DUAL_AHEAD = 8
_DUAL_AHEAD_BYTES = 2 << 20


def _dual_ahead(X) -> int | None:
    """The rows a pass over ``X`` (dense, or a CSR matrix: its values and indices) asks for ahead of the one at
    hand; None: it does not ask."""
    nbytes = X.nbytes if isinstance(X, np.ndarray) else X.data.nbytes + X.indices.nbytes
    return _DUAL_AHEAD if nbytes >= _DUAL_AHEAD_BYTES else None


@lazy_njit(nogil=True, boundscheck=False, inline="always")
def _csr_ask(data, indices, indptr, perm, t, ahead):  # pragma: no cover - compiled
    """A CSR pass's asking, in two stages: the row pointers of the row ``2 * ahead`` steps on, and the values and
    indices of the row ``ahead`` steps on (found through its pointers, asked for ``ahead`` steps before)."""
    m = perm.shape[0]
    if t + 2 * ahead < m:
        _prefetch(indptr, perm[t + 2 * ahead])
    if t + ahead < m:
        k = perm[t + ahead]
        lo, hi = indptr[k], indptr[k + 1]
        _prefetch_span(data, lo, hi)
        _prefetch_span(indices, lo, hi)


# The passes are written once per layout of X.  One body per loss with a layout flag and the row helpers
# below (as the Crammer-Singer pass uses) ran slower, dense and CSR (docs/design-measurements.md has the measurement).
@lazy_njit(nogil=True, boundscheck=False)
def _svc_pass(X, y, c, alpha, sqnorm, w, u, bias, sigma, squared, perm, ahead):  # pragma: no cover - compiled
    """One pass of dual coordinate ascent over the rows ``perm`` (hinge or squared hinge).

    ``w`` (p + 1) are the local weights (updated in place), ``u`` the
    shard's change of ``w~(alpha)`` this round (updated in place).  Returns
    LIBLINEAR's (max, min) of the projected gradient over the visited rows,
    (-inf, inf) when none was visited.  ``ahead``: see :func:`_dual_ahead`.
    """
    p = X.shape[1]
    pg_max, pg_min = -np.inf, np.inf
    m = perm.shape[0]
    for t in range(m):
        if ahead is not None and t + ahead < m:  # the row `ahead` steps on: its X and its entries (explicit:
            k = perm[t + ahead]  # behind an inlined helper of these arguments the pass ran 1.2-3x slower)
            _prefetch_row(X, k)
            _prefetch(c, k)
            _prefetch(sqnorm, k)
            _prefetch(alpha, k)
            _prefetch(y, k)
        i = perm[t]
        ci = c[i]
        if not ci > 0.0:  # a row of weight 0 is not part of the problem
            continue
        if squared:
            diag, upper = 0.5 / ci, np.inf
        else:
            diag, upper = 0.0, ci
        q = sigma * sqnorm[i] + diag
        if not q > 0.0:
            continue
        dot = w[p] * bias
        for j in range(p):
            dot += X[i, j] * w[j]
        a = alpha[i]
        yi = y[i]
        g = yi * dot - 1.0 + diag * a
        if a == 0.0:
            pg = min(g, 0.0)
        elif a >= upper:
            pg = max(g, 0.0)
        else:
            pg = g
        pg_max = max(pg_max, pg)
        pg_min = min(pg_min, pg)
        if abs(pg) > 1e-12:
            a_new = min(max(a - g / q, 0.0), upper)
            alpha[i] = a_new
            d = (a_new - a) * yi
            if d != 0.0:
                sd = sigma * d
                for j in range(p):
                    u[j] += d * X[i, j]
                    w[j] += sd * X[i, j]
                u[p] += d * bias
                w[p] += sd * bias
    return pg_max, pg_min


@lazy_njit(nogil=True, boundscheck=False)
def _svr_pass(X, y, c, beta, sqnorm, w, u, bias, sigma, squared, epsilon, perm, ahead):  # pragma: no cover
    """One pass of dual coordinate descent over the rows ``perm`` (epsilon-insensitive or its square).

    Returns LIBLINEAR's (max, sum) of the violations of the optimality
    conditions over the visited rows.  ``ahead``: see :func:`_dual_ahead`.
    """
    p = X.shape[1]
    v_max, v_sum = 0.0, 0.0
    m = perm.shape[0]
    for t in range(m):
        if ahead is not None and t + ahead < m:
            k = perm[t + ahead]
            _prefetch_row(X, k)
            _prefetch(c, k)
            _prefetch(sqnorm, k)
            _prefetch(beta, k)
            _prefetch(y, k)
        i = perm[t]
        ci = c[i]
        if not ci > 0.0:
            continue
        if squared:
            lam, upper = 0.5 / ci, np.inf
        else:
            lam, upper = 0.0, ci
        h = sigma * sqnorm[i] + lam
        if not h > 0.0:
            continue
        dot = w[p] * bias
        for j in range(p):
            dot += X[i, j] * w[j]
        b = beta[i]
        g = dot - y[i] + lam * b
        gp, gn = g + epsilon, g - epsilon
        if b == 0.0:
            viol = -gp if gp < 0.0 else (gn if gn > 0.0 else 0.0)
        elif b >= upper:
            viol = gp if gp > 0.0 else 0.0
        elif b <= -upper:
            viol = -gn if gn < 0.0 else 0.0
        elif b > 0.0:
            viol = abs(gp)
        else:
            viol = abs(gn)
        v_max = max(v_max, viol)
        v_sum += viol
        if gp < h * b:
            d = -gp / h
        elif gn > h * b:
            d = -gn / h
        else:
            d = -b
        if abs(d) < 1e-12:
            continue
        b_new = min(max(b + d, -upper), upper)
        beta[i] = b_new
        d = b_new - b
        if d != 0.0:
            sd = sigma * d
            for j in range(p):
                u[j] += d * X[i, j]
                w[j] += sd * X[i, j]
            u[p] += d * bias
            w[p] += sd * bias
    return v_max, v_sum


@lazy_njit(nogil=True, boundscheck=False)
def _svc_pass_csr(data, indices, indptr, y, c, alpha, sqnorm, w, u, bias, sigma, squared, perm,
                  ahead):  # pragma: no cover - compiled
    """:func:`_svc_pass` on a CSR X given by its three arrays: each row reads and updates only its columns."""
    p = w.shape[0] - 1
    pg_max, pg_min = -np.inf, np.inf
    m = perm.shape[0]
    for t in range(m):
        if ahead is not None:
            _csr_ask(data, indices, indptr, perm, t, ahead)
            if t + ahead < m:
                k = perm[t + ahead]
                _prefetch(c, k)
                _prefetch(sqnorm, k)
                _prefetch(alpha, k)
                _prefetch(y, k)
        i = perm[t]
        ci = c[i]
        if not ci > 0.0:  # a row of weight 0 is not part of the problem
            continue
        if squared:
            diag, upper = 0.5 / ci, np.inf
        else:
            diag, upper = 0.0, ci
        q = sigma * sqnorm[i] + diag
        if not q > 0.0:
            continue
        lo, hi = indptr[i], indptr[i + 1]
        dot = w[p] * bias
        for jj in range(lo, hi):
            dot += data[jj] * w[indices[jj]]
        a = alpha[i]
        yi = y[i]
        g = yi * dot - 1.0 + diag * a
        if a == 0.0:
            pg = min(g, 0.0)
        elif a >= upper:
            pg = max(g, 0.0)
        else:
            pg = g
        pg_max = max(pg_max, pg)
        pg_min = min(pg_min, pg)
        if abs(pg) > 1e-12:
            a_new = min(max(a - g / q, 0.0), upper)
            alpha[i] = a_new
            d = (a_new - a) * yi
            if d != 0.0:
                sd = sigma * d
                for jj in range(lo, hi):
                    j = indices[jj]
                    u[j] += d * data[jj]
                    w[j] += sd * data[jj]
                u[p] += d * bias
                w[p] += sd * bias
    return pg_max, pg_min


@lazy_njit(nogil=True, boundscheck=False)
def _svr_pass_csr(data, indices, indptr, y, c, beta, sqnorm, w, u, bias, sigma, squared, epsilon,
                  perm, ahead):  # pragma: no cover - compiled
    """:func:`_svr_pass` on a CSR X given by its three arrays."""
    p = w.shape[0] - 1
    v_max, v_sum = 0.0, 0.0
    m = perm.shape[0]
    for t in range(m):
        if ahead is not None:
            _csr_ask(data, indices, indptr, perm, t, ahead)
            if t + ahead < m:
                k = perm[t + ahead]
                _prefetch(c, k)
                _prefetch(sqnorm, k)
                _prefetch(beta, k)
                _prefetch(y, k)
        i = perm[t]
        ci = c[i]
        if not ci > 0.0:
            continue
        if squared:
            lam, upper = 0.5 / ci, np.inf
        else:
            lam, upper = 0.0, ci
        h = sigma * sqnorm[i] + lam
        if not h > 0.0:
            continue
        lo, hi = indptr[i], indptr[i + 1]
        dot = w[p] * bias
        for jj in range(lo, hi):
            dot += data[jj] * w[indices[jj]]
        b = beta[i]
        g = dot - y[i] + lam * b
        gp, gn = g + epsilon, g - epsilon
        if b == 0.0:
            viol = -gp if gp < 0.0 else (gn if gn > 0.0 else 0.0)
        elif b >= upper:
            viol = gp if gp > 0.0 else 0.0
        elif b <= -upper:
            viol = -gn if gn < 0.0 else 0.0
        elif b > 0.0:
            viol = abs(gp)
        else:
            viol = abs(gn)
        v_max = max(v_max, viol)
        v_sum += viol
        if gp < h * b:
            d = -gp / h
        elif gn > h * b:
            d = -gn / h
        else:
            d = -b
        if abs(d) < 1e-12:
            continue
        b_new = min(max(b + d, -upper), upper)
        beta[i] = b_new
        d = b_new - b
        if d != 0.0:
            sd = sigma * d
            for jj in range(lo, hi):
                j = indices[jj]
                u[j] += d * data[jj]
                w[j] += sd * data[jj]
            u[p] += d * bias
            w[p] += sd * bias
    return v_max, v_sum


# Row helpers for a pass body written once for both layouts (``dense`` selects the rows of the 2-D ``X``, else
# the CSR arrays; :func:`layout_args`): the Crammer-Singer pass, whose per-row work over K classes dwarfs
# the branch.
@lazy_njit(nogil=True, boundscheck=False, inline="always")
def _row_dot(X, data, indices, indptr, dense, i, w, bias):  # pragma: no cover - compiled
    """``w~ . x~_i`` (the bias feature's weight is ``w[p]``)."""
    p = w.shape[0] - 1
    z = w[p] * bias
    if dense:
        for j in range(p):
            z += X[i, j] * w[j]
    else:
        for jj in range(indptr[i], indptr[i + 1]):
            z += data[jj] * w[indices[jj]]
    return z


@lazy_njit(nogil=True, boundscheck=False, inline="always")
def _row_add(X, data, indices, indptr, dense, i, d, sigma, w, u, bias):  # pragma: no cover - compiled
    """``u += d x~_i`` and ``w += sigma d x~_i``."""
    p = w.shape[0] - 1
    sd = sigma * d
    if dense:
        for j in range(p):
            u[j] += d * X[i, j]
            w[j] += sd * X[i, j]
    else:
        for jj in range(indptr[i], indptr[i + 1]):
            j = indices[jj]
            u[j] += d * data[jj]
            w[j] += sd * data[jj]
    u[p] += d * bias
    w[p] += sd * bias


# ------------------------------------------------------------------- shard state
def set_shard_index(shard, index: int):
    """Per-shard map: record the shard's position among the shards (its slot in the stopping vector)."""
    shard.cache["dual_index"] = int(index)
    shard.cache.pop("dual_state", None)
    shard.cache.pop("cs_state", None)
    return int(index)


def _shard_index(shard) -> int:
    """The shard's slot among the shards (:func:`set_shard_index`; 0 when it was not set)."""
    return int(shard.cache.get("dual_index", 0))


def _host(t):
    if t is None:
        return None
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def _host_x(X):
    """The shard's X in host memory for the row loops: a C-contiguous float64 or float32 array, or, for a
    sparse CSR X (:mod:`._sparse`), a ``scipy.sparse.csr_array`` over its three arrays (views on the CPU).

    A float32 X stays float32: the row loops widen each value as they read it and keep every sum in float64.
    """
    from ._sparse import csr_parts, is_host_csr, is_sparse

    if not (is_sparse(X) or is_host_csr(X)):
        a = _host(X)
        return np.ascontiguousarray(a, dtype=a.dtype if a.dtype in (np.float32, np.float64) else np.float64)
    from scipy import sparse

    if is_sparse(X) and X.device.type != "cpu":
        X = X.cpu()
    data, indices, indptr = csr_parts(X)
    if data.dtype not in (np.float32, np.float64):
        data = np.asarray(data, dtype=np.float64)
    return sparse.csr_array((data, indices, indptr), shape=tuple(X.shape), copy=False)


def _row_sqnorms(X):
    """Each row's squared norm, summed in float64 (also for float32 values)."""
    if isinstance(X, np.ndarray):
        return np.einsum("ij,ij->i", X, X, dtype=np.float64)
    n = X.shape[0]
    rows = np.repeat(np.arange(n), np.diff(X.indptr))
    data = X.data.astype(np.float64, copy=False)
    return np.bincount(rows, weights=data * data, minlength=n)


def _pass_args(X):
    """The leading arguments of the per-layout passes: the dense X, or the CSR's three arrays."""
    if isinstance(X, np.ndarray):
        return (X,)
    return (X.data, index_array(X.indices), index_array(X.indptr))


def layout_args(X):
    """The leading arguments of the row-loop kernels, ``(X, data, indices, indptr, dense)``: the dense X
    with empty CSR arrays, or an empty 2-D X with the CSR's three arrays."""
    if isinstance(X, np.ndarray):
        empty = np.zeros(0, dtype=np.int64)
        return (X, np.zeros(0), empty, empty, True)
    return (np.zeros((0, 0)), X.data, index_array(X.indices), index_array(X.indptr), False)


def dual_state(shard, spec: DualSpec) -> dict:
    """The shard's dual state, made on first use: X in host memory (a sparse X as a CSR over its arrays,
    never densified), y (columns), C_i, squared row norms,
    ``alpha`` (n_outputs, n) at 0 and ``v = w~(alpha)`` (n_outputs, p + 1) at 0.

    Expects the targets as :func:`~dask_estimators.objectives.targets.prepare_targets` leaves them
    (``"squared_hinge"`` encoding for the classifiers: y in {-1, 1}, per-output weights one-vs-rest).
    """
    st = shard.cache.get("dual_state")
    K, p = spec.n_outputs, spec.n_features
    if st is not None and st["alpha"].shape[0] == K and st["spec"] == (spec.loss, spec.C, spec.bias, spec.epsilon):
        return st
    X = _host_x(_shard.array(shard, "X"))
    n = X.shape[0]
    y = np.asarray(_host(_shard.array(shard, "y")), dtype=np.float64).reshape(n, -1)
    if y.shape[1] != K:
        raise ValueError(f"The shard's targets have {y.shape[1]} columns, the problem {K}.")
    s = _host(_shard.array(shard, "sample_weight"))
    s = np.ones((n, 1)) if s is None else np.asarray(s, dtype=np.float64).reshape(n, -1)
    c = np.ascontiguousarray(np.broadcast_to(spec.C * s, (n, K)).T)
    st = {
        "X": X,
        "y": np.ascontiguousarray(y.T),
        "c": c,
        "sqnorm": _row_sqnorms(X) + spec.bias**2,
        "alpha": np.zeros((K, n)),
        "v": np.zeros((K, p + 1)),
        "pending": None,  # (d_alpha, u) of the last round, applied with the step the next round brings
        "classification": spec.classification,
        "upper": None if spec.squared else c,
        "spec": (spec.loss, spec.C, spec.bias, spec.epsilon),
    }
    shard.cache["dual_state"] = st
    return st


def _pieces(st, W, spec: DualSpec):
    """(sum_i C_i loss_i at W~, the dual's sum over rows at alpha), each (n_outputs,)."""
    X, y, c, alpha = st["X"], st["y"], st["c"], st["alpha"]
    z = (X @ W[:, :-1].T).T + spec.bias * W[:, -1:]  # (K, n)
    live = c > 0
    if spec.classification:
        loss = np.maximum(0.0, 1.0 - y * z)
    else:
        loss = np.maximum(0.0, np.abs(y - z) - spec.epsilon)
    if spec.squared:
        loss = loss * loss
    primal = np.where(live, c * loss, 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        quad = np.where(live, 0.25 / c * alpha * alpha, 0.0) if spec.squared else 0.0
    if spec.classification:
        dual = (np.where(live, alpha, 0.0) - quad).sum(axis=1)
    else:
        dual = (np.where(live, y * alpha - spec.epsilon * np.abs(alpha), 0.0) - quad).sum(axis=1)
    return primal, dual


# ----------------------------------------------------------------------- kernels
def _apply_pending(st, gamma):
    """Take the last round's step, scaled by ``gamma`` (per output): alpha += gamma * d_alpha, v += gamma * u."""
    pending, st["pending"] = st["pending"], None
    if pending is None:
        return
    d_alpha, u = pending
    gamma = np.asarray(_host(gamma), dtype=np.float64).reshape(-1, 1)
    st["alpha"] += gamma * d_alpha
    st["v"] += gamma * u
    upper = st.get("upper")
    if upper is not None:  # rounding must not leave the box
        lo = 0.0 if st["classification"] else -upper
        np.clip(st["alpha"], lo, upper, out=st["alpha"])


def dual_objective(shard, W, gamma, spec: DualSpec):
    """Kernel: after the last step (scaled by ``gamma``), ``{"primal": sum_i C_i loss_i(W~),
    "dual": dual row sum at alpha, "v": w~(alpha_k)}`` (raw sums).

    ``P = 1/2 ||W~||^2 + primal`` and ``D = dual - 1/2 ||w~(alpha)||^2`` are formed on the client.
    """
    st = dual_state(shard, spec)
    _apply_pending(st, gamma)
    W = np.asarray(_host(W), dtype=np.float64).reshape(spec.n_outputs, spec.n_features + 1)
    primal, dual = _pieces(st, W, spec)
    return {"primal": primal, "dual": dual, "v": st["v"].copy()}


def dual_round(shard, W, gamma, active, first, seed, passes, spec: DualSpec):
    """Kernel: one CoCoA+ round on this shard (see the module docstring).

    Parameters
    ----------
    shard : Shard
    W : array of shape (n_outputs, n_features + 1)
        The global ``w~`` (the sum of the shards' ``v``) at the start of the round, the last
        round's step taken.
    gamma : array of shape (n_outputs,)
        The scale of the last round's step (1 with ``aggregation="add"``).
    active : array of shape (n_outputs,)
        1 for the columns still to update, 0 for those that have converged.
    first : array of shape (n_outputs,)
        Regression: the sum of the violations in the fit's first pass (0 in the first round).
    seed : int
        Seeds the order of the rows (a fresh permutation per pass, as LIBLINEAR's).
    passes : int
        Local passes over the shard's rows in this round.  With one shard they are LIBLINEAR's
        iterations and stop early on its rule; with several the stopping values are those of the
        first pass, whose gradients start from the global point.
    spec : DualSpec

    Returns
    -------
    dict of raw sums
        ``"v"`` (n_outputs, p + 1): this shard's ``w~(alpha_k)`` at the start (their sum is ``W``);
        ``"u"``: its change by this round's step (kept on the shard until the next round brings
        the step's scale); ``"lin"`` and ``"quad"`` (n_outputs,): the shard's terms of the dual
        objective's change along the step, ``gamma * lin + gamma^2 / 2 * quad`` plus the terms in
        ``W`` and ``sum u`` that the client adds (an upper bound for the regressors); ``"primal"`` and
        ``"dual"`` (n_outputs,): the pieces of P and D at the start of the round; ``"stop"``
        (n_shards, 2, n_outputs): in this shard's slot, for SVC the (max, min) of the projected
        gradient, for SVR the (max, sum) of the violations (zeros elsewhere); ``"passes"``
        (n_shards, n_outputs): in this shard's slot, the passes made; ``"first"`` (n_outputs,):
        SVR, the sum of the violations in the round's first pass.
    """
    st = dual_state(shard, spec)
    _apply_pending(st, gamma)
    K, p = spec.n_outputs, spec.n_features
    W = np.asarray(_host(W), dtype=np.float64).reshape(K, p + 1)
    active = np.asarray(_host(active)).reshape(K) > 0
    first = np.asarray(_host(first), dtype=np.float64).reshape(K)
    primal, dual = _pieces(st, W, spec)
    v_start = st["v"].copy()
    alpha_start = st["alpha"].copy()
    index = _shard_index(shard)
    stop = np.zeros((spec.n_shards, 2, K))
    done = np.zeros((spec.n_shards, K))
    first_sum = np.zeros(K)
    U = np.zeros((K, p + 1))
    X, sigma, alone = st["X"], spec.sigma, spec.n_shards == 1
    n = X.shape[0]
    dense = isinstance(X, np.ndarray)
    svc, svr = (_svc_pass, _svr_pass) if dense else (_svc_pass_csr, _svr_pass_csr)
    xargs = _pass_args(X)
    ahead = _dual_ahead(X)
    rng = np.random.default_rng([int(seed) & 0x7FFFFFFF, index])
    tol = spec.tol
    for k in range(K):
        if not active[k]:
            continue
        w = W[k].copy()
        u = U[k]
        live = bool(np.any(st["c"][k] > 0))
        for h in range(int(passes)):
            perm = rng.permutation(n).astype(np.int64)
            if spec.classification:
                a, b = svc(*xargs, st["y"][k], st["c"][k], st["alpha"][k], st["sqnorm"], w, u, spec.bias, sigma,
                           spec.squared, perm, ahead)
            else:
                a, b = svr(*xargs, st["y"][k], st["c"][k], st["alpha"][k], st["sqnorm"], w, u, spec.bias, sigma,
                           spec.squared, spec.epsilon, perm, ahead)
            if h == 0 or alone:
                stop[index, :, k] = (a, b)
            if h == 0:
                first_sum[k] = b
            done[index, k] = h + 1
            if alone:  # the pass is LIBLINEAR's iteration: its rule decides here
                if spec.classification:
                    met = not live or a - b <= tol
                else:
                    if first[k] == 0.0:
                        first[k] = b
                    met = b <= tol * first[k]
                if met:
                    break
        if spec.classification and not live:  # no row of weight > 0: no bound on either side
            stop[index, :, k] = np.nan
    d_alpha = st["alpha"] - alpha_start
    st["alpha"][...] = alpha_start  # the step is taken when its scale is known (next round)
    st["pending"] = (d_alpha, U.copy())
    lin, quad = _step_terms(st, alpha_start, d_alpha, spec)
    return {"v": v_start, "u": U, "lin": lin, "quad": quad, "primal": primal, "dual": dual, "stop": stop,
            "passes": done, "first": first_sum if not spec.classification else np.zeros(K)}


def _step_terms(st, alpha, d, spec: DualSpec):
    """The shard's terms of ``f(alpha + g d) - f(alpha) <= g * (W . dW + lin) + g^2 / 2 * (||dW||^2 + quad)``.

    ``f`` is the dual objective to minimise (the negated ``D``); for the regressors the
    ``epsilon |beta|`` term is bounded by its chord on [0, 1], so the bound holds for ``g`` in [0, 1].
    """
    c = st["c"]
    live = c > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        diag = np.where(live, 0.5 / c, 0.0) if spec.squared else np.zeros_like(c)
    if spec.classification:
        lin = ((diag * alpha - 1.0) * d)
    else:
        lin = (-st["y"] * d + spec.epsilon * (np.abs(alpha + d) - np.abs(alpha)) + diag * alpha * d)
    lin = np.where(live, lin, 0.0).sum(axis=1)
    quad = (diag * d * d).sum(axis=1)
    return lin, quad


#: The dual kernels read their arguments as NumPy (``_host``): the engine's ``run_kernel`` passes them as they are.
for _kernel in (dual_objective, dual_round):
    _kernel.host_args = True
