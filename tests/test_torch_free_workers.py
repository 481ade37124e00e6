"""A linear fit never imports torch (nor, on dask input, scikit-learn) on a worker.

On a fresh process cluster whose workers have imported neither, every linear
estimator fits on NumPy and on dask input, with sample and class weights, the
newton-cholesky solver, the dual SVMs and the cross-validated estimators,
also on sparse input (scipy CSR, and a dask array of CSR blocks), and
predicts on dask input: torch and
scikit-learn stay out of every worker's ``sys.modules`` (importing them was about
2.4 s of one core, most of a first fit's set-up on a cluster the user started).
The models are those the session cluster's workers fit with torch imported.
"""

import sys

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster

import dask_estimators as de


def _loaded():
    return sorted(m for m in ("torch", "sklearn") if m in sys.modules)


@pytest.fixture(scope="module")
def fresh():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=60)
        assert set(map(tuple, c.run(_loaded).values())) == {()}
        yield c


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6000, 8))
    y = (X[:, 0] + 0.5 * rng.standard_normal(6000) > 0).astype(int)
    y3 = y + (X[:, 1] > 0.3)
    return X, y, y3, rng.uniform(0.5, 2.0, 6000), np.exp(0.3 * X[:, 2]).round()


def _dask(a):
    return da.from_array(a, chunks=1500)


def _fits(client):
    """(name, fitted model) for each linear case, fitted through ``client``."""
    X, y, y3, sw, counts = _data()
    dX = _dask(X)
    cases = [
        ("lbfgs, weights", de.LogisticRegression(class_weight="balanced", client=client), (X, y), {"sample_weight": sw}),
        ("lbfgs, dask", de.LogisticRegression(client=client), (dX, _dask(y)), {"sample_weight": _dask(sw)}),
        ("multinomial, dask", de.LogisticRegression(client=client), (dX, _dask(y3)), {}),
        ("newton-cholesky", de.LogisticRegression(solver="newton-cholesky", client=client), (X, y), {}),
        ("ols", de.LinearRegression(client=client), (dX, _dask(X @ np.arange(8.0))), {}),
        ("svc", de.LinearSVC(random_state=0, client=client), (X, y3), {}),
        ("svr", de.LinearSVR(random_state=0, client=client), (dX, _dask(X[:, 1])), {}),
        ("poisson", de.PoissonRegressor(client=client), (X, counts), {}),
        ("logistic cv", de.LogisticRegressionCV(Cs=3, client=client), (X, y3), {"sample_weight": sw}),
        ("elastic-net cv, dask", de.LinearRegressionCV(l1_ratio=0.5, client=client), (dX, _dask(X[:, 1])), {}),
    ] + _sparse_cases(client)
    return [(name, est.fit(*args, **kw)) for name, est, args, kw in cases]


def _sparse_cases(client):
    """The estimators on sparse X: its CSR arrays stay NumPy on the worker, read by the numba kernels (the
    searches' kernels through scipy.sparse)."""
    X, y, y3, sw, counts = _data()
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0.0))  # about 42% of the values stored
    blocks = da.from_array(Xs.toarray(), chunks=(1500, 8)).map_blocks(sp.csr_matrix, dtype=float,
                                                                       meta=sp.csr_matrix((0, 0)))
    return [
        ("sparse lbfgs, weights", de.LogisticRegression(client=client), (Xs, y), {"sample_weight": sw}),
        ("sparse multinomial, dask blocks", de.LogisticRegression(client=client), (blocks, _dask(y3)), {}),
        ("sparse newton-cholesky", de.LogisticRegression(solver="newton-cholesky", client=client), (Xs, y), {}),
        ("sparse ols", de.LinearRegression(client=client), (Xs, Xs @ np.arange(8.0)), {}),
        ("sparse svc", de.LinearSVC(random_state=0, client=client), (Xs, y3), {}),
        ("sparse poisson, float32", de.PoissonRegressor(client=client), (Xs.astype(np.float32), counts), {}),
        ("sparse logistic cv", de.LogisticRegressionCV(Cs=3, client=client), (Xs, y3), {"sample_weight": sw}),
        ("sparse elastic-net cv, dask blocks", de.LinearRegressionCV(l1_ratio=0.5, client=client),
         (blocks, _dask(X[:, 1])), {}),
    ]


def test_linear_fits_leave_torch_and_scikit_learn_off_the_workers(fresh, client):
    X = _data()[0]
    fitted = _fits(fresh)
    predicted = fitted[1][1].predict(_dask(X)).compute()
    assert {tuple(v) for v in fresh.run(_loaded).values()} == {()}
    client.run(__import__, "torch")
    for (name, ours), (_, theirs) in zip(fitted, _fits(None)):  # the session cluster, torch on its workers
        np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(predicted, fitted[1][1].predict(X))


def _searches(client):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    from dask_estimators.model_selection import GridSearchCV

    X, y, _, _, _ = _data()
    classify = GridSearchCV(make_pipeline(StandardScaler(), de.LogisticRegression(client=client)),
                            {"logisticregression__C": [0.1, 1.0]}, cv=3)
    regress = GridSearchCV(make_pipeline(MinMaxScaler(), de.LinearRegression(client=client)),
                           {"linearregression__fit_intercept": [True, False]}, cv=3)
    # a scaler on sparse X would go round the shards (partial_fit), importing scikit-learn there
    sparse = GridSearchCV(de.LogisticRegression(client=client), {"C": [0.1, 1.0]}, cv=3)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0.0))
    return [classify.fit(X, y), regress.fit(_dask(X), _dask(X @ np.ones(8))), sparse.fit(Xs, y)]


def test_searches_with_scalers_leave_torch_off_the_workers(fresh, client):
    """The placed search's scalers (affine maps of the stored X) and a regression's shared Newton Hessians, and a
    search on sparse X, run without torch too; the session cluster's workers, with torch imported, give the same
    results."""
    ours = _searches(fresh)
    assert {tuple(v) for v in fresh.run(_loaded).values()} == {()}
    client.run(__import__, "torch")
    for got, want in zip(ours, _searches(None)):
        assert got.best_params_ == want.best_params_
        np.testing.assert_allclose(got.cv_results_["mean_test_score"], want.cv_results_["mean_test_score"],
                                   rtol=1e-9)
