"""Integration tests on the real process-based cluster (issue 3: "Data and prediction", "Acceptance").

* dask input (uneven chunks, unknown chunk sizes, dask dataframes and series)
  gives the same model as NumPy input, and prediction on dask input is lazy;
* bad input and bad hyperparameters give scikit-learn's errors;
* ``Pipeline`` + ``GridSearchCV`` select scikit-learn's parameters, serially
  and on the joblib dask backend;
* a fitted model holds no client: it pickles without one and predicts after
  its cluster is closed;
* an explicit ``client=`` (object or address) is the cluster that is used;
* refits and warm starts leak no state.

The session cluster of ``tests/conftest.py`` (2 workers) is the default client.
One more 3-worker cluster is started for this module (see ``other``); the
last test of the file closes it.
"""

from __future__ import annotations

import copy
import os
import pickle
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import distributed
import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn import linear_model as sk
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

import dask_estimators as de
from dask_estimators.estimators import _base

N, D = 350, 5
ROW_CHUNKS = (50, 10, 90, 30, 70, 40, 60)  # 7 uneven row blocks
assert sum(ROW_CHUNKS) == N
TIGHT = dict(tol=1e-10, max_iter=10_000)
RTOL, ATOL = 1e-6, 1e-8


# --------------------------------------------------------------------------- data
def _data(kind, seed=0, n=N, d=D):
    """(X, y) of a small, well-conditioned problem of the given kind."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if kind == "binary":
        y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    elif kind == "multiclass":
        y = np.argmax(X @ rng.normal(size=(d, 3)) + 0.5 * rng.normal(size=(n, 3)), axis=1).astype(np.int64)
    else:
        y = X @ rng.normal(size=d) + 0.3 + 0.1 * rng.normal(size=n)
    return X, y


# name -> (estimator factory, kind of target)
CASES = {
    "logistic-binary": (lambda: de.LogisticRegression(C=0.5, **TIGHT), "binary"),
    "logistic-multiclass": (lambda: de.LogisticRegression(C=0.5, **TIGHT), "multiclass"),
    "linear-regression": (lambda: de.LinearRegression(alpha=0.01, **TIGHT), "regression"),
    "linear-svc": (lambda: de.LinearSVC(C=0.5, **TIGHT), "multiclass"),
    "linear-svr": (lambda: de.LinearSVR(C=0.5, epsilon=0.1, loss="squared_epsilon_insensitive", **TIGHT),
                   "regression"),
}


def _dask_array(a, col_chunks=None):
    chunks = (ROW_CHUNKS,) if a.ndim == 1 else (ROW_CHUNKS, col_chunks or (a.shape[1],))
    return da.from_array(a, chunks=chunks)


def _assert_same_model(got, ref):
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.intercept_, ref.intercept_, rtol=RTOL, atol=ATOL)
    if hasattr(ref, "classes_"):
        np.testing.assert_array_equal(got.classes_, ref.classes_)
        assert got.classes_.dtype == ref.classes_.dtype


@pytest.fixture(scope="module")
def numpy_fits():
    """Reference fits of every case on NumPy input (the same data as the dask fits), spread over the workers
    (small as they are, they would otherwise run their solver on one worker)."""
    import dask

    out = {}
    with dask.config.set({"dask-estimators.worker-solve-below": 0}):
        for name, (make, kind) in CASES.items():
            X, y = _data(kind)
            out[name] = make().fit(X, y)
    return out


# ------------------------------------------------------------------ 1. dask input
@pytest.mark.parametrize("y_kind", ["dask", "numpy"])
@pytest.mark.parametrize("name", list(CASES))
def test_fit_on_uneven_dask_chunks_equals_numpy_fit(name, y_kind, numpy_fits, spread):
    make, kind = CASES[name]
    X, y = _data(kind)
    # split the columns too for one variant: placement must merge them
    Xd = _dask_array(X, col_chunks=(2, 3) if y_kind == "dask" else None)
    assert Xd.numblocks[0] == 7
    yd = _dask_array(y) if y_kind == "dask" else y
    est = make().fit(Xd, yd)
    _assert_same_model(est, numpy_fits[name])
    assert est.n_features_in_ == D
    assert est.fit_stats_["n_shards"] == 2
    assert sum(est.fit_stats_["rows_per_shard"]) == N


@pytest.mark.parametrize("name", ["logistic-binary", "logistic-multiclass", "linear-regression"])
def test_fit_on_unknown_chunk_sizes_equals_numpy_fit(name, numpy_fits):
    make, kind = CASES[name]
    X, y = _data(kind)
    Xu = dd.from_dask_array(_dask_array(X)).to_dask_array()
    yu = dd.from_dask_array(_dask_array(y)).to_dask_array()
    assert np.isnan(Xu.shape[0]) and np.isnan(yu.shape[0])
    est = make().fit(Xu, yu)
    _assert_same_model(est, numpy_fits[name])
    assert sum(est.fit_stats_["rows_per_shard"]) == N


def test_unknown_chunk_sizes_with_in_memory_y_are_aligned_by_position():
    X, y = _data("binary")
    Xu = dd.from_dask_array(_dask_array(X)).to_dask_array()
    assert np.isnan(Xu.shape[0])
    est = de.LogisticRegression().fit(Xu, y)
    ref = de.LogisticRegression().fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        de.LogisticRegression().fit(Xu, y[:-3])


def _frame(X):
    return pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])


@pytest.mark.parametrize("labels", ["int", "str"])
def test_fit_on_dask_dataframe_with_series_y_and_weights(labels):
    X, y = _data("multiclass")
    if labels == "str":
        y = np.array(["cat", "dog", "emu"])[y]
    sw = np.random.default_rng(1).uniform(0.2, 3.0, size=N)
    df, ys, sws = _frame(X), pd.Series(y), pd.Series(sw)
    ddf = dd.from_pandas(df, npartitions=7)
    assert ddf.npartitions > 1
    est = de.LogisticRegression(C=0.5, **TIGHT).fit(
        ddf, dd.from_pandas(ys, npartitions=ddf.npartitions), sample_weight=dd.from_pandas(sws, npartitions=7)
    )
    ref = de.LogisticRegression(C=0.5, **TIGHT).fit(df, ys, sample_weight=sw)
    _assert_same_model(est, ref)
    np.testing.assert_array_equal(est.classes_, sk.LogisticRegression().fit(df, ys).classes_)
    # the weights were used: an unweighted fit is another model
    unweighted = de.LogisticRegression(C=0.5, **TIGHT).fit(df, ys)
    assert not np.allclose(unweighted.coef_, est.coef_, rtol=1e-3)


def test_fit_on_dask_dataframe_regression_with_series_y():
    X, y = _data("regression")
    ddf = dd.from_pandas(_frame(X), npartitions=7)
    ys = dd.from_pandas(pd.Series(y), npartitions=7)
    est = de.LinearRegression(alpha=0.01, **TIGHT).fit(ddf, ys)
    ref = de.LinearRegression(alpha=0.01, **TIGHT).fit(X, y)
    _assert_same_model(est, ref)
    np.testing.assert_allclose(est.predict(ddf).compute(), ref.predict(X), rtol=1e-6, atol=1e-8)


def test_feature_names_in_from_pandas_dataframe():
    X, y = _data("binary")
    est = de.LogisticRegression().fit(_frame(X), y)
    np.testing.assert_array_equal(est.feature_names_in_, [f"f{i}" for i in range(D)])
    assert est.feature_names_in_.dtype == object
    assert not hasattr(de.LogisticRegression().fit(X, y), "feature_names_in_")


def test_feature_names_in_from_dask_dataframe():
    X, y = _data("binary")
    ddf = dd.from_pandas(_frame(X), npartitions=3)
    est = de.LogisticRegression().fit(ddf, dd.from_pandas(pd.Series(y), npartitions=3))
    np.testing.assert_array_equal(est.feature_names_in_, [f"f{i}" for i in range(D)])


def test_predict_dask_dataframe_after_pandas_fit_does_not_warn():
    X, y = _data("binary")
    est = de.LogisticRegression().fit(_frame(X), y)
    ddf = dd.from_pandas(_frame(X), npartitions=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        pred = est.predict(ddf)
    np.testing.assert_array_equal(pred.compute(), est.predict(_frame(X)))


def _boom(block):
    raise RuntimeError("the input was computed: prediction is not lazy")


PREDICT_METHODS = {
    "logistic-binary": ["predict", "predict_proba", "predict_log_proba", "decision_function"],
    "logistic-multiclass": ["predict", "predict_proba", "predict_log_proba", "decision_function"],
    "linear-svc": ["predict", "decision_function"],
    "linear-regression": ["predict"],
    "linear-svr": ["predict"],
}


@pytest.mark.parametrize("container", ["array", "dataframe"])
@pytest.mark.parametrize("name", list(CASES))
def test_predict_on_dask_input_is_lazy_and_equals_numpy(name, container, numpy_fits):
    est = numpy_fits[name]
    _, kind = CASES[name]
    X, _ = _data(kind, seed=5)  # new rows
    if container == "array":
        Xd = _dask_array(X)
        poisoned = Xd.map_blocks(_boom, dtype=float)
    else:
        Xd = dd.from_pandas(pd.DataFrame(X), npartitions=7)
        poisoned = Xd.map_partitions(_boom, meta=Xd._meta)
    for method in PREDICT_METHODS[name]:
        expected = getattr(est, method)(X)
        assert isinstance(expected, np.ndarray)
        # a lazy result: building it must not compute the (poisoned) input
        lazy = getattr(est, method)(poisoned)
        # one value per row of a dataframe: a series on its index and divisions; otherwise a dask array
        series = container == "dataframe" and expected.ndim == 1
        assert isinstance(lazy, dd.Series if series else da.Array), method
        assert lazy.ndim == expected.ndim, method
        out = getattr(est, method)(Xd)
        assert isinstance(out, dd.Series if series else da.Array), method
        if series:
            assert out.divisions == Xd.divisions, method
        assert out.dtype == expected.dtype, method
        got = np.asarray(out.compute())
        assert got.shape == expected.shape, method
        if expected.dtype.kind in "f":
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12, err_msg=method)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=method)
        with pytest.raises(RuntimeError, match="not lazy"):
            lazy.compute()


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(np.array(["no", "yes"]), id="str"),
        pytest.param(np.array([3, 7, 11], dtype=np.int64), id="int64"),
        pytest.param(np.array([False, True]), id="bool"),
        pytest.param(np.array([1.0, 3.0]), id="float"),
        pytest.param(np.array([-2, 5], dtype=np.int32), id="int32"),
    ],
)
def test_classes_keep_label_dtype_on_dask_input(labels):
    X, codes = _data("multiclass" if len(labels) == 3 else "binary")
    y = labels[codes]
    ref = sk.LogisticRegression().fit(X, y)
    est = de.LogisticRegression().fit(_dask_array(X), _dask_array(y))
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    assert est.classes_.dtype == ref.classes_.dtype
    pred = est.predict(_dask_array(X))
    assert pred.dtype == ref.classes_.dtype
    computed = pred.compute()
    assert computed.dtype == ref.classes_.dtype
    assert np.isin(computed, ref.classes_).all()


def test_string_labels_from_dask_series_match_sklearn_on_pandas():
    X, codes = _data("binary")
    ys = pd.Series(np.array(["neg", "pos"])[codes])
    ref = sk.LogisticRegression().fit(X, ys)
    est = de.LogisticRegression().fit(
        dd.from_pandas(_frame(X), npartitions=7), dd.from_pandas(ys, npartitions=7)
    )
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    assert est.classes_.dtype == ref.classes_.dtype
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


# ---------------------------------------------------------------- 2. bad input
@pytest.fixture
def no_cluster_work(monkeypatch):
    """Fail the test if the estimator resolves a client or places data."""

    def forbidden(*args, **kwargs):
        raise AssertionError("cluster work was started before the input was validated")

    monkeypatch.setattr(_base, "DataSession", forbidden)  # the estimators' one way to a client and its workers


def _with_nan():
    X, y = _data("binary")
    X[123, 2] = np.nan
    return X, y


def _with_inf():
    X, y = _data("binary")
    X[123, 2] = np.inf
    return X, y


@pytest.mark.parametrize("Est", [de.LogisticRegression, de.LinearRegression, de.LinearSVC, de.LinearSVR])
@pytest.mark.parametrize("make,match", [(_with_nan, "NaN"), (_with_inf, "infinity")])
def test_nan_inf_in_numpy_x_raise_before_cluster_work(Est, make, match, no_cluster_work):
    X, y = make()
    with pytest.raises(ValueError, match=match):
        Est().fit(X, y)


@pytest.mark.parametrize("Est", [de.LogisticRegression, de.LinearRegression])
@pytest.mark.parametrize("make,match", [(_with_nan, "NaN"), (_with_inf, "infinity")])
def test_nan_inf_in_one_chunk_of_dask_x(Est, make, match):
    X, y = make()  # row 123 lies in the third of the 7 blocks
    with pytest.raises(ValueError, match=match):
        Est().fit(_dask_array(X), _dask_array(y))


@pytest.mark.parametrize(
    "X,y,match",
    [
        pytest.param(np.ones((10, 2)), np.arange(9) % 2, "inconsistent numbers of samples", id="lengths"),
        pytest.param(np.array([["a", "b"], ["c", "d"]]), [0, 1], "convert string to float", id="string-X"),
        pytest.param(np.empty((0, 3)), np.empty(0), r"0 sample\(s\)", id="empty"),
        pytest.param(np.random.default_rng(0).normal(size=(10, 2)), np.ones(10), "only one class", id="one-class"),
        pytest.param(np.ones((10, 2, 2)), np.arange(10) % 2, "dim 3", id="3d"),
    ],
)
def test_bad_numpy_input_raises_before_cluster_work(X, y, match, no_cluster_work):
    with pytest.raises(ValueError, match=match):
        de.LogisticRegression().fit(X, y)


def test_one_class_in_linear_svc(no_cluster_work):
    X, _ = _data("binary")
    with pytest.raises(ValueError, match="only one class"):
        de.LinearSVC().fit(X, np.full(N, "a"))


def test_negative_sample_weight_raises_before_cluster_work(no_cluster_work):
    """LinearRegression refuses negative weights before any work, as scikit-learn's does."""
    X, y = _data("regression")
    sw = np.ones(N)
    sw[7] = -1.0
    with pytest.raises(ValueError, match="^Negative values in data passed to `sample_weight`.$"):
        de.LinearRegression().fit(X, y, sample_weight=sw)


def test_bad_dask_input():
    X, y = _data("binary")
    Xd = _dask_array(X)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        de.LogisticRegression().fit(Xd, y[:-1])
    with pytest.raises(ValueError, match="only one class"):
        de.LogisticRegression().fit(Xd, _dask_array(np.ones(N)))
    sw = np.ones(N)
    sw[200] = -1.0  # in one block only: LinearRegression refuses it, as scikit-learn's does
    with pytest.raises(ValueError, match="Negative values in data passed to"):
        de.LinearRegression().fit(Xd, _dask_array(y.astype(float)), sample_weight=_dask_array(sw))
    with pytest.raises(ValueError, match="convert string to float"):
        de.LogisticRegression().fit(da.from_array(np.array([["a", "b"], ["c", "d"]])), da.from_array(np.array([0, 1])))
    with pytest.raises(ValueError, match=r"0 sample\(s\)"):
        de.LogisticRegression().fit(da.zeros((0, 3), chunks=(1, 3)), da.zeros(0, chunks=1))
    with pytest.raises(ValueError, match="2D|dim"):
        de.LogisticRegression().fit(da.ones((10, 2, 2)), da.from_array(np.arange(10) % 2))


def test_dask_x_and_dask_y_of_different_lengths():
    X, y = _data("binary")
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        de.LogisticRegression().fit(_dask_array(X), da.from_array(y[:-1], chunks=50))


@pytest.mark.parametrize(
    "Est,params",
    [
        (de.LogisticRegression, dict(C=-1)),
        (de.LinearSVC, dict(C=-1)),
        (de.LinearSVR, dict(C=-1)),
        (de.LogisticRegression, dict(solver="bogus")),
        (de.LinearRegression, dict(solver="bogus")),
        (de.LinearRegression, dict(reduction="x")),
        (de.LogisticRegression, dict(reduction="x")),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "-".join(f"{k}={x}" for k, x in v.items()),
)
def test_invalid_hyperparameters_raise_invalid_parameter_error(Est, params, no_cluster_work):
    X, y = _data("binary")
    with pytest.raises(InvalidParameterError, match=list(params)[0]):
        Est(**params).fit(X, y)
    with pytest.raises(InvalidParameterError):  # dask input too
        Est(**params).fit(_dask_array(X), _dask_array(y))


# -------------------------------------------------------- 3. Pipeline in GridSearchCV
@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


#: Both sides fit to tol=1e-10, so that each fold's model is the same optimum and the held-out accuracies are
#: equal, not merely close (at the default tol a point near the boundary may fall either way).
SEARCH_TOL = 1e-10


def _search(clf, n_jobs):
    pipe = Pipeline([("scale", StandardScaler()), ("clf", clf.set_params(tol=SEARCH_TOL))])
    return GridSearchCV(pipe, param_grid={"clf__C": [0.01, 0.1, 1, 10]}, cv=3, n_jobs=n_jobs)


@pytest.fixture(scope="module")
def sklearn_search(cancer):
    return _search(sk.LogisticRegression(), n_jobs=1).fit(*cancer)


def _check_search(search, reference):
    assert search.best_params_ == reference.best_params_
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"], rtol=0, atol=1e-12
    )
    assert isinstance(search.best_estimator_[-1], de.LogisticRegression)


def test_grid_search_pipeline_serial(cancer, sklearn_search):
    search = _search(de.LogisticRegression(), n_jobs=1).fit(*cancer)
    _check_search(search, sklearn_search)


def _tasks_run(dask_worker):
    """Tasks run on this worker, and shards its shard hosts built (a small fit's placement takes no task)."""
    from dask_estimators.engine.data._actor import ShardHost

    return dask_worker.state.executed_count + ShardHost.made_here


def test_grid_search_with_n_jobs_fits_on_the_active_client(cancer, sklearn_search, client):
    """joblib's worker processes (``n_jobs=2``, its default process backend) fit on the cluster of the process
    that sent them the estimators, not on an embedded cluster each (adopt_sender)."""
    before = sum(client.run(_tasks_run).values())
    search = _search(de.LogisticRegression(), n_jobs=2).fit(*cancer)
    _check_search(search, sklearn_search)
    # 12 fits in joblib's processes and the refit here, each at least one task or hosted shard on these workers
    assert sum(client.run(_tasks_run).values()) - before >= 13


def test_an_unfitted_estimator_tells_a_child_process_its_cluster(client):
    from dask_estimators.engine.cluster import client as ec

    est = de.LogisticRegression(C=2.0)
    state = est.__getstate__()
    assert state["_dask_estimators_sender"] == (client.scheduler.address, os.getpid())
    copied = pickle.loads(pickle.dumps(est))
    assert "_dask_estimators_sender" not in vars(copied) and copied.get_params() == est.get_params()
    assert ec._INHERITED[0] is None  # unpickled by the process that pickled it: not a child
    ec.adopt_sender("tcp://127.0.0.1:9", os.getppid())
    try:
        assert ec._INHERITED[0] == "tcp://127.0.0.1:9"
        assert ec.resolve_client() is client  # an active client still comes first
    finally:
        ec._INHERITED[0] = None
    ec.adopt_sender("tcp://127.0.0.1:9", os.getppid())
    try:  # a parent that runs no cluster now says so: a reused child forgets the address of one gone since
        ec.adopt_sender(None, os.getppid())
        assert ec._INHERITED[0] is None
    finally:
        ec._INHERITED[0] = None
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    fitted = de.LogisticRegression().fit(X, (X[:, 0] + rng.standard_normal(40) > 0).astype(int))
    assert "_dask_estimators_sender" not in fitted.__getstate__()  # a model carries no cluster

    class Declared(de.LogisticRegression):  # fitted by scikit-learn's rule, through __sklearn_is_fitted__
        def __sklearn_is_fitted__(self):
            return True

    assert "_dask_estimators_sender" not in Declared().__getstate__()


def _fit_in_task():
    X, y = _data("binary")
    return de.LogisticRegression().fit(X, y).coef_


def _assert_fits_inside_a_task(client, timeout=60):
    """Fail fast, instead of hanging the session cluster, when a fit inside a Dask task deadlocks.

    The joblib dask backend runs each fit as a task on a 1-thread worker; the
    fit must secede while it waits for its own tasks on that worker.
    """
    from dask_estimators.engine.cluster import client as engine_cluster

    in_task = getattr(engine_cluster, "_in_task", None)  # the check that decides to secede
    if in_task is not None and not client.submit(in_task, pure=False).result(timeout):
        pytest.fail("a fit inside a Dask task does not know it is in a task: it will not secede and deadlocks")
    probe = client.submit(_fit_in_task, pure=False)
    try:
        probe.result(timeout)
    except TimeoutError:
        probe.cancel()
        client.restart(wait_for_workers=True)  # frees the worker threads stuck in the deadlocked fit
        pytest.fail(f"a fit inside a Dask task did not finish in {timeout}s (deadlock)")


def test_grid_search_pipeline_on_joblib_dask_backend(cancer, sklearn_search, client):
    _assert_fits_inside_a_task(client)
    with joblib.parallel_backend("dask"):
        search = _search(de.LogisticRegression(), n_jobs=None).fit(*cancer)
    _check_search(search, sklearn_search)
    # the fitted model holds no client from the worker it may have been refitted on
    assert b"distributed" not in pickle.dumps(search.best_estimator_)


def test_halving_search_and_regression_grid_on_joblib_dask_backend(cancer, client):
    """HalvingGridSearchCV over a pipeline, and GridSearchCV over LinearRegression, with fits as Dask tasks."""
    from sklearn.datasets import load_diabetes
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import HalvingGridSearchCV

    _assert_fits_inside_a_task(client)

    def halving(clf):
        pipe = Pipeline([("scale", StandardScaler()), ("clf", clf.set_params(tol=SEARCH_TOL))])
        return HalvingGridSearchCV(pipe, {"clf__C": [0.01, 0.1, 1, 10]}, cv=3, factor=2, random_state=0)

    reference = halving(sk.LogisticRegression()).fit(*cancer)
    with joblib.parallel_backend("dask"):
        search = halving(de.LogisticRegression()).fit(*cancer)
    assert search.best_params_ == reference.best_params_
    np.testing.assert_array_equal(search.n_resources_, reference.n_resources_)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"],
                               rtol=0, atol=1e-12)
    assert isinstance(search.best_estimator_[-1], de.LogisticRegression)

    X, y = load_diabetes(return_X_y=True)
    alphas = {"alpha": [0.01, 0.1, 1.0]}
    lasso = GridSearchCV(sk.Lasso(tol=1e-10, max_iter=100_000), alphas, cv=3).fit(X, y)
    with joblib.parallel_backend("dask"):
        ours = GridSearchCV(de.LinearRegression(l1_ratio=1.0, tol=1e-10), alphas, cv=3).fit(X, y)
    assert ours.best_params_ == lasso.best_params_  # our alpha is Lasso's (the same objective scale)
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], lasso.cv_results_["mean_test_score"],
                               rtol=1e-5)


# ------------------------------------------------------------------ 4. pickling
def _walk(obj, seen=None):
    """Every object reachable from containers and instance dicts (no deeper than needed here)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(k, seen)
            yield from _walk(v, seen)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from _walk(v, seen)
    elif isinstance(obj, np.ndarray) and obj.dtype == object:
        for v in obj.ravel():
            yield from _walk(v, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        yield from _walk(vars(obj), seen)


_CLUSTER_TYPES = (distributed.Client, distributed.Future, distributed.SpecCluster, distributed.Scheduler)


def _assert_fitted_attributes_hold_no_cluster(est):
    fitted = {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}
    assert "coef_" in fitted
    for name, value in fitted.items():
        for obj in _walk(value):
            assert not isinstance(obj, _CLUSTER_TYPES), (name, type(obj))
            assert not (isinstance(obj, str) and "tcp://" in obj), (name, obj)
        blob = pickle.dumps(value)
        assert b"distributed" not in blob and b"tcp://" not in blob, name


def _assert_pickle_holds_no_cluster(est):
    blob = pickle.dumps(est)
    assert b"distributed" not in blob
    assert b"tcp://" not in blob
    return blob


@pytest.mark.parametrize("name", list(CASES))
def test_pickle_round_trip_predicts(name, numpy_fits):
    est = numpy_fits[name]
    _assert_fitted_attributes_hold_no_cluster(est)
    blob = _assert_pickle_holds_no_cluster(est)
    back = pickle.loads(blob)
    _, kind = CASES[name]
    X, _ = _data(kind, seed=9)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.predict(_dask_array(X)).compute(), est.predict(X))
    np.testing.assert_array_equal(back.coef_, est.coef_)


def test_pickle_of_dask_fitted_model_holds_no_cluster():
    X, y = _data("multiclass")
    ddf, ys = dd.from_pandas(_frame(X), npartitions=4), dd.from_pandas(pd.Series(y), npartitions=4)
    est = de.LogisticRegression().fit(ddf, ys)
    _assert_fitted_attributes_hold_no_cluster(est)
    back = pickle.loads(_assert_pickle_holds_no_cluster(est))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


# ------------------------------------------------ 5. an explicit client= (object or address)
OTHER_WORKERS = 3


@pytest.fixture(scope="module")
def other():
    """A second process-based cluster, not the default client's; the last test of the file closes it."""
    cluster = distributed.LocalCluster(
        n_workers=OTHER_WORKERS, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster, set_as_default=False)
    client.wait_for_workers(OTHER_WORKERS, timeout=120)
    yield cluster, client
    from dask_estimators.engine import close_embedded_cluster

    close_embedded_cluster()  # closes the clients the estimators opened from the address
    client.close()
    cluster.close()


def _running(other):
    cluster, client = other
    assert client.status == "running", "the module cluster was closed by an earlier test"
    return cluster, client


def test_explicit_client_is_used(other, client, spread):
    _, c3 = _running(other)
    X, y = _data("binary")
    ref = de.LogisticRegression(**TIGHT).fit(X, y)
    est = de.LogisticRegression(client=c3, **TIGHT).fit(X, y)
    assert est.fit_stats_["n_shards"] == OTHER_WORKERS
    assert ref.fit_stats_["n_shards"] == 2  # the default client's cluster
    assert sum(est.fit_stats_["rows_per_shard"]) == N
    _assert_same_model(est, ref)
    _assert_fitted_attributes_hold_no_cluster(est)
    _assert_pickle_holds_no_cluster(est)
    # dask input built on the default client is placed on the explicit client's cluster too
    est_d = de.LinearRegression(client=c3, **TIGHT).fit(*(_dask_array(a) for a in _data("regression")))
    assert est_d.fit_stats_["n_shards"] == OTHER_WORKERS
    _assert_same_model(est_d, de.LinearRegression(**TIGHT).fit(*_data("regression")))


def test_scheduler_address_as_client(other, spread):
    cluster, _ = _running(other)
    X, y = _data("regression")
    est = de.LinearRegression(client=cluster.scheduler_address).fit(X, y)
    assert est.fit_stats_["n_shards"] == OTHER_WORKERS
    assert est.client == cluster.scheduler_address  # get_params is untouched by fit
    _assert_fitted_attributes_hold_no_cluster(est)
    _assert_pickle_holds_no_cluster(est)
    np.testing.assert_allclose(est.predict(X), de.LinearRegression().fit(X, y).predict(X), rtol=1e-6, atol=1e-8)


def test_unfitted_estimator_with_client_pickles_without_it(other):
    """No client object travels; the scheduler's address does only as the sender's note to a child process
    (adopt_sender), never as the ``client`` parameter."""
    _, c3 = _running(other)
    est = de.LogisticRegression(C=3.0, client=c3)
    blob = pickle.dumps(est)
    assert b"distributed" not in blob
    back = pickle.loads(blob)
    assert back.client is None and back.C == 3.0
    assert est.__getstate__()["_dask_estimators_sender"][0] == c3.scheduler.address
    assert "_dask_estimators_sender" not in vars(back)


def test_clone_keeps_the_client(other):
    _, c3 = _running(other)
    est = de.LogisticRegression(C=3.0, client=c3)
    new = clone(est)
    assert new.client is c3 and new.C == 3.0


def test_clone_with_address_client(other):
    cluster, _ = _running(other)
    est = de.LogisticRegression(client=cluster.scheduler_address)
    assert clone(est).client == cluster.scheduler_address
    assert copy.deepcopy(de.LogisticRegression(C=2.0)).C == 2.0


def test_deepcopy_keeps_the_client_as_clone_does(other):
    """In one process a copy fits on the cluster its original names: deepcopy dropped ``client=`` (as a pickle
    does), and the copy's fit started the embedded cluster instead."""
    cluster, c3 = _running(other)
    X, y = _data("binary")
    for client in (c3, cluster.scheduler_address):
        est = de.LogisticRegression(C=2.0, client=client)
        new = copy.deepcopy(est)
        assert new.client is client and new.C == 2.0
        with dask.config.set({"dask-estimators.worker-solve-below": 0}):  # spread: its shards name the cluster
            new.fit(X, y)
        assert new.fit_stats_["n_shards"] == OTHER_WORKERS
        again = copy.deepcopy(new)  # fitted: its arrays are copies
        assert again.client is client and again.coef_ is not new.coef_
        np.testing.assert_array_equal(again.coef_, new.coef_)


# ---------------------------------------------------- 6. refits, warm starts, fit_stats_
def test_refit_on_other_data_leaks_no_state():
    Xa, ya = _data("binary", seed=1)
    Xb, yb = _data("multiclass", seed=2, n=280, d=3)
    yb_str = np.array(["x", "y", "z"])[yb]
    est = de.LogisticRegression(**TIGHT)
    est.fit(_frame(Xa), ya)
    assert hasattr(est, "feature_names_in_")
    est.fit(da.from_array(Xb, chunks=(70, 3)), da.from_array(yb_str, chunks=70))
    fresh = de.LogisticRegression(**TIGHT).fit(Xb, yb_str)
    _assert_same_model(est, fresh)
    assert est.n_features_in_ == 3
    assert not hasattr(est, "feature_names_in_")  # reset by the numpy fit, as in scikit-learn
    assert sum(est.fit_stats_["rows_per_shard"]) == 280
    # and back: the first fit again gives the first model
    again = est.fit(Xa, ya)
    _assert_same_model(again, de.LogisticRegression(**TIGHT).fit(Xa, ya))


@pytest.mark.parametrize(
    "make",
    [lambda **k: de.LogisticRegression(**TIGHT, **k), lambda **k: de.LinearRegression(alpha=0.1, **TIGHT, **k)],
    ids=["logistic", "linear-regression"],
)
def test_warm_start_reaches_the_cold_solution(make, spread):
    kind = "binary" if isinstance(make(), de.LogisticRegression) else "regression"
    Xa, ya = _data(kind, seed=3)
    Xb, yb = _data(kind, seed=4)
    warm = make(warm_start=True).fit(Xa, ya)
    cold_rounds = warm.fit_stats_["rounds"]
    coef_a = np.copy(warm.coef_)
    warm.fit(_dask_array(Xb), _dask_array(yb))
    cold_b = make().fit(Xb, yb)
    _assert_same_model(warm, cold_b)
    assert not np.allclose(warm.coef_, coef_a)
    # refitting the same data from its own solution takes fewer rounds than from zero
    warm.fit(Xb, yb)
    _assert_same_model(warm, cold_b)
    assert warm.fit_stats_["rounds"] < cold_b.fit_stats_["rounds"]
    assert cold_rounds > 0


def test_warm_start_with_changed_number_of_classes():
    Xa, ya = _data("binary", seed=5)
    Xb, yb = _data("multiclass", seed=6)
    est = de.LogisticRegression(warm_start=True, **TIGHT).fit(Xa, ya)
    est.fit(Xb, yb)
    assert est.coef_.shape == (3, D)
    _assert_same_model(est, de.LogisticRegression(**TIGHT).fit(Xb, yb))


@pytest.mark.parametrize("name", list(CASES))
def test_fit_stats(name, numpy_fits):
    stats = numpy_fits[name].fit_stats_
    assert stats["rounds"] > 0
    assert stats["bytes_sent"] > 0 and stats["bytes_received"] > 0
    assert stats["n_shards"] == 2 and sum(stats["rows_per_shard"]) == N
    assert np.isfinite(stats["objective"])
    assert sum(stats["by_kernel"].values()) == stats["rounds"]


@pytest.mark.parametrize("solver, tol", [("lbfgs", 1e-9), ("newton-cg", 1e-10), ("newton-cholesky", 1e-10)])
def test_no_convergence_warning_at_tight_tol(solver, tol):
    """The parity fits above need converged solvers: each reaches a tight tol without a ConvergenceWarning.

    L-BFGS stops on the decrease of f, which float64 no longer resolves below max |gradient| of a few 1e-10
    here: at tol=1e-10 it may stop short, and then it warns (tests/estimators/test_linear_parity.py)."""
    X, y = _data("multiclass")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        de.LogisticRegression(C=0.5, solver=solver, tol=tol, max_iter=10_000).fit(X, y)


# ------------------------------------------ 4 (end). the cluster goes away, the model stays
def test_model_predicts_after_its_cluster_is_closed(other):
    cluster, c3 = _running(other)
    X, y = _data("multiclass")
    models = {
        "client": de.LogisticRegression(client=c3).fit(X, y),
        "address": de.LinearSVC(client=cluster.scheduler_address).fit(X, y),
        "dask": de.LogisticRegression(client=c3).fit(_dask_array(X), _dask_array(y)),
    }
    def scores(m):
        return m.predict_proba(X) if hasattr(m, "predict_proba") else m.decision_function(X)

    before = {k: scores(m) for k, m in models.items()}
    labels = {k: m.predict(X) for k, m in models.items()}
    blobs = {k: pickle.dumps(m) for k, m in models.items()}

    from dask_estimators.engine import close_embedded_cluster

    close_embedded_cluster()
    c3.close()
    cluster.close()
    assert c3.status == "closed"

    for k, m in models.items():
        for est in (m, pickle.loads(blobs[k])):
            np.testing.assert_allclose(scores(est), before[k], rtol=1e-12)
            np.testing.assert_array_equal(est.predict(X), labels[k])
            # lazy predict on dask input runs on the session's default client
            np.testing.assert_array_equal(est.predict(_dask_array(X)).compute(), labels[k])
    assert (labels["client"] == y).mean() > 0.8


def test_an_unfitted_estimator_says_when_no_cluster_runs(monkeypatch):
    """With no cluster running, the state names none (None), so that a joblib worker reused from an earlier
    search on a cluster closed since forgets that cluster's address, where it waited out a connect timeout of
    10 s before each first fit."""
    from dask_estimators.engine.cluster import client as ec

    monkeypatch.setattr(ec, "sender_address", lambda client=None: None)
    from dask_estimators.estimators import _base

    monkeypatch.setattr(_base, "sender_address", lambda client=None: None)
    assert de.LogisticRegression().__getstate__()["_dask_estimators_sender"] == (None, os.getpid())


def test_an_asynchronous_client_in_its_event_loop_is_a_clear_error():
    """A fit in the event loop of an asynchronous client (passed, or active) would block that loop: a clear
    error, where distributed's sync gave a coroutine and the fit a TypeError."""
    import asyncio

    import distributed

    X, y = np.random.default_rng(0).standard_normal((40, 2)), np.arange(40) % 2

    async def main():
        async with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                            dashboard_address=None, asynchronous=True) as cluster:
            async with distributed.Client(cluster, asynchronous=True) as c:
                with pytest.raises(RuntimeError, match="asynchronous"):
                    de.LogisticRegression(client=c).fit(X, y)
                with pytest.raises(RuntimeError, match="asynchronous"):
                    with c.as_current():
                        de.LogisticRegression().fit(X, y)
                model = await asyncio.to_thread(de.LogisticRegression(client=c).fit, X, y)  # another thread: fits
                return model

    assert asyncio.run(main()).coef_.shape == (1, 2)
