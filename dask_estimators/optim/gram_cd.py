"""Elastic-net coordinate descent on a Gram matrix: least-squares fits with no pass over the data.

For the squared loss every quantity a solver needs is a function of the
weighted second moments of ``[X, y]``: the objective

    ½ wᵀGw − cᵀw + ½·yy + λ₁‖w‖₁ + ½λ₂‖w‖²       (G = XᵀSX, c = XᵀSy, yy = yᵀSy)

its gradient, and its duality gap.  Once the workers have summed those
moments (one round), a whole regularisation path, for every split of a
cross-validation, is solved here on the client in O(d²) per sweep, whatever
the number of rows.  :mod:`dask_estimators.estimators.cv` uses it for
``LinearRegressionCV``.

The solver is cyclic coordinate descent with soft-thresholding, keeping
``q = G w`` up to date (a coordinate's change costs one column of G), and it
stops on the duality gap of the elastic net written as a lasso on the
augmented design ``[X; √λ₂ I]``: ``gap ≤ tol · yy``.  Every few sweeps it tries the linear
solve on the current support with the current signs, and keeps it where it
stays in that orthant and lowers the objective: that ends coordinate
descent's slow tail on correlated columns.  Without an L1 part the
minimiser is one linear solve.

Nothing here knows Dask or the shards.
"""

from __future__ import annotations

import numpy as np

from .. import _jit  # numba's njit cached on disk (dask_estimators._jit)

__all__ = ["enet_gram", "duality_gap"]


@_jit.njit(nogil=True)
def _gap(G, c, yy, l1, l2, w, q):
    """The elastic net's duality gap at ``w`` (``q = G w``)."""
    d = w.shape[0]
    wc = 0.0
    wq = 0.0
    w1 = 0.0
    w2 = 0.0
    dual_norm = 0.0
    for j in range(d):
        wc += w[j] * c[j]
        wq += w[j] * q[j]
        w1 += abs(w[j])
        w2 += w[j] * w[j]
        a = abs(c[j] - q[j] - l2 * w[j])  # the augmented design's correlation with the residual
        if a > dual_norm:
            dual_norm = a
    r2 = max(yy - 2.0 * wc + wq, 0.0) + l2 * w2  # the augmented residual's squared norm
    s = 1.0 if dual_norm <= l1 else l1 / dual_norm  # the residual scaled into the dual's feasible set
    return 0.5 * (1.0 + s * s) * r2 + l1 * w1 - s * (yy - wc)


@_jit.njit(nogil=True)
def _sweeps(G, c, yy, l1, l2, w, q, tol_gap, max_iter):
    d = w.shape[0]
    gap = np.inf
    for it in range(max_iter):
        for j in range(d):
            denom = G[j, j] + l2
            old = w[j]
            if denom <= 0.0:  # a column of zeros without an L2 part: its coefficient stays 0
                new = 0.0
            else:
                rho = c[j] - q[j] + G[j, j] * old
                mag = abs(rho) - l1
                new = 0.0 if mag <= 0.0 else (mag if rho > 0.0 else -mag) / denom
            if new != old:
                delta = new - old
                for i in range(d):
                    q[i] += delta * G[j, i]  # G is symmetric: row j is column j, read contiguously
                w[j] = new
        gap = _gap(G, c, yy, l1, l2, w, q)
        if gap <= tol_gap:
            return it + 1, gap
    return max_iter, gap


def duality_gap(G, c, yy, l1, l2, w):
    """The duality gap of ``½ wᵀGw − cᵀw + ½yy + l1‖w‖₁ + ½·l2‖w‖²`` at ``w`` (0 at the minimum; needs l1 > 0).

    Examples
    --------
    >>> import numpy as np
    >>> G, c = np.eye(2), np.array([3.0, 0.5])
    >>> round(duality_gap(G, c, 9.25, 1.0, 0.0, np.array([2.0, 0.0])), 12)  # the lasso's minimiser
    0.0
    """
    G = np.ascontiguousarray(G, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    return float(_gap(G, np.asarray(c, dtype=np.float64), float(yy), float(l1), float(l2), w, G @ w))


def enet_gram(G, c, yy, l1, l2, w0=None, tol=1e-6, max_iter=1000):
    """Minimise ``½ wᵀGw − cᵀw + l1‖w‖₁ + ½·l2‖w‖²`` by coordinate descent (a linear solve when l1 = 0).

    Parameters
    ----------
    G : ndarray of shape (d, d)
        Symmetric positive semi-definite (``XᵀSX``, centred where there is an intercept).
    c : ndarray of shape (d,)
        ``XᵀSy``.
    yy : float
        ``yᵀSy``: the gap's scale (and the residual's norm).
    l1, l2 : float
        The penalties, on the scale of ``G`` (a mean-scaled objective's alphas times the weight sum).
    w0 : ndarray of shape (d,), optional
        The start (a warm start along a path); zeros by default.
    tol : float
        Stop when the duality gap is at most ``tol * yy``.
    max_iter : int
        Sweeps over the coordinates.

    Returns
    -------
    w : ndarray of shape (d,)
    n_iter : int
        Sweeps made (1 for a linear solve).
    converged : bool

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 3)); y = X @ [1.0, 0.0, -2.0]
    >>> w, n_iter, ok = enet_gram(X.T @ X, X.T @ y, y @ y, l1=1.0, l2=0.0, tol=1e-12)
    >>> ok, np.round(w, 2).tolist()
    (True, [0.98, 0.0, -1.98])
    """
    G = np.ascontiguousarray(G, dtype=np.float64)
    c = np.ascontiguousarray(c, dtype=np.float64)
    d = c.shape[0]
    if l1 <= 0.0:  # ridge or least squares: the minimiser solves (G + l2 I) w = c (least norm when singular)
        A = G + l2 * np.eye(d)
        try:
            w = np.linalg.solve(A, c) if l2 > 0 else np.linalg.lstsq(A, c, rcond=None)[0]
        except np.linalg.LinAlgError:
            w = np.linalg.lstsq(A, c, rcond=None)[0]
        return w, 1, True
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64, copy=True)
    q = G @ w
    tol_gap = float(tol) * max(float(yy), 0.0)
    done, gap = 0, np.inf
    while done < max_iter:
        n, gap = _sweeps(G, c, float(yy), float(l1), float(l2), w, q, tol_gap, min(_POLISH_EVERY, max_iter - done))
        done += int(n)
        if gap <= tol_gap:
            break
        polished = _polish(G, c, l1, l2, w)
        if polished is not None:
            w[:] = polished
            q[:] = G @ w
            gap = _gap(G, c, float(yy), float(l1), float(l2), w, q)
            if gap <= tol_gap:
                break
    return w, done, bool(gap <= tol_gap)


#: Sweeps between two attempts at solving on the support (:func:`_polish`).
_POLISH_EVERY = 5


def _objective(G, c, l1, l2, w):
    return 0.5 * w @ (G @ w) - c @ w + l1 * np.abs(w).sum() + 0.5 * l2 * (w @ w)


def _polish(G, c, l1, l2, w):
    """The minimiser on ``w``'s support with its signs, where that keeps the signs and lowers the objective.

    On a fixed support with fixed signs the elastic net is a linear system,
    ``(G_AA + l2 I) w_A = c_A − l1 sign(w_A)``; once the sweeps have found the
    support this ends the slow tail of coordinate descent on correlated
    columns.  Returns None where the solve leaves the orthant or gains nothing.
    """
    support = np.flatnonzero(w)
    if support.size == 0:
        return None
    signs = np.sign(w[support])
    A = G[np.ix_(support, support)] + l2 * np.eye(support.size)
    try:
        w_a = np.linalg.solve(A, c[support] - l1 * signs)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.sign(w_a) == signs):
        return None
    out = np.zeros_like(w)
    out[support] = w_a
    return out if _objective(G, c, l1, l2, out) <= _objective(G, c, l1, l2, w) else None
