"""LIBLINEAR's bias feature on a linear objective: the intercept penalised as ``(b / s)^2 / 2``.

LIBLINEAR (scikit-learn's ``LinearSVC`` and ``LinearSVR``) fits an intercept
by appending a constant feature of value ``s = intercept_scaling`` to every
row; its weight ``c`` is penalised like the coefficients and the intercept
is ``b = s * c``.  :class:`BiasFeatureObjective` gives any objective with the
interface of :class:`~dask_estimators.objectives.linear.LinearObjective` (an
unpenalised intercept) that parametrisation: its variables are
``[W.ravel(), c]``, and it adds the penalty of ``c`` (``l2 / 2 * c^2``, and
the L1 term of the drivers through ``penalized``).  Everything is computed on
the client from the wrapped objective's rounds: no kernel changes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BiasFeatureObjective"]


class BiasFeatureObjective:
    """``objective`` in LIBLINEAR's variables: the intercepts as bias-feature weights ``c = b / scale``, penalised.

    Parameters
    ----------
    objective : LinearObjective
        With ``spec.fit_intercept`` true.
    scale : float
        ``intercept_scaling``, positive and finite.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.objectives.bias import BiasFeatureObjective
    >>> class Quadratic:  # f(w) = ||w - 1||^2 / 2 with one coefficient and one intercept, l2 = 1
    ...     spec = type("S", (), {"n_outputs": 1, "n_features": 1, "fit_intercept": True})()
    ...     n_params, l2, l1, sw_sum = 2, 1.0, 0.0, 1.0
    ...     penalized = np.array([True, False])
    ...     def fun_and_grad(self, w):
    ...         return 0.5 * float((w - 1) @ (w - 1)) + 0.5 * w[0] ** 2, (w - 1) + w * self.penalized
    >>> f, g = BiasFeatureObjective(Quadratic(), 2.0).fun_and_grad(np.array([0.0, 1.0]))
    >>> float(f), g.tolist()  # b = 2 * 1: (0 - 1)^2 / 2 + (2 - 1)^2 / 2 + 1^2 / 2
    (1.5, [-1.0, 3.0])
    """

    def __init__(self, objective, scale: float):
        if not (0 < scale < np.inf):
            raise ValueError(f"intercept_scaling must be positive and finite here, got {scale!r}.")
        if not objective.spec.fit_intercept:
            raise ValueError("BiasFeatureObjective needs an objective with an intercept.")
        self.objective = objective
        self.scale = float(scale)
        self.spec = objective.spec
        self.n_params = objective.n_params
        self.sw_sum = objective.sw_sum
        self._k = objective.spec.n_outputs * objective.spec.n_features  # where the intercepts start
        self.penalized = np.ones(self.n_params, dtype=bool)

    def with_evaluator(self, evaluate):
        """This objective over another evaluator (see :meth:`.LinearObjective.with_evaluator`)."""
        import copy

        new = copy.copy(self)
        new.objective = self.objective.with_evaluator(evaluate)
        return new

    @property
    def l2(self):
        return self.objective.l2

    @property
    def l1(self):
        return self.objective.l1

    def to_inner(self, w):
        """``[W, c]`` -> the wrapped objective's ``[W, b]`` (``b = scale * c``)."""
        w = np.array(w, dtype=np.float64)
        w[self._k :] *= self.scale
        return w

    def from_inner(self, w):
        """``[W, b]`` -> ``[W, c]``."""
        w = np.array(w, dtype=np.float64)
        w[self._k :] /= self.scale
        return w

    def fun_and_grad(self, w):
        """Smooth part (loss and L2, the bias weight's included) and its gradient at ``w = [W, c]``."""
        w = np.asarray(w, dtype=np.float64)
        f, g = self.objective.fun_and_grad(self.to_inner(w))
        c = w[self._k :]
        g = np.array(g, dtype=np.float64)
        g[self._k :] = self.scale * g[self._k :] + self.l2 * c
        return f + 0.5 * self.l2 * float(c @ c), g

    def hessp(self, w, p):
        """Hessian of the smooth part at ``w`` times ``p``."""
        p = np.asarray(p, dtype=np.float64)
        h = np.array(self.objective.hessp(self.to_inner(w), self.to_inner(p)), dtype=np.float64)
        h[self._k :] = self.scale * h[self._k :] + self.l2 * p[self._k :]
        return h

    def hess(self, w):
        """Dense Hessian of the smooth part at ``w``."""
        H = np.array(self.objective.hess(self.to_inner(w)), dtype=np.float64)
        d = np.ones(self.n_params)
        d[self._k :] = self.scale
        H = H * d[:, None] * d[None, :]
        idx = np.arange(self._k, self.n_params)
        H[idx, idx] += self.l2
        return H
