"""dask_estimators.model_selection: GridSearchCV and RandomizedSearchCV whose fits of our linear models share
their placements (issue 57), on the session's process cluster (tests/conftest.py).

Each search is checked against scikit-learn's own search class around the same estimators of ours, where every
fit places its rows and optimises alone: the same candidates, the same splits' scores, the same best model.  The
placed path runs every (candidate, split) fit from zero with its own stopping test, so the scores agree to the
solvers' tolerance, far tighter than the 1e-4 the issue asks; against scikit-learn's own LogisticRegression the
best candidate is the same and the scores agree to 1e-4.  The placements are counted: one per search (with a
pipeline's scaler, fitted where the rows are), one per split for other earlier steps.  A worker killed
mid-search is in tests/engine/test_faults.py.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import sklearn.model_selection as skms
from scipy.stats import loguniform
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, make_classification
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, PolynomialFeatures, StandardScaler
from sklearn.svm import SVC

import dask_estimators as de
from dask_estimators.model_selection import GridSearchCV, RandomizedSearchCV
from dask_estimators.model_selection import _search

# "spread": a search's rounds spread over the workers, as large data's; the others' small searches run in one task
# on one worker (PlacedRuns' one-worker path)


@pytest.fixture
def placed_only(monkeypatch):
    """The search must take the placed path: scikit-learn's own search is not run."""
    def refused(self, X, y, params):
        raise AssertionError("scikit-learn's search ran instead of the placed one")

    monkeypatch.setattr(_search._PlacedSearch, "_sklearn_fit", refused)


def _cancer(scaled=False):
    """Breast cancer's rows: raw (for the pipelines' scalers) or standardised (for a plain estimator)."""
    X, y = load_breast_cancer(return_X_y=True)
    return (StandardScaler().fit_transform(X) if scaled else X), y


def _same_results(ours, theirs, rtol=1e-6, atol=1e-8, same_best=True):
    """The same cv_results_ keys, candidates and split scores; the same best candidate (``same_best`` False:
    where candidates tie to the solvers' tolerance, one whose score is the best's)."""
    assert set(ours.cv_results_) == set(theirs.cv_results_)
    assert ours.cv_results_["params"] == theirs.cv_results_["params"]
    for key in ours.cv_results_:
        if key.startswith(("split", "mean_test", "mean_train", "std_test", "std_train")):
            np.testing.assert_allclose(ours.cv_results_[key], theirs.cv_results_[key], rtol=rtol, atol=atol,
                                       err_msg=key)
    if same_best:
        assert ours.best_params_ == theirs.best_params_
        assert ours.best_index_ == theirs.best_index_
    else:
        np.testing.assert_allclose(ours.best_score_, theirs.best_score_, rtol=rtol, atol=atol)


def test_a_pipelines_grid_is_placed_once_and_scores_as_each_fit_alone(placements, placed_only, spread):
    X, y = _cancer()
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8, max_iter=500))])
    grid = {"clf__C": [0.01, 0.1, 1.0, 10.0]}
    ours = GridSearchCV(pipe, grid, cv=3, return_train_score=True).fit(X, y)
    assert len(placements) == 1  # every candidate, every split and the refit
    placements.clear()
    theirs = skms.GridSearchCV(pipe, grid, cv=3, return_train_score=True).fit(X, y)
    assert len(placements) == 4 * 3 + 1  # each fit placed its own rows
    _same_results(ours, theirs)
    best, ref = ours.best_estimator_, theirs.best_estimator_
    np.testing.assert_allclose(best[-1].coef_, ref[-1].coef_, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(best[0].mean_, ref[0].mean_, rtol=1e-12)
    np.testing.assert_allclose(best.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    assert best[-1].fit_stats_["fitted_in_search"] and best[-1].n_iter_[0] > 0
    # fitted, it needs no cluster: pickled and predicting alone
    again = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(again.predict(X), ours.predict(X))
    assert "client" not in again.best_estimator_[-1].__dict__ or again.best_estimator_[-1].client is None


def test_against_scikit_learns_own_estimator_the_best_candidate_and_scores_agree():
    X, y = _cancer()
    grid = {"clf__C": [0.01, 0.1, 1.0, 10.0]}
    ours = GridSearchCV(Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(max_iter=1000))]),
                        grid, cv=5).fit(X, y)
    theirs = skms.GridSearchCV(Pipeline([("scale", StandardScaler()), ("clf", SkLogisticRegression(max_iter=1000))]),
                               grid, cv=5).fit(X, y)
    assert ours.best_params_ == theirs.best_params_
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"], atol=1e-4)


def test_a_plain_estimators_grid_over_c_l1_ratio_and_tol(placements, placed_only):
    X, y = load_iris(return_X_y=True)  # three classes: multinomial fits
    est = de.LogisticRegression(max_iter=1000)
    grid = {"C": [0.1, 1.0], "l1_ratio": [0.0, 0.5], "tol": [1e-4, 1e-5]}
    ours = GridSearchCV(est, grid, cv=StratifiedKFold(3, shuffle=True, random_state=0)).fit(X, y)
    assert len(placements) == 1
    theirs = skms.GridSearchCV(est, grid, cv=StratifiedKFold(3, shuffle=True, random_state=0)).fit(X, y)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-5, same_best=False)  # the tolerances tie
    assert ours.best_estimator_.classes_.tolist() == [0, 1, 2]


def test_groups_that_change_the_problem_get_a_placement_each(placements, placed_only, spread):
    X, y = load_diabetes(return_X_y=True)
    grid = {"alpha": [0.0, 0.01, 0.1], "fit_intercept": [True, False], "solver": ["lbfgs", "newton-cholesky"]}
    est = de.LinearRegression(tol=1e-8, max_iter=2000)
    ours = GridSearchCV(est, grid, cv=4, scoring=["r2", "neg_mean_squared_error"], refit="r2").fit(X, y)
    assert len(placements) == 2 + 1  # one per fit_intercept, and the refit's own (two groups)
    theirs = skms.GridSearchCV(est, grid, cv=4, scoring=["r2", "neg_mean_squared_error"], refit="r2").fit(X, y)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-5, same_best=False)  # the solvers tie
    assert ours.multimetric_ and set(ours.scorer_) == {"r2", "neg_mean_squared_error"}


def test_a_scaled_regressions_newton_solvers_run_in_the_scalers_coordinates(placements, placed_only, spread):
    X, y = load_diabetes(return_X_y=True)
    X = X * 50 + 3  # offsets and scales for the scaler to remove
    pipe = Pipeline([("scale", StandardScaler()), ("reg", de.LinearRegression(tol=1e-10))])
    grid = {"reg__alpha": [0.0, 0.01, 0.1], "reg__solver": ["newton-cholesky", "newton-cg"]}
    ours = GridSearchCV(pipe, grid, cv=3, scoring="neg_mean_squared_error").fit(X, y)
    assert len(placements) == 1
    theirs = skms.GridSearchCV(pipe, grid, cv=3, scoring="neg_mean_squared_error").fit(X, y)
    _same_results(ours, theirs, rtol=1e-7, atol=1e-6, same_best=False)  # the solvers tie
    np.testing.assert_allclose(ours.best_estimator_.predict(X), theirs.best_estimator_.predict(X), rtol=1e-6)


def test_other_earlier_steps_are_fitted_per_split_and_placed_per_split(placements, placed_only, spread):
    X, y = _cancer()
    X = X[:300, :6]
    y = y[:300]
    pipe = Pipeline([("poly", PolynomialFeatures(2)), ("scale", StandardScaler()),
                     ("clf", de.LogisticRegression(tol=1e-8, max_iter=1000))])
    grid = {"clf__C": [0.1, 1.0, 10.0]}
    ours = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    assert len(placements) == 3 + 1  # one per split for all candidates, and the refit
    theirs = skms.GridSearchCV(pipe, grid, cv=3).fit(X, y)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_frames_column_names_and_weights_go_where_scikit_learns_search_puts_them(placed_only):
    X, y = _cancer()
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    pipe = Pipeline([("scale", MinMaxScaler()), ("clf", de.LogisticRegression(tol=1e-6, max_iter=2000))])
    grid = {"clf__C": [0.1, 1.0]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "fitted with(out) feature names" warning on the scoring
        ours = GridSearchCV(pipe, grid, cv=3).fit(frame, y, clf__sample_weight=w)
    theirs = skms.GridSearchCV(pipe, grid, cv=3).fit(frame, y, clf__sample_weight=w)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-6)
    assert list(ours.feature_names_in_) == list(frame.columns)
    assert not hasattr(ours.best_estimator_[-1], "feature_names_in_")  # it sees the scaler's array
    frame = pd.DataFrame(StandardScaler().fit_transform(X), columns=frame.columns)
    plain = GridSearchCV(de.LogisticRegression(max_iter=1000), {"tol": [1e-4, 1e-6]}, cv=3).fit(
        frame, y, sample_weight=w)  # the scorer gets the held-out rows' weights, as scikit-learn's
    theirs = skms.GridSearchCV(de.LogisticRegression(max_iter=1000), {"tol": [1e-4, 1e-6]}, cv=3).fit(
        frame, y, sample_weight=w)
    _same_results(plain, theirs, rtol=1e-5, atol=1e-6)


def test_a_split_that_lacks_a_class_is_placed_on_its_own(placements, placed_only, spread):
    X, y = load_iris(return_X_y=True)
    splits = [(np.flatnonzero(y != 2), np.flatnonzero(y == 2)), (np.arange(0, 150, 2), np.arange(1, 150, 2))]
    est = de.LogisticRegression(tol=1e-8, max_iter=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a split's test rows are of a class its model never saw
        ours = GridSearchCV(est, {"C": [0.1, 1.0]}, cv=splits).fit(X, y)
        assert len(placements) == 2 + 1  # the placement with every split failed its check before placing
        theirs = skms.GridSearchCV(est, {"C": [0.1, 1.0]}, cv=splits).fit(X, y)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("state", [0, "instance"])
def test_a_randomized_search_draws_scikit_learns_candidates(state, placed_only):
    X, y = _cancer()
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(max_iter=1000))])
    dist = {"clf__C": loguniform(1e-3, 1e2), "clf__tol": [1e-4, 1e-6]}

    def search(cls):
        rs = np.random.RandomState(7) if state == "instance" else state
        return cls(pipe, dist, n_iter=5, cv=3, random_state=rs)

    ours = search(RandomizedSearchCV)
    ours.fit(X, y)
    theirs = search(skms.RandomizedSearchCV).fit(X, y)
    _same_results(ours, theirs, rtol=1e-6, atol=1e-6)
    if state == "instance":  # the instance moved on as scikit-learn's search moves it
        assert ours.random_state.randint(1 << 30) == theirs.random_state.randint(1 << 30)


def test_anything_else_is_scikit_learns_search():
    X, y = _cancer(scaled=True)
    grid = [{"kernel": ["linear"], "C": [0.1, 1.0]}]
    ours = GridSearchCV(SVC(), grid, cv=3).fit(X, y)
    theirs = skms.GridSearchCV(SVC(), grid, cv=3).fit(X, y)
    _same_results(ours, theirs, rtol=0, atol=0)
    # a candidate outside what the placed path fits (balanced class weights: per split counts) as well
    est = de.LogisticRegression(max_iter=500)
    grid = {"class_weight": [None, "balanced"], "C": [0.1, 1.0]}
    ours = GridSearchCV(est, grid, cv=3).fit(X, y)
    theirs = skms.GridSearchCV(est, grid, cv=3).fit(X, y)
    _same_results(ours, theirs, rtol=1e-9, atol=1e-12)


def test_a_bad_candidate_fails_as_in_scikit_learns_search():
    X, y = _cancer(scaled=True)
    grid = {"C": [1.0, -1.0]}
    with pytest.warns(FitFailedWarning, match="fits failed"):
        ours = GridSearchCV(de.LogisticRegression(), grid, cv=3).fit(X, y)
    assert np.isnan(ours.cv_results_["mean_test_score"][1]) and ours.best_params_ == {"C": 1.0}
    with pytest.raises(ValueError, match="C"):
        GridSearchCV(de.LogisticRegression(), grid, cv=3, error_score="raise").fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        bad = X.copy()
        bad[3, 2] = np.nan
        GridSearchCV(de.LogisticRegression(), {"C": [1.0]}, cv=3, error_score="raise").fit(bad, y)


@pytest.mark.parametrize("grid", [
    {"solver": ["lbfgs", "newton-cg"], "l1_ratio": [1.0]},  # a solver that refuses the penalty: at its fit
    {"class_weight": [None, {5: 1.0}]},  # a class y lacks: when the group's classes are known
], ids=["solver", "class_weight"])
def test_a_candidate_its_fit_refuses_gets_the_error_score_as_in_scikit_learns_search(grid):
    X, y = _cancer(scaled=True)
    est = de.LogisticRegression(max_iter=500)
    with pytest.warns(FitFailedWarning, match="3 fits failed"):
        ours = GridSearchCV(est, grid, cv=3).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        theirs = skms.GridSearchCV(est, grid, cv=3).fit(X, y)
    assert np.isnan(ours.cv_results_["mean_test_score"][1]) and not np.isnan(ours.cv_results_["mean_test_score"][0])
    _same_results(ours, theirs, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="newton-cg|classes"):
        GridSearchCV(est, grid, cv=3, error_score="raise").fit(X, y)


def test_candidates_whose_long_reprs_read_alike_are_fitted_each_with_its_own_steps(placements, placed_only):
    from sklearn.compose import ColumnTransformer

    X, y = make_classification(400, 60, n_informative=10, random_state=0)
    cols = [f"feature_number_{i:03d}" for i in range(X.shape[1])]
    df = pd.DataFrame(X, columns=cols)
    a = ColumnTransformer([("keep", "passthrough", cols[:30] + cols[40:])])
    b = ColumnTransformer([("keep", "passthrough", cols[:30] + cols[50:])])
    assert repr(a) == repr(b)  # scikit-learn cuts the middle out of both
    pipe = Pipeline([("prep", a), ("clf", de.LogisticRegression(max_iter=2000, tol=1e-8))])
    ours = GridSearchCV(pipe, {"prep": [a, b]}, cv=3).fit(df, y)
    placed = len(placements)
    assert placed == 2 * 3 + 1  # each candidate's steps per split, and the refit
    theirs = skms.GridSearchCV(pipe, {"prep": [a, b]}, cv=3).fit(df, y)
    _same_results(ours, theirs, rtol=1e-6, atol=1e-6)
    assert ours.cv_results_["mean_test_score"][0] != ours.cv_results_["mean_test_score"][1]


def test_one_failing_metric_of_several_gets_the_error_score_and_a_warning():
    X, y = _cancer(scaled=True)

    def fragile(est, X, y):
        if est.C < 0.5:
            raise RuntimeError("cannot score this one")
        return est.score(X, y)

    kw = dict(cv=3, scoring={"fragile": fragile, "acc": "accuracy"}, refit="acc")
    with pytest.warns(UserWarning, match="Scoring failed"):
        ours = GridSearchCV(de.LogisticRegression(), {"C": [0.1, 1.0]}, **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        theirs = skms.GridSearchCV(de.LogisticRegression(), {"C": [0.1, 1.0]}, **kw).fit(X, y)
    assert np.isnan(ours.cv_results_["mean_test_fragile"][0]) and ours.cv_results_["mean_test_fragile"][1] > 0.9
    np.testing.assert_allclose(ours.cv_results_["mean_test_fragile"], theirs.cv_results_["mean_test_fragile"],
                               rtol=1e-6)
    np.testing.assert_allclose(ours.cv_results_["mean_test_acc"], theirs.cv_results_["mean_test_acc"], rtol=1e-6)
    assert ours.best_params_ == theirs.best_params_


def test_a_random_state_instance_draws_as_scikit_learns_when_the_search_falls_back_to_it():
    X, y = _cancer(scaled=True)
    X[0, 0] = np.nan  # refused by the placed path's validation: scikit-learn's search runs, and fails each fit
    kw = dict(n_iter=3, cv=3, refit=False)
    dist = {"C": loguniform(1e-3, 1e2)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = RandomizedSearchCV(de.LogisticRegression(), dist, random_state=np.random.RandomState(0), **kw)
        theirs = skms.RandomizedSearchCV(de.LogisticRegression(), dist, random_state=np.random.RandomState(0), **kw)
        ours.fit(X, y)
        theirs.fit(X, y)
    assert ours.cv_results_["params"] == theirs.cv_results_["params"]
    assert ours.random_state.randint(1 << 30) == theirs.random_state.randint(1 << 30)


def test_a_draw_larger_than_its_grid_warns_once_as_scikit_learns():
    X, y = _cancer(scaled=True)
    for cls in (RandomizedSearchCV, skms.RandomizedSearchCV):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cls(de.LogisticRegression(), {"C": [0.1, 1.0]}, n_iter=5, cv=3, random_state=0).fit(X, y)
        assert [str(w.message)[:40] for w in caught if "smaller than n_iter" in str(w.message)] == [
            "The total space of parameters 2 is small"], cls


def test_without_scikit_learns_private_search_methods_its_own_search_runs(placements, monkeypatch):
    X, y = _cancer()
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8))])
    monkeypatch.setattr(_search, "_SEARCH_INTERNALS", _search._SEARCH_INTERNALS + ("_gone_in_a_future_release",))
    ours = GridSearchCV(pipe, {"clf__C": [0.1, 1.0]}, cv=3).fit(X, y)
    assert len(placements) == 2 * 3 + 1  # each fit placed its own rows: scikit-learn's search ran
    theirs = skms.GridSearchCV(pipe, {"clf__C": [0.1, 1.0]}, cv=3).fit(X, y)
    _same_results(ours, theirs, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("container", ["array", "frame"])
def test_dask_input_stays_on_the_workers_and_scores_there(container, placements, placed_only, spread):
    import dask.array as da
    import dask.dataframe as dd

    X, y = _cancer()
    X = X * 3 + 2
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    if container == "array":
        Xd, yd, wd = da.from_array(X, chunks=(150, 30)), da.from_array(y, chunks=150), da.from_array(w, chunks=150)
    else:
        frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(30)])
        Xd = dd.from_pandas(frame, npartitions=4)
        yd = dd.from_pandas(pd.Series(y, name="y"), npartitions=4)
        w = None
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8, max_iter=500))])
    grid = {"clf__C": [0.01, 0.1, 1.0], "clf__fit_intercept": [True, False]}
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    scoring = ["accuracy", "neg_log_loss"]
    fit_params = {} if w is None else {"clf__sample_weight": wd}
    ours = GridSearchCV(pipe, grid, cv=cv, scoring=scoring, refit="neg_log_loss").fit(Xd, yd, **fit_params)
    assert len(placements) == 1  # kept by its keys: the other group and the refit find it placed
    ref_params = {} if w is None else {"clf__sample_weight": w}
    theirs = skms.GridSearchCV(pipe, grid, cv=cv, scoring=scoring, refit="neg_log_loss").fit(X, y, **ref_params)
    # the scorers get no weights through a pipeline (their key is the step's): the same on both sides
    _same_results(ours, theirs, rtol=1e-6, atol=1e-7)
    Xp = X if container == "array" else frame  # as fitted: a frame's column names
    np.testing.assert_allclose(ours.predict_proba(Xp), theirs.predict_proba(X), atol=1e-6)
    # a regressor's default score (r2) and its squared error, with the scorers' weights (a plain estimator)
    Xr, yr = load_diabetes(return_X_y=True)
    Xrd, yrd = da.from_array(Xr, chunks=(111, 10)), da.from_array(yr, chunks=111)
    wr = np.random.default_rng(2).uniform(0.5, 2.0, len(yr))
    grid = {"alpha": [0.0, 0.1, 1.0]}
    for scoring in (None, "neg_mean_squared_error"):
        ours = GridSearchCV(de.LinearRegression(), grid, cv=4, scoring=scoring).fit(
            Xrd, yrd, sample_weight=da.from_array(wr, chunks=111))
        theirs = skms.GridSearchCV(de.LinearRegression(), grid, cv=4, scoring=scoring).fit(Xr, yr, sample_weight=wr)
        _same_results(ours, theirs, rtol=1e-8, atol=1e-8)


def test_float32_input_is_searched_in_float32(placed_only):
    X, y = _cancer()
    X32 = (X * 2 + 1).astype(np.float32)
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8, max_iter=500))])
    grid = {"clf__C": [0.1, 1.0]}
    ours = GridSearchCV(pipe, grid, cv=3).fit(X32, y)
    assert ours.best_estimator_[-1].fit_stats_["x_dtype"] == "float32"
    assert ours.best_estimator_[-1].coef_.dtype == np.float32  # as scikit-learn keeps X's dtype
    theirs = skms.GridSearchCV(pipe, grid, cv=3).fit(X32, y)
    _same_results(ours, theirs, rtol=1e-4, atol=1e-4)


def test_the_progress_bar_counts_every_fit_and_shows_the_best_score(capsys, placed_only):
    X, y = _cancer(scaled=True)
    grid = {"C": [0.1, 1.0, 10.0]}
    search = GridSearchCV(de.LogisticRegression(), grid, cv=4, progress=True).fit(X, y)
    err = capsys.readouterr().err
    assert "12/12" in err and f"best={np.max(search.cv_results_['mean_test_score']):.4g}" in err
    assert "_bar" not in search.__dict__
    pickle.loads(pickle.dumps(search))
    assert GridSearchCV(de.LogisticRegression(), grid).get_params()["progress"] is False


def test_the_lockstep_takes_as_many_fits_as_its_memory_share_allows(monkeypatch, placed_only, spread):
    import dask

    from dask_estimators.estimators import _grid

    widths = []
    run = _grid.independent_fits

    def counted(problem, runs, **kwargs):
        widths.append((len(runs), kwargs["max_runs"]))
        return run(problem, runs, **kwargs)

    monkeypatch.setattr(_grid, "independent_fits", counted)
    X, y = _cancer(scaled=True)
    search = lambda: GridSearchCV(de.LogisticRegression(max_iter=300), {"C": [0.01, 0.1, 1.0]},  # noqa: E731
                                  cv=3)
    # a shard of about 285 rows x 30 float64 holds 68 kB of X; each fit in lockstep 24 bytes a row: 6.8 kB
    with dask.config.set({"dask-estimators.search-lockstep-memory": 0.1}):
        narrow = search().fit(X, y)
    wide = search().fit(X, y)
    assert widths == [(9, 1), (1, 1), (9, 10), (1, 10)]  # the 9 fits, then the refit
    _same_results(narrow, wide, rtol=1e-9, atol=1e-12)


@pytest.fixture
def cut_on_client(monkeypatch):
    """The splits whose held-out rows the search cuts on the client to score there (each a _Rows)."""
    cut = []
    init = _search._Rows.__init__

    def counted(self, X, y, rows, *args):
        cut.append(len(rows))
        init(self, X, y, rows, *args)

    monkeypatch.setattr(_search._Rows, "__init__", counted)
    return cut


@pytest.mark.parametrize("dask_input", [False, True], ids=["numpy", "dask"])
def test_held_out_scores_are_summed_on_the_workers_also_for_numpy_input(dask_input, cut_on_client, placed_only,
                                                                        spread):
    """The named scorers' held-out scores are the workers' sums for NumPy input too (no split's rows cut on
    the client), equal to scikit-learn's scorers: weighted accuracy and log-loss of a plain classifier, and r2
    of targets whose mean is a million of their standard deviations (the sums are taken about each split's
    mean: about zero, a split's total sum of squares would be lost to rounding)."""
    import dask.array as da

    X, y = _cancer(scaled=True)
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(y))
    Xr, yr = load_diabetes(return_X_y=True)
    yr = yr * 1e-1 + 1e7
    if dask_input:
        data = (da.from_array(X, chunks=(150, 30)), da.from_array(y, chunks=150), da.from_array(w, chunks=150))
        reg = (da.from_array(Xr, chunks=(111, 10)), da.from_array(yr, chunks=111))
    else:
        data, reg = (X, y, w), (Xr, yr)
    cv = StratifiedKFold(4, shuffle=True, random_state=1)
    grid = {"C": [0.01, 1.0], "fit_intercept": [True, False]}
    est = de.LogisticRegression(tol=1e-10, max_iter=1000)
    scoring = ["accuracy", "neg_log_loss"]
    ours = GridSearchCV(est, grid, cv=cv, scoring=scoring, refit="accuracy").fit(data[0], data[1],
                                                                               sample_weight=data[2])
    theirs = skms.GridSearchCV(est, grid, cv=cv, scoring=scoring, refit="accuracy").fit(X, y, sample_weight=w)
    _same_results(ours, theirs, rtol=1e-7, atol=1e-9)
    grid = {"alpha": [0.0, 1.0]}
    reg_est = de.LinearRegression(tol=1e-8)
    ours = GridSearchCV(reg_est, grid, cv=3).fit(*reg)
    theirs = skms.GridSearchCV(reg_est, grid, cv=3).fit(Xr, yr)
    _same_results(ours, theirs, rtol=1e-7, atol=1e-9)
    assert 0.3 < ours.best_score_ < 0.6  # diabetes' r2, not the noise of two large sums
    assert cut_on_client == []


def test_a_group_placed_per_split_is_scored_on_the_client_beside_worker_scored_ones(cut_on_client, placed_only):
    X, y = _cancer(scaled=True)
    pipe = Pipeline([("prep", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8, max_iter=1000))])
    grid = {"prep": [StandardScaler(), PolynomialFeatures(1)], "clf__C": [0.1, 1.0]}
    ours = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    assert len(cut_on_client) == 3  # the PolynomialFeatures group's splits
    theirs = skms.GridSearchCV(pipe, grid, cv=3).fit(X, y)
    _same_results(ours, theirs, rtol=1e-5, atol=1e-6, same_best=False)


def _bootstrap_splits(n, k=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, n, n), rng.permutation(n)[: n // 4]) for _ in range(k)]


def _overlapping_splits(n, k=3):
    folds = np.array_split(np.arange(n), k)
    return [(np.concatenate([f for j, f in enumerate(folds) if j != i] + [folds[i][:5]]), folds[i]) for i in range(k)]


@pytest.mark.parametrize("make_splits", [_bootstrap_splits, _overlapping_splits])
def test_splits_that_repeat_or_hold_out_a_training_row_are_scikit_learns_search(make_splits):
    """A bootstrap (a training row twice) or a split whose held-out rows are among its training rows: the
    placed path holds one role per row and split, so it dropped the repeats and took the shared rows out of
    training, and the scores were not scikit-learn's.  Such splits now run scikit-learn's search."""
    X, y = _cancer(scaled=True)
    splits = make_splits(len(y))
    grid = {"C": [0.01, 1.0]}
    est = de.LogisticRegression(tol=1e-8, max_iter=500)
    ours = GridSearchCV(est, grid, cv=splits).fit(X, y)
    theirs = skms.GridSearchCV(est, grid, cv=splits).fit(X, y)
    _same_results(ours, theirs)


def test_splits_as_boolean_masks_are_read_as_masks(placed_only):
    """scikit-learn's search takes a split's rows as a boolean mask too; the placed roles read the mask's zeros
    and ones as the positions 0 and 1."""
    X, y = _cancer(scaled=True)
    n = len(y)
    masks = [(np.arange(n) % 3 != i, np.arange(n) % 3 == i) for i in range(3)]
    est = de.LogisticRegression(tol=1e-8, max_iter=500)
    ours = GridSearchCV(est, {"C": [0.1, 1.0]}, cv=masks).fit(X, y)
    theirs = GridSearchCV(est, {"C": [0.1, 1.0]}, cv=[(np.flatnonzero(a), np.flatnonzero(b)) for a, b in masks]).fit(X, y)
    _same_results(ours, theirs)


def test_an_iterator_of_splits_serves_scikit_learns_search_after_the_placed_path_gave_up():
    """``cv=KFold(3).split(X)`` is read once: the placed path read it, and a candidate our fit refuses then sent
    the search to scikit-learn's, which found it empty ("No fits were performed")."""
    X, y = _cancer(scaled=True)
    grid = {"class_weight": [None, {0: 1, 9: 3}]}
    est = de.LogisticRegression(tol=1e-8, max_iter=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        ours = GridSearchCV(est, grid, cv=skms.KFold(3).split(X)).fit(X, y)
        theirs = skms.GridSearchCV(est, grid, cv=skms.KFold(3).split(X)).fit(X, y)
    assert np.isnan(ours.cv_results_["mean_test_score"][1])
    _same_results(ours, theirs)


@pytest.mark.parametrize("kw", [{"scoring": "f1"}, {"return_train_score": True}])
def test_a_dask_dataframe_on_scikit_learns_search_is_refused_in_words(client, kw):
    """Options the placed path does not take run scikit-learn's search, which cuts each split's rows by
    position: a dask dataframe failed there with "'DataFrame' object has no attribute 'take'".  The error now
    says what runs, why, and what to pass; dask arrays work."""
    import dask.dataframe as dd

    X, y = _cancer(scaled=True)
    Xf = dd.from_pandas(pd.DataFrame(X[:, :5], columns=list("abcde")), npartitions=2)
    yf = dd.from_pandas(pd.Series(y), npartitions=2)
    search = GridSearchCV(de.LogisticRegression(), {"C": [0.1, 1.0]}, cv=3, **kw)
    with pytest.raises(TypeError, match=r"scikit-learn's own search.*X, y are dask dataframes or series.*"
                                        r"to_dask_array\(lengths=True\)"):
        search.fit(Xf, yf)
    Xa, ya = Xf.to_dask_array(lengths=True), yf.to_dask_array(lengths=True)
    ours = search.fit(Xa, ya)
    theirs = skms.GridSearchCV(de.LogisticRegression(), {"C": [0.1, 1.0]}, cv=3, **kw).fit(X[:, :5], y)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"],
                               rtol=1e-4)


def test_scikit_learns_pandas_output_config_keeps_the_column_names_of_a_pipelines_fits():
    """With ``sklearn.set_config(transform_output="pandas")`` the scaler hands the final step a dataframe, whose
    names it keeps.  The placed path read only the scaler's own ``set_output``, saw the scaler as an affine
    map, and fitted the final step on NumPy: no ``feature_names_in_``, and a warning at every predict."""
    from sklearn import config_context

    X, y = _cancer()
    Xf = pd.DataFrame(X[:, :4], columns=list("abcd"))
    pipe = Pipeline([("scale", StandardScaler()), ("clf", de.LogisticRegression(tol=1e-8, max_iter=500))])
    with config_context(transform_output="pandas"), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        ours = GridSearchCV(pipe, {"clf__C": [0.1, 1.0]}, cv=3).fit(Xf, y)
        ours.predict(Xf)
        theirs = skms.GridSearchCV(pipe, {"clf__C": [0.1, 1.0]}, cv=3).fit(Xf, y)
    assert list(ours.best_estimator_[-1].feature_names_in_) == list("abcd")
    _same_results(ours, theirs)


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "after MaxAbsScaler"])
def test_a_sparse_grid_leaves_the_columns_storing_no_value_out_of_every_fit(placements, placed_only, spread, scaled):
    """A CSR whose columns mostly store nothing (hashed text): every (candidate, split) fit and the refit solve
    the stored columns alone; a pipeline's scaler is fitted on the whole columns first.  The scores and the best
    model equal those of scikit-learn's search around our estimator (each fit alone, narrowing its own split's
    columns), and the model has every column, zero where none is stored."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    n, d, vocab = 300, 4000, 150
    cols = np.sort(rng.choice(d, vocab, replace=False))
    X = sp.csr_matrix((rng.uniform(0.5, 2.0, n * 6), (np.repeat(np.arange(n), 6), cols[rng.integers(0, vocab, n * 6)])),
                      shape=(n, d))
    X.sum_duplicates()
    w = np.zeros(d)
    w[cols] = rng.normal(size=vocab)
    y = (X @ w > np.median(X @ w)).astype(int)
    clf = de.LogisticRegression(tol=1e-10, max_iter=2000)
    est, key = (Pipeline([("scale", MaxAbsScaler()), ("clf", clf)]), "clf__C") if scaled else (clf, "C")
    grid = {key: [0.1, 10.0]}
    ours = GridSearchCV(est, grid, cv=3).fit(X, y)
    assert len(placements) == 1
    theirs = skms.GridSearchCV(est, grid, cv=3).fit(X, y)
    _same_results(ours, theirs)
    best, ref = (ours.best_estimator_[-1], theirs.best_estimator_[-1]) if scaled else (ours.best_estimator_,
                                                                                       theirs.best_estimator_)
    stored = np.unique(X.indices)
    assert best.fit_stats_["solved_columns"] == len(stored) < d
    assert best.coef_.shape == (1, d) and not np.any(best.coef_[:, np.setdiff1d(np.arange(d), stored)])
    np.testing.assert_allclose(best.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
