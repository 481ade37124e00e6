"""dask_estimators.model_selection over our networks (issue 57): X placed whole on every worker once, and each
split's candidates that take the same batches trained in lockstep, in one task on one worker.

Each candidate must come out as its own ``fit`` on the split's rows trains it on one worker: the same initial
weights, batches, steps, stopping epochs and weights, to the bit.  The reference fits run on one worker of the
session's process cluster (tests/conftest.py), with ``dask-estimators.min-step-flops-per-worker`` set so high
that a fit's steps are worth one worker only.
"""

from __future__ import annotations

import pickle
import warnings

import dask
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn.model_selection as skms
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_digits, load_iris
from sklearn.exceptions import ConvergenceWarning, FitFailedWarning
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, PolynomialFeatures, StandardScaler

import dask_estimators as de
from dask_estimators.estimators import neural
from dask_estimators.model_selection import GridSearchCV, RandomizedSearchCV
from dask_estimators.model_selection import _search
from dask_estimators.session import _session

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

ONE_WORKER = {"dask-estimators.min-step-flops-per-worker": 1e30}  # every network fit on one worker


@pytest.fixture
def lockstep_tasks(monkeypatch):
    """The members of each lockstep task run while the test runs."""
    tasks = []
    run = _session.PlacedData.train_lockstep

    def counted(self, rows, y, sample_weight, members, through=None):
        tasks.append(len(members))
        return run(self, rows, y, sample_weight, members, through)

    monkeypatch.setattr(_session.PlacedData, "train_lockstep", counted)
    return tasks


def _digits(n=600):
    X, y = load_digits(return_X_y=True)
    return StandardScaler().fit_transform(X[:n]), y[:n]


def _alone(model, X, y, sample_weight=None):
    """``model`` fitted on its own, on one worker."""
    with dask.config.set(ONE_WORKER):
        est = clone(model).fit(X, y, sample_weight=sample_weight)
    assert est.fit_stats_["n_shards"] == 1
    return est


def _same_fit(got, ref):
    assert got.fit_stats_["strategy"] == "lockstep"
    for a, b in zip(got.coefs_ + got.intercepts_, ref.coefs_ + ref.intercepts_):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert got.n_iter_ == ref.n_iter_ and got.t_ == ref.t_
    assert got.loss_curve_ == ref.loss_curve_
    assert got.validation_scores_ == ref.validation_scores_
    assert got.best_loss_ == ref.best_loss_ and got.best_validation_score_ == ref.best_validation_score_
    for name in ("classes_", "n_features_in_", "n_outputs_", "out_activation_", "n_layers_"):
        np.testing.assert_array_equal(getattr(got, name, None), getattr(ref, name, None))


CLASSIFIERS = {
    "adam-multiclass": [de.MLPClassifier(h, alpha=a, max_iter=3, random_state=0) for h in [(8,), (16,)]
                        for a in [1e-4, 1e-1]],
    "early-stopping-and-sgd": [
        de.MLPClassifier((8,), max_iter=40, early_stopping=True, n_iter_no_change=2, random_state=1),
        de.MLPClassifier((8,), max_iter=40, early_stopping=True, n_iter_no_change=2, random_state=1,
                         learning_rate_init=0.01, activation="tanh"),
        de.MLPClassifier((8, 6), solver="sgd", learning_rate="invscaling", max_iter=4, batch_size=64,
                         random_state=2),
        de.MLPClassifier((8,), solver="sgd", learning_rate="adaptive", max_iter=6, tol=1e-1, n_iter_no_change=1,
                         random_state=2, batch_size=64, activation="logistic"),
    ],
}


@pytest.mark.parametrize("case", sorted(CLASSIFIERS))
def test_each_classifier_comes_out_as_its_own_fit_on_one_worker(case):
    X, y = _digits()
    models = CLASSIFIERS[case]
    splits = list(StratifiedKFold(3).split(X, y))
    grid, _ = neural.fit_lockstep(models, X, y, None, splits)
    for i, model in enumerate(models):
        for k, (train, _) in enumerate(splits):
            _same_fit(grid[i][k], _alone(model, X[train], y[train]))
    assert max(g.fit_stats_["lockstep_members"] for row in grid for g in row) > 1  # some trained together


def test_each_regressor_comes_out_as_its_own_fit_with_weights_float32_and_two_outputs():
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    Y = np.column_stack([y / 100.0, np.log(y)])
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    models = [de.MLPRegressor(hidden_layer_sizes=(6,), alpha=a, max_iter=3, batch_size=50, random_state=3)
              for a in [1e-4, 1.0]]
    splits = list(KFold(3, shuffle=True, random_state=0).split(X))
    grid, _ = neural.fit_lockstep(models, X, Y, w, splits)
    for i, model in enumerate(models):
        for k, (train, _) in enumerate(splits):
            ref = _alone(model, X[train], Y[train], w[train])
            assert ref.coefs_[0].dtype == np.float32
            _same_fit(grid[i][k], ref)


def test_a_network_grid_places_x_once_per_worker_and_scores_as_each_fit_alone(placements, lockstep_tasks, client):
    X, y = _digits()
    grid = {"hidden_layer_sizes": [(8,), (16,)], "alpha": [1e-4, 1e-2], "learning_rate_init": [1e-3, 1e-2]}
    est = de.MLPClassifier(max_iter=3, random_state=0)
    ours = GridSearchCV(est, grid, cv=3, return_train_score=True).fit(X, y)
    n_workers = len(client.scheduler_info()["workers"])
    # X once on each worker; the refit on all of them
    assert sorted(map(len, placements[:-1])) == [1] * n_workers and placements[-1] is None
    # two architectures draw two batch seeds: per split, two lockstep groups of four
    assert sorted(lockstep_tasks) == [4] * 6
    with dask.config.set(ONE_WORKER):
        theirs = skms.GridSearchCV(est, grid, cv=3, return_train_score=True).fit(X, y)
    assert ours.cv_results_["params"] == theirs.cv_results_["params"]
    for key in ours.cv_results_:
        if key.startswith(("split", "mean_test", "mean_train", "std_test", "std_train", "rank")):
            np.testing.assert_array_equal(ours.cv_results_[key], theirs.cv_results_[key], err_msg=key)
    assert ours.best_params_ == theirs.best_params_
    # the refit is a fit of its own, on every worker; fitted, the search needs no cluster
    assert ours.best_estimator_.fit_stats_["strategy"] != "lockstep"
    again = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(again.predict(X), ours.predict(X))


def test_a_randomized_search_over_a_frame_keeps_its_names(lockstep_tasks):
    X, y = load_iris(return_X_y=True, as_frame=True)
    X = (X - X.mean()) / X.std()
    dist = {"alpha": [1e-5, 1e-4, 1e-3, 1e-2], "learning_rate_init": [1e-3, 3e-3, 1e-2]}
    ours = RandomizedSearchCV(de.MLPClassifier((5,), max_iter=5, random_state=0), dist, n_iter=4, cv=3,
                              random_state=0).fit(X, y)
    # one architecture: each split's candidates in one group, one of them halved so that two workers get two each
    assert sorted(lockstep_tasks) == [2, 2, 4, 4]
    theirs = skms.RandomizedSearchCV(de.MLPClassifier((5,), max_iter=5, random_state=0), dist, n_iter=4, cv=3,
                                     random_state=0)
    with dask.config.set(ONE_WORKER):
        theirs.fit(X, y)
    np.testing.assert_array_equal(ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"])
    assert list(ours.feature_names_in_) == list(X.columns)


def test_candidates_without_a_random_state_share_their_splits_batches(lockstep_tasks):
    X, y = _digits(300)
    grid = {"hidden_layer_sizes": [(4,), (8,), (12,)]}
    ours = GridSearchCV(de.MLPClassifier(max_iter=2), grid, cv=3).fit(X, y)
    assert sorted(lockstep_tasks) == [1, 2, 3, 3]  # a group a split, one halved for the two workers
    assert np.all(np.isfinite(ours.cv_results_["mean_test_score"]))
    # the initial weights stay each candidate's own draw
    models = [de.MLPClassifier((4,), max_iter=1) for _ in range(2)]
    grid, _ = neural.fit_lockstep(models, X, y, None, [(np.arange(200), np.arange(200, 300))])
    assert not np.array_equal(grid[0][0].coefs_[0], grid[1][0].coefs_[0])


def test_what_the_lockstep_does_not_take_runs_scikit_learns_search(monkeypatch):
    X, y = _digits(300)

    def refused(*args, **kwargs):
        raise AssertionError("the lockstep ran")

    monkeypatch.setattr(neural, "fit_lockstep", refused)
    for est, grid in [
        (de.MLPClassifier(solver="lbfgs", max_iter=5), {"alpha": [1e-4, 1e-2]}),
        (de.MLPClassifier(max_iter=2), {"solver": ["adam", "lbfgs"]}),
        (de.MLPClassifier(max_iter=2, strategy="rounds"), {"alpha": [1e-4, 1e-2]}),
        (de.MLPClassifier(max_iter=2, warm_start=True), {"alpha": [1e-4, 1e-2]}),
        (Pipeline([("poly", PolynomialFeatures(2)), ("mlp", de.MLPClassifier(max_iter=2))]), {"mlp__alpha": [1e-4]}),
    ]:
        ours = GridSearchCV(est, grid, cv=2).fit(X, y)
        theirs = skms.GridSearchCV(est, grid, cv=2).fit(X, y)
        assert ours.cv_results_["params"] == theirs.cv_results_["params"]
    GridSearchCV(de.MLPClassifier(max_iter=2), {"alpha": [1e-4]}, cv=2).fit(sp.csr_matrix(X), y)  # sparse X


def test_x_too_large_for_every_worker_runs_scikit_learns_search(monkeypatch, lockstep_tasks):
    X, y = _digits(300)
    ran = []
    sklearn_fit = _search._PlacedSearch._sklearn_fit
    monkeypatch.setattr(_search._PlacedSearch, "_sklearn_fit", lambda *a: ran.append(1) or sklearn_fit(*a))
    with dask.config.set({"dask-estimators.search-replica-share": 1e-9}):
        ours = GridSearchCV(de.MLPClassifier(max_iter=2, random_state=0), {"alpha": [1e-4, 1e-3]}, cv=2).fit(X, y)
    assert ran == [1] and lockstep_tasks == []
    assert ours.best_estimator_.n_iter_ == 2


def test_a_failing_candidate_scores_error_score_as_in_scikit_learns_search():
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    grid = {"learning_rate_init": [1e-3, 1e2]}  # the second diverges: non-finite weights
    est = de.MLPRegressor(hidden_layer_sizes=(4,), activation="identity", solver="sgd", momentum=0.0, max_iter=5,
                          random_state=0)
    with pytest.warns(FitFailedWarning):
        ours = GridSearchCV(est, grid, cv=2).fit(X, y)
    assert np.isfinite(ours.cv_results_["mean_test_score"][0]) and np.isnan(ours.cv_results_["mean_test_score"][1])
    with pytest.raises(ValueError, match="non-finite"):
        GridSearchCV(est, grid, cv=2, error_score="raise").fit(X, y)


def test_bad_input_gets_the_estimators_own_error():
    X, y = _digits(300)
    bad = X.copy()
    bad[5, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GridSearchCV(de.MLPClassifier(max_iter=2), {"alpha": [1e-4]}, cv=2, error_score="raise").fit(bad, y)
    with pytest.raises(ValueError, match="[Uu]nknown label type"):
        GridSearchCV(de.MLPClassifier(max_iter=2), {"alpha": [1e-4]}, cv=2, error_score="raise").fit(
            X, np.linspace(0, 1, len(y)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError):
            GridSearchCV(de.MLPClassifier(max_iter=2), {"alpha": [1e-4]}, cv=2).fit(pd.DataFrame(X).astype(str)
                                                                                      .assign(s="a"), y)


def test_a_convergence_warning_is_raised_as_by_each_fit():
    X, y = _digits(300)
    with pytest.warns(ConvergenceWarning, match="Maximum iterations"):
        GridSearchCV(de.MLPClassifier((4,), max_iter=1, random_state=0), {"alpha": [1e-4, 1e-3]}, cv=2).fit(X, y)


def test_the_progress_bar_counts_every_network_fit_and_shows_the_best_score(capsys, lockstep_tasks):
    X, y = _digits(300)
    grid = {"alpha": [1e-4, 1e-3], "hidden_layer_sizes": [(4,), (6,)]}
    search = GridSearchCV(de.MLPClassifier(max_iter=2, random_state=0), grid, cv=3, progress=True).fit(X, y)
    err = capsys.readouterr().err
    assert lockstep_tasks and "12/12" in err
    assert f"best={np.max(search.cv_results_['mean_test_score']):.4g}" in err


@pytest.mark.parametrize("scaler", [StandardScaler(), MinMaxScaler()], ids=["standard", "minmax"])
def test_a_pipelines_scaler_is_fitted_once_a_split_and_scales_the_rows_where_x_is(scaler, placements,
                                                                                   lockstep_tasks, client):
    X, y = load_digits(return_X_y=True, as_frame=True)
    X, y = X.iloc[:600], y.iloc[:600]
    pipe = Pipeline([("scale", scaler), ("mlp", de.MLPClassifier(max_iter=3, random_state=0))])
    grid = {"mlp__alpha": [1e-4, 1e-1], "mlp__hidden_layer_sizes": [(8,), (12,)]}
    w = np.linspace(0.5, 1.5, len(y))
    fitted = []
    original = _search._with_final

    def kept(model, steps, final):
        out = original(model, steps, final)
        fitted.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_search, "_with_final", kept)
        ours = GridSearchCV(pipe, grid, cv=3).fit(X, y, mlp__sample_weight=w)
    n_workers = len(client.scheduler_info()["workers"])
    assert sorted(map(len, placements[:-1])) == [1] * n_workers and placements[-1] is None  # X once a worker
    assert sum(lockstep_tasks) == 4 * 3
    with dask.config.set(ONE_WORKER):
        theirs = skms.GridSearchCV(pipe, grid, cv=3).fit(X, y, mlp__sample_weight=w)
    for key in ("mean_test_score", "split0_test_score", "split1_test_score", "split2_test_score"):
        np.testing.assert_array_equal(ours.cv_results_[key], theirs.cv_results_[key], err_msg=key)
    assert ours.best_params_ == theirs.best_params_
    # each candidate's pipeline: its split's scaler, and its network as the pipeline's own fit on one worker
    splits = list(StratifiedKFold(3).split(X, y))
    train = splits[0][0]
    for model in fitted[: 4 * 3 : 3]:  # each candidate's fit on the first split (the fits go candidate by candidate)
        with dask.config.set(ONE_WORKER):
            ref = clone(model).fit(X.iloc[train], y.iloc[train], mlp__sample_weight=w[train])
        np.testing.assert_array_equal(model[0].transform(X.iloc[:5]), ref[0].transform(X.iloc[:5]))
        _same_fit(model[-1], ref[-1])
        assert not hasattr(model[-1], "feature_names_in_") and list(model.feature_names_in_) == list(X.columns)


@pytest.mark.parametrize("fraction", [0.0, 0.005])
def test_too_few_validation_rows_fail_as_each_fit_does(fraction):
    X, y = load_iris(return_X_y=True)
    est = de.MLPClassifier((4,), max_iter=3, random_state=0, early_stopping=True, validation_fraction=fraction)
    with pytest.raises(ValueError, match="validation set is too small"):
        GridSearchCV(est, {"alpha": [1e-4]}, cv=3, error_score="raise").fit(X, y)
    with pytest.raises(ValueError, match="All the 6 fits failed"):
        GridSearchCV(est, {"alpha": [1e-4, 1e-2]}, cv=3).fit(X, y)


def test_a_multiclass_early_stopping_split_is_not_stratified_so_a_class_of_one_row_trains_in_lockstep(
        monkeypatch, lockstep_tasks):
    """scikit-learn stratifies the early-stopping split of a classifier of one output only: a multiclass network's
    split is not, and a class of one row trains.  The lockstep search counted such a split as stratified and
    refused it (scikit-learn's search then ran every fit alone); it trains the candidates in lockstep, each as
    its fit alone."""
    X, y = _digits(300)
    y = np.where((y == 9) & (np.arange(len(y)) != np.flatnonzero(y == 9)[0]), 8, y)  # class 9: one row
    ran = []
    sklearn_fit = _search._PlacedSearch._sklearn_fit
    monkeypatch.setattr(_search._PlacedSearch, "_sklearn_fit", lambda *a: ran.append(1) or sklearn_fit(*a))
    est = de.MLPClassifier((8,), max_iter=3, random_state=0, early_stopping=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the least populated class; the three epochs
        ours = GridSearchCV(est, {"alpha": [1e-4, 1e-2]}, cv=3, error_score="raise").fit(X, y)
        train, test = next(iter(StratifiedKFold(3).split(X, y)))
        assert np.sum(y[train] == 9) == 1
        ref = _alone(clone(est).set_params(alpha=1e-4), X[train], y[train])
    assert ran == [] and sum(lockstep_tasks) == 2 * 3
    assert ours.cv_results_["split0_test_score"][0] == ref.score(X[test], y[test])
