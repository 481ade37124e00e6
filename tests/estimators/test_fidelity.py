"""Drop-in fidelity with scikit-learn: parameters, edge cases, dtypes and ``to_sklearn()``.

Each test compares with scikit-learn's own estimator where it has the same
behaviour, on the session's process cluster (``tests/conftest.py``).
"""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sk_lm
from sklearn import neural_network as sk_nn
from sklearn import svm as sk_svm
from sklearn.datasets import load_diabetes, load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

import dask_estimators as de

SK_LINEAR = {
    "LogisticRegression": sk_lm.LogisticRegression,
    "LinearSVC": sk_svm.LinearSVC,
    "LinearSVR": sk_svm.LinearSVR,
}


def _classification(n=120, d=5, k=2, seed=0):
    X, y = make_classification(
        n_samples=n, n_features=d, n_informative=3, n_redundant=0, n_classes=k, flip_y=0.1, random_state=seed
    )
    return StandardScaler().fit_transform(X), y


def _regression(n=120, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) + 1.0


def _data_for(name, k=2):
    return _regression() if name in ("LinearSVR", "LinearRegression") else _classification(k=k)


# ------------------------------------------------------------ random_state
@pytest.mark.parametrize("name", sorted(SK_LINEAR))
def test_random_state_is_a_parameter_as_in_sklearn(name):
    cls, sk_cls = getattr(de, name), SK_LINEAR[name]
    assert inspect.signature(cls).parameters["random_state"].default is None
    assert inspect.signature(sk_cls).parameters["random_state"].default is None
    X, y = _data_for(name)
    with pytest.raises(InvalidParameterError, match="random_state"):
        cls(random_state="zero").fit(X, y)
    # deterministic solvers: the seed changes nothing
    a = cls(random_state=0).fit(X, y)
    b = cls(random_state=np.random.RandomState(7)).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert cls(random_state=3).get_params()["random_state"] == 3


# --------------------------------------------------------------- C = inf
def test_logistic_C_inf_is_the_unpenalised_fit_of_sklearn():
    X, y = _classification(n=200, seed=1)
    ours = de.LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=200).fit(X, y)
    ref = sk_lm.LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=200).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["LinearSVC", "LinearSVR"])
def test_svm_C_inf_is_the_limit_of_large_C(name):
    X, y = _data_for(name)
    cls = getattr(de, name)
    kw = dict(solver="newton-cg", tol=1e-10, max_iter=1000)
    ours = cls(C=np.inf, **kw).fit(X, y)
    large = cls(C=1e9, **kw).fit(X, y)
    np.testing.assert_allclose(ours.coef_, large.coef_, rtol=1e-4, atol=1e-5)
    assert ours._penalties(len(X)) == (0.0, 0.0)


# ----------------------------------------------------------- max_iter = 0
@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg", "newton-cholesky"])
def test_max_iter_zero_returns_the_start_with_a_warning(solver):
    X, y = _classification()
    with pytest.warns(ConvergenceWarning):
        ours = de.LogisticRegression(solver=solver, max_iter=0).fit(X, y)
    with pytest.warns(ConvergenceWarning):  # scikit-learn's Newton solvers: the start, n_iter_ 0, a warning
        ref = sk_lm.LogisticRegression(solver="newton-cg" if solver == "lbfgs" else solver, max_iter=0).fit(X, y)
    np.testing.assert_array_equal(ours.coef_, ref.coef_)
    np.testing.assert_array_equal(ours.intercept_, ref.intercept_)
    np.testing.assert_array_equal(ours.n_iter_, ref.n_iter_)
    assert ours.n_iter_.dtype == ref.n_iter_.dtype

    # a warm start stays where it was
    warm = de.LogisticRegression(solver=solver, warm_start=True).fit(X, y)
    coef, intercept = warm.coef_.copy(), warm.intercept_.copy()
    with pytest.warns(ConvergenceWarning):
        warm.set_params(max_iter=0).fit(X, y)
    np.testing.assert_array_equal(warm.coef_, coef)
    np.testing.assert_array_equal(warm.intercept_, intercept)
    assert warm.n_iter_[0] == 0


@pytest.mark.parametrize("name", ["LinearSVC", "LinearSVR", "LinearRegression"])
def test_max_iter_zero_other_linear_models(name):
    X, y = _data_for(name)
    with pytest.warns(ConvergenceWarning):
        est = getattr(de, name)(max_iter=0).fit(X, y)
    assert est.n_iter_ == 0
    assert not np.any(est.coef_) and not np.any(est.intercept_)
    if name in SK_LINEAR:
        with pytest.warns(ConvergenceWarning):
            ref = SK_LINEAR[name](max_iter=0).fit(X, y)
        assert ref.n_iter_ == 0 and not np.any(ref.coef_)


# ------------------------------------------------------- sparsify/densify
@pytest.mark.parametrize("name,k", [("LogisticRegression", 2), ("LogisticRegression", 3), ("LinearSVC", 3)])
def test_sparsify_densify_as_sklearn(name, k):
    X, y = _classification(k=k)
    kw = dict(l1_ratio=1.0, C=0.05) if name == "LogisticRegression" else dict(penalty="l1", C=0.05)
    est = getattr(de, name)(**kw).fit(X, y)
    ref = SK_LINEAR[name]().fit(X, y)
    with pytest.raises(NotFittedError, match="must be fitted before sparsifying"):
        getattr(de, name)().sparsify()
    with pytest.raises(NotFittedError, match="must be fitted before densifying"):
        getattr(de, name)().densify()

    dense = est.coef_.copy()
    methods = ["predict", "decision_function"] + (["predict_proba"] if name == "LogisticRegression" else [])
    before = {m: getattr(est, m)(X) for m in methods}
    assert est.sparsify() is est
    ref.sparsify()
    assert type(est.coef_) is type(ref.coef_) and est.coef_.format == "csr"
    np.testing.assert_array_equal(est.coef_.toarray(), dense)
    assert est.coef_.nnz == np.count_nonzero(dense) < dense.size
    for m in methods:
        np.testing.assert_allclose(getattr(est, m)(X), before[m], rtol=1e-12, atol=1e-12)
    assert est.densify() is est
    assert type(est.coef_) is np.ndarray
    np.testing.assert_array_equal(est.coef_, dense)
    # a warm start from a sparse coef_
    est.set_params(warm_start=True).sparsify().fit(X, y)
    assert type(est.coef_) is np.ndarray


# ---------------------------------------------------------------- float32
@pytest.mark.parametrize("name", ["LogisticRegression", "LinearSVC", "LinearSVR", "LinearRegression"])
def test_float32_dtypes_as_sklearn(name):
    X, y = _data_for(name, k=3)
    X32 = X.astype(np.float32)
    ours = getattr(de, name)().fit(X32, y)
    sk_cls = SK_LINEAR.get(name, sk_lm.LinearRegression)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = sk_cls().fit(X32, y)
    assert ours.coef_.dtype == ref.coef_.dtype
    assert np.asarray(ours.intercept_).dtype == np.asarray(ref.intercept_).dtype
    for m in ["predict", "decision_function", "predict_proba", "predict_log_proba"]:
        if hasattr(ref, m):
            for Xp in (X32, X):
                assert getattr(ours, m)(Xp).dtype == getattr(ref, m)(Xp).dtype, (m, Xp.dtype)
    np.testing.assert_allclose(ours.predict(X32), ours.predict(X), rtol=1e-5, atol=1e-5)


def test_float32_dask_input_gives_float32_predictions():
    import dask.array as da

    X, y = _classification()
    X32 = da.from_array(X.astype(np.float32), chunks=40)
    est = de.LogisticRegression().fit(X32, da.from_array(y, chunks=40))
    assert est.coef_.dtype == np.float32
    proba = est.predict_proba(X32)
    assert proba.dtype == np.float32 and proba.compute().dtype == np.float32


# ---------------------------------------------------------------- verbose
def test_linear_svc_verbose_prints(capsys):
    X, y = _classification()
    assert inspect.signature(de.LinearSVC).parameters["verbose"].default == 0
    de.LinearSVC().fit(X, y)
    assert capsys.readouterr().out == ""
    de.LinearSVC(verbose=1).fit(X, y)
    out = capsys.readouterr().out
    assert "evaluation 1: objective" in out and "newton-cg:" in out
    with pytest.raises(InvalidParameterError):
        de.LinearSVC(verbose="yes").fit(X, y)


# ------------------------------------------------------------- to_sklearn
_BLOCKER = """
import importlib.abc, pickle, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "dask_estimators" or name.startswith("dask_estimators."):
            raise ImportError("dask_estimators is blocked in this process")

sys.meta_path.insert(0, Block())
est, X = pickle.load(sys.stdin.buffer)
assert not any(m.startswith("dask_estimators") for m in sys.modules), "dask_estimators was imported"
out = {m: getattr(est, m)(X) for m in %r if hasattr(est, m)}
sys.stdout.buffer.write(pickle.dumps(out))
"""


def _predictions(est, X, methods):
    return {m: getattr(est, m)(X) for m in methods if hasattr(est, m)}


def _assert_same_predictions(ours, sk, X):
    methods = ["predict", "predict_proba", "predict_log_proba", "decision_function"]
    a, b = _predictions(ours, X, methods), _predictions(sk, X, methods)
    assert set(a) == set(b)
    for m in a:
        if a[m].dtype.kind == "f":
            np.testing.assert_allclose(b[m], a[m], rtol=1e-12, atol=1e-12, err_msg=m)
        else:
            np.testing.assert_array_equal(b[m], a[m], err_msg=m)
    # pickled, loaded and used where dask_estimators cannot be imported
    payload = pickle.dumps((sk, X))
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _BLOCKER % (methods,)], input=payload, capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()
    c = pickle.loads(proc.stdout)
    assert set(c) == set(a)
    for m in a:
        np.testing.assert_array_equal(c[m], b[m], err_msg=m)


@pytest.mark.parametrize(
    "name,kw,k",
    [
        ("LogisticRegression", {}, 2),
        ("LogisticRegression", {"C": 0.3, "class_weight": "balanced"}, 3),
        ("LogisticRegression", {"l1_ratio": 0.5, "C": 0.2}, 3),
        ("LinearSVC", {}, 2),
        ("LinearSVC", {"penalty": "l1"}, 3),
        ("LinearSVR", {"epsilon": 0.1, "C": 2.0}, None),
    ],
)
def test_to_sklearn_linear(name, kw, k):
    X, y = _data_for(name, k=k or 2)
    ours = getattr(de, name)(**kw).fit(X, y)
    sk = ours.to_sklearn()
    assert type(sk) is SK_LINEAR[name]
    assert type(sk).__module__.startswith("sklearn.")
    assert sk.get_params()["C"] == ours.C
    for attr in ["coef_", "intercept_", "n_features_in_", "n_iter_"] + (["classes_"] if k else []):
        np.testing.assert_array_equal(getattr(sk, attr), getattr(ours, attr))
    _assert_same_predictions(ours, sk, X)


@pytest.mark.parametrize(
    "kw,sk_cls",
    [
        ({}, sk_lm.LinearRegression),
        ({"alpha": 0.5}, sk_lm.Ridge),
        ({"alpha": 0.05, "l1_ratio": 1.0}, sk_lm.Lasso),
        ({"alpha": 0.05, "l1_ratio": 0.4}, sk_lm.ElasticNet),
    ],
)
@pytest.mark.parametrize("n_targets", [1, 2])
def test_to_sklearn_linear_regression_is_the_same_objective(kw, sk_cls, n_targets):
    X, y = _regression()
    if n_targets == 2:
        y = np.column_stack([y, X[:, 0] - y])
    rng = np.random.default_rng(1)
    sw = rng.uniform(0.5, 2.0, size=len(X))
    ours = de.LinearRegression(tol=1e-10, max_iter=10_000, **kw).fit(X, y, sample_weight=sw)
    sk = ours.to_sklearn()
    assert type(sk) is sk_cls
    _assert_same_predictions(ours, sk, X)
    # the scikit-learn estimator fitted afresh solves the same problem
    refit = pickle.loads(pickle.dumps(sk)).set_params(**({"tol": 1e-12} if "tol" in sk.get_params() else {}))
    refit.fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(refit.coef_, ours.coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(refit.intercept_, ours.intercept_, rtol=1e-5, atol=1e-6)


def test_to_sklearn_keeps_feature_names():
    pd = pytest.importorskip("pandas")
    X, y = _classification()
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    sk = de.LogisticRegression().fit(df, y).to_sklearn()
    np.testing.assert_array_equal(sk.feature_names_in_, df.columns)
    sk.predict(df)  # no feature-name warning
    with pytest.warns(UserWarning, match="feature names"):
        sk.predict(X)
