"""LinearSVC / LinearSVR with scikit-learn's ``loss`` and ``dual``: the distributed dual method (CoCoA+).

On the session's process cluster (2 workers, so 2 shards, the data spread
even where it is small; the last section fits on the one shard small data
gets by default): the solutions equal LIBLINEAR's (scikit-learn's estimators, same C, loss, intercept_scaling,
tight tol), ``dual="auto"`` picks as scikit-learn does, the errors and the
warning are scikit-learn's, and the fitted models travel without a cluster.
"""

from __future__ import annotations

import pickle
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn import svm as sk_svm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.optim.dual_driver import LIBLINEAR_WARNING

REF = dict(tol=1e-10, max_iter=100_000)


@pytest.fixture(autouse=True)
def spread(request):
    """Spread the data over both workers (small data goes to one by default: the dual's rule, and the primal's
    solver on one worker), unless a test asks for one shard.  (It stands in for tests/conftest.py's ``spread``.)"""
    if "one_shard" in request.keywords:
        yield
        return
    with dask.config.set({"dask-estimators.dual-one-shard-below": 0, "dask-estimators.worker-solve-below": 0}):
        yield


def _scaled(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _close(ours, ref, atol=1e-5):
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_binary_dual_equals_liblinear_breast_cancer(loss):
    X, y = _scaled(load_breast_cancer)
    ours = de.LinearSVC(loss=loss, dual=True, C=0.1, tol=1e-6).fit(X, y)
    ref = sk_svm.LinearSVC(loss=loss, dual=True, C=0.1, **REF).fit(X, y)
    assert ours.solver_ == "dual-cd" and ours.fit_stats_["n_shards"] == 2
    assert isinstance(ours.n_iter_, int) and 0 < ours.n_iter_ < 1000
    _close(ours, ref)
    stats = ours.fit_stats_
    assert -1e-9 <= stats["duality_gap"] <= 1e-4 * stats["objective"]
    assert stats["dual_objective"] <= stats["objective"] + 1e-9


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_shards_of_one_row_each_reach_liblinears_solution(loss):
    """Two rows on the two workers, a shard each: every shard starts its pass at the round's common point, and at
    the start every row's projected gradient is -1, so LIBLINEAR's spread was 0 and the fit stopped after its
    first round, far from the optimum, without a warning."""
    X = np.array([[0.3, -1.2, 0.5, 2.0], [1.1, 0.4, -0.7, 0.2]])
    y = np.array([0, 1])
    ours = de.LinearSVC(loss=loss, dual=True, tol=1e-8, max_iter=100_000).fit(X, y)
    ref = sk_svm.LinearSVC(loss=loss, dual=True, **REF).fit(X, y)
    assert ours.fit_stats_["rows_per_shard"] == [1, 1] and ours.n_iter_ > 1
    _close(ours, ref)


def test_one_vs_rest_dual_weighted_iris_with_string_labels():
    X, y = _scaled(load_iris)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    sw = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    kw = dict(loss="hinge", C=0.1, intercept_scaling=2.0, class_weight="balanced")
    ours = de.LinearSVC(tol=1e-6, **kw).fit(X, names, sample_weight=sw)
    ref = sk_svm.LinearSVC(**kw, **REF).fit(X, names, sample_weight=sw)
    assert ours.coef_.shape == (3, 4) and list(ours.classes_) == list(ref.classes_)
    _close(ours, ref)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_svr_default_loss_is_sklearns_and_dask_input_gives_the_same_model():
    X, y = _scaled(load_diabetes)
    assert de.LinearSVR().loss == sk_svm.LinearSVR().loss == "epsilon_insensitive"
    ref = sk_svm.LinearSVR(C=0.1, epsilon=5.0, **REF).fit(X, y)
    ours = de.LinearSVR(C=0.1, epsilon=5.0, tol=1e-8).fit(X, y)
    on_dask = de.LinearSVR(C=0.1, epsilon=5.0, tol=1e-8).fit(da.from_array(X, chunks=(100, 10)),
                                                             da.from_array(y, chunks=150))
    assert ours.solver_ == on_dask.solver_ == "dual-cd"
    for est in (ours, on_dask):
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-6, atol=1e-6)
    pred = on_dask.predict(da.from_array(X, chunks=(100, 10)))
    np.testing.assert_allclose(pred.compute(), ref.predict(X), rtol=1e-6, atol=1e-5)


# --------------------------------------------------------------------- dual="auto"
@pytest.mark.parametrize(
    "cls, kw, wide, expected",
    [
        (de.LinearSVC, {}, False, "primal"),
        (de.LinearSVC, {}, True, "dual"),
        (de.LinearSVC, {"loss": "hinge"}, False, "dual"),
        (de.LinearSVC, {"penalty": "l1"}, True, "primal"),
        (de.LinearSVC, {"solver": "lbfgs"}, True, "primal"),  # an explicit primal solver asks for the primal
        (de.LinearSVR, {}, False, "dual"),
        (de.LinearSVR, {"loss": "squared_epsilon_insensitive"}, False, "primal"),
        (de.LinearSVR, {"loss": "squared_epsilon_insensitive"}, True, "dual"),
    ],
)
def test_dual_auto_picks_as_sklearn(cls, kw, wide, expected):
    n, d = (20, 40) if wide else (80, 5)
    X, y = make_classification(n_samples=n, n_features=d, n_informative=3, random_state=0)
    if cls is de.LinearSVR:
        y = X[:, 0] + 0.1 * y
    with warnings.catch_warnings():  # only the choice matters here
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = cls(max_iter=50, **kw).fit(X, y)
    assert (ours.solver_ == "dual-cd") == (expected == "dual")


@pytest.mark.parametrize("penalty, loss, dual", [
    ("l1", "hinge", True), ("l1", "hinge", False), ("l2", "hinge", False), ("l1", "squared_hinge", True),
])
def test_unsupported_combinations_raise_sklearns_error(penalty, loss, dual):
    X, y = make_classification(n_samples=30, n_features=4, random_state=0)
    with pytest.raises(ValueError) as theirs:
        sk_svm.LinearSVC(penalty=penalty, loss=loss, dual=dual).fit(X, y)
    with pytest.raises(ValueError) as ours:
        de.LinearSVC(penalty=penalty, loss=loss, dual=dual).fit(X, y)
    assert str(ours.value) == str(theirs.value)


def test_svr_epsilon_insensitive_primal_raises_sklearns_error():
    X, y = _scaled(load_diabetes)
    with pytest.raises(ValueError) as theirs:
        sk_svm.LinearSVR(dual=False).fit(X, y)
    with pytest.raises(ValueError) as ours:
        de.LinearSVR(dual=False).fit(X, y)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kw, match", [
    ({"solver": "lbfgs", "dual": True}, "solves the primal problem"),
    ({"C": np.inf, "dual": True}, "no dual problem"),
    ({"warm_start": True, "dual": True}, "warm_start=True needs the primal"),
    ({"loss": "hinge", "C": np.inf}, "no dual problem"),
])
def test_dual_rejects_what_it_cannot_do(kw, match):
    X, y = make_classification(n_samples=30, n_features=4, random_state=0)
    with pytest.raises(ValueError, match=match):
        de.LinearSVC(**kw).fit(X, y)


# ----------------------------------------------------------- warnings, n_iter_
def test_max_iter_gives_liblinears_warning_and_n_iter():
    X, y = _scaled(load_breast_cancer)
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        est = de.LinearSVC(loss="hinge", max_iter=2).fit(X, y)
    assert est.n_iter_ == 2 and isinstance(est.n_iter_, int)
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        est = de.LinearSVR(max_iter=0).fit(X, y.astype(float))
    assert est.n_iter_ == 0 and not np.any(est.coef_) and not np.any(est.intercept_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        de.LinearSVR(C=0.1, epsilon=5.0).fit(*_scaled(load_diabetes))


def test_random_state_seeds_the_row_order():
    X, y = _scaled(load_breast_cancer)
    a = de.LinearSVC(loss="hinge", random_state=0, tol=1e-2).fit(X, y)
    b = de.LinearSVC(loss="hinge", random_state=0, tol=1e-2).fit(X, y)
    c = de.LinearSVC(loss="hinge", random_state=1, tol=1e-2).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)


# ------------------------------------------------------------- models that travel
@pytest.mark.parametrize("make", [lambda: de.LinearSVC(loss="hinge", C=0.1), lambda: de.LinearSVR(C=0.1)])
def test_dual_model_pickles_and_to_sklearn(make):
    X, y = _scaled(load_iris)
    y = y if isinstance(make(), de.LinearSVC) else X[:, 0] + y
    ours = make().fit(X, y)
    back = pickle.loads(pickle.dumps(ours))
    assert back.client is None
    np.testing.assert_array_equal(back.predict(X), ours.predict(X))
    sk = ours.to_sklearn()
    assert type(sk).__module__.startswith("sklearn.")
    assert sk.get_params()["loss"] == ours.loss and sk.get_params()["dual"] == ours.dual
    np.testing.assert_array_equal(sk.predict(X), ours.predict(X))
    if hasattr(sk, "decision_function"):
        np.testing.assert_allclose(sk.decision_function(X), ours.decision_function(X), rtol=1e-12, atol=1e-12)


# -------------------------------------------------- small data: one shard, many passes per round
@pytest.mark.one_shard
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_small_data_fits_on_one_shard_with_liblinears_iterations(loss):
    X, y = _scaled(load_breast_cancer)
    ours = de.LinearSVC(loss=loss, dual=True, C=0.1, tol=1e-6, random_state=0).fit(X, y)
    ref = sk_svm.LinearSVC(loss=loss, dual=True, C=0.1, **REF).fit(X, y)
    stats = ours.fit_stats_
    assert stats["n_shards"] == 1 and stats["rows_per_shard"] == [len(y)]
    # up to 100 of LIBLINEAR's iterations per round trip, stopped by its rule on the worker
    assert stats["dual_rounds"] == -(-ours.n_iter_ // 100)
    _close(ours, ref)
    assert -1e-9 <= stats["duality_gap"] <= 1e-4 * stats["objective"]


@pytest.mark.one_shard
def test_one_shard_svr_and_one_vs_rest_equal_liblinear_and_warn_as_it_does():
    X, y = _scaled(load_diabetes)
    # LIBLINEAR's regression rule is relative to the first pass: at tol=1e-6 the coefficients are ~1e-5 off
    # for some row orders, at 1e-8 ~2e-7 for each of 6 seeds
    ours = de.LinearSVR(C=0.1, epsilon=0.5, tol=1e-8, max_iter=20_000, random_state=0).fit(X, y / 100)
    ref = sk_svm.LinearSVR(C=0.1, epsilon=0.5, **REF).fit(X, y / 100)
    assert ours.fit_stats_["n_shards"] == 1
    _close(ours, ref)
    X, y = _scaled(load_iris)
    ours = de.LinearSVC(loss="hinge", C=0.1, tol=1e-6, random_state=0).fit(X, y)
    assert ours.fit_stats_["n_shards"] == 1
    _close(ours, sk_svm.LinearSVC(loss="hinge", C=0.1, **REF).fit(X, y))
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        est = de.LinearSVC(loss="hinge", max_iter=150).fit(*_scaled(load_breast_cancer))
    assert est.n_iter_ == 150 and est.fit_stats_["dual_rounds"] == 2


@pytest.mark.one_shard
def test_the_size_thresholds_of_the_dual_and_of_the_primal():
    X, y = _scaled(load_breast_cancer)
    with dask.config.set({"dask-estimators.dual-one-shard-below": X.size}):
        assert de.LinearSVC(loss="hinge").fit(X, y).fit_stats_["n_shards"] == 2
    with dask.config.set({"dask-estimators.dual-one-shard-below": X.size + 1}):
        stats = de.LinearSVC(loss="hinge").fit(X, y).fit_stats_
        assert stats["n_shards"] == 1 and not stats["solved_on_worker"]  # the dual's rounds, on one shard
    # the primal of a problem this small runs its solver on one worker, in one task; its own threshold spreads it
    stats = de.LinearSVC(dual=False).fit(X, y).fit_stats_
    assert stats["n_shards"] == 1 and stats["solved_on_worker"]
    with dask.config.set({"dask-estimators.worker-solve-below": X.size}):
        assert de.LinearSVC(dual=False).fit(X, y).fit_stats_["n_shards"] == 2


# ------------------------------------------------- Crammer and Singer's joint multi-class problem
CS_REF = dict(multi_class="crammer_singer", tol=1e-10, max_iter=100_000)


@pytest.mark.one_shard
@pytest.mark.parametrize("below, fit_intercept", [(2**40, True), (2**40, False), (0, False)],
                         ids=["one shard", "one shard, no intercept", "spread, no intercept"])
def test_crammer_singer_equals_liblinear_weighted_iris(below, fit_intercept):
    X, y = _scaled(load_iris)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    sw = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    kw = dict(C=0.5, fit_intercept=fit_intercept, intercept_scaling=2.0, class_weight={"virginica": 3.0})
    ref = sk_svm.LinearSVC(**kw, **CS_REF).fit(X, names, sample_weight=sw)
    with dask.config.set({"dask-estimators.dual-one-shard-below": below}):
        ours = de.LinearSVC(multi_class="crammer_singer", tol=1e-8, max_iter=20_000, random_state=0, **kw).fit(
            X, names, sample_weight=sw)
    stats = ours.fit_stats_
    assert ours.solver_ == "crammer-singer-cd" and stats["n_shards"] == (1 if below else 2)
    assert ours.coef_.shape == (3, 4) and list(ours.classes_) == list(ref.classes_)
    _close(ours, ref, atol=1e-6)
    assert 0 <= stats["duality_gap"] <= 1e-6 * stats["objective"]
    # the joint problem is not one-vs-rest's
    assert not np.allclose(ours.coef_, de.LinearSVC(loss="hinge", **kw).fit(X, names, sample_weight=sw).coef_)


@pytest.mark.one_shard
def test_crammer_singer_binary_keeps_one_row_and_sparse_input_gives_the_same_model():
    import scipy.sparse as sp

    X, y = make_classification(n_samples=200, n_features=20, class_sep=1.5, random_state=0)
    ref = sk_svm.LinearSVC(**CS_REF).fit(X, y)
    ours = de.LinearSVC(multi_class="crammer_singer", tol=1e-8, max_iter=100_000, random_state=0).fit(X, y)
    assert ours.coef_.shape == (1, 20) and ours.intercept_.shape == (1,)
    _close(ours, ref, atol=1e-6)
    X[np.abs(X) < 0.5] = 0.0
    dense = de.LinearSVC(multi_class="crammer_singer", tol=1e-8, max_iter=100_000, random_state=0).fit(X, y)
    csr = de.LinearSVC(multi_class="crammer_singer", tol=1e-8, max_iter=100_000, random_state=0).fit(
        sp.csr_matrix(X), y)
    np.testing.assert_allclose(csr.coef_, dense.coef_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(csr.intercept_, dense.intercept_, rtol=1e-12, atol=1e-12)


def test_crammer_singer_ignores_loss_and_dual_and_rejects_the_primal_only_options():
    X, y = _scaled(load_iris)
    kw = dict(multi_class="crammer_singer", C=0.1, random_state=0)
    a = de.LinearSVC(**kw).fit(X, y)
    b = de.LinearSVC(loss="hinge", penalty="l1", dual=False, **kw).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    for kw, match in [(dict(C=np.inf), "C=np.inf"), (dict(warm_start=True), "warm_start"),
                      (dict(solver="lbfgs"), "solver='lbfgs'")]:
        with pytest.raises(ValueError, match=match):
            de.LinearSVC(multi_class="crammer_singer", **kw).fit(X, y)
    with pytest.raises(ValueError, match="multi_class"):
        de.LinearSVC(multi_class="multinomial").fit(X, y)
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        est = de.LinearSVC(multi_class="crammer_singer", max_iter=3).fit(X, y)
    assert est.n_iter_ == 3


def test_crammer_singer_model_pickles_and_to_sklearn():
    X, y = _scaled(load_iris)
    ours = de.LinearSVC(multi_class="crammer_singer", C=0.5).fit(X, y)
    back = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(back.predict(X), ours.predict(X))
    sk = ours.to_sklearn()
    assert sk.get_params()["multi_class"] == "crammer_singer"
    np.testing.assert_allclose(sk.decision_function(X), ours.decision_function(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ours.predict(X), ours.classes_[np.argmax(ours.decision_function(X), axis=1)])


def test_linear_svr_convergence_warning_as_liblinear():
    """The LinearSVR half of scikit-learn's ``test_linear_svm_convergence_warnings`` (its LinearSVC half is a
    written skip in tests/upstream: our LinearSVC's primal converges there): with ``max_iter=2`` the dual
    method stops short on iris and warns with liblinear's message, and ``n_iter_`` is a Python int of 2."""
    X, y = load_iris(return_X_y=True)
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        svr = de.LinearSVR(random_state=0, max_iter=2).fit(X, y)
    assert type(svr.n_iter_) is int and svr.n_iter_ == 2
    ref = sk_svm.LinearSVR(random_state=0, max_iter=2)
    with pytest.warns(ConvergenceWarning, match=LIBLINEAR_WARNING):
        ref.fit(X, y)
    assert ref.n_iter_ == svr.n_iter_
