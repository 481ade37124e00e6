"""A fit takes as many workers as its steps are worth: small networks train on one worker, in turn; large ones,
and fits with the rule off, on every worker.  (The session's config turns the rule off for the other tests.)"""

import dask
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import workers_per_gpu, workers_worth
from dask_estimators.engine.data import placement

LEAST = 2.5e6


@pytest.fixture
def rule():
    with dask.config.set({"dask-estimators.min-step-flops-per-worker": LEAST}):
        yield


def test_small_steps_take_one_worker_in_turn(client, rule):
    ws = sorted(client.nthreads())
    assert len(ws) == 2
    picks = [workers_worth(client, 0.1e6) for _ in range(4)]
    assert all(len(p) == 1 for p in picks)
    assert {p[0] for p in picks} == set(ws)  # in turn, not always the first
    assert picks[0] != picks[1]
    assert workers_worth(client, 2 * LEAST) is None  # every worker: None
    assert workers_worth(client, 1e12) is None


def test_the_workers_given_are_those_chosen_from(client, rule):
    ws = sorted(client.nthreads())
    assert workers_worth(client, 0.1e6, workers=ws[1:]) == ws[1:]  # one is all of them: returned as given
    assert workers_worth(client, 1e12, workers=ws) == ws
    with dask.config.set({"dask-estimators.min-step-flops-per-worker": 0}):
        assert workers_worth(client, 1.0, workers=ws[:1]) == ws[:1]


def test_workers_per_gpu_on_workers_without_one(client, monkeypatch):
    """CPU workers all train (the list looked up), each asked once; device="cpu" asks none (None stays None)."""
    monkeypatch.setattr(placement, "_GPU", {})
    assert workers_per_gpu(client, "cpu") is None and placement._GPU == {}
    ws = sorted(client.nthreads())
    if placement._gpu_of("auto"):
        pytest.skip("the workers have a GPU (tests/test_gpu.py)")
    assert workers_per_gpu(client, "auto") == ws
    assert placement._GPU == {(w, "auto"): "" for w in ws}
    assert workers_per_gpu(client, "auto", workers=ws[:1]) == ws[:1]


def test_workers_per_gpu_takes_the_first_worker_on_each_gpu(client, monkeypatch):
    ws = sorted(client.nthreads())
    monkeypatch.setattr(placement, "_GPU", {(ws[0], "cuda"): "GPU-a", (ws[1], "cuda"): "GPU-a"})
    assert workers_per_gpu(client, "cuda") == ws[:1]  # two workers on one GPU: one rank
    placement._GPU[(ws[1], "cuda")] = "GPU-b"
    assert workers_per_gpu(client, "cuda") == ws  # one each: every worker
    placement._GPU[(ws[0], "cuda")] = ""
    assert workers_per_gpu(client, "cuda") == ws[1:]  # only one has a GPU: it trains


def test_the_rule_off_and_large_inputs_take_every_worker(client, rule, monkeypatch):
    with dask.config.set({"dask-estimators.min-step-flops-per-worker": 0}):
        assert workers_worth(client, 1.0) is None
    monkeypatch.setattr(placement, "MAX_BYTES_PER_WORKER", 1000)
    assert len(workers_worth(client, 1.0, nbytes=1000)) == 1
    assert workers_worth(client, 1.0, nbytes=1001) is None


def _iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.mark.parametrize("solver", ["adam", "lbfgs"])
def test_a_small_network_trains_on_one_worker_and_takes_the_same_steps(client, rule, solver):
    """iris with the default network: one shard, and ddp's steps are the rounds strategy's, to rounding."""
    X, y = _iris()
    kw = dict(solver=solver, max_iter=30, random_state=0)
    if solver == "lbfgs":
        fits = [de.MLPClassifier(**kw).fit(X, y)]
    else:
        fits = [de.MLPClassifier(strategy=s, **kw).fit(X, y) for s in ("ddp", "rounds")]
    for est in fits:
        assert est.fit_stats_["n_shards"] == 1 and est.fit_stats_["rows_per_shard"] == [150]
        assert est.score(X, y) > 0.85
    if solver == "adam":
        ddp, rounds = fits
        assert ddp.fit_stats_["strategy"] == "ddp"
        for a, b in zip(ddp.coefs_ + ddp.intercepts_, rounds.coefs_ + rounds.intercepts_):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ddp.loss_curve_, rounds.loss_curve_, rtol=1e-10)


def test_a_network_whose_steps_are_worth_two_workers_takes_both(client, rule, rng):
    X = rng.standard_normal((2000, 100))
    y = (X[:, 0] > 0).astype(int)
    # the rule is the CPU ranks' (on a GPU machine the session's two workers share its GPU: one rank, test_gpu.py)
    est = de.MLPClassifier((100,), batch_size=256, max_iter=1, random_state=0, device="cpu").fit(X, y)  # 15.5 MFLOP
    assert est.fit_stats_["n_shards"] == 2
    small = de.MLPClassifier((8,), batch_size=32, max_iter=1, random_state=0).fit(X, y)  # 0.15 MFLOP
    assert small.fit_stats_["n_shards"] == 1


@pytest.mark.parametrize("case", ["sample_weight", "early_stopping", "sparse", "dask"])
def test_the_paths_users_take_train_on_one_worker_alike_with_both_strategies(client, rule, case):
    """Sample weights, a validation split, sparse X and dask input (blocks on both workers, placed on one): one
    shard, and ddp's single rank takes the rounds strategy's steps, to rounding."""
    import dask.array as da
    import scipy.sparse as sp

    X, y = _iris()
    fit_kw, kw = {}, dict(random_state=0, max_iter=20)
    if case == "sample_weight":
        fit_kw["sample_weight"] = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    elif case == "early_stopping":
        kw["early_stopping"] = True
    elif case == "sparse":
        X = sp.csr_matrix(X)
    else:
        X, y = da.from_array(X, chunks=50), da.from_array(y, chunks=50)
    ddp, rounds = (de.MLPClassifier(strategy=s, **kw).fit(X, y, **fit_kw) for s in ("ddp", "rounds"))
    for est in (ddp, rounds):
        assert est.fit_stats_["rows_per_shard"] == [150]
    assert ddp.n_iter_ == rounds.n_iter_
    for a, b in zip(ddp.coefs_ + ddp.intercepts_, rounds.coefs_ + rounds.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
