"""The per-iteration callback of the scipy drivers (what ``verbose`` and ``progress`` show), on a NumPy objective.

No cluster: the driver sees only callables.  Each report must be the
solver's own iterate, with the objective and the largest (projected)
gradient entry at that point, once per iteration counted in ``nit``, and
without extra evaluations.
"""

import numpy as np
import pytest
from scipy.special import expit

from dask_estimators.optim import minimize
from dask_estimators._progress import IterationLog


class LogisticObjective:
    """Mean log-loss + l2/2 ||w[:-1]||^2 (+ l1 ||w[:-1]||_1 outside fun_and_grad), intercept last and unpenalised."""

    def __init__(self, X, y, l2=1e-2, l1=0.0):
        self.A = np.hstack([X, np.ones((X.shape[0], 1))])
        self.t = 2.0 * y - 1.0
        self.l2, self.l1 = l2, l1
        self.penalized = np.r_[np.ones(X.shape[1], bool), False]
        self.n_params = self.A.shape[1]
        self.n_evaluations = 0

    def fun_and_grad(self, w):
        self.n_evaluations += 1
        z = self.A @ w
        wp = w * self.penalized
        f = np.mean(np.logaddexp(0.0, -self.t * z)) + 0.5 * self.l2 * wp @ wp
        g = self.A.T @ (-self.t * expit(-self.t * z)) / len(z) + self.l2 * wp
        return f, g

    def hess(self, w):
        p = expit(self.A @ w)
        return (self.A * (p * (1 - p))[:, None]).T @ self.A / len(p) + self.l2 * np.diag(self.penalized.astype(float))

    def hessp(self, w, v):
        return self.hess(w) @ v


def _problem(l1=0.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 6))
    y = (X @ rng.normal(size=6) + 0.5 * rng.normal(size=300) > 0).astype(float)
    return LogisticObjective(X, y, l1=l1)


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg", "newton-cholesky"])
def test_callback_reports_every_iteration_at_the_iterate(solver):
    obj = _problem()
    reports = []
    res = minimize(obj, np.zeros(obj.n_params), solver=solver, tol=1e-8, max_iter=200, callback=reports.append)
    assert res.success and res.nit >= 2
    assert [r.nit for r in reports] == list(range(1, res.nit + 1))
    n_eval = obj.n_evaluations
    for r in reports:
        f, g = obj.fun_and_grad(r.x)  # recomputed here, independently of what the driver remembered
        assert r.fun == pytest.approx(f, rel=1e-12, abs=1e-15)
        assert r.grad_max == pytest.approx(np.max(np.abs(g)), rel=1e-9, abs=1e-15)
    np.testing.assert_array_equal(reports[-1].x, res.x)
    assert reports[-1].grad_max <= 1e-8
    times = [r.time for r in reports]
    assert times == sorted(times)
    # the reports cost no evaluation: the same fit without a callback makes as many
    obj2 = _problem()
    res2 = minimize(obj2, np.zeros(obj2.n_params), solver=solver, tol=1e-8, max_iter=200)
    assert obj2.n_evaluations == n_eval and res2.nit == res.nit


def test_lbfgs_objective_never_increases():
    obj = _problem()
    reports = []
    minimize(obj, np.zeros(obj.n_params), solver="lbfgs", tol=1e-8, max_iter=200, callback=reports.append)
    f = [r.fun for r in reports]
    assert all(b <= a for a, b in zip(f, f[1:]))


def test_l1_reports_the_projected_gradient_of_the_split_problem():
    obj = _problem(l1=0.05)
    reports = []
    res = minimize(obj, np.zeros(obj.n_params), solver="lbfgs", tol=1e-7, max_iter=500, callback=reports.append)
    assert len(reports) == res.nit and np.any(res.x[obj.penalized] == 0)
    last = reports[-1]
    # the callback sees the model's parameters w = u - v, not the split variables theta = (u, v, intercept)
    np.testing.assert_array_equal(last.x, res.x)
    # at the end u * v = 0 entrywise, so theta is u = max(w, 0), v = max(-w, 0)
    pen, n_pen = obj.penalized, int(obj.penalized.sum())
    u, v = np.maximum(res.x[pen], 0), np.maximum(-res.x[pen], 0)
    theta = np.r_[u, v, res.x[~pen]]
    # L-BFGS-B's projected gradient of the split objective, from the unsplit gradient
    f, g = obj.fun_and_grad(res.x)
    gp = g[pen]
    gt = np.r_[gp + obj.l1, -gp + obj.l1, g[~pen]]
    lower = np.r_[np.zeros(2 * n_pen), -np.inf]
    proj = np.maximum(theta - gt, lower) - theta
    assert last.grad_max == pytest.approx(np.max(np.abs(proj)), rel=1e-9, abs=1e-15)
    assert last.fun == pytest.approx(f + obj.l1 * (u.sum() + v.sum()), rel=1e-12)
    assert last.grad_max <= 1e-7


def test_newton_polish_iterations_are_reported_only_when_kept():
    """tol below what L-BFGS-B reaches: the Newton polish finishes, and its steps are numbered on."""
    obj = _problem()
    reports = []
    res = minimize(obj, np.zeros(obj.n_params), solver="lbfgs", tol=1e-15, max_iter=500, callback=reports.append)
    assert "Newton polish" in res.message  # the polish ran and was kept
    assert [r.nit for r in reports] == list(range(1, res.nit + 1))
    np.testing.assert_array_equal(reports[-1].x, res.x)


def test_max_iter_zero_reports_nothing():
    obj = _problem()
    reports = []
    with pytest.warns(Warning):
        res = minimize(obj, np.zeros(obj.n_params), max_iter=0, callback=reports.append)
    assert res.nit == 0 and reports == []


def test_iteration_log_lines(capsys):
    obj = _problem()
    log = IterationLog(verbose=1, progress=False, total=200, desc="test")
    res = minimize(obj, np.zeros(obj.n_params), solver="newton-cg", tol=1e-8, max_iter=200, callback=log)
    log.close()
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == res.nit and out.err == ""
    assert lines[0].startswith("Iteration 1, objective = ")


def test_an_l1_fit_that_stops_short_of_tol_says_so():
    """An L1 fit's stopping quantity is the projected gradient of its split problem; where L-BFGS-B (restarted from
    its stalls) can no longer lower the objective above ``tol``, minimize warns as for the other fits (an L1 fit
    carried no gradient, so it never warned)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    obj = _problem(l1=1e-2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = minimize(obj, np.zeros(obj.n_params), solver="lbfgs", tol=1e-18, max_iter=10_000)
    assert res.nit < 10_000 and res.grad_max > 1e-18
    [w] = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert "short of tol = 1e-18" in str(w.message)
    kept = []
    quiet = minimize(obj, np.zeros(obj.n_params), solver="lbfgs", tol=1e-6, max_iter=10_000, warn=kept)
    assert quiet.grad_max <= 1e-6 and kept == []
    np.testing.assert_allclose(quiet.x, res.x, atol=1e-5)
