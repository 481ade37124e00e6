"""A small linear fit runs its solver on one worker, in one task: the same model as one round per evaluation.

Below ``dask-estimators.worker-solve-below`` (stored values times outputs) the
data goes to one worker, and the solver runs there (``solve_on_shard``: the
objective over a ``LocalEvaluator`` of the placed shard); its result and
warnings come back to the client, which sets the fitted attributes.  Each
test compares against the same fit with the setting at 0 (the data on every
worker, one distributed round per evaluation), on the session's process cluster.
"""

from __future__ import annotations

import traceback
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import Shard, solve_on_shard
from dask_estimators.session import small_problem, warn_again, worker_solve_below
from dask_estimators.optim.scipy_driver import ConvergenceNote

ROUNDS = {"dask-estimators.worker-solve-below": 0}


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _rounds(make, *args, **kw):
    with dask.config.set(ROUNDS):
        return make().fit(*args, **kw)


def _close(a, b, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=rtol, atol=atol)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=rtol, atol=atol)


@pytest.mark.parametrize("make", [
    lambda: de.LogisticRegression(tol=1e-10, max_iter=1000),
    lambda: de.LogisticRegression(solver="newton-cholesky", tol=1e-10, class_weight="balanced"),
    lambda: de.LinearSVC(dual=False, tol=1e-10, max_iter=1000),
    lambda: de.LinearSVC(dual=False, intercept_scaling=3.0, tol=1e-10, max_iter=1000),
], ids=["lbfgs", "newton-cholesky-balanced", "svc-primal", "svc-bias-feature"])
def test_small_classifier_solves_on_one_worker_as_the_rounds_do(make):
    X, y = load_iris(return_X_y=True)
    sw = np.linspace(0.5, 2.0, len(y))
    est = make().fit(X, y, sample_weight=sw)
    ref = _rounds(make, X, y, sample_weight=sw)
    assert est.fit_stats_["solved_on_worker"] is True
    assert est.fit_stats_["n_shards"] == 1 and est.fit_stats_["rounds"] == 0
    assert est.fit_stats_["evaluations_on_worker"] >= np.max(est.n_iter_)
    assert ref.fit_stats_["solved_on_worker"] is False and ref.fit_stats_["n_shards"] == 2
    _close(est, ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    assert est.n_features_in_ == 4
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


def test_small_regressors_and_inference_solve_on_one_worker(rng):
    X = rng.normal(size=(300, 5))
    y = rng.poisson(np.exp(0.3 * X[:, 0] + 0.2)).astype(float)
    est = de.PoissonRegressor(alpha=0.0, compute_inference=True, tol=1e-12).fit(X, y)
    ref = _rounds(lambda: de.PoissonRegressor(alpha=0.0, compute_inference=True, tol=1e-12), X, y)
    assert est.fit_stats_["solved_on_worker"] and not ref.fit_stats_["solved_on_worker"]
    _close(est, ref, rtol=1e-9)
    np.testing.assert_allclose(est.coef_cov_, ref.coef_cov_, rtol=1e-7)
    np.testing.assert_allclose(est.summary()["std_err"], ref.summary()["std_err"], rtol=1e-7)
    Y = np.column_stack([X @ np.arange(5.0), X[:, 0] - 1.0])
    lin = de.LinearRegression().fit(X, Y)
    assert lin.fit_stats_["solved_on_worker"]
    np.testing.assert_allclose(lin.coef_, np.linalg.lstsq(np.c_[X, np.ones(300)], Y, rcond=None)[0][:5].T,
                               atol=1e-9)


def test_the_dual_svm_keeps_its_rounds_on_one_shard():
    X, y = load_iris(return_X_y=True)
    est = de.LinearSVC(dual=True, tol=1e-8, max_iter=10_000).fit(X, y)
    assert est.fit_stats_["n_shards"] == 1 and not est.fit_stats_["solved_on_worker"]
    assert est.fit_stats_["dual_rounds"] >= 1


def test_sparse_and_dask_input_solve_on_one_worker(cancer):
    X, y = cancer
    dense = de.LogisticRegression(tol=1e-10, max_iter=1000).fit(X, y)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    sparse = de.LogisticRegression(tol=1e-10).fit(Xs, y)
    sparse_ref = _rounds(lambda: de.LogisticRegression(tol=1e-10), Xs, y)
    lazy = de.LogisticRegression(tol=1e-10).fit(da.from_array(X, chunks=100), da.from_array(y, chunks=100))
    for est in (dense, sparse, lazy):
        assert est.fit_stats_["solved_on_worker"] and est.fit_stats_["n_shards"] == 1
    _close(sparse, sparse_ref, rtol=1e-6, atol=1e-8)
    _close(lazy, dense, rtol=1e-10, atol=1e-12)  # the same rows on one worker: the same sums


def test_the_threshold_counts_values_times_outputs():
    X, y = load_iris(return_X_y=True)  # 600 values, 3 classes: 1800
    with dask.config.set({"dask-estimators.worker-solve-below": 1800}):
        assert not de.LogisticRegression().fit(X, y).fit_stats_["solved_on_worker"]
    with dask.config.set({"dask-estimators.worker-solve-below": 1801}):
        assert de.LogisticRegression().fit(X, y).fit_stats_["solved_on_worker"]
    yb = (y > 0).astype(int)  # two classes: one output, 600
    with dask.config.set({"dask-estimators.worker-solve-below": 601}):
        assert de.LogisticRegression().fit(X, yb).fit_stats_["solved_on_worker"]
    assert worker_solve_below() == 2**21
    big = np.zeros((2**21, 1))
    assert not small_problem(big, 1) and small_problem(big[:-1], 1)
    assert not small_problem(big[: 2**20], 2) and small_problem(big[: 2**20 - 1], 2)


@pytest.mark.parametrize("params", [{"verbose": 1}, {"progress": True}])
def test_a_fit_that_reports_per_iteration_keeps_the_rounds(params, capsys):
    pytest.importorskip("tqdm")
    X, y = load_iris(return_X_y=True)
    est = de.LogisticRegression(max_iter=5, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    assert not est.fit_stats_["solved_on_worker"]
    out = capsys.readouterr()
    assert (out.out + out.err).strip()  # the client printed the iterations


def test_a_fit_with_a_timeout_per_round_keeps_the_rounds():
    X, y = load_iris(return_X_y=True)
    tight = dict(tol=1e-10, max_iter=1000)
    est = de.LogisticRegression(timeout=60, **tight).fit(X, y)
    assert not est.fit_stats_["solved_on_worker"] and est.fit_stats_["rounds"] > 0
    np.testing.assert_allclose(est.coef_, de.LogisticRegression(**tight).fit(X, y).coef_, rtol=1e-6, atol=1e-8)


def test_warnings_of_the_solve_reach_the_client_and_errors_keep_their_type(cancer):
    X, y = cancer
    with pytest.warns(ConvergenceWarning, match="lbfgs failed to converge"):
        est = de.LogisticRegression(max_iter=3).fit(X, y)
    assert est.fit_stats_["solved_on_worker"] and est.n_iter_[0] == 3
    for params in ({"max_iter": 1000}, {"max_iter": 5, "solver": "newton-cg"}):
        seen = []
        for make in (lambda: de.LogisticRegression(**params).fit(X, y),
                     lambda: _rounds(lambda: de.LogisticRegression(**params), X, y)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                make()
            seen.append([(w.category, str(w.message).split("(")[0]) for w in caught])
        assert seen[0] == seen[1]  # the same warnings, raised on the client, either way
    # an error of the solver, raised on the worker, reaches the client with its type and message
    with pytest.raises(ValueError, match="does not support positive=True") as err:
        de.LinearRegression(positive=True, solver="newton-cholesky").fit(X, y.astype(float))
    assert "solve_on_shard" in "".join(traceback.format_exception(err.value))


def test_a_refit_on_the_worker_drops_what_the_new_fit_does_not_set(cancer):
    X, y = cancer
    est = de.LogisticRegression(compute_inference=True, C=1e6, max_iter=2000).fit(X[:, :5], y)
    assert hasattr(est, "coef_cov_")
    est.set_params(compute_inference=False).fit(X[:, :5], y)
    assert est.fit_stats_["solved_on_worker"] and not hasattr(est, "coef_cov_")


def test_warm_start_continues_from_the_clients_coefficients(cancer):
    X, y = cancer
    est = de.LogisticRegression(warm_start=True, tol=1e-10, max_iter=1000).fit(X, y)
    first = est.n_iter_[0]
    est.fit(X, y)  # from the optimum: almost nothing left to do
    assert est.fit_stats_["solved_on_worker"] and est.n_iter_[0] < first


class _Mean:
    """An objective of the shape ``solve_on_shard`` needs: ``with_evaluator``, and a value through the evaluator."""

    def __init__(self, evaluate=None):
        self.evaluate = evaluate

    def with_evaluator(self, evaluate):
        return _Mean(evaluate)


def _driver(objective, scale, *, warn):
    total = objective.evaluate(lambda s: s.get("X").sum())
    if warn:
        warnings.warn("from the driver", ConvergenceWarning)
        warnings.warn("numerical noise", RuntimeWarning)
    return float(total) * scale


def test_solve_on_shard_runs_the_driver_over_a_local_evaluator_and_keeps_the_warnings_asked_for():
    shard = Shard({"X": np.arange(6.0).reshape(3, 2)}, device="cpu")
    out, stats, caught = solve_on_shard(shard, _driver, _Mean(), (2.0,), {"warn": True}, (UserWarning,))
    assert out == 30.0 and stats["rounds"] == 1
    assert caught == [(ConvergenceWarning, "from the driver")]  # not the RuntimeWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what it caught was not raised here
        assert solve_on_shard(shard, _driver, _Mean(), (1.0,), {"warn": True})[0] == 15.0


def _engine_imported():
    """Whether the linear fits' modules are imported here (and torch, which they do not need, is not)."""
    import sys

    from dask_estimators.engine.cluster._warm import LINEAR_MODULES, SOLVER_MODULES

    if "torch" in sys.modules:
        raise AssertionError("torch was imported on a worker for a linear fit")
    return all(m in sys.modules for m in LINEAR_MODULES + SOLVER_MODULES)


def _tasks_run(dask_worker):
    return dask_worker.state.executed_count


def test_a_small_fit_warms_the_next_worker_of_a_fresh_cluster():
    """On a cluster started without the package's preload (a plain ``Client()``), the worker the next small fit
    goes to imports the engine while this fit runs, before any task of ours reaches it (``warm_ahead``)."""
    import time

    from distributed import Client, LocalCluster

    X, y = load_iris(return_X_y=True)
    # the client asks for no warm-up as it connects (tests/engine/test_warm.py), as a client made before the import
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            dask.config.set({"dask-estimators.warm-clients": False}), Client(cluster, set_as_default=False) as c:
        assert not any(c.run(_engine_imported).values())
        de.LogisticRegression(max_iter=1000, client=c).fit(X, y)
        idle = [w for w, n in c.run(_tasks_run).items() if n == 0]
        assert len(idle) == 1  # the fit's tasks ran on the other worker
        deadline = time.monotonic() + 120
        while not c.run(_engine_imported, workers=idle)[idle[0]] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert c.run(_engine_imported, workers=idle)[idle[0]]
        assert c.run(_tasks_run, workers=idle)[idle[0]] == 0  # warmed up, no task of ours ran there
        est = de.LogisticRegression(max_iter=1000, client=c).fit(X, y)
        assert est.fit_stats_["solved_on_worker"] is True
        assert c.run(_tasks_run, workers=idle)[idle[0]] > 0  # the next fit ran there


def test_reading_a_class_warms_the_workers_of_the_active_client(monkeypatch):
    """A client the user made before the first class read (``de.LogisticRegression``): its workers import the
    engine (not torch) at that read, before any fit sends them a task, while the user's code loads its data."""
    import time

    import distributed.client
    from distributed import Client, LocalCluster

    import dask_estimators

    # the client asks for no warm-up as it connects (tests/engine/test_warm.py), as a client made before the import
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            dask.config.set({"dask-estimators.warm-clients": False}), Client(cluster, set_as_default=False) as c:
        assert not any(c.run(_engine_imported).values())
        monkeypatch.setattr(distributed.client, "default_client", lambda: c)  # the user's active client
        dask_estimators.__getattr__("LinearSVR")  # what ``de.LinearSVR`` runs on its first read
        deadline = time.monotonic() + 120
        while not all(c.run(_engine_imported).values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(c.run(_engine_imported).values())
        assert set(c.run(_tasks_run).values()) == {0}  # warmed up by the read: no task of ours ran


# ------------------------------------------------------------------ a small cross-validated search
GRID = [0.01, 0.1, 1.0]  # well-conditioned points: larger C on nearly separable data amplifies the summation order
CV_SEARCHES = {
    "binary-auto": (lambda: de.LogisticRegressionCV(Cs=GRID, tol=1e-8, max_iter=500), "cancer"),
    "binary-batched": (lambda: de.LogisticRegressionCV(Cs=GRID, tol=1e-8, max_iter=500, path_method="batched"),
                       "cancer"),
    "binary-sequential-newton": (lambda: de.LogisticRegressionCV(Cs=GRID, solver="newton-cholesky", tol=1e-8,
                                                                 path_method="sequential"), "cancer"),
    "multinomial-weighted": (lambda: de.LogisticRegressionCV(Cs=GRID, cv=4, class_weight="balanced", tol=1e-8,
                                                             max_iter=500), "iris"),
    "elastic-net-no-refit": (lambda: de.LogisticRegressionCV(Cs=GRID, l1_ratios=[0.0, 0.5], refit=False,
                                                             tol=1e-8, max_iter=500, use_legacy_attributes=False),
                             "cancer"),
    "log-loss-splitter": (lambda: de.LogisticRegressionCV(Cs=GRID, scoring="neg_log_loss", tol=1e-8, max_iter=500,
                                                          cv=StratifiedKFold(3, shuffle=True, random_state=0)),
                          "cancer"),
    "enet-paths": (lambda: de.LinearRegressionCV(alphas=4, l1_ratio=[0.5, 1.0], solver="lbfgs", tol=1e-10,
                                                 max_iter=1000), "diabetes"),
    "dask-input": (lambda: de.LogisticRegressionCV(Cs=GRID, cv=3, tol=1e-8, max_iter=500), "cancer-dask"),
}


def _data(name, cancer):
    if name == "cancer":
        return cancer
    if name == "cancer-dask":  # chunks of rows: the one shard holds several row ranges
        return da.from_array(cancer[0], chunks=(150, -1)), da.from_array(cancer[1], chunks=150)
    if name == "iris":
        return load_iris(return_X_y=True)
    X, y = load_diabetes(return_X_y=True)
    return X, y / 100.0


@pytest.mark.parametrize("case", list(CV_SEARCHES))
def test_a_small_search_runs_its_paths_on_one_worker_as_the_rounds_do(case, cancer):
    """The splits' paths, the held-out sums and the refit in tasks on one worker: the same search, attribute
    for attribute, as one distributed round per evaluation over every worker."""
    make, data = CV_SEARCHES[case]
    X, y = _data(data, cancer)
    sw = np.linspace(0.5, 2.0, len(y))
    if data == "cancer-dask":
        sw = da.from_array(sw, chunks=150)
    est = make().fit(X, y, sample_weight=sw)
    ref = _rounds(make, X, y, sample_weight=sw)
    stats = est.fit_stats_
    assert stats["solved_on_worker"] is True and stats["n_shards"] == 1
    assert stats["rounds"] == (1 if data == "diabetes" else 0)  # LinearRegressionCV's alpha grid: one round of sums
    assert stats["evaluations_on_worker"] > 20
    assert ref.fit_stats_["solved_on_worker"] is False and ref.fit_stats_["n_shards"] == 2
    fitted = sorted(k for k in vars(ref) if k.endswith("_") and k != "fit_stats_")
    assert fitted == sorted(k for k in vars(est) if k.endswith("_") and k != "fit_stats_")
    for name in fitted:
        a, b = getattr(est, name), getattr(ref, name)
        for key in (a if isinstance(a, dict) else [None]):
            x, r = (a, b) if key is None else (a[key], b[key])
            if np.asarray(x).dtype.kind == "f":
                np.testing.assert_allclose(x, r, rtol=1e-5, atol=1e-6, err_msg=name)
            elif name.startswith("n_iter"):  # at tol=1e-8 the iterations follow the summation order's rounding
                assert np.shape(x) == np.shape(r) and np.min(x) >= 1
            else:
                np.testing.assert_array_equal(x, r, err_msg=name)
    if data == "cancer-dask":
        X = X.compute()
    if data == "diabetes":
        np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=1e-6)
    else:
        np.testing.assert_array_equal(est.predict(X), ref.predict(X))


def test_auto_runs_a_small_one_worker_searchs_paths_one_after_the_other():
    """``path_method="auto"``: lockstep for one-output models, except on one worker under 2**18 stored values."""
    from types import SimpleNamespace

    from dask_estimators.objectives import LinearSpec

    est = de.LogisticRegressionCV()
    binary, multi = LinearSpec("binomial", 30, 1, True), LinearSpec("multinomial", 30, 3, True)
    for on_worker, values, spec, lockstep in [(True, 2**18 - 1, binary, False), (True, 2**18, binary, True),
                                              (False, 100, binary, True), (False, 2**20, multi, False)]:
        search = SimpleNamespace(on_worker=on_worker, values=values, spec=spec)
        assert est._batched(["lbfgs"], search) is lockstep
        assert est.set_params(path_method="batched")._batched(["lbfgs"], search) is True
        assert est.set_params(path_method="batched")._batched(["newton-cg"], search) is False
        est.set_params(path_method="auto")


def test_a_small_search_finds_scikit_learns_hyperparameters(cancer):
    from sklearn.linear_model import LogisticRegressionCV

    X, y = cancer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (ConvergenceWarning, FutureWarning))
        est = de.LogisticRegressionCV(tol=1e-8, max_iter=1000).fit(X, y)
        ref = LogisticRegressionCV(tol=1e-8, max_iter=1000).fit(X, y)
    assert est.fit_stats_["solved_on_worker"] is True
    np.testing.assert_array_equal(est.C_, ref.C_)
    np.testing.assert_allclose(est.scores_[1], ref.scores_[1], atol=1e-12)  # accuracies: counts of rows
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


def test_a_small_search_scored_on_the_client_keeps_its_rounds(cancer):
    X, y = cancer
    est = de.LogisticRegressionCV(Cs=3, scoring="roc_auc").fit(X, y)
    assert est.fit_stats_["solved_on_worker"] is False and est.fit_stats_["rounds"] > 0
    assert de.LogisticRegressionCV(Cs=3, timeout=60).fit(X, y).fit_stats_["solved_on_worker"] is False


def test_a_small_searchs_tasks_need_no_scikit_learn_on_the_worker(cancer, monkeypatch):
    """What the search sends its worker unpickles and runs in a process that has imported the engine's modules
    alone, without importing scikit-learn (about 0.65 s a worker would pay at its first search)."""
    import pickle
    import subprocess
    import sys

    from dask_estimators.engine.data.placement import Placement

    sent, real_map = [], Placement.map

    def recording_map(self, fn, *args):
        if fn is solve_on_shard:
            sent.append(pickle.dumps(args))
        return real_map(self, fn, *args)

    monkeypatch.setattr(Placement, "map", recording_map)
    X, y = cancer
    with pytest.warns(ConvergenceWarning):  # C = 1e4 within 100 iterations: the warning's path too
        est = de.LogisticRegressionCV(Cs=3).fit(X, y)
    assert est.fit_stats_["solved_on_worker"] is True and len(sent) == 2  # the paths, the refit
    shard = Shard({"X": X, "y": y}, device="cpu")
    code = (
        "import pickle, sys\n"
        "from dask_estimators.engine import solve_on_shard\n"
        "from dask_estimators.engine.cluster import _warm\n"
        "from dask_estimators.objectives import cv as CV\n"
        "_warm._import_all()\n"
        "shard, paths_task, refit_task = pickle.loads(sys.stdin.buffer.read())\n"
        "CV.assign_kfold(shard, [(0, shard.n_rows)], shard.n_rows, 5)\n"
        "CV.prepare(shard, 'binomial', 1, None)\n"
        "assert 'sklearn' not in sys.modules\n"
        "(coefs, _, _), _, caught = solve_on_shard(shard, *pickle.loads(paths_task))\n"
        "x = solve_on_shard(shard, *pickle.loads(refit_task))[0]['x']\n"
        "assert 'sklearn' not in sys.modules, 'imported'\n"
        "print(coefs.shape, x.shape, {c.__name__ for c, _ in caught})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((shard, *sent)), capture_output=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().split() == ["(1,", "5,", "3,", "31)", "(31,)", "{'ConvergenceNote'}"]
    with pytest.warns(ConvergenceWarning, match="from a worker"):  # the client raises it as scikit-learn's
        warn_again([(ConvergenceNote, "from a worker")])


def test_a_small_searchs_warnings_reach_the_client(cancer):
    X, y = cancer
    with pytest.warns(ConvergenceWarning, match="lbfgs failed to converge"):
        est = de.LogisticRegressionCV(Cs=3, max_iter=2).fit(X, y)
    assert est.fit_stats_["solved_on_worker"] is True and est.n_iter_.max() == 2
