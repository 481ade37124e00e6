"""Coordinate descent on a Gram matrix (dask_estimators.optim.gram_cd) against scikit-learn's ElasticNet.

The minimiser is checked three ways: against ``sklearn.linear_model.ElasticNet``
on the same data (the Gram of the centred data), by its optimality conditions
(the subgradient of every coordinate), and by its duality gap, which is zero
there and positive elsewhere.
"""

import numpy as np
import pytest
from sklearn.linear_model import ElasticNet

from dask_estimators.optim.gram_cd import duality_gap, enet_gram


def _data(n=300, d=12, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 3))
    X = base @ rng.normal(size=(3, d)) + 0.3 * rng.normal(size=(n, d))  # strongly correlated columns
    y = X[:, :4] @ np.array([2.0, -1.0, 0.5, 0.0]) + rng.normal(size=n)
    return X, y


def _gram(X, y):
    Xc, yc = X - X.mean(0), y - y.mean()
    return Xc.T @ Xc, Xc.T @ yc, float(yc @ yc)


@pytest.mark.parametrize("l1_ratio", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("alpha", [1.0, 0.1, 1e-3])
def test_matches_sklearn_elastic_net(alpha, l1_ratio):
    X, y = _data()
    n = len(y)
    G, c, yy = _gram(X, y)
    w, n_iter, ok = enet_gram(G, c, yy, n * alpha * l1_ratio, n * alpha * (1 - l1_ratio), tol=1e-14,
                              max_iter=100_000)
    ref = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-15, max_iter=1_000_000).fit(X, y)
    assert ok and n_iter >= 1
    np.testing.assert_allclose(w, ref.coef_, rtol=1e-7, atol=1e-9 * np.abs(ref.coef_).max())
    np.testing.assert_array_equal(w == 0, ref.coef_ == 0)


def test_optimality_conditions_and_gap():
    X, y = _data(seed=1)
    G, c, yy = _gram(X, y)
    l1, l2 = 40.0, 5.0
    w, _, ok = enet_gram(G, c, yy, l1, l2, tol=1e-13, max_iter=10_000)
    assert ok
    grad = c - G @ w - l2 * w  # minus the smooth part's gradient
    on = w != 0
    assert 0 < on.sum() < len(w)  # some coordinates at zero, some not: both conditions are exercised
    np.testing.assert_allclose(grad[on], l1 * np.sign(w[on]), rtol=1e-8)
    assert np.all(np.abs(grad[~on]) <= l1 * (1 + 1e-10))
    assert duality_gap(G, c, yy, l1, l2, w) <= 1e-13 * yy
    # elsewhere the gap is positive, and it bounds the distance to the minimum from above
    rng = np.random.default_rng(2)

    def objective(v):
        return 0.5 * v @ G @ v - c @ v + 0.5 * yy + l1 * np.abs(v).sum() + 0.5 * l2 * v @ v

    for _ in range(5):
        v = w + 0.1 * rng.normal(size=w.shape)
        gap = duality_gap(G, c, yy, l1, l2, v)
        assert gap > 0 and gap >= objective(v) - objective(w) - 1e-9 * yy


def test_warm_start_reaches_the_same_minimum_in_fewer_sweeps():
    X, y = _data(seed=3)
    G, c, yy = _gram(X, y)
    cold, n_cold, _ = enet_gram(G, c, yy, 5.0, 1.0, tol=1e-12, max_iter=10_000)
    near, _, _ = enet_gram(G, c, yy, 6.0, 1.0, tol=1e-12, max_iter=10_000)
    warm, n_warm, _ = enet_gram(G, c, yy, 5.0, 1.0, w0=near, tol=1e-12, max_iter=10_000)
    np.testing.assert_allclose(warm, cold, rtol=1e-9, atol=1e-12)
    assert n_warm <= n_cold
    assert np.all(near == enet_gram(G, c, yy, 6.0, 1.0, tol=1e-12, max_iter=10_000)[0])  # w0 is not modified


def test_without_l1_it_is_a_linear_solve():
    X, y = _data(seed=4)
    G, c, yy = _gram(X, y)
    w, n_iter, ok = enet_gram(G, c, yy, 0.0, 3.0)
    np.testing.assert_allclose(w, np.linalg.solve(G + 3.0 * np.eye(len(c)), c), rtol=1e-12)
    assert (n_iter, ok) == (1, True)
    # least squares on a rank-deficient Gram: the least-norm solution
    Xd = np.column_stack([X[:, 0], X[:, 0]])
    G2, c2, yy2 = _gram(Xd, y)
    w2, _, _ = enet_gram(G2, c2, yy2, 0.0, 0.0)
    assert w2[0] == pytest.approx(w2[1], rel=1e-10)
    np.testing.assert_allclose(G2 @ w2, c2, rtol=1e-8)


def test_zero_column_and_constant_target():
    X, y = _data(seed=5)
    X[:, 3] = 7.0  # constant: a zero row and column of the centred Gram
    G, c, yy = _gram(X, y)
    w, _, ok = enet_gram(G, c, yy, 10.0, 0.0, tol=1e-12, max_iter=10_000)
    assert ok and w[3] == 0 and np.all(np.isfinite(w))
    G, c, yy = _gram(X, np.full(len(y), 3.0))
    w, _, ok = enet_gram(G, c, yy, 10.0, 1.0, tol=1e-12)
    assert ok and np.all(w == 0)


def test_stopping_short_is_reported():
    X, y = _data(n=400, d=40, seed=6)
    G, c, yy = _gram(X, y)
    w, n_iter, ok = enet_gram(G, c, yy, 1.0, 0.0, tol=1e-14, max_iter=1)
    assert n_iter == 1
    assert ok == (duality_gap(G, c, yy, 1.0, 0.0, w) <= 1e-14 * yy)
    assert not ok
