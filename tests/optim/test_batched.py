"""The lockstep driver: each run's iterates are those of the same solver run alone; rounds are shared."""

import numpy as np
import pytest
from scipy.special import expit

from dask_estimators.optim import minimize
from dask_estimators.optim.batched import minimize_lockstep


class Logistic:
    """An L2 (and optionally L1) logistic objective on NumPy, recording the points it is evaluated at."""

    def __init__(self, X, y, l2, l1=0.0):
        self.X, self.y, self.l2, self.l1 = X, y, l2, l1
        self.n_params = X.shape[1]
        self.penalized = np.ones(self.n_params, dtype=bool)
        self.points = []

    def raw(self, w):
        z = self.X @ w
        loss = np.sum(np.logaddexp(0, z) - self.y * z)
        return loss, self.X.T @ (expit(z) - self.y)

    def finish(self, w, loss, grad):
        n = len(self.y)
        return loss / n + 0.5 * self.l2 * w @ w, grad / n + self.l2 * w

    def fun_and_grad(self, w):
        self.points.append(np.array(w))
        return self.finish(w, *self.raw(w))

    def hess(self, w):
        p = expit(self.X @ w)
        return (self.X.T * (p * (1 - p))) @ self.X / len(self.y) + self.l2 * np.eye(self.n_params)


@pytest.mark.parametrize("l1", [0.0, 0.01])
def test_lockstep_iterates_are_lone_runs(l1):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6))
    y = (X @ rng.standard_normal(6) + rng.standard_normal(300) > 0).astype(float)
    l2s = [1e-3, 1e-2, 1e-1, 1.0]  # the runs converge after different numbers of iterations
    lone = [Logistic(X, y, l2, l1) for l2 in l2s]
    alone = [minimize(o, np.zeros(6), solver="lbfgs", tol=1e-8, max_iter=200) for o in lone]

    together = [Logistic(X, y, l2, l1) for l2 in l2s]
    rounds = []

    def batch(idx, W):
        rounds.append(list(idx))
        out = [together[i].raw(w) for i, w in zip(idx, W)]
        for i, w in zip(idx, W):
            together[i].points.append(np.array(w))
        return np.array([o[0] for o in out]), np.stack([o[1] for o in out])

    res = minimize_lockstep(together, batch, np.zeros((4, 6)), solver="lbfgs", tol=1e-8, max_iter=200)
    for a, b, o_lone, o_together in zip(alone, res, lone, together):
        # the same points, bit for bit, in the same order: each run's own line search and stopping test
        assert len(o_lone.points) == len(o_together.points)
        for p, q in zip(o_lone.points, o_together.points):
            np.testing.assert_array_equal(p, q)
        np.testing.assert_array_equal(a.x, b.x)
        assert a.nit == b.nit
    # one round serves every run still going; runs drop out as they converge
    evaluations = [len(o.points) for o in lone]
    assert len(rounds) == max(evaluations)
    assert [len(r) for r in rounds] == [sum(e > j for e in evaluations) for j in range(len(rounds))]
    assert len(set(evaluations)) > 1


def test_lockstep_error_reaches_every_run():
    X = np.ones((3, 2))
    objs = [Logistic(X, np.ones(3), 1.0) for _ in range(3)]

    def batch(idx, W):
        raise RuntimeError("round failed")

    with pytest.raises(RuntimeError, match="round failed"):
        minimize_lockstep(objs, batch, np.zeros((3, 2)), tol=1e-8, max_iter=10)


def test_the_runs_convergence_warnings_are_raised_in_the_callers_thread():
    """Each run that stops at max_iter warns once, from the caller's thread (the warning names this file, not
    the thread pool's); with the warnings made errors, the error reaches the caller."""
    import warnings

    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 5))
    y = (X @ rng.standard_normal(5) > 0).astype(float)
    objs = [Logistic(X, y, l2) for l2 in (1e-4, 1e-3, 1e-2)]

    def batch(idx, W):
        out = [objs[i].raw(w) for i, w in zip(idx, W)]
        return np.array([o[0] for o in out]), np.stack([o[1] for o in out])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        minimize_lockstep(objs, batch, np.zeros((3, 5)), solver="lbfgs", tol=1e-12, max_iter=2)
    convergence = [w for w in caught if "failed to converge after 2 iteration" in str(w.message)]
    assert len(convergence) == 3
    assert all(w.filename == __file__ for w in convergence)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Warning, match="failed to converge"):
            minimize_lockstep(objs, batch, np.zeros((3, 5)), solver="lbfgs", tol=1e-12, max_iter=2)
    with warnings.catch_warnings(record=True) as caught:  # warn=False: none
        warnings.simplefilter("always")
        minimize_lockstep(objs, batch, np.zeros((3, 5)), solver="lbfgs", tol=1e-12, max_iter=2, warn=False)
    assert not [w for w in caught if "converge" in str(w.message)]
