"""Paths no other test ran: device="cuda" without CUDA, MLPRegressor(loss="poisson")."""

import numpy as np
import pytest
import sklearn
import torch
from sklearn import neural_network as sknn
from sklearn.utils.fixes import parse_version

import dask_estimators as de

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA: the error path is not reached")


def _poisson_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = rng.poisson(np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1])).astype(float)
    return X, y


@NO_CUDA
@pytest.mark.parametrize("make", [lambda: de.MLPRegressor(max_iter=3), lambda: de.MLPClassifier(max_iter=3),
                                  lambda: de.CharLSTM(max_epochs=1)], ids=["MLPRegressor", "MLPClassifier", "CharLSTM"])
def test_cuda_without_cuda_is_a_clear_error(make):
    est = make().set_params(device="cuda")
    if isinstance(est, de.CharLSTM):
        X, y = ["anna", "bob", "carl"] * 10, None
    else:
        X, y = _poisson_data(40)
        y = (y > 1).astype(int) if isinstance(est, de.MLPClassifier) else y
    with pytest.raises(RuntimeError, match=r"device='cuda' was asked for but this worker has no CUDA device"):
        est.fit(X, y) if y is not None else est.fit(X)


def test_mlp_poisson_rejects_negative_y():
    X, y = _poisson_data(40)
    y[3] = -1.0
    with pytest.raises(ValueError, match=r"loss='poisson' requires non-negative y"):
        de.MLPRegressor(loss="poisson", max_iter=3).fit(X, y)
    y[3] = 0.0  # zeros are counts like any other
    de.MLPRegressor(loss="poisson", max_iter=3).fit(X, y)


@pytest.mark.skipif(parse_version(sklearn.__version__) < parse_version("1.7"),
                    reason="scikit-learn's MLPRegressor has loss='poisson' from 1.7")
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_poisson_lbfgs_follows_sklearn():
    """The Poisson deviance, the exp link and scipy's L-BFGS-B on both sides: the same network."""
    X, y = _poisson_data()
    params = dict(hidden_layer_sizes=(5,), activation="tanh", solver="lbfgs", alpha=1e-2, max_iter=30,
                  random_state=0, loss="poisson")
    ref = sknn.MLPRegressor(**params).fit(X, y)
    est = de.MLPRegressor(**params).fit(X, y)
    assert est.n_iter_ == ref.n_iter_
    for got, exp in zip(est.coefs_ + est.intercepts_, ref.coefs_ + ref.intercepts_):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-7)
    pred = est.predict(X)
    assert np.all(pred > 0)  # the exp link
    np.testing.assert_allclose(pred, ref.predict(X), rtol=1e-6)


@pytest.mark.parametrize("make", [lambda: de.MLPClassifier(hidden_layer_sizes=(4,), max_iter=3, random_state=0),
                                  lambda: de.CharLSTM(hidden_size=8, embedding_dim=4, context_length=3,
                                                      max_epochs=1, random_state=0)],
                         ids=["MLPClassifier", "CharLSTM"])
def test_strategy_auto_on_a_thread_cluster_is_ddp_with_one_rank(make):
    """docs/solvers.md: "auto" trains minibatches with ddp on any cluster, one rank per worker process; the
    workers of a threads-based cluster share a process, so one rank trains on both shards, and the model
    equals the one fitted by two ranks on the session's process cluster (to the rounding of the sums)."""
    from distributed import Client, LocalCluster

    X, y = _poisson_data(60)
    y = (y > 1).astype(int)
    data = (["anna", "bob", "carl", "dora"] * 10,) if isinstance(make(), de.CharLSTM) else (X, y)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as threads:
        # device="cpu": CPU ranks are this test's subject (the workers of a GPU machine share its GPU, test_gpu.py)
        est = make().set_params(client=threads, strategy="auto", device="cpu").fit(*data)
        assert est.fit_stats_["strategy"] == "ddp"
        assert est.fit_stats_["n_shards"] == 2
    ref = make().set_params(strategy="auto", device="cpu").fit(*data)
    assert ref.fit_stats_["strategy"] == "ddp"
    np.testing.assert_allclose(est.loss_curve_, ref.loss_curve_, rtol=1e-5)
    if hasattr(est, "coefs_"):
        for a, b in zip(est.coefs_ + est.intercepts_, ref.coefs_ + ref.intercepts_):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
