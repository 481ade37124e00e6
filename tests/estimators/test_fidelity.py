"""Drop-in fidelity with scikit-learn: parameters, edge cases, dtypes and ``to_sklearn()``.

Each test compares with scikit-learn's own estimator where it has the same
behaviour, on the session's process cluster (``tests/conftest.py``).
"""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
    # the primal solvers are deterministic: the seed changes nothing; the dual method (LinearSVR's
    # default loss) visits the rows in the seed's order, as LIBLINEAR (tests/estimators/test_svm_dual.py)
    a = cls(random_state=0).fit(X, y)
    b = cls(random_state=np.random.RandomState(7) if a.solver_ != "dual-cd" else 0).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert cls(random_state=3).get_params()["random_state"] == 3


# --------------------------------------------------------------- C = inf
def test_logistic_C_inf_is_the_unpenalised_fit_of_sklearn():
    X, y = _classification(n=200, seed=1)
    ours = de.LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=200).fit(X, y)
    ref = sk_lm.LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=200).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("multi", [False, True])
def test_newton_cholesky_stops_where_scikit_learns_does_at_the_default_tol(multi):
    """scikit-learn's Newton solver stops when both max |gradient| and half the last Newton decrement are under
    tol.  On nearly separable data the gradient passes first: stopping on it alone ended one iteration early,
    with coefficients of about 10 off by 0.3."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4000, 8))
    z = X @ np.linspace(-1, 1, 8) + 0.1 * rng.standard_normal(4000)
    y = np.digitize(z, [-0.5, 0.5]) if multi else (z > 0).astype(int)
    ours = de.LogisticRegression(solver="newton-cholesky").fit(X, y)
    ref = sk_lm.LogisticRegression(solver="newton-cholesky").fit(X, y)
    np.testing.assert_array_equal(ours.n_iter_, ref.n_iter_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["LinearSVC", "LinearSVR"])
def test_svm_C_inf_is_the_limit_of_large_C(name):
    X, y = _data_for(name)
    cls = getattr(de, name)
    kw = dict(solver="newton-cg", tol=1e-10, max_iter=1000)
    if name == "LinearSVR":  # the primal (C=inf has no dual), which only the squared loss has
        kw["loss"] = "squared_epsilon_insensitive"
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


@pytest.mark.parametrize("name", ["LinearRegression", "PoissonRegressor", "GammaRegressor", "TweedieRegressor"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_single_targets_intercept_is_of_sklearns_type(name, fit_intercept, dtype):
    """A NumPy scalar of X's float dtype (``intercept_.dtype`` works), or a Python 0.0 without an intercept: it
    was a Python float with float64 X."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = X.astype(dtype)
    ours = getattr(de, name)(fit_intercept=fit_intercept).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = getattr(sk_lm, name)(fit_intercept=fit_intercept).fit(X, y)
    assert type(ours.intercept_) is type(ref.intercept_)


@pytest.mark.parametrize("name, k", [("LinearSVC", 2), ("LinearSVC", 3), ("LinearSVR", 0)])
@pytest.mark.parametrize("dual", [True, False])
def test_an_svms_intercept_without_one_is_sklearns_zero(name, k, dual):
    """LIBLINEAR's estimators in scikit-learn set ``intercept_ = 0.0`` where ``fit_intercept=False``; ours kept an
    array of zeros.  Predictions are unchanged."""
    X, y = _regression() if k == 0 else _classification(k=k)
    kw = dict(fit_intercept=False, dual=dual, max_iter=5000) | ({"loss": "squared_epsilon_insensitive"} if k == 0 and not dual else {})
    ours = getattr(de, name)(**kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = SK_LINEAR[name](**kw).fit(X, y)
    assert type(ours.intercept_) is type(ref.intercept_) is float and ours.intercept_ == 0.0
    np.testing.assert_allclose(ours.decision_function(X) if k else ours.predict(X),
                               X @ ours.coef_.T + 0.0 if k and k > 2 else X @ np.ravel(ours.coef_), rtol=1e-12)


@pytest.mark.parametrize("kw", [{}, {"alpha": 0.1}, {"alpha": 0.1, "l1_ratio": 1.0}])
def test_several_targets_without_an_intercept_give_sklearns_zero(kw):
    """scikit-learn's regressors set ``intercept_ = 0.0`` without an intercept, also for several targets; ours gave
    an array of zeros there.  Predictions are unchanged."""
    X, y = _regression()
    Y = np.c_[y, -2.0 * y]
    ours = de.LinearRegression(fit_intercept=False, **kw).fit(X, Y)
    ref = sk_lm.LinearRegression(fit_intercept=False).fit(X, Y)
    assert type(ours.intercept_) is type(ref.intercept_) is float and ours.intercept_ == 0.0
    np.testing.assert_allclose(ours.predict(X), X @ ours.coef_.T, rtol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_a_logistic_fit_without_an_intercept_keeps_sklearns_zeros(k):
    """scikit-learn's LogisticRegression, unlike its regressors, gives zeros of shape (1,) or (n_classes,)."""
    X, y = _classification(k=k)
    ours = de.LogisticRegression(fit_intercept=False).fit(X, y)
    ref = sk_lm.LogisticRegression(fit_intercept=False).fit(X, y)
    assert isinstance(ours.intercept_, np.ndarray) and ours.intercept_.shape == ref.intercept_.shape
    assert not ours.intercept_.any()


def _outcome(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except ValueError as e:
            return str(e)
    return "works"


@pytest.mark.parametrize("name, sk_name", [
    ("LinearRegression", "linear_model.LinearRegression"), ("LinearSVR", "svm.LinearSVR"),
    ("LinearSVC", "svm.LinearSVC"), ("LogisticRegression", "linear_model.LogisticRegression"),
    ("PoissonRegressor", "linear_model.PoissonRegressor"), ("LinearRegressionCV", "linear_model.ElasticNetCV"),
    ("MLPRegressor", "neural_network.MLPRegressor"), ("MLPClassifier", "neural_network.MLPClassifier"),
])
def test_x_of_numeric_strings_as_sklearn(name, sk_name):
    """X of NumPy strings of numbers: scikit-learn's estimators convert them where they validate X with float
    dtypes and refuse them where they validate it as numeric; ours, at fit and at predict, as its namesake."""
    import importlib

    module, cls = sk_name.rsplit(".", 1)
    sk_cls = getattr(importlib.import_module(f"sklearn.{module}"), cls)
    X, y = _regression() if "Classifier" not in name and name not in ("LinearSVC", "LogisticRegression") \
        else _classification()
    y = np.abs(y) if name == "PoissonRegressor" else y
    kw = {"max_iter": 5} if name.startswith("MLP") else {}
    Xs = X.astype(str)
    assert _outcome(lambda: getattr(de, name)(**kw).fit(Xs, y)) == _outcome(lambda: sk_cls(**kw).fit(Xs, y))
    ours, ref = getattr(de, name)(**kw).fit(X, y), sk_cls(**kw).fit(X, y)
    assert _outcome(lambda: ours.predict(Xs)) == _outcome(lambda: ref.predict(Xs))


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
    assert "Iteration 1, objective = " in out and "newton-cg:" in out
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


# ===================================================================== MLPs
MLP_STRATEGIES = ["rounds", "ddp"]


def _iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _diabetes(n=150):
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X[:n])
    y = y[:n]
    return X, (y - y.mean()) / y.std()


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fn(*args, **kwargs)


@pytest.mark.parametrize("solver", ["adam", "lbfgs"])
@pytest.mark.parametrize("name", ["MLPClassifier", "MLPRegressor"])
def test_mlp_float32_dtypes_as_sklearn(name, solver):
    X, y = _iris() if name == "MLPClassifier" else _diabetes()
    X32 = X.astype(np.float32)
    kw = dict(hidden_layer_sizes=(5,), max_iter=5, random_state=0, solver=solver)
    ours = _quiet(getattr(de, name)(**kw).fit, X32, y)
    ref = _quiet(getattr(sk_nn, name)(**kw).fit, X32, y)
    # float32 weights for the stochastic solvers; lbfgs (scipy's, float64) gives float64 in scikit-learn
    expected = np.float32 if solver != "lbfgs" else np.float64
    assert [c.dtype for c in ours.coefs_] == [c.dtype for c in ref.coefs_] == [expected] * 2
    assert [b.dtype for b in ours.intercepts_] == [b.dtype for b in ref.intercepts_]
    for m in ["predict", "predict_proba", "predict_log_proba"]:
        if hasattr(ref, m):
            assert getattr(ours, m)(X32).dtype == getattr(ref, m)(X32).dtype, m
    # float64 input to a float32 model: float64 out, as NumPy's (and scikit-learn's) result type
    assert ours.predict(X).dtype == ref.predict(X).dtype


def test_mlp_partial_fit_only_for_stochastic_solvers():
    for solver in ["lbfgs", "sgd", "adam"]:
        assert hasattr(de.MLPClassifier(solver=solver), "partial_fit") == hasattr(
            sk_nn.MLPClassifier(solver=solver), "partial_fit"
        )
        # scikit-learn's MLPRegressor forgets to call its check (hasattr is True for lbfgs there); ours does
        assert hasattr(de.MLPRegressor(solver=solver), "partial_fit") == (solver != "lbfgs")
    errors = []
    for est in (de.MLPClassifier(solver="lbfgs"), sk_nn.MLPClassifier(solver="lbfgs")):
        with pytest.raises(AttributeError) as info:
            est.partial_fit
        errors.append((str(info.value).replace(type(est).__module__, ""), str(info.value.__cause__)))
    assert errors[0] == errors[1]
    assert errors[0][1] == "partial_fit is only available for stochastic optimizers. lbfgs is not stochastic."


@pytest.mark.parametrize("name", ["MLPClassifier", "MLPRegressor"])
def test_mlp_partial_fit_rejects_early_stopping_as_sklearn(name):
    X, y = _iris() if name == "MLPClassifier" else _diabetes()
    kw = dict(hidden_layer_sizes=(5,), max_iter=3, early_stopping=True, random_state=0)
    for cls in (getattr(de, name), getattr(sk_nn, name)):
        est = _quiet(cls(**kw).fit, X, y)
        with pytest.raises(ValueError, match="partial_fit does not support early_stopping=True"):
            est.partial_fit(X, y)


def test_mlp_validation_set_too_small_message_as_sklearn():
    X, y = _iris()
    msg = "The validation set is too small. Increase 'validation_fraction' or the size of your dataset."
    for cls in (de.MLPClassifier, sk_nn.MLPClassifier):
        with pytest.raises(ValueError, match=msg.replace(".", r"\.")):
            cls(early_stopping=True, validation_fraction=0.01, max_iter=2).fit(X[:50], y[:50])


@pytest.mark.parametrize("label", [0, "a"])
def test_mlp_single_class_as_sklearn(label):
    X, _ = _iris()
    y = np.array([label] * len(X))
    kw = dict(hidden_layer_sizes=(5,), max_iter=3, random_state=0)
    ours = _quiet(de.MLPClassifier(**kw).fit, X, y)
    ref = _quiet(sk_nn.MLPClassifier(**kw).fit, X, y)
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    assert (ours.n_outputs_, ours.out_activation_) == (ref.n_outputs_, ref.out_activation_)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    assert ours.predict_proba(X).shape == ref.predict_proba(X).shape == (len(X), 2)


@pytest.mark.parametrize("strategy", MLP_STRATEGIES)
def test_mlp_warm_start_with_other_classes_is_an_error_as_sklearn(strategy):
    X, y = _iris()
    msg = "warm_start can only be used where `y` has the same classes as in the previous call to fit"
    ours = _quiet(de.MLPClassifier((5,), max_iter=3, warm_start=True, random_state=0, strategy=strategy).fit, X, y)
    ref = _quiet(sk_nn.MLPClassifier((5,), max_iter=3, warm_start=True, random_state=0).fit, X, y)
    for est in (ours, ref):
        with pytest.raises(ValueError, match=msg):
            est.fit(X[y < 2], y[y < 2])
        with pytest.raises(ValueError, match=msg):  # partial_fit too, with warm_start=True
            est.partial_fit(X[y < 2], y[y < 2])
        _quiet(est.fit, X, y)  # the same classes: fine
    # without warm_start, partial_fit takes a subset of the classes, and an unknown one is scikit-learn's error
    for est in (ours, ref):
        est.set_params(warm_start=False).partial_fit(X[y < 2], y[y < 2])
        with pytest.raises(ValueError, match="`y` has classes not in `self.classes_`"):
            est.partial_fit(X, np.where(y == 2, 7, y))


@pytest.mark.parametrize("strategy", MLP_STRATEGIES)
def test_mlp_n_iter_across_warm_starts_as_sklearn(strategy):
    X, y = _iris()
    kw = dict(hidden_layer_sizes=(5,), max_iter=3, warm_start=True, random_state=0, n_iter_no_change=100)
    ours = de.MLPClassifier(strategy=strategy, **kw)
    ref = sk_nn.MLPClassifier(**kw)
    seen = []
    for est in (ours, ref):
        _quiet(est.fit, X, y)
        first = (est.n_iter_, est.t_, len(est.loss_curve_))
        _quiet(est.fit, X, y)
        second = (est.n_iter_, est.t_, len(est.loss_curve_))
        est.partial_fit(X, y)
        seen.append((first, second, (est.n_iter_, est.t_, len(est.loss_curve_))))
    assert seen[0] == seen[1] == ((3, 450, 3), (3, 900, 6), (1, 1050, 7))


@pytest.mark.parametrize("strategy", MLP_STRATEGIES)
def test_mlp_diverging_loss_with_early_stopping_finishes_as_sklearn(strategy):
    X, y = load_iris(return_X_y=True)
    kw = dict(hidden_layer_sizes=100, activation="identity", solver="sgd", alpha=0.0001, learning_rate="constant",
              learning_rate_init=1, shuffle=True, max_iter=20, early_stopping=True, n_iter_no_change=10,
              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = sk_nn.MLPRegressor(**kw).fit(X, y)
        ours = de.MLPRegressor(strategy=strategy, **kw).fit(X, y)
    assert ours.n_iter_ == ref.n_iter_ == 20
    assert not np.all(np.isfinite(ours.loss_curve_)) and not np.all(np.isfinite(ref.loss_curve_))
    assert all(np.all(np.isfinite(c)) for c in ours.coefs_ + ours.intercepts_)
    assert np.isfinite(ours.best_validation_score_)
    assert np.all(np.isfinite(ours.predict(X)))


@pytest.mark.parametrize("solver,strategy", [("adam", "rounds"), ("adam", "ddp"), ("lbfgs", "rounds")])
def test_mlp_nonfinite_params_is_sklearns_value_error(solver, strategy):
    rng = np.random.RandomState(0)
    X = np.finfo(np.float64).max * rng.uniform(size=(10, 2))
    y = rng.standard_normal(size=10)
    msg = ("Solver produced non-finite parameter weights. The input data may contain large values and need to "
           "be preprocessed.")
    for est in (de.MLPRegressor(solver=solver, strategy=strategy), sk_nn.MLPRegressor(solver=solver)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if solver != "lbfgs":
                with pytest.raises(ValueError, match=msg):
                    est.fit(X, y)
            else:  # L-BFGS-B stops at its (finite) start on a NaN objective: a ConvergenceWarning, no error
                with pytest.warns(ConvergenceWarning):
                    est.fit(X, y)
                assert est.n_iter_ == 0


@pytest.mark.parametrize(
    "name,kw",
    [
        ("MLPClassifier", {"solver": "adam"}),
        ("MLPClassifier", {"solver": "lbfgs", "activation": "tanh"}),
        ("MLPClassifier", {"solver": "sgd", "activation": "logistic", "early_stopping": True}),
        ("MLPRegressor", {"solver": "adam"}),
        ("MLPRegressor", {"solver": "lbfgs", "loss": "poisson"}),
    ],
)
def test_to_sklearn_mlp(name, kw):
    if name == "MLPClassifier":
        X, y = _iris()
        y = np.array(["setosa", "versicolor", "virginica"])[y]
    else:
        X, y = _diabetes()
        if kw.get("loss") == "poisson":
            y = np.exp(0.5 * y)
    ours = _quiet(getattr(de, name)(hidden_layer_sizes=(7, 4), max_iter=30, random_state=0, **kw).fit, X, y)
    sk = ours.to_sklearn()
    assert type(sk) is getattr(sk_nn, name)
    for k, v in sk.get_params().items():
        assert v == ours.get_params()[k], k
    for attr in ["coefs_", "intercepts_"]:
        for a, b in zip(getattr(sk, attr), getattr(ours, attr)):
            np.testing.assert_array_equal(a, b)
    assert (sk.n_layers_, sk.n_outputs_, sk.out_activation_, sk.n_iter_) == (
        ours.n_layers_, ours.n_outputs_, ours.out_activation_, ours.n_iter_)
    _assert_same_predictions(ours, sk, X)
    # scikit-learn can go on from it: a warm-started fit starts from our weights
    cont = pickle.loads(pickle.dumps(sk)).set_params(warm_start=True, max_iter=1)
    _quiet(cont.fit, X, y)
    assert cont.n_iter_ == 1
    if kw["solver"] != "lbfgs":
        moved = max(np.abs(a - b).max() for a, b in zip(cont.coefs_, ours.coefs_))
        assert 0 < moved < 0.5


@pytest.mark.parametrize("y_kind", ["binary", "multilabel"])
def test_to_sklearn_mlp_classifier_label_kinds(y_kind):
    X, y = _iris()
    y = (y == 2).astype(int) if y_kind == "binary" else np.column_stack([y == 0, y == 2, X[:, 0] > 0]).astype(int)
    ours = _quiet(de.MLPClassifier((6,), max_iter=20, random_state=0).fit, X, y)
    _assert_same_predictions(ours, ours.to_sklearn(), X)


# ------------------------------------------------------ batches and shards
@pytest.mark.parametrize("n_rows,batch", [([75, 75], 1), ([10, 3, 0, 7], 1), ([10, 3, 0, 7], 4), ([100, 37], 200),
                                          ([50, 51], 7)])
def test_batch_cuts_give_exact_global_batches(n_rows, batch):
    from dask_estimators.objectives import module as M

    cuts = M.batch_cuts(n_rows, batch)
    total = sum(n_rows)
    n_steps = -(-total // batch)
    assert cuts.shape == (len(n_rows), n_steps + 1)
    np.testing.assert_array_equal(cuts[:, 0], 0)
    np.testing.assert_array_equal(cuts[:, -1], n_rows)
    assert np.all(np.diff(cuts, axis=1) >= 0)
    sizes = np.diff(cuts, axis=1).sum(0)
    np.testing.assert_array_equal(sizes, [batch] * (n_steps - 1) + [total - batch * (n_steps - 1)])
    # each shard's share of the first k batches stays within one row of its proportion
    done = np.minimum(np.arange(n_steps + 1) * batch, total)
    assert np.all(np.abs(cuts - np.outer(n_rows, done) / total) <= 1)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("strategy", MLP_STRATEGIES)
def test_mlp_sgd_takes_sklearns_batches_on_two_workers(strategy, shuffle):
    """SGD on 2 workers: each worker takes its rows of scikit-learn's global batches, in input order or in
    scikit-learn's shuffles (drawn from where the initial weights leave its random state), so the steps are
    scikit-learn's own: batch_size=1 steps one row at a time, in the same order."""
    X, y = _diabetes(n=40)
    kw = dict(hidden_layer_sizes=(4,), solver="sgd", momentum=0.0, learning_rate_init=0.01, batch_size=1,
              shuffle=shuffle, max_iter=3, random_state=0, alpha=1e-3)
    ours = _quiet(de.MLPRegressor(strategy=strategy, **kw).fit, X, y)
    assert ours.fit_stats_["steps_per_epoch"] == len(X) and len(ours.fit_stats_["rows_per_shard"]) == 2
    ref = _quiet(sk_nn.MLPRegressor(**kw).fit, X, y)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_layout_of_the_rows_takes_sklearns_batches(data):
    """However the rows are cut into pieces and the pieces dealt to shards (in any order), the shards' rows of
    each global batch are together scikit-learn's batch: its shuffle of the sample indices, once an epoch,
    drawn over the one before from the same random state."""
    from sklearn.utils import gen_batches, shuffle

    from dask_estimators.objectives import module as M

    n = data.draw(st.integers(1, 60), label="rows")
    batch = data.draw(st.integers(1, n), label="batch")
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6), label="cuts")) | {0, n})
    pieces = [(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    n_shards = data.draw(st.integers(1, 4), label="shards")
    owner = data.draw(st.lists(st.integers(0, n_shards - 1), min_size=len(pieces), max_size=len(pieces)))
    dealt = data.draw(st.permutations(range(len(pieces))), label="order within shards")
    shards = [tuple(pieces[j] for j in dealt if owner[j] == r) for r in range(n_shards)]
    shuffled = data.draw(st.booleans(), label="shuffle")
    rng = np.random.RandomState(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    state = M.shuffle_state(rng)
    epoch0 = data.draw(st.integers(0, 3), label="epoch0")
    orders = [M.BatchOrder(r, n, batch, state, epoch0) for r in shards]
    held = [{"order": {"order": o, "mine": None, "shuffles": None, "local": None}} for o in orders]
    sample_idx = np.arange(n)
    for epoch in (epoch0, epoch0 + 1, epoch0 + 2, epoch0):  # and back to the first (a rebuilt shard)
        if epoch == epoch0:
            sample_idx, ref_rng = np.arange(n), M.random_state_of(state)
        if shuffled:
            sample_idx = shuffle(sample_idx, random_state=ref_rng)
        took = [M.epoch_order(h, epoch, shuffled) for h in held]
        for k, sl in enumerate(gen_batches(n, batch)):
            got = np.concatenate([o.global_rows()[rows[c[k]:c[k + 1]]] for o, (rows, c) in zip(orders, took)])
            want = sample_idx[sl] if shuffled else np.arange(n)[sl]
            np.testing.assert_array_equal(np.sort(got), np.sort(want))


@pytest.mark.parametrize("target", ["two classes", "three classes", "regression"])
def test_early_stopping_holds_out_sklearns_validation_rows(client, target):
    """early_stopping: scikit-learn's train_test_split of the global rows (stratified for two classes) drawn
    from its random state after the initial weights, then its shuffles of the training rows: SGD on every
    worker, from NumPy or a dask frame, takes scikit-learn's steps and validation scores, and stops where it
    stops."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    kw = dict(hidden_layer_sizes=(4,), solver="sgd", learning_rate_init=0.05, batch_size=16, max_iter=30,
              random_state=0, early_stopping=True, validation_fraction=0.2, n_iter_no_change=3)
    if target == "regression":
        y, ours_cls, ref_cls = X[:, 0] + 0.5 * X[:, 1] ** 2, de.MLPRegressor, sk_nn.MLPRegressor
        X = X[:, 1:]
    else:
        y = (y == 2).astype(int) if target == "two classes" else y
        ours_cls, ref_cls = de.MLPClassifier, sk_nn.MLPClassifier
    ref = _quiet(ref_cls(**kw).fit, X, y)
    assert ref.n_iter_ < kw["max_iter"]
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=5), dd.from_pandas(pd.Series(y), npartitions=5)
    with dask.config.set({"dask-estimators.min-step-flops-per-worker": 0}):
        for Xf, yf in [(X, y), frame]:
            ours = _quiet(ours_cls(**kw).fit, Xf, yf)
            assert len(ours.fit_stats_["rows_per_shard"]) == 2
            assert ours.n_iter_ == ref.n_iter_
            np.testing.assert_allclose(ours.validation_scores_, ref.validation_scores_, rtol=1e-9)
            for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_the_same_rows_in_any_layout_train_the_same_network(client):
    """Adam on the same rows from NumPy, from dask arrays whose blocks sit on both workers (the shards' rows
    out of input order), and from dask frames of known and unknown lengths: the same network."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd

    X, y = load_iris(return_X_y=True)
    X = np.repeat(X, 4, axis=0) + np.random.default_rng(0).normal(scale=0.1, size=(600, 4))
    y = np.repeat(y, 4)
    kw = dict(hidden_layer_sizes=(5,), max_iter=4, batch_size=32, random_state=0)
    ref = _quiet(de.MLPClassifier(**kw).fit, X, y)
    blocks = client.persist([da.from_array(X, chunks=(50, 4)), da.from_array(y, chunks=50)])
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=7), dd.from_pandas(pd.Series(y), npartitions=7)
    layouts = {"persisted blocks": blocks, "frame": frame,
               "unknown lengths": [f.clear_divisions() for f in frame]}
    spread = 0
    for name, (Xd, yd) in layouts.items():
        ours = _quiet(de.MLPClassifier(**kw).fit, Xd, yd)
        spread += len(ours.fit_stats_["rows_per_shard"]) > 1
        for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
    assert spread


def _three_outputs(n=120):
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X[:n])
    Y = np.column_stack([y[:n], 50 * X[:, 2] + 0.3 * y[:n], -y[:n]])
    return X, (Y - Y.mean(0)) / Y.std(0)


@pytest.mark.parametrize("strategy", MLP_STRATEGIES)
def test_mlp_several_outputs_report_and_stop_on_sklearns_loss(strategy):
    """scikit-learn reports the squared error of several outputs as their mean (its gradient is that of the
    sum), and its stopping rule compares that loss with tol: the same loss curve, and the same epoch to stop
    at (tol=1e-2 stops it at 25 of 60 epochs; on the sum, three times the decrease, it would go on longer)."""
    X, Y = _three_outputs()
    kw = dict(hidden_layer_sizes=(5,), batch_size=200, shuffle=False, max_iter=60, random_state=0, tol=1e-2,
              n_iter_no_change=3, learning_rate_init=0.01)
    ours = _quiet(de.MLPRegressor(strategy=strategy, **kw).fit, X, Y)
    ref = _quiet(sk_nn.MLPRegressor(**kw).fit, X, Y)
    assert ref.n_iter_ < kw["max_iter"]
    assert ours.n_iter_ == ref.n_iter_
    # to Adam's rounding: torch adds epsilon to the bias-corrected root, scikit-learn to the raw one
    np.testing.assert_allclose(ours.loss_curve_, ref.loss_curve_, rtol=1e-5)
    assert ours.loss_ == ours.loss_curve_[-1] and ours.best_loss_ == pytest.approx(ref.best_loss_, rel=1e-5)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_mlp_lbfgs_several_outputs_is_sklearns():
    """L-BFGS-B gets scikit-learn's value (the mean over the outputs) with its gradient (of the sum): the same
    iterations, loss_ and weights."""
    X, Y = _three_outputs()
    kw = dict(hidden_layer_sizes=(5,), solver="lbfgs", max_iter=30, random_state=0)
    ours = _quiet(de.MLPRegressor(**kw).fit, X, Y)
    ref = _quiet(sk_nn.MLPRegressor(**kw).fit, X, Y)
    assert ours.n_iter_ == ref.n_iter_
    assert ours.loss_ == pytest.approx(ref.loss_, rel=1e-8)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_mlp_lbfgs_follows_sklearn_past_probabilities_below_eps():
    """A line search's trial point with class probabilities below eps: scikit-learn's log-loss clips them, and
    ours (exact) gave L-BFGS-B another value; from the tenth iteration the fits went apart (loss_ 0.168 against
    scikit-learn's 0.075 after 200).  With the same clipped value they take the same iterations."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = np.digitize(X @ rng.normal(size=4) + 0.5 * rng.normal(size=60), [-0.5, 0.5])
    kw = dict(hidden_layer_sizes=(3,), random_state=0, solver="lbfgs", max_iter=200)
    ours = _quiet(de.MLPClassifier(**kw).fit, X, y)
    ref = _quiet(sk_nn.MLPClassifier(**kw).fit, X, y)
    assert ours.n_iter_ == ref.n_iter_
    assert ours.loss_ == pytest.approx(ref.loss_, rel=1e-6)
    for a, b in zip(ours.coefs_ + ours.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_mlp_lbfgs_ignores_early_stopping_as_sklearn():
    """scikit-learn's lbfgs trains on all rows whatever early_stopping says (no split, no 'too small' error)."""
    X, y = _iris()
    kw = dict(hidden_layer_sizes=(5,), solver="lbfgs", max_iter=30, random_state=0)
    plain = _quiet(de.MLPClassifier(**kw).fit, X, y)
    for est in (de.MLPClassifier(early_stopping=True, **kw), sk_nn.MLPClassifier(early_stopping=True, **kw)):
        _quiet(est.fit, X, y)
        _quiet(est.set_params(validation_fraction=0.001).fit, X, y)  # too small for a split: no error either
    ours = _quiet(de.MLPClassifier(early_stopping=True, **kw).fit, X, y)
    for a, b in zip(ours.coefs_, plain.coefs_):
        np.testing.assert_array_equal(a, b)


def test_mlp_regressor_one_output_predicts_1d_as_sklearn():
    X, y = _diabetes()
    kw = dict(hidden_layer_sizes=(4,), max_iter=3, random_state=0)
    from sklearn.exceptions import DataConversionWarning

    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        ours = _quiet(de.MLPRegressor(**kw).fit, X, y[:, None])
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        ref = _quiet(sk_nn.MLPRegressor(**kw).fit, X, y[:, None])
    assert ours.predict(X).shape == ref.predict(X).shape == (len(X),)
    _assert_same_predictions(ours, ours.to_sklearn(), X)


def test_mlp_partial_fit_class_errors_have_sklearns_text():
    X, y = _iris()
    messages = []
    for cls in (de.MLPClassifier, sk_nn.MLPClassifier):
        got = []
        with pytest.raises(ValueError) as info:  # y has a class outside the first call's classes
            cls(hidden_layer_sizes=(3,), random_state=0).partial_fit(X, y, classes=[0, 1])
        got.append(str(info.value))
        est = cls(hidden_layer_sizes=(3,), random_state=0).partial_fit(X, y, classes=[0, 1, 2])
        with pytest.raises(ValueError) as info:  # other classes on a later call
            est.partial_fit(X, y, classes=[0, 1, 2, 3])
        got.append(str(info.value))
        messages.append(got)
    assert messages[0] == messages[1]


# ------------------------------------------------------------------ scikit-learn's callbacks (set_callbacks)
class _Recorder:
    """A callback of scikit-learn's protocol that keeps every hook call and each iteration's fitted copy."""

    def __init__(self):
        self.calls, self.ends = [], []

    def setup(self, estimator, context):
        self.calls.append("setup")

    def on_fit_task_begin(self, estimator, context, *, X=None, y=None, metadata=None, fitted_estimator=None):
        self.calls.append(("begin", context.task_name))

    def on_fit_task_end(self, estimator, context, *, X=None, y=None, metadata=None, fitted_estimator=None):
        self.calls.append(("end", context.task_name))
        if "iter" in context.task_name:
            self.ends.append(fitted_estimator)

    def teardown(self, estimator, context):
        self.calls.append("teardown")


@pytest.mark.skipif(not hasattr(sk_lm.LogisticRegression, "set_callbacks"), reason="scikit-learn < 1.9: no callbacks")
@pytest.mark.parametrize(
    "name,solver,dask_input",
    [
        ("LogisticRegression", "lbfgs", True),
        ("LogisticRegression", "newton-cg", False),
        ("LogisticRegression", "newton-cholesky", False),
        ("LinearRegression", "lbfgs", False),
        ("LinearSVC", "lbfgs", True),
    ],
)
def test_callbacks_see_every_iteration_as_a_fit_stopped_there(name, solver, dask_input):
    import dask.array as da

    X, y = make_classification(n_samples=300, n_features=6, n_informative=4, n_classes=3, random_state=0)
    if name == "LinearRegression":
        y = X @ np.arange(6.0) + np.random.default_rng(0).normal(size=300)
    kw = {"solver": solver, "tol": 1e-8} if name != "LinearSVC" else {"tol": 1e-8}
    # persisted once, so that every fit below sums the same rows on the same shards in the same order
    Xf, yf = (da.from_array(X, chunks=100).persist(), da.from_array(y, chunks=100).persist()) if dask_input else (X, y)
    cb = _Recorder()
    est = getattr(de, name)(**kw).set_callbacks(cb).fit(Xf, yf)
    n_iter = int(np.max(est.n_iter_))
    assert n_iter >= 2
    # one root task, one sub-task per iteration and the empty one after the last; setup and teardown once
    assert cb.calls[0] == "setup" and cb.calls[-1] == "teardown"
    begins = [c for c in cb.calls if c[0] == "begin"]
    assert len(begins) == len([c for c in cb.calls if c[0] == "end"]) == n_iter + 2
    assert len(cb.ends) == n_iter + 1 and cb.ends[-1] is None
    # the iterate after iteration i predicts as a fit with max_iter=i (the same path, cut short)
    for i in (1, n_iter // 2, n_iter):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            cut = getattr(de, name)(**kw, max_iter=i).fit(Xf, yf)
        got = cb.ends[i - 1]
        # dask input: the scheduler may lay the rows out on other shards for another fit, and the sums' other
        # rounding moves late L-BFGS iterates in the 7th digit; NumPy input is split the same way every time
        rtol = 1e-5 if dask_input else 1e-7
        np.testing.assert_allclose(got.coef_, cut.coef_, rtol=rtol, atol=1e-10)
        np.testing.assert_allclose(got.intercept_, cut.intercept_, rtol=rtol, atol=1e-10)
    # the last iterate is the fitted model; the callbacks do not survive into a pickle's behaviour
    np.testing.assert_allclose(cb.ends[n_iter - 1].coef_, est.coef_)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(X), est.predict(X))


# ------------------------------------------------------------------ newton-cholesky on a singular Hessian
def test_newton_cholesky_goes_on_with_lbfgs_on_a_singular_hessian():
    from scipy.linalg import LinAlgWarning

    X, y = make_classification(n_samples=10, n_features=20, random_state=42)  # wider than long
    lbfgs = de.LogisticRegression(solver="lbfgs", C=1e30).fit(X, y)
    with pytest.warns(LinAlgWarning, match="goes on with lbfgs"):
        nc = de.LogisticRegression(solver="newton-cholesky", C=1e30).fit(X, y)
    assert nc.n_iter_[0] == lbfgs.n_iter_[0]
    np.testing.assert_allclose(nc.coef_, lbfgs.coef_)
    with pytest.warns(LinAlgWarning), pytest.warns(ConvergenceWarning, match="lbfgs failed to converge"):
        de.LogisticRegression(solver="newton-cholesky", C=1e30, max_iter=lbfgs.n_iter_[0] - 1).fit(X, y)


def test_newton_cholesky_least_squares_step_on_collinear_regression():
    X, y = load_diabetes(return_X_y=True)
    X = np.hstack([X, X[:, :2] + X[:, 2:4]])  # two exactly collinear columns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = de.LinearRegression(solver="newton-cholesky", alpha=0.0).fit(X, y)
    ref = sk_lm.LinearRegression().fit(X, y)  # the minimum-norm least-squares solution
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-8)


@pytest.mark.parametrize("C", [1.0, np.inf])
def test_newton_cholesky_multinomial_null_direction_is_held(C):
    # the softmax is unchanged by a shift common to all classes: Newton's steps keep one class's entries fixed
    X, y = load_iris(return_X_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        two = de.LogisticRegression(solver="newton-cholesky", C=C, max_iter=2).fit(X, y)
        one = de.LogisticRegression(solver="newton-cholesky", C=C, max_iter=1, warm_start=True)
        one.fit(X, y).fit(X, y)
    np.testing.assert_allclose(one.predict_proba(X), two.predict_proba(X), rtol=1e-10)
    if C == 1.0:
        ref = sk_lm.LogisticRegression(solver="newton-cholesky", C=C, tol=1e-10).fit(X, y)
        ours = de.LogisticRegression(solver="newton-cholesky", C=C, tol=1e-10).fit(X, y)
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), rtol=1e-6, atol=1e-10)


def test_mlp_early_stopping_names_the_class_too_small_to_stratify():
    X = np.arange(16.0).reshape(8, 2)
    y = np.array(["a", "a", "a", "a", "a", "a", "a", "c"])
    with pytest.raises(ValueError, match=r"least populated classes in y have only 1 member.*are: \['c'\]"):
        de.MLPClassifier(early_stopping=True, max_iter=5).fit(X, y)


def test_mlp_early_stopping_does_not_stratify_more_than_two_classes_as_scikit_learn():
    """scikit-learn stratifies the early-stopping split of a classifier of one output only (two classes): with
    three classes, one of a single row, it fits; ours raised the stratified split's error."""
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = np.array(["a"] * 50 + ["b"] * 49 + ["c"])
    kw = dict(early_stopping=True, max_iter=5, hidden_layer_sizes=(4,), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = MLPClassifier(**kw).fit(X, y)
        ours = de.MLPClassifier(**kw).fit(X, y)
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    assert len(ours.validation_scores_) == ours.n_iter_


def test_mlp_multilabel_log_proba_is_the_log_of_proba():
    from sklearn.datasets import make_multilabel_classification

    X, Y = make_multilabel_classification(n_samples=50, random_state=0, return_indicator=True)
    clf = de.MLPClassifier(solver="lbfgs", hidden_layer_sizes=30, random_state=0).fit(X, Y)
    proba, log_proba = clf.predict_proba(X), clf.predict_log_proba(X)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(log_proba, np.log(proba))
    np.testing.assert_array_equal(log_proba.argmax(1), proba.argmax(1))


@pytest.mark.parametrize(
    "name,kw",
    [
        ("PoissonRegressor", {"alpha": 0.01}),
        ("GammaRegressor", {"alpha": 0.1, "solver": "newton-cholesky"}),
        ("TweedieRegressor", {"power": 1.5, "alpha": 0.05}),
        ("TweedieRegressor", {"power": 0.0, "link": "identity", "alpha": 0.05}),
    ],
)
def test_to_sklearn_glm(name, kw):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    mu = np.exp(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.5)
    y = rng.gamma(2.0, mu / 2.0) if name == "GammaRegressor" else rng.poisson(mu).astype(float)
    ours = getattr(de, name)(**kw).fit(X, y)
    sk = ours.to_sklearn()
    assert type(sk) is getattr(sk_lm, name)
    assert sk.get_params()["alpha"] == ours.alpha
    for attr in ["coef_", "intercept_", "n_features_in_", "n_iter_"]:
        np.testing.assert_array_equal(getattr(sk, attr), getattr(ours, attr))
    assert sk.score(X, y) == pytest.approx(ours.score(X, y), rel=1e-12)
    _assert_same_predictions(ours, sk, X)
    # the same objective: scikit-learn's fit from scratch lands on these coefficients
    ref = getattr(sk_lm, name)(**{k: v for k, v in sk.get_params().items() if k != "tol"}, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


def test_to_sklearn_glm_refuses_l1():
    X, y = np.random.default_rng(0).normal(size=(50, 2)), np.arange(50) % 3
    with pytest.raises(ValueError, match="no L1 term"):
        de.PoissonRegressor(l1_ratio=0.5, alpha=0.1).fit(X, y).to_sklearn()


@pytest.mark.parametrize("form", ["object", "pandas-string", "categorical"])
def test_mlp_string_labels_as_sklearn(form):
    """Labels held as Python strings (an object array, pandas' string or categorical dtype): scikit-learn's
    LabelBinarizer gives NumPy string classes_ and predictions; ours kept them as objects."""
    import pandas as pd

    X, k = _classification(n=90, k=3)
    labels = np.array(["apple", "banana", "cherry"])[k]
    y = {"object": labels.astype(object), "pandas-string": pd.Series(labels, dtype="string"),
         "categorical": pd.Series(pd.Categorical(labels))}[form]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = de.MLPClassifier(max_iter=5, random_state=0).fit(X, y)
        ref = sk_nn.MLPClassifier(max_iter=5, random_state=0).fit(X, y)
    assert ours.classes_.dtype == ref.classes_.dtype and ours.classes_.dtype.kind == "U"
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    assert ours.predict(X).dtype == ref.predict(X).dtype


@pytest.mark.parametrize("name", ["MLPClassifier", "MLPRegressor"])
def test_mlp_dask_column_y_warns_as_sklearn(name):
    """A dask y of one column: scikit-learn's DataConversionWarning, as for a NumPy one (it warned for NumPy
    only), and the model of the 1-d y."""
    import dask.array as da
    from sklearn.exceptions import DataConversionWarning

    X, y = _classification() if name == "MLPClassifier" else _regression()
    dX, dy = da.from_array(X, chunks=40), da.from_array(y.reshape(-1, 1), chunks=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.warns(DataConversionWarning, match="column-vector y"):
            ours = getattr(de, name)(max_iter=5, random_state=0).fit(dX, dy)
        flat = getattr(de, name)(max_iter=5, random_state=0).fit(dX, da.from_array(y, chunks=40))
    for a, b in zip(ours.coefs_, flat.coefs_):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("solver, early_stopping", [("adam", False), ("adam", True), ("sgd", False), ("lbfgs", False)])
def test_mlp_loss_attributes_are_of_sklearns_types(solver, early_stopping):
    """``loss_``, the entries of ``loss_curve_`` and ``best_loss_`` are NumPy float64, as scikit-learn's (they were
    Python floats), after a fit and after a warm start."""
    X, y = load_iris(return_X_y=True)
    kw = dict(solver=solver, early_stopping=early_stopping, max_iter=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pair = [de.MLPClassifier(**kw).fit(X, y), sk_nn.MLPClassifier(**kw).fit(X, y)]
        if solver != "lbfgs":
            pair = [m.set_params(warm_start=True, max_iter=3).fit(X, y) for m in pair]
    ours, ref = pair
    assert type(ours.loss_) is type(ref.loss_) is np.float64
    if hasattr(ref, "loss_curve_"):  # scikit-learn's lbfgs keeps no curve; ours does
        assert {type(v) for v in ours.loss_curve_} == {type(v) for v in ref.loss_curve_} == {np.float64}
    assert type(getattr(ours, "best_loss_", "absent")) is type(getattr(ref, "best_loss_", "absent"))


@pytest.mark.parametrize("name", ["LogisticRegression", "LinearSVC"])
@pytest.mark.parametrize("class_weight, error", [
    ({0: 1.0, 1: 2.0, 2: 5.0}, None),  # every class of y, and one more: scikit-learn fits
    ({1: 3.0}, None),                   # some classes of y only
    ({0: 1.0, 5: 2.0}, "The classes, [1], are not in class_weight"),
    ({5: 2.0}, "The classes, [0, 1], are not in class_weight"),
])
def test_a_class_weight_dict_is_read_as_scikit_learn_reads_it(name, class_weight, error):
    """scikit-learn weighs the classes of y that the dict names, leaves out keys that are no class of y, and
    refuses only a dict that misses a class of y while naming another label; ours refused any key that was not
    a class (a training fold without a rare class then failed in a search)."""
    X, y = _classification(k=2)
    if error is not None:
        for cls in (getattr(de, name), SK_LINEAR[name]):
            with pytest.raises(ValueError, match=re.escape(error)):
                cls(class_weight=class_weight).fit(X, y)
        return
    ours = getattr(de, name)(class_weight=class_weight, tol=1e-10, max_iter=5000).fit(X, y)
    ref = SK_LINEAR[name](class_weight=class_weight, tol=1e-10, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["LogisticRegression", "LinearSVC", "MLPClassifier"])
@pytest.mark.parametrize("where", ["numpy", "dask"])
def test_labels_of_ints_and_strings_are_scikit_learns_unknown_label_type(name, where):
    """y mixing ints and strings: scikit-learn's ValueError "Unknown label type: unknown"; ours raised
    ``TypeError: '<' not supported between instances of 'str' and 'int'`` from sorting the labels."""
    import dask.array as da

    X, _ = _classification()
    y = np.array([1, "a"] * (len(X) // 2), dtype=object)
    if where == "dask":
        X, y = da.from_array(X, chunks=40), da.from_array(y, chunks=40)
    with pytest.raises(ValueError, match="Unknown label type: unknown"):
        getattr(de, name)().fit(X, y)
