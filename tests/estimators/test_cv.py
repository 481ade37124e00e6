"""LogisticRegressionCV and LinearRegressionCV: the search on one placement, against scikit-learn's CV estimators.

* the splits made on the workers are scikit-learn's unshuffled ``StratifiedKFold`` / ``KFold``
  (also for shards holding several interleaved row ranges, as dask input gives);
* parity on breast_cancer (binary), digits (multinomial) and diabetes (elastic net) with the
  same folds: the same hyperparameters, the same scores, coefficients within rtol 1e-4;
* the data is placed once per search; dask input gives the NumPy result;
* the lockstep (batched) paths equal the sequential ones; splitters, iterables, client-side
  scorers, ``refit=False``, class and sample weights; pickling and predicting without a cluster;
* metadata routing as scikit-learn's: ``groups`` to the splitter, ``sample_weight`` to the scorer as it requests.
"""

import pickle
import warnings

import dask.array as da
import numpy as np
import pytest
import sklearn
from sklearn import linear_model as sk
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.exceptions import ConvergenceWarning, UnsetMetadataPassedError
from sklearn.metrics import get_scorer
from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import Shard
from dask_estimators.estimators import cv as cv_module
from dask_estimators.objectives import cv as CV

# the searches here spread their data over every worker, one distributed round per evaluation, as large ones do;
# a small search's paths on one worker are tests/estimators/test_worker_solve.py's
pytestmark = pytest.mark.usefixtures("spread")

TIGHT = dict(tol=1e-10, max_iter=1000)
CS = [0.01, 0.1, 1.0, 10.0]


def _sk_logistic_cv(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return sk.LogisticRegressionCV(l1_ratios=None, scoring=kw.pop("scoring", None), use_legacy_attributes=True,
                                       **kw)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return StandardScaler().fit_transform(X), y


# ------------------------------------------------------------------ the splits, computed where the rows are
def _shards(y_codes, ranges_per_shard):
    """Local shards holding the given global row ranges of ``y_codes`` (in range order)."""
    shards = []
    for ranges in ranges_per_shard:
        idx = np.concatenate([np.arange(a, b) for a, b in ranges])
        shards.append(Shard({"X": np.zeros((len(idx), 1)), "y": y_codes[idx]}, device="cpu"))
    return shards


def _held_out_split(shards, ranges_per_shard, n):
    fold = np.full(n, -1)
    for shard, ranges in zip(shards, ranges_per_shard):
        roles = shard.cache["cv_roles"]
        assert np.all((roles == CV.TEST).sum(0) == 1)  # held out in exactly one split, trained on in the others
        fold[CV._positions(ranges)] = (roles == CV.TEST).argmax(0)
    return fold


@pytest.mark.parametrize("n_splits", [2, 3, 5])
def test_worker_stratified_folds_are_sklearns(n_splits):
    rng = np.random.default_rng(0)
    n = 203
    labels = np.array([7, 3, 5, 9])  # first appearance order differs from sorted order
    y = labels[rng.choice(4, n, p=[0.1, 0.5, 0.25, 0.15])]
    classes = np.unique(y)
    codes = np.searchsorted(classes, y)
    ranges = [[(0, 40), (90, 150)], [(40, 90), (150, 203)]]  # interleaved, as dask placement can give
    shards = _shards(codes, ranges)
    runs = [CV.class_runs(s, r, len(classes)) for s, r in zip(shards, ranges)]
    bounds, prefixes = CV.stratified_plan(runs, len(classes), n_splits)
    for s, r, p in zip(shards, ranges, prefixes):
        CV.assign_stratified(s, r, p, bounds)
    expected = np.empty(n, dtype=int)
    for k, (_, test) in enumerate(StratifiedKFold(n_splits).split(np.zeros(n), y)):
        expected[test] = k
    np.testing.assert_array_equal(_held_out_split(shards, ranges, n), expected)


def test_worker_kfold_folds_are_sklearns():
    n, ranges = 53, [[(0, 10), (30, 53)], [(10, 30)]]
    shards = _shards(np.zeros(n, dtype=int), ranges)
    for s, r in zip(shards, ranges):
        CV.assign_kfold(s, r, n, 4)
    expected = np.empty(n, dtype=int)
    for k, (_, test) in enumerate(KFold(4).split(np.zeros(n))):
        expected[test] = k
    np.testing.assert_array_equal(_held_out_split(shards, ranges, n), expected)


def test_stratified_plan_refuses_too_many_splits_as_sklearn():
    codes = np.array([0, 0, 1, 1, 1])
    shards = _shards(codes, [[(0, 5)]])
    runs = [CV.class_runs(shards[0], [(0, 5)], 2)]
    with pytest.raises(ValueError, match="n_splits=4 cannot be greater than the number of members in each class"):
        CV.stratified_plan(runs, 2, 4)
    with pytest.warns(UserWarning, match="least populated class in y has only 2 members"):
        CV.stratified_plan(runs, 2, 3)


# --------------------------------------------------------------------------------- parity with scikit-learn
def _check_logistic(ours, ref, rtol=1e-4):
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_array_equal(ours.Cs_, ref.Cs_)
    assert ours.l1_ratio_.dtype == ref.l1_ratio_.dtype  # None where no l1_ratios were searched, with refit
    np.testing.assert_array_equal(ours.l1_ratio_, ref.l1_ratio_)
    assert set(ours.scores_) == set(ref.scores_) and set(ours.coefs_paths_) == set(ref.coefs_paths_)
    for key in ref.scores_:
        np.testing.assert_allclose(ours.scores_[key], ref.scores_[key], atol=1e-12)
        assert ours.coefs_paths_[key].shape == ref.coefs_paths_[key].shape
    assert ours.n_iter_.shape == ref.n_iter_.shape
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=rtol, atol=rtol * scale)


def test_binary_parity_breast_cancer(cancer):
    X, y = cancer
    ours = de.LogisticRegressionCV(Cs=CS, **TIGHT).fit(X, y)
    ref = _sk_logistic_cv(Cs=CS, tol=1e-10, max_iter=10_000).fit(X, y)
    _check_logistic(ours, ref)
    assert list(ours.scores_) == [1] and ours.coefs_paths_[1].shape == (5, len(CS), X.shape[1] + 1)
    # the fold paths themselves (converged at every C here)
    np.testing.assert_allclose(ours.coefs_paths_[1], ref.coefs_paths_[1], rtol=1e-4, atol=1e-4)


def test_multinomial_parity_digits(digits):
    X, y = digits
    Cs = [0.01, 0.1, 1.0]
    ours = de.LogisticRegressionCV(Cs=Cs, cv=3, tol=1e-8, max_iter=1000).fit(X, y)
    ref = _sk_logistic_cv(Cs=Cs, cv=3, tol=1e-8, max_iter=10_000).fit(X, y)
    _check_logistic(ours, ref)
    assert ours.C_.shape == (10,) and ours.coefs_paths_[3].shape == (3, 3, X.shape[1] + 1)


def test_elastic_net_parity_diabetes():
    X, y = load_diabetes(return_X_y=True)
    kw = dict(alphas=5, l1_ratio=[0.5, 1.0])
    ours = de.LinearRegressionCV(**kw, tol=1e-10).fit(X, y)
    ref = sk.ElasticNetCV(**kw, tol=1e-12, max_iter=100_000).fit(X, y)
    # the same objective scale: LinearRegression's alpha is ElasticNet's
    assert ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-12) and ours.l1_ratio_ == ref.l1_ratio_
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-12)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6 * scale)
    assert ours.intercept_ == pytest.approx(ref.intercept_, rel=1e-6)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-6)


def test_elastic_net_given_alphas_and_ridge_weights():
    X, y = load_diabetes(return_X_y=True)
    sw = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    alphas = [0.001, 0.01, 0.1]
    ours = de.LinearRegressionCV(alphas=alphas, l1_ratio=0.0, cv=3, tol=1e-10).fit(X, y, sample_weight=sw)
    ref = sk.ElasticNetCV(alphas=alphas, l1_ratio=0.0, cv=3, tol=1e-12, max_iter=100_000).fit(X, y, sample_weight=sw)
    assert ours.alpha_ == ref.alpha_
    np.testing.assert_allclose(ours.alphas_, ref.alphas_)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6 * np.abs(ref.coef_).max())


# ------------------------------------------------------------------------- LinearRegressionCV on the Gram
def test_gram_search_equals_the_path_search():
    """solver="cd" (one round of Gram sums, coordinate descent on the client) against the solvers' fold paths."""
    X, y = load_diabetes(return_X_y=True)
    kw = dict(alphas=6, l1_ratio=[0.3, 0.9], cv=4, tol=1e-10, max_iter=10_000)
    gram = de.LinearRegressionCV(solver="cd", **kw).fit(X, y)
    path = de.LinearRegressionCV(solver="lbfgs", **kw).fit(X, y)
    assert gram.solver_ == "cd" and path.solver_ == "lbfgs"
    assert (gram.alpha_, gram.l1_ratio_) == (path.alpha_, path.l1_ratio_)
    np.testing.assert_allclose(gram.mse_path_, path.mse_path_, rtol=1e-6)
    np.testing.assert_allclose(gram.coef_, path.coef_, rtol=1e-5, atol=1e-7 * np.abs(path.coef_).max())
    assert gram.intercept_ == pytest.approx(path.intercept_, rel=1e-7)
    # the whole search is two rounds (the means, then the sums), against one per solver evaluation
    assert gram.fit_stats_["rounds"] <= 2 < path.fit_stats_["rounds"]


@pytest.mark.parametrize("cv", ["shuffle", "predefined"])
def test_gram_search_on_offset_features_and_given_splits_matches_sklearn(cv):
    """Features with means 1e4 times their spread; splits that overlap or leave rows out; sample weights."""
    from sklearn.model_selection import PredefinedSplit, ShuffleSplit

    X, y = load_diabetes(return_X_y=True)
    X = X + 1e4 * np.std(X, axis=0) * np.arange(1, X.shape[1] + 1)
    sw = np.random.default_rng(3).uniform(0.5, 2.0, len(y))
    splits = ShuffleSplit(3, test_size=0.25, train_size=0.5, random_state=0) if cv == "shuffle" else \
        PredefinedSplit(np.arange(len(y)) % 4 - 1)  # rows of fold -1 are never held out
    kw = dict(alphas=5, l1_ratio=0.7, cv=splits)
    ours = de.LinearRegressionCV(**kw, tol=1e-10, max_iter=10_000).fit(X, y, sample_weight=sw)
    ref = sk.ElasticNetCV(**kw, tol=1e-12, max_iter=100_000).fit(X, y, sample_weight=sw)
    assert ours.solver_ == "cd" and ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-12)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-6 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-6)


def test_gram_search_refusals_and_warnings():
    import scipy.sparse as sp

    X, y = load_diabetes(return_X_y=True)
    with pytest.raises(ValueError, match="solver='cd' works on the Gram matrix of dense X"):
        de.LinearRegressionCV(solver="cd", alphas=2, cv=2).fit(sp.csr_matrix(X), y)
    with pytest.warns(ConvergenceWarning, match="Coordinate descent did not converge within max_iter=1 sweeps"):
        de.LinearRegressionCV(alphas=3, l1_ratio=0.5, cv=2, tol=1e-14, max_iter=1).fit(X, y)
    # wide dense X: "auto" keeps the fold paths (the Gram would be (d + 2)^2 per split)
    rng = np.random.default_rng(0)
    Xw = rng.normal(size=(60, cv_module._GRAM_MAX_FEATURES + 1))
    assert de.LinearRegressionCV(alphas=2, cv=2).fit(Xw, Xw[:, 0]).solver_ == "lbfgs"


def test_generated_grid_needs_l1_as_sklearn():
    X, y = load_diabetes(return_X_y=True)
    with pytest.raises(ValueError, match="Automatic alpha grid generation is not supported for l1_ratio=0"):
        de.LinearRegressionCV(l1_ratio=0.0).fit(X, y)


def test_weights_refit_false_and_splitter(cancer):
    X, y = cancer
    rng = np.random.default_rng(0)
    sw = rng.uniform(0.2, 3.0, len(y))
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    kw = dict(Cs=CS, cv=cv, class_weight="balanced", refit=False)
    ours = de.LogisticRegressionCV(**kw, **TIGHT).fit(X, y, sample_weight=sw)
    ref = _sk_logistic_cv(**kw, tol=1e-10, max_iter=10_000).fit(X, y, sample_weight=sw)
    _check_logistic(ours, ref)


def test_iterable_of_splits_and_client_side_scorer(cancer):
    X, y = cancer
    splits = list(KFold(4, shuffle=True, random_state=1).split(X))
    ours = de.LogisticRegressionCV(Cs=CS, cv=splits, scoring="roc_auc", **TIGHT).fit(X, y)
    ref = _sk_logistic_cv(Cs=CS, cv=splits, scoring="roc_auc", tol=1e-10, max_iter=10_000).fit(X, y)
    _check_logistic(ours, ref)
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), rel=1e-6)


def test_neg_log_loss_on_workers_and_elastic_net(cancer):
    X, y = cancer
    kw = dict(Cs=[0.1, 1.0], l1_ratios=[0.0, 0.5], scoring="neg_log_loss", cv=3)
    ours = de.LogisticRegressionCV(**kw, **TIGHT).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk.LogisticRegressionCV(**kw, solver="saga", tol=1e-10, max_iter=100_000,
                                      use_legacy_attributes=True).fit(X, y)
    assert ours.scores_[1].shape == ref.scores_[1].shape == (3, 2, 2)
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1], rtol=1e-5)
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_array_equal(ours.l1_ratio_, ref.l1_ratio_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- one placement, dask input
def test_one_placement_per_search_and_dask_equals_numpy(cancer, monkeypatch):
    X, y = cancer
    from dask_estimators.session import DataSession

    calls = []
    real = DataSession.data

    def spy(self, **arrays):
        calls.append(arrays["X"])
        return real(self, **arrays)

    monkeypatch.setattr(DataSession, "data", spy)
    ours = de.LogisticRegressionCV(Cs=CS, cv=4, **TIGHT).fit(X, y)
    assert len(calls) == 1  # 4 splits x 4 values of C and the refit: one placement
    # uneven chunks: the shards hold interleaved row ranges, and the splits still follow the rows' positions
    Xd = da.from_array(X, chunks=(97, -1))
    yd = da.from_array(y, chunks=(131,))
    on_dask = de.LogisticRegressionCV(Cs=CS, cv=4, **TIGHT).fit(Xd, yd)
    assert len(calls) == 2
    np.testing.assert_array_equal(on_dask.C_, ours.C_)
    for key in ours.scores_:
        np.testing.assert_array_equal(on_dask.scores_[key], ours.scores_[key])
    np.testing.assert_allclose(on_dask.coef_, ours.coef_, rtol=1e-8, atol=1e-10)

    Xr, yr = load_diabetes(return_X_y=True)
    reg = de.LinearRegressionCV(alphas=4, l1_ratio=1.0, cv=3, tol=1e-10).fit(Xr, yr)
    reg_dask = de.LinearRegressionCV(alphas=4, l1_ratio=1.0, cv=3, tol=1e-10).fit(
        da.from_array(Xr, chunks=(100, -1)), da.from_array(yr, chunks=(150,)))
    assert len(calls) == 4
    assert reg_dask.alpha_ == pytest.approx(reg.alpha_, rel=1e-12)
    np.testing.assert_allclose(reg_dask.mse_path_, reg.mse_path_, rtol=1e-6)
    np.testing.assert_allclose(reg_dask.coef_, reg.coef_, rtol=1e-6, atol=1e-6)


def test_dask_input_refuses_client_side_scorer(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="needs the held-out rows on the client"):
        de.LogisticRegressionCV(Cs=2, scoring="roc_auc").fit(da.from_array(X, chunks=100), da.from_array(y, chunks=100))


# ------------------------------------------------------------------------------ lockstep = sequential paths
def test_batched_paths_equal_sequential(cancer):
    X, y = cancer
    kw = dict(Cs=CS, cv=3, **TIGHT)
    seq = de.LogisticRegressionCV(path_method="sequential", **kw).fit(X, y)
    bat = de.LogisticRegressionCV(path_method="batched", **kw).fit(X, y)
    np.testing.assert_allclose(bat.coefs_paths_[1], seq.coefs_paths_[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(bat.scores_[1], seq.scores_[1])
    # the splits of a point of the path share each round (tests/optim/test_batched.py: the iterates of each
    # run are a lone run's; here the kernels differ, a GEMM against the fused one-model kernel, in rounding)
    assert bat.fit_stats_["rounds"] < seq.fit_stats_["rounds"] / 2
    # "auto" (the default): lockstep for a binary model's splits, one split after the other for a multinomial's
    auto = de.LogisticRegressionCV(**kw).fit(X, y)
    assert "fold_value_grad_many" in auto.fit_stats_["by_kernel"]
    np.testing.assert_array_equal(auto.scores_[1], bat.scores_[1])


@pytest.mark.parametrize("path_method", ["batched", "sequential"])
def test_paths_on_unscaled_columns_solve_centred_in_a_fraction_of_sklearns_iterations(path_method):
    """Unscaled breast_cancer (columns of mean up to 880): each split's L-BFGS fits measure the intercept at the
    split's mean row, as a lone fit does, so they take about a third of the iterations of scikit-learn's, which
    solves in the stored variables, to the same optimum: the same scores and C_."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    kw = dict(Cs=[1e-2, 1e-1], cv=3, tol=1e-8, max_iter=20_000)  # 1,934 iterations against 5,429
    ours = de.LogisticRegressionCV(path_method=path_method, **kw).fit(X, y)
    ref = _sk_logistic_cv(**kw).fit(X, y)
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1], atol=1e-12)
    np.testing.assert_allclose(ours.coefs_paths_[1], ref.coefs_paths_[1], rtol=1e-3, atol=1e-3)
    assert ours.n_iter_.sum() < 0.5 * ref.n_iter_.sum(), (ours.n_iter_.sum(), ref.n_iter_.sum())


def test_auto_path_method_runs_multinomial_splits_one_after_the_other(digits):
    X, y = digits
    auto = de.LogisticRegressionCV(Cs=[0.1], cv=2, max_iter=50).fit(X[:400], y[:400])
    assert "fold_value_grad_many" not in auto.fit_stats_["by_kernel"]
    assert "fold_value_grad_many" in de.LogisticRegressionCV(Cs=[0.1], cv=2, max_iter=50, path_method="batched").fit(
        X[:400], y[:400]).fit_stats_["by_kernel"]


def test_pickles_and_predicts_without_a_cluster(cancer):
    X, y = cancer
    clf = de.LogisticRegressionCV(Cs=[0.1, 1.0], cv=3).fit(X, y)
    copy = pickle.loads(pickle.dumps(clf))
    assert copy.client is None
    np.testing.assert_array_equal(copy.predict(X), clf.predict(X))
    np.testing.assert_allclose(copy.predict_proba(X), clf.predict_proba(X))
    sk_copy = clf.to_sklearn()
    np.testing.assert_allclose(sk_copy.predict_proba(X), clf.predict_proba(X))


def test_new_attribute_layout_as_sklearn(digits):
    X, y = digits
    kw = dict(Cs=[0.1, 1.0], l1_ratios=[0.0], cv=3, scoring="neg_log_loss", use_legacy_attributes=False)
    ours = de.LogisticRegressionCV(**kw, tol=1e-8, max_iter=1000).fit(X, y)
    ref = sk.LogisticRegressionCV(**kw, tol=1e-8, max_iter=10_000).fit(X, y)
    assert isinstance(ours.C_, float) and ours.C_ == ref.C_ and ours.l1_ratio_ == ref.l1_ratio_
    assert ours.coefs_paths_.shape == ref.coefs_paths_.shape == (3, 1, 2, 10, X.shape[1] + 1)
    assert ours.scores_.shape == ref.scores_.shape and ours.n_iter_.shape == ref.n_iter_.shape
    np.testing.assert_allclose(ours.scores_, ref.scores_, rtol=1e-6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-4, atol=1e-4 * np.abs(ref.coef_).max())


def test_fit_params_refused_without_routing(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="only supported if enable_metadata_routing=True"):
        de.LogisticRegressionCV(Cs=2).fit(X, y, groups=np.zeros(len(y)))


def _check_mse_paths(ours, ref):
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-10)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-5)
    assert ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-10)


def test_routing_groups_to_the_splitter_as_sklearn(cancer):
    X, y = cancer
    groups = np.arange(len(y)) % 7
    kw = dict(Cs=CS, cv=GroupKFold(3))
    with sklearn.config_context(enable_metadata_routing=True):
        ours = de.LogisticRegressionCV(**kw, **TIGHT).fit(X, y, groups=groups)
        ref = _sk_logistic_cv(**kw, tol=1e-10, max_iter=10_000).fit(X, y, groups=groups)
        _check_logistic(ours, ref)
        # ElasticNetCV's routing; dask input with NumPy groups gives the NumPy search
        Xd, yd = load_diabetes(return_X_y=True)
        g = np.arange(len(yd)) % 5
        kw = dict(l1_ratio=0.5, alphas=6, cv=GroupKFold(3))
        ours = de.LinearRegressionCV(**kw, tol=1e-12).fit(Xd, yd, groups=g)
        ref = sk.ElasticNetCV(**kw, tol=1e-12, max_iter=100_000).fit(Xd, yd, groups=g)
        _check_mse_paths(ours, ref)
        on_dask = de.LinearRegressionCV(**kw, tol=1e-12).fit(da.from_array(Xd, chunks=(150, -1)),
                                                            da.from_array(yd, chunks=150), groups=g)
        np.testing.assert_allclose(on_dask.mse_path_, ours.mse_path_, rtol=1e-10)
        # groups with a splitter that takes none: not routed, scikit-learn's error
        with pytest.raises(TypeError, match="not routed to any object"):
            de.LinearRegressionCV(alphas=2, cv=3).fit(Xd, yd, groups=g)
    with pytest.raises(ValueError, match="only supported if enable_metadata_routing=True"):
        de.LinearRegressionCV(alphas=2).fit(Xd, yd, groups=g)


@pytest.mark.parametrize("requested", [True, False])
def test_routing_sample_weight_to_the_scorer_as_requested(cancer, requested):
    X, y = cancer
    sw = np.where(np.arange(len(y)) % 3 == 0, 4.0, 1.0)
    kw = dict(Cs=CS, cv=StratifiedKFold(3, shuffle=True, random_state=0))
    with sklearn.config_context(enable_metadata_routing=True):
        scorer = get_scorer("accuracy").set_score_request(sample_weight=requested)
        ours = de.LogisticRegressionCV(scoring=scorer, **kw, **TIGHT).fit(X, y, sample_weight=sw)
        ref = _sk_logistic_cv(scoring=scorer, **kw, tol=1e-10, max_iter=10_000).fit(X, y, sample_weight=sw)
        _check_logistic(ours, ref)
        # the held-out scores are the accuracies of the fold paths, weighted only as requested
        for k, (_, test) in enumerate(kw["cv"].split(X, y)):
            for j, path in enumerate(ours.coefs_paths_[1][k]):
                right = ((X[test] @ path[:-1] + path[-1] > 0) == y[test]).astype(float)
                w = sw[test] if requested else np.ones(len(test))
                assert ours.scores_[1][k, j] == pytest.approx((w * right).sum() / w.sum(), rel=1e-12)
        if requested:
            assert ours.score(X, y, sample_weight=sw) == ref.score(X, y, sample_weight=sw)
        else:  # score's sample_weight goes to the scorer alone, which does not take it
            with pytest.raises(TypeError, match="score got unexpected argument"):
                ours.score(X, y, sample_weight=sw)
        assert ours.score(X, y) == ref.score(X, y)
        # a scorer whose request is unset: scikit-learn's error, before any work
        with pytest.raises(UnsetMetadataPassedError):
            de.LogisticRegressionCV(Cs=CS).fit(X, y, sample_weight=sw)


def test_splitter_on_dask_input_equals_numpy(cancer):
    X, y = cancer
    cv = KFold(3, shuffle=True, random_state=0)
    ours = de.LogisticRegressionCV(Cs=[0.1, 1.0], cv=cv, **TIGHT).fit(X, y)
    on_dask = de.LogisticRegressionCV(Cs=[0.1, 1.0], cv=cv, **TIGHT).fit(
        da.from_array(X, chunks=(150, -1)), da.from_array(y, chunks=(150,)))
    np.testing.assert_array_equal(on_dask.scores_[1], ours.scores_[1])
    np.testing.assert_allclose(on_dask.coef_, ours.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["LogisticRegressionCV", "LinearRegressionCV"])
def test_splits_that_repeat_or_hold_out_a_training_row_are_refused_in_words(name):
    """The placed roles hold one role per row and split: a bootstrap's repeated training rows counted once, and
    a training row also held out was taken out of training, so the scores were not scikit-learn's.  Such splits
    are now refused, with what to use instead."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    n = len(y)
    rng = np.random.default_rng(0)
    bootstrap = [(rng.integers(0, n, n), np.arange(n // 4)) for _ in range(3)]
    overlap = [(np.arange(n), np.arange(n // 4))] * 3
    for splits in (bootstrap, overlap):
        with pytest.raises(ValueError, match=r"The training rows of split 0 repeat a row or include one of its "
                                             r"held-out rows.*GridSearchCV takes such splits"):
            getattr(de, name)(cv=splits).fit(X, y)


def test_a_class_weight_key_that_is_no_class_is_refused_as_by_sklearn():
    """scikit-learn's LogisticRegressionCV refuses a class_weight key that names no class (a misspelt label would
    weigh nothing); ours fitted, the key left out.  The same error, before any path is solved."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3))
    y = np.array(["cat", "dog", "emu"])[np.arange(90) % 3]
    weights = {"cat": 1.0, "dog": 2.0, "emu": 1.0, "typo": 3.0}
    with pytest.raises(ValueError, match="must have the class labels as keys") as ours:
        de.LogisticRegressionCV(Cs=3, cv=3, class_weight=weights).fit(X, y)
    with pytest.raises(ValueError, match="must have the class labels as keys"):
        sk.LogisticRegressionCV(Cs=3, cv=3, class_weight=weights).fit(X, y)
    assert "typo" in str(ours.value)
    fitted = de.LogisticRegressionCV(Cs=3, cv=3, class_weight={"cat": 1.0, "dog": 2.0}).fit(X, y)
    assert list(fitted.classes_) == ["cat", "dog", "emu"]
