"""Crammer and Singer's multi-class SVM (objectives/crammer_singer.py, optim/dual_driver.py), in-process shards.

The row step minimises the dual over the row's K variables (against a
brute-force solve of the same small problem), the shards' objective pieces
sum to the whole data's, weak duality holds and the gap closes, and 1, 2 and
3 shards reach LIBLINEAR's solution (scikit-learn's
``LinearSVC(multi_class="crammer_singer")``).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize
from sklearn import svm
from sklearn.datasets import load_iris, load_wine
from sklearn.preprocessing import StandardScaler

from dask_estimators.engine import LocalEvaluator
from dask_estimators.objectives.crammer_singer import CSSpec, _cs_pass, cs_objective, cs_state
from dask_estimators.optim.dual_driver import crammer_singer_ascent
from dual_shards import indexed_shards  # tests/dual_shards.py


def _scaled(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _shards(X, y, n_shards, sample_weight=None):
    return indexed_shards(X, y, "multinomial", int(y.max()) + 1, n_shards, sample_weight)


def _f(W, alpha, X, y, bias):
    """The dual objective f(alpha) from scratch, and W~(alpha)."""
    Xb = np.column_stack([X, np.full(len(X), bias)])
    Wa = alpha.T @ Xb
    E = np.ones_like(alpha)
    E[np.arange(len(y)), y] = 0.0
    return 0.5 * np.sum(Wa * Wa) + np.sum(E * alpha), Wa


def test_row_step_minimises_the_dual_over_the_row():
    rng = np.random.default_rng(0)
    K, p, bias, C = 4, 3, 1.5, 0.7
    X = rng.normal(size=(6, p))
    y = rng.integers(0, K, 6)
    c = np.full(6, C)
    sqnorm = np.einsum("ij,ij->i", X, X) + bias**2
    # a generic feasible point: alpha_im <= 0 off the class, the class's own entry balancing the row
    alpha = -rng.uniform(0, C / K, (6, K))
    alpha[np.arange(6), y] = 0.0
    alpha[np.arange(6), y] = -alpha.sum(axis=1)
    W = _f(None, alpha, X, y, bias)[1]
    U = np.zeros_like(W)
    i = 2
    before = alpha.copy()
    W0 = W.copy()
    _cs_pass(X, np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), True, y, c, alpha, sqnorm, W, U, bias,
             1.0, np.array([i], dtype=np.int64), None)

    def f_row(a):
        trial = before.copy()
        trial[i] = a
        return _f(None, trial, X, y, bias)[0]

    upper = np.where(np.arange(K) == y[i], C, 0.0)
    res = optimize.minimize(f_row, before[i], method="SLSQP", constraints=[{"type": "eq", "fun": np.sum}],
                            bounds=[(None, u) for u in upper], options={"ftol": 1e-14, "maxiter": 500})
    assert f_row(alpha[i]) <= res.fun + 1e-9
    assert abs(alpha[i].sum()) < 1e-12 and np.all(alpha[i] <= upper + 1e-15)
    np.testing.assert_array_equal(np.delete(alpha, i, axis=0), np.delete(before, i, axis=0))
    # the local weights follow alpha: W~ = sum_i alpha_i x~_i
    np.testing.assert_allclose(W, _f(None, alpha, X, y, bias)[1], atol=1e-12)
    assert not np.array_equal(W, W0)


def test_shard_pieces_sum_to_the_whole_data():
    X, y = _scaled(load_iris)
    spec1, spec3 = CSSpec(4, 3, C=0.5, bias=2.0), CSSpec(4, 3, C=0.5, bias=2.0, n_shards=3)
    whole, parts = _shards(X, y, 1)[0], _shards(X, y, 3)
    rng = np.random.default_rng(1)
    alpha = -rng.uniform(0, 0.1, (len(y), 3))
    alpha[np.arange(len(y)), y] = 0.0
    alpha[np.arange(len(y)), y] = -alpha.sum(axis=1)
    cs_state(whole, spec1)["alpha"][:] = alpha
    for shard, idx in zip(parts, np.array_split(np.arange(len(y)), 3)):
        cs_state(shard, spec3)["alpha"][:] = alpha[idx]
    W = rng.normal(size=(3, 5))
    one = cs_objective(whole, W, spec1)
    summed = LocalEvaluator(parts)(cs_objective, W, spec3)
    for key in ("loss", "ealpha"):
        np.testing.assert_allclose(summed[key], one[key], rtol=1e-13)
    # from scratch: sum_i C max_m (e_im + z_im - z_iy) and sum e . alpha
    Z = X @ W[:, :4].T + 2.0 * W[:, 4]
    E = np.ones_like(Z)
    E[np.arange(len(y)), y] = 0.0
    np.testing.assert_allclose(one["loss"], 0.5 * (E + Z - Z[np.arange(len(y)), y][:, None]).max(axis=1).sum())
    np.testing.assert_allclose(one["ealpha"], (E * alpha).sum())


@pytest.mark.parametrize("n_shards", [1, 2, 3])
@pytest.mark.parametrize("loader", [load_iris, load_wine])
def test_equals_liblinear_and_the_gap_closes(loader, n_shards):
    X, y = _scaled(loader)
    sw = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    K = int(y.max()) + 1
    spec = CSSpec(X.shape[1], K, C=0.3, bias=1.0, n_shards=n_shards, tol=1e-9)
    res = crammer_singer_ascent(LocalEvaluator(_shards(X, y, n_shards, sw)), spec, max_iter=50_000,
                                passes_per_round=100 if n_shards == 1 else 1)
    assert res.success and 0 <= res.gap <= 1e-7 * res.fun
    ref = svm.LinearSVC(multi_class="crammer_singer", C=0.3, tol=1e-12, max_iter=200_000).fit(X, y,
                                                                                              sample_weight=sw)
    W = np.column_stack([ref.coef_, ref.intercept_])
    np.testing.assert_allclose(res.x, W, atol=1e-6)
    if n_shards == 1:
        assert res.rounds == -(-res.nit // 100)
    else:
        assert res.rounds == res.nit


def test_max_iter_zero_returns_zeros_and_the_spec_checks():
    X, y = _scaled(load_iris)
    res = crammer_singer_ascent(LocalEvaluator(_shards(X, y, 1)), CSSpec(4, 3), max_iter=0)
    assert not res.success and res.nit == 0 and not np.any(res.x)
    with pytest.raises(ValueError, match="finite positive C"):
        CSSpec(4, 3, C=np.inf)
    with pytest.raises(ValueError, match="n_classes"):
        CSSpec(4, 1)
