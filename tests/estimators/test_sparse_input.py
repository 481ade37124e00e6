"""Sparse X in the linear estimators and GLMs: validation, tags, prediction, and fits (issue 23).

Validation and prediction need no kernel: X is checked on the client (or on
the workers for dask input) and predictions are ``safe_sparse_dot`` on
NumPy/scipy.  The fits compare, on the same CSR, with scikit-learn, with our
own dense fit, and with a dask array of sparse blocks.
"""

from __future__ import annotations

import functools
import pickle
import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sk_lm
from sklearn import svm as sk_svm
from sklearn.base import clone, is_classifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import get_tags

import dask_estimators as de
from sparse_guard import forbid_densify  # tests/sparse_guard.py

N, D = 240, 25


def _X(n=N, d=D, density=0.25, seed=0, fmt="csr"):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=rng)
    X.data = rng.normal(size=X.nnz)
    return X.asformat(fmt)


def _y(kind, X, seed=1):
    rng = np.random.default_rng(seed)
    z = X @ rng.normal(size=X.shape[1]) * 0.5
    if kind == "binary":
        return (z + 0.3 * rng.normal(size=X.shape[0]) > 0).astype(int)
    if kind == "multiclass":
        return np.argmax(np.c_[z, -z, 0.5 * rng.normal(size=X.shape[0])], axis=1)
    if kind == "poisson":
        return rng.poisson(np.exp(z)).astype(float)
    if kind == "positive":
        return rng.gamma(2.0, np.exp(z) / 2.0)
    return z + 0.1 * rng.normal(size=X.shape[0]) + 0.5


ESTIMATORS = {
    # name: (estimator, target kind, scikit-learn counterpart on the same objective, or None)
    "LogisticRegression": (lambda: de.LogisticRegression(C=1.0), "binary"),
    "LogisticRegression-multinomial": (lambda: de.LogisticRegression(C=1.0), "multiclass"),
    "LinearSVC": (lambda: de.LinearSVC(C=0.5, dual=False), "binary"),
    "LinearSVC-dual": (lambda: de.LinearSVC(C=0.5, dual=True), "multiclass"),
    "LinearRegression": (lambda: de.LinearRegression(alpha=0.01), "regression"),
    "LinearSVR": (lambda: de.LinearSVR(C=1.0, epsilon=0.1), "regression"),
    "PoissonRegressor": (lambda: de.PoissonRegressor(alpha=0.01), "poisson"),
    "GammaRegressor": (lambda: de.GammaRegressor(alpha=0.01), "positive"),
    "TweedieRegressor": (lambda: de.TweedieRegressor(power=1.5, alpha=0.01), "positive"),
    "LogisticRegressionCV": (lambda: de.LogisticRegressionCV(Cs=[0.1, 1.0], cv=2), "binary"),
    "LinearRegressionCV": (lambda: de.LinearRegressionCV(alphas=2, cv=2), "regression"),
}

FORMATS = ["csr", "csc", "coo", "lil", "csr_array", "coo_array"]


def _as(fmt, X):
    if fmt.endswith("_array"):
        return getattr(sp, fmt)(X)
    return X.asformat(fmt)


# ----------------------------------------------------------------- tags
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_sparse_tag_is_set(name):
    est = ESTIMATORS[name][0]()
    assert get_tags(est).input_tags.sparse is True


# ----------------------------------------------------------------- validation (client side)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["LogisticRegression", "LinearRegression", "PoissonRegressor"])
def test_any_format_becomes_canonical_csr_of_its_float_dtype(name, fmt):
    """Any sparse format becomes canonical CSR; float32 values stay float32 (the shard stores them so)."""
    make, kind = ESTIMATORS[name]
    X = _X()
    est = make()
    Xv, y, sw, dask_input = est._validate_input(_as(fmt, X.astype(np.float32)), _y(kind, X), None)
    assert sp.issparse(Xv) and Xv.format == "csr" and Xv.dtype == np.float32 and not dask_input
    assert Xv.has_canonical_format
    assert (Xv != X.astype(np.float32)).nnz == 0
    assert est._validate_input(_as(fmt, X), _y(kind, X), None)[0].dtype == np.float64
    assert est.n_features_in_ == D and not hasattr(est, "feature_names_in_")


def test_duplicates_are_summed_and_indices_sorted_on_a_copy():
    # row 0: columns 2, 0, 2; row 1: column 1
    X = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    data, indices = X.data.copy(), X.indices.copy()
    Xv = de.LinearRegression()._validate_input(X, np.array([1.0, 2.0]), None)[0]
    assert Xv.indices.tolist() == [0, 2, 1] and Xv.data.tolist() == [2.0, 4.0, 4.0]
    np.testing.assert_array_equal(X.data, data)  # the caller's matrix is untouched
    np.testing.assert_array_equal(X.indices, indices)


def test_a_broken_structure_is_an_error_not_a_crash():
    X = sp.csr_matrix(np.eye(3))
    X.indptr = np.array([0, 2, 1, 3], dtype=X.indptr.dtype)  # a negative indptr step
    with pytest.raises(ValueError, match="indptr"):
        de.LinearRegression()._validate_input(X, np.ones(3), None)
    X = sp.csr_matrix(np.eye(3))
    X.indices = np.array([0, 1, 7], dtype=X.indices.dtype)  # a column out of range
    with pytest.raises(ValueError, match="indices must be < 3"):
        de.LinearRegression()._validate_input(X, np.ones(3), None)


def _sk_error(sk_est, X, y):
    with pytest.raises(Exception) as info:
        sk_est.fit(X, y)
    return type(info.value), str(info.value).splitlines()[0]


@pytest.mark.parametrize("name, sk_est", [
    ("LogisticRegression", sk_lm.LogisticRegression()),
    ("LinearSVC", sk_svm.LinearSVC()),
    ("PoissonRegressor", sk_lm.PoissonRegressor()),
])
def test_sparse_y_raises_scikit_learns_error(name, sk_est):
    X = _X()
    y = sp.csr_matrix(np.abs(_y("binary", X)).reshape(-1, 1).astype(float))
    err, msg = _sk_error(sk_est, X, y)
    with pytest.raises(err) as info:
        ESTIMATORS[name][0]().fit(X, y)
    assert str(info.value).splitlines()[0] == msg


@pytest.mark.parametrize("make", [de.LinearRegression, de.LinearSVR, lambda: de.LinearRegressionCV(cv=3),
                                  lambda: de.MLPRegressor(max_iter=2)],
                         ids=["LinearRegression", "LinearSVR", "LinearRegressionCV", "MLPRegressor"])
def test_sparse_y_of_a_multi_output_regressor_raises_scikit_learns_error(make):
    """Validation with multi_output lets a sparse y through; it failed deep in a worker's kernel (torch's "Sparse
    CSR tensors do not have is_contiguous") or in the MLP's encoding.  scikit-learn's MLPRegressor's error."""
    from sklearn.neural_network import MLPRegressor

    X = _X().toarray()
    y = sp.csr_matrix(_y("regression", X).reshape(-1, 1))
    err, msg = _sk_error(MLPRegressor(max_iter=2), X, y)
    with pytest.raises(err) as info:
        make().fit(X, y)
    assert str(info.value).splitlines()[0] == msg


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "infinity")])
@pytest.mark.parametrize("name, sk_est", [
    ("LogisticRegression", sk_lm.LogisticRegression()),
    ("GammaRegressor", sk_lm.GammaRegressor()),
])
def test_nan_in_data_raises_scikit_learns_error(name, sk_est, bad, word):
    make, kind = ESTIMATORS[name]
    X = _X()
    y = _y(kind, X)
    X.data[5] = bad
    err, msg = _sk_error(sk_est, X, y)
    assert word in msg
    with pytest.raises(err) as info:
        make().fit(X, y)
    assert str(info.value).splitlines()[0] == msg


def test_empty_sparse_input_raises_scikit_learns_error():
    X = sp.csr_matrix((0, 4))
    with pytest.raises(ValueError, match=r"Found array with 0 sample\(s\) \(shape=\(0, 4\)\)"):
        de.LogisticRegression().fit(X, np.array([]))
    X = sp.csr_matrix((5, 0))
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        de.LinearRegression().fit(X, np.ones(5))


def test_nan_in_a_sparse_dask_block_raises_on_the_workers():
    X = _X(600)
    X.data[X.indptr[500]] = np.nan
    Xd = da.from_array(X, chunks=(200, D), asarray=False)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        de.LinearRegression().fit(Xd, da.from_array(np.ones(600), chunks=200))


# ----------------------------------------------------------------- prediction (no kernel, no cluster)
PREDICTORS = {
    "LogisticRegression": ("binary", ("predict", "decision_function", "predict_proba", "predict_log_proba")),
    "LogisticRegression-multinomial": ("multiclass", ("predict", "decision_function", "predict_proba")),
    "LinearSVC": ("binary", ("predict", "decision_function")),
    "LinearRegression": ("regression", ("predict",)),
    "LinearSVR": ("regression", ("predict",)),
    "PoissonRegressor": ("poisson", ("predict",)),
    "GammaRegressor": ("positive", ("predict",)),
}


@functools.cache
def _fitted_dense(name):
    """Fitted on dense data (the dense kernels), then pickled: the model travels without its cluster."""
    kind, _ = PREDICTORS[name]
    X = _X()
    est = ESTIMATORS[name][0]().fit(X.toarray(), _y(kind, X))
    return pickle.dumps(est)


@pytest.mark.parametrize("name", list(PREDICTORS))
def test_predict_on_sparse_equals_predict_on_dense(name):
    _, methods = PREDICTORS[name]
    est = pickle.loads(_fitted_dense(name))
    assert est.client is None
    Xt = _X(90, seed=5)
    for fmt in ("csr", "csc", "coo_array"):
        for m in methods:
            got = getattr(est, m)(_as(fmt, Xt))
            want = getattr(est, m)(Xt.toarray())
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13) if got.dtype.kind == "f" else \
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["LogisticRegression", "LinearRegression", "PoissonRegressor"])
def test_predict_on_dask_sparse_blocks_is_lazy_and_equal(name):
    _, methods = PREDICTORS[name]
    est = pickle.loads(_fitted_dense(name))
    Xt = _X(300, seed=6)
    Xd = da.from_array(Xt, chunks=(70, D), asarray=False)
    for m in methods:
        lazy = getattr(est, m)(Xd)
        assert isinstance(lazy, da.Array) and type(lazy._meta) is np.ndarray
        np.testing.assert_allclose(lazy.compute(), getattr(est, m)(Xt), rtol=1e-13, atol=1e-13)


def test_sparse_coef_times_sparse_x():
    est = pickle.loads(_fitted_dense("LogisticRegression"))
    Xt = _X(50, seed=7)
    want = est.decision_function(Xt)
    est.sparsify()
    np.testing.assert_allclose(est.decision_function(Xt), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(est.decision_function(Xt.toarray()), want, rtol=1e-13, atol=1e-13)


def test_predict_checks_sparse_input_as_scikit_learn_does():
    est = pickle.loads(_fitted_dense("LinearRegression"))
    with pytest.raises(ValueError, match=f"X has 3 features, but LinearRegression is expecting {D} features"):
        est.predict(sp.csr_matrix(np.ones((2, 3))))
    X = _X(10)
    X.data[0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.predict(X)


def test_float32_sparse_predictions_are_float32_where_the_model_is():
    est = pickle.loads(_fitted_dense("LinearRegression"))
    Xt = _X(20, seed=8)
    out = est.predict(Xt.astype(np.float32))
    assert out.dtype == est.predict(Xt.toarray().astype(np.float32)).dtype


# ----------------------------------------------------------------- fits (need the sparse kernels)
TIGHT = dict(tol=1e-10, max_iter=10_000)
KERNELS = pytest.mark.usefixtures()  # the kernels are merged (sparse-kernels)
#: The dual method (LIBLINEAR's): tight, as tests/estimators/test_svm_dual.py runs it.
DUAL_TIGHT = dict(tol=1e-8, max_iter=100_000)


def _is_dual(name):
    return name in ("LinearSVC-dual", "LinearSVR")


@pytest.mark.parametrize("make_ours, make_ref, kind", [
    (lambda: de.LinearSVC(C=0.5, loss="hinge", dual=True, **DUAL_TIGHT),
     lambda: sk_svm.LinearSVC(C=0.5, loss="hinge", dual=True, tol=1e-10, max_iter=1_000_000, random_state=0),
     "multiclass"),
], ids=["LinearSVC-hinge"])
def test_dual_fit_on_csr_equals_liblinear_on_the_same_csr(make_ours, make_ref, kind):
    X = _X()
    y = _y(kind, X)
    ref = _quiet(make_ref(), X, y)
    est = make_ours().fit(X, y)
    assert est.solver_ == "dual-cd"
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-4, atol=1e-5)


def _quiet(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return est.fit(X, y, **kw)


def _sk_reference(name, X, y):
    """scikit-learn's estimator on the same CSR and the same objective, run to a tight tolerance."""
    n = X.shape[0]
    if name.startswith("LogisticRegression"):
        return _quiet(sk_lm.LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-12, max_iter=10_000), X, y)
    if name == "LinearSVC":
        return _quiet(sk_svm.LinearSVC(C=0.5, dual=False, tol=1e-12, max_iter=100_000, random_state=0), X, y)
    if name == "LinearRegression":
        return _quiet(sk_lm.Ridge(alpha=0.01 * n, solver="sparse_cg", tol=1e-14, max_iter=100_000), X, y)
    if name == "LinearSVR":
        return _quiet(sk_svm.LinearSVR(C=1.0, epsilon=0.1, loss="squared_epsilon_insensitive", dual=False,
                                       tol=1e-12, max_iter=100_000, random_state=0), X, y)
    glm = {"PoissonRegressor": sk_lm.PoissonRegressor(alpha=0.01),
           "GammaRegressor": sk_lm.GammaRegressor(alpha=0.01),
           "TweedieRegressor": sk_lm.TweedieRegressor(power=1.5, alpha=0.01)}[name]
    return _quiet(glm.set_params(solver="newton-cholesky", tol=1e-12, max_iter=10_000), X, y)


SK_CASES = [
    ("LogisticRegression", "binary", s) for s in ("lbfgs", "newton-cg", "newton-cholesky")
] + [
    ("LogisticRegression-multinomial", "multiclass", s) for s in ("lbfgs", "newton-cg", "newton-cholesky")
] + [
    ("LinearSVC", "binary", s) for s in ("lbfgs", "newton-cg", "newton-cholesky")
] + [
    ("LinearRegression", "regression", s) for s in ("lbfgs", "newton-cg", "newton-cholesky")
] + [
    ("LinearSVR", "regression", s) for s in ("lbfgs", "newton-cg", "newton-cholesky")
] + [
    (g, k, s) for g, k in (("PoissonRegressor", "poisson"), ("GammaRegressor", "positive"),
                           ("TweedieRegressor", "positive")) for s in ("lbfgs", "newton-cg", "newton-cholesky")
]


def _ours(name, solver):
    est = ESTIMATORS[name][0]()
    if name == "LinearSVR":
        est.set_params(loss="squared_epsilon_insensitive", dual=False)
    return est.set_params(solver=solver, **TIGHT)


@KERNELS
@pytest.mark.parametrize("name, kind, solver", SK_CASES)
def test_fit_on_csr_equals_scikit_learn_on_the_same_csr(name, kind, solver):
    X = _X()
    y = _y(kind, X)
    ref = _sk_reference(name.split("-")[0] if name != "LogisticRegression-multinomial" else name, X, y)
    est = _ours(name, solver).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-4, atol=1e-6)


@KERNELS
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_fit_on_csr_equals_our_dense_fit(name):
    make, kind = ESTIMATORS[name]
    X = _X(120, 10, seed=3)
    y = _y(kind, X)
    dual = _is_dual(name)
    params = DUAL_TIGHT if dual else dict(tol=1e-12, max_iter=10_000)
    if name == "LinearRegressionCV":
        # the same solver and path on both kernels: on dense X "auto" would solve on the Gram, and the lockstep
        # paths use the fused many-model kernel on dense X only (L-BFGS with L1 stops within ~1e-8 of the optimum)
        params.update(solver="lbfgs", path_method="sequential")
    sparse = make().set_params(**params).fit(X, y)
    dense = make().set_params(**params).fit(X.toarray(), y)
    # the dual method's iterates depend on the arithmetic's order: both stop within its tolerance of the optimum;
    # so do L-BFGS's restarts from where it stalls with L1 (each fit within 1e-8 of the optimum, measured)
    rtol, atol = (1e-6, 1e-6) if dual else (1e-8, 1e-8 if name == "LinearRegressionCV" else 1e-10)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=rtol, atol=atol)
    np.testing.assert_allclose(sparse.intercept_, dense.intercept_, rtol=rtol, atol=atol)


@KERNELS
@pytest.mark.parametrize("name", ["LogisticRegression", "LinearRegression", "PoissonRegressor", "LinearSVC-dual",
                                  "LogisticRegressionCV"])
@pytest.mark.parametrize("blocks", ["from_array", "map_blocks"])
def test_fit_on_dask_sparse_blocks_equals_the_csr_fit(name, blocks):
    make, kind = ESTIMATORS[name]
    X = _X(400, seed=4)
    y = _y(kind, X)
    if blocks == "from_array":
        Xd = da.from_array(X, chunks=(90, D), asarray=False)
    else:
        Xd = da.from_array(X.toarray(), chunks=(130, D)).map_blocks(sp.csr_matrix, dtype=float,
                                                                    meta=sp.csr_matrix((0, 0)))
    yd = da.from_array(y, chunks=100)
    dual = _is_dual(name)
    params = DUAL_TIGHT if dual else {} if name.endswith("CV") else dict(tol=1e-10, max_iter=10_000)
    ref = make().set_params(**params).fit(X, y)
    est = make().set_params(**params).fit(Xd, yd)
    atol = 1e-6 if dual else 1e-10  # the dual's iterates depend on the shards' rows: both within tol of the optimum
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=atol)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-6, atol=atol)
    out, want = est.predict(Xd).compute(), ref.predict(X)
    if is_classifier(ref):
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=atol)


@KERNELS
def test_fit_never_densifies(client):
    """A whole fit on 3000 x 2^22 CSR (100 GB dense) with every densifying call made to raise on the workers."""
    rng = np.random.default_rng(0)
    n, d = 3000, 1 << 22
    indices = np.sort(rng.integers(0, d, (n, 8)), axis=1).ravel()
    X = sp.csr_matrix((rng.normal(size=n * 8), indices, np.arange(n + 1) * 8), shape=(n, d))
    X.sum_duplicates()
    y = (np.asarray(X.sum(axis=1)).ravel() > 0).astype(int)
    assert client.run(forbid_densify, True)
    try:
        est = de.LogisticRegression(solver="lbfgs", max_iter=20).fit(X, y)
        assert all(client.run(_worker_cannot_densify).values())  # the patch was in place during the fit
    finally:
        client.run(forbid_densify, False)
    assert est.coef_.shape == (1, d)
    assert est.score(X, y) > 0.9


def _worker_cannot_densify():
    try:
        sp.csr_matrix(np.eye(2)).toarray()
    except AssertionError:
        return True
    return False


def test_clone_keeps_accepting_sparse():
    est = clone(de.LogisticRegression())
    assert get_tags(est).input_tags.sparse


@pytest.mark.parametrize("name", ["LogisticRegressionCV", "LinearRegressionCV"])
def test_the_cv_estimators_on_sparse_rows_warn_nothing_scikit_learn_would_not(name):
    """The folds' rows cut from the shard's CSR tensor: torch's invariant checks are ours to skip (the rows are
    cut from a valid matrix), and say so only where asked."""
    import dask_estimators as de

    rng = np.random.default_rng(0)
    X = sp.random(300, 6, density=0.4, format="csr", random_state=0)
    y = (X.toarray()[:, 0] > 0.2).astype(int) if name.startswith("Logistic") else rng.normal(size=300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(de, name)(cv=3).fit(X, y)
    assert not [w for w in caught if issubclass(w.category, UserWarning) and "Sparse" in str(w.message)]


# ------------------------------------------------------ columns that store no value
def _hashed(n=300, d=4000, vocab=150, per_row=6, seed=0):
    """Hashed-text-like CSR: each row stores a few of ``vocab`` columns spread over ``d`` (the rest store none)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(d, vocab, replace=False))
    rows = np.repeat(np.arange(n), per_row)
    picked = cols[rng.integers(0, vocab, n * per_row)]
    X = sp.csr_matrix((rng.uniform(0.5, 2.0, n * per_row), (rows, picked)), shape=(n, d))
    X.sum_duplicates()
    w = np.zeros(d)
    w[cols] = rng.normal(size=vocab)
    return X, X @ w, np.unique(X.indices)


@pytest.mark.parametrize("make_ours, make_ref, target", [
    (lambda: de.LogisticRegression(tol=1e-10, max_iter=2000), lambda: sk_lm.LogisticRegression(tol=1e-10,
                                                                                               max_iter=2000), 3),
    (lambda: de.LinearSVC(dual=False, tol=1e-10, max_iter=5000), lambda: sk_svm.LinearSVC(dual=False, tol=1e-10,
                                                                                          max_iter=5000), 2),
    (lambda: de.TweedieRegressor(power=0, alpha=0.01, tol=1e-10, max_iter=1000),
     lambda: sk_lm.TweedieRegressor(power=0, alpha=0.01, tol=1e-10, max_iter=1000), 0),
    (lambda: de.PoissonRegressor(alpha=0.1, tol=1e-10, max_iter=1000),
     lambda: sk_lm.PoissonRegressor(alpha=0.1, tol=1e-10, max_iter=1000), "counts"),
])
def test_columns_storing_no_value_are_left_out_of_the_solve(client, make_ours, make_ref, target):
    """A CSR whose columns mostly store nothing (hashed text): the solver sees the stored columns only (the
    rounds carry their parameters alone), the model has every column, zero where none is stored, and equals
    scikit-learn's on the same CSR."""
    X, z, stored = _hashed()
    if target == "counts":
        y = np.random.default_rng(2).poisson(np.exp(0.3 * z / np.abs(z).max()))
    elif target:
        y = np.digitize(z, np.quantile(z, np.linspace(0, 1, target + 1)[1:-1]))
    else:
        y = z
    ours, ref = make_ours().fit(X, y), make_ref().fit(X, y)
    assert ours.fit_stats_["solved_columns"] == len(stored) < X.shape[1]
    assert np.shape(ours.coef_) == np.shape(ref.coef_)
    unused = np.setdiff1d(np.arange(X.shape[1]), stored)
    assert not np.any(np.atleast_2d(ours.coef_)[:, unused])
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-4, atol=1e-6)


def test_a_warm_start_keeps_the_coefficients_of_columns_the_new_rows_leave_empty(client):
    """Unpenalised, a column that stores no value in the new rows has a zero gradient: the warm start's
    coefficient there stays, as in scikit-learn's warm start; the second fit on kept data narrows its X again
    from the full one."""
    X, z, _ = _hashed(per_row=2)
    y = (z > np.median(z)).astype(int)
    first, second = slice(0, 150), slice(150, 300)
    ours = de.LogisticRegression(C=np.inf, warm_start=True, tol=1e-10, max_iter=2000)
    ref = sk_lm.LogisticRegression(C=np.inf, warm_start=True, tol=1e-10, max_iter=2000)
    only_first = np.setdiff1d(np.unique(X[first].indices), np.unique(X[second].indices))
    kept = []
    for rows in (first, second):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ours.fit(X[rows], y[rows])
            ref.fit(X[rows], y[rows])
        kept.append((ours.coef_[0, only_first].copy(), ref.coef_[0, only_first].copy()))
    assert len(only_first) and np.all(kept[0][0] != 0)
    np.testing.assert_array_equal(kept[1][0], kept[0][0])  # ours, as scikit-learn's:
    np.testing.assert_array_equal(kept[1][1], kept[0][1])
    with de.KeptData(X, y) as data:
        a = de.LogisticRegression(C=0.5).fit(data)
        b = de.LogisticRegression(C=0.5).fit(data)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)
    assert a.fit_stats_["solved_columns"] == b.fit_stats_["solved_columns"] < X.shape[1]


@pytest.mark.parametrize("scoring", [None, "roc_auc"], ids=["on the workers", "on the client"])
def test_a_cv_search_leaves_the_columns_storing_no_value_out_of_every_split(client, scoring):
    """LogisticRegressionCV and LinearRegressionCV on a CSR whose columns mostly store nothing: every split's
    path and the refit solve the stored columns alone; the paths, scores and model have every column, zero where
    none is stored, and equal scikit-learn's search on the same CSR (a client-side scorer sees the whole
    columns)."""
    X, z, stored = _hashed()
    y = (z > np.median(z)).astype(int)
    unused = np.setdiff1d(np.arange(X.shape[1]), stored)
    kw = dict(Cs=[0.1, 10.0], cv=3, tol=1e-10, max_iter=5000, scoring=scoring)
    ours = de.LogisticRegressionCV(**kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = sk_lm.LogisticRegressionCV(**kw, l1_ratios=None, use_legacy_attributes=True).fit(X, y)
    assert ours.fit_stats_["solved_columns"] == len(stored) < X.shape[1]
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1], atol=1e-9)
    assert ours.coefs_paths_[1].shape == ref.coefs_paths_[1].shape
    assert not np.any(ours.coefs_paths_[1][..., unused]) and not np.any(ours.coef_[:, unused])
    np.testing.assert_allclose(ours.coefs_paths_[1], ref.coefs_paths_[1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6)
    if scoring is None:
        reg = de.LinearRegressionCV(alphas=3, l1_ratio=0.5, cv=3, tol=1e-10).fit(X, z)
        ref = sk_lm.ElasticNetCV(alphas=3, l1_ratio=0.5, cv=3, tol=1e-12, max_iter=100_000).fit(X, z)
        assert reg.fit_stats_["solved_columns"] == len(stored)
        assert not np.any(reg.coef_[unused])
        assert reg.alpha_ == pytest.approx(ref.alpha_, rel=1e-10)
        np.testing.assert_allclose(reg.coef_, ref.coef_, rtol=1e-3, atol=1e-5)
