"""A linear objective in centred variables: the intercepts measured at the mean row, ``b = c - xbar @ W``.

With columns far from zero (ages, prices, counts) a linear model's
coefficients and intercept are strongly coupled: moving a coefficient moves
every prediction by about its column's mean, which the intercept must undo.
The Hessian is then ill-conditioned, and a first-order or quasi-Newton
solver (L-BFGS, Newton-CG's inner conjugate gradients) needs many more
iterations.  In the variables ``[W, c]`` with ``b = c - xbar @ W`` the
coupling is gone at the start: ``X W + b = (X - xbar) W + c``.  The
minimum is the same; only the path to it changes.

Where the minimum is not unique (a rank-deficient X, more columns than
rows, no penalty) L-BFGS from zero ends at the solution of least norm in
its own variables: in these, that of the centred problem, which is
scikit-learn's ``LinearRegression``.

``xbar`` is read off one Hessian-vector product at a point where every row
has the same linear predictor (the coefficients zero): there the Hessian's
intercept column is the curvature-weighted sum of the rows, so
``H[W_k, b] / H[b_k, b]`` is the mean row weighted by the sample weights,
the class weights and the loss's curvature at the start.  It needs no
kernel of its own, and for the squared loss it is the weighted mean.
Everything else is computed on the client from the wrapped objective.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CentredObjective", "row_means"]


def row_means(objective, w0):
    """Each output's curvature-weighted mean row (K, d) from one ``hessp`` of ``objective`` near ``w0``, or None;
    and ``(point, f, g)``, the evaluation there that the product needed (a solver starting at that point, the
    coefficients zero, need not evaluate it again: see :class:`CentredObjective`'s ``first``).

    The product is taken at ``w0`` with the coefficients set to zero (each
    row's linear predictor is then its intercept), with the direction of
    the intercepts: all of them for independent outputs, the first for the
    multinomial loss (whose intercepts are coupled, and a shift of all of
    them is a null direction).  None where a curvature there is not
    positive and finite (no reparametrisation is made).
    """
    spec = objective.spec
    K, d = spec.n_outputs, spec.n_features
    probe = np.array(w0, dtype=np.float64)
    probe[: K * d] = 0.0
    p = np.zeros(objective.n_params)
    if spec.loss == "multinomial":
        p[K * d] = 1.0
    else:
        p[K * d :] = 1.0
    f, g = objective.fun_and_grad(probe)  # the point the product is taken at
    with np.errstate(all="ignore"):
        h = np.asarray(objective.hessp(probe, p), dtype=np.float64)
        hb = h[K * d :]
        # every intercept's curvature positive, and none below 1e-12 of the largest (all zero fails too)
        if not (np.all(np.isfinite(h)) and np.all(np.abs(hb) > 1e-12 * np.abs(hb).max(initial=0.0))):
            return None, (probe, f, g)
        return h[: K * d].reshape(K, d) / hb[:, None], (probe, f, g)


class CentredObjective:
    """``objective`` (with intercepts) in the variables ``[W.ravel(), c]``, where ``b = c - xbar @ W`` per output.

    Parameters
    ----------
    objective : LinearObjective
        With ``spec.fit_intercept`` true and unpenalised intercepts.
    xbar : ndarray of shape (n_outputs, n_features)
        The row each output's intercept is measured at (:func:`row_means`).
    first : tuple or None
        ``(point, f, g)``: the wrapped objective's value and gradient at
        ``point`` (its variables), already evaluated; the first call at that
        point takes them instead of another round.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.objectives.centred import CentredObjective
    >>> class LeastSquares:  # two rows (1, 1) and (3, 3): F = mean of (x w + b - y)^2 / 2
    ...     spec = type("S", (), {"n_outputs": 1, "n_features": 1, "fit_intercept": True})()
    ...     n_params, l2, l1, sw_sum, penalized = 2, 0.0, 0.0, 2.0, np.array([True, False])
    ...     X, y = np.array([[1.0, 1.0], [3.0, 1.0]]), np.array([1.0, 3.0])
    ...     def fun_and_grad(self, w):
    ...         r = self.X @ w - self.y
    ...         return 0.25 * float(r @ r), self.X.T @ r / 2
    >>> obj = CentredObjective(LeastSquares(), np.array([[2.0]]))
    >>> obj.to_inner(np.array([1.0, 2.0])).tolist()  # w = 1, c = 2: b = 2 - 2 * 1
    [1.0, 0.0]
    >>> f, g = obj.fun_and_grad(np.array([1.0, 2.0]))  # (x - 2) w + c fits y exactly
    >>> float(f), g.tolist()
    (0.0, [0.0, 0.0])
    """

    def __init__(self, objective, xbar, first=None):
        spec = objective.spec
        if not spec.fit_intercept:
            raise ValueError("CentredObjective needs an objective with an intercept.")
        self.objective = objective
        self.spec = spec
        self.xbar = np.asarray(xbar, dtype=np.float64).reshape(spec.n_outputs, spec.n_features)
        self.n_params = objective.n_params
        self.sw_sum = objective.sw_sum
        self.penalized = objective.penalized  # the coefficients are the same variables; the intercepts are not
        self._k = spec.n_outputs * spec.n_features
        self._first = first

    def with_evaluator(self, evaluate):
        """This objective over another evaluator (see :meth:`.LinearObjective.with_evaluator`)."""
        import copy

        new = copy.copy(self)
        new.objective = self.objective.with_evaluator(evaluate)
        return new

    l2 = property(lambda self: self.objective.l2)
    l1 = property(lambda self: self.objective.l1)
    positive = property(lambda self: bool(getattr(self.objective, "positive", False)))
    quadratic = property(lambda self: bool(getattr(self.objective, "quadratic", False)))
    #: the multinomial loss's null direction (a shift common to all classes) is one in these variables too: a
    #: common shift of the c's, and without penalty of the W's (which shifts every b alike)
    newton_fixed = property(lambda self: getattr(self.objective, "newton_fixed", None))

    def _shift(self, w):
        return (self.xbar * np.asarray(w[: self._k]).reshape(self.xbar.shape)).sum(axis=1)

    def to_inner(self, v):
        """``[W, c]`` -> the wrapped objective's ``[W, b]``."""
        w = np.array(v, dtype=np.float64)
        w[self._k :] -= self._shift(w)
        return w

    def from_inner(self, w):
        """``[W, b]`` -> ``[W, c]``."""
        v = np.array(w, dtype=np.float64)
        v[self._k :] += self._shift(v)
        return v

    def _pull_back(self, g):
        """``J^T g``: a gradient (or Hessian column) in ``[W, b]`` as one in ``[W, c]``."""
        g = np.array(g, dtype=np.float64)
        g[: self._k] -= (self.xbar * g[self._k :, None]).reshape(-1)
        return g

    def fun_and_grad(self, v):
        """The wrapped objective's smooth part and its gradient at ``v = [W, c]``."""
        w = self.to_inner(v)
        first, self._first = self._first, None
        if first is not None and np.array_equal(first[0], w):
            f, g = first[1], first[2]
        else:
            f, g = self.objective.fun_and_grad(w)
        return f, self._pull_back(g)

    def hessp(self, v, p):
        """Hessian of the smooth part at ``v`` times ``p``."""
        return self._pull_back(self.objective.hessp(self.to_inner(v), self.to_inner(p)))

    def hess(self, v):
        """Dense Hessian of the smooth part at ``v``: ``J^T H J``."""
        H = np.asarray(self.objective.hess(self.to_inner(v)), dtype=np.float64)
        J = np.eye(self.n_params)
        J[self._k :, : self._k] = -np.kron(np.eye(self.spec.n_outputs), np.ones((1, self.spec.n_features))) * (
            self.xbar.reshape(1, -1))
        return J.T @ H @ J
