"""Placed dask input kept between fits (dask-estimators.keep-placed): the next fit on the same collections places
nothing, every fit on the kept shards gets the model it gets alone, the kept data stays within its budget, and it
goes when its collection is garbage-collected.  On the session's process cluster (tests/conftest.py); a worker
killed between two fits is in tests/engine/test_faults.py."""

from __future__ import annotations

import gc
import time

import dask
import dask.array as da
import distributed
import numpy as np
import pytest
from leftovers import _held

import dask_estimators as de
from dask_estimators.session import _kept
from dask_estimators.engine.cluster._watch import workers_info

pytestmark = pytest.mark.usefixtures("spread")  # small data spread over the workers, as large data is


def _dask(rng, n=3000, d=5, classes=3, chunks=700):
    X = rng.normal(size=(n, d))
    scores = X @ rng.normal(size=(d, classes)) + 0.5 * rng.normal(size=(n, classes))
    y = np.argmax(scores, axis=1)
    return X, y, da.from_array(X, chunks=(chunks, d)), da.from_array(y, chunks=chunks)


def _placement_tasks(client, fit):
    """The model ``fit()`` returns, and the shard builds it ran (the tasks that place dask input)."""
    with distributed.get_task_stream(client) as ts:
        model = fit()
    return model, [t for t in ts.data if "build_shard" in str(t["key"])]


def test_a_second_fit_on_the_same_collections_places_nothing(client, rng):
    _, _, Xd, yd = _dask(rng)
    first, built = _placement_tasks(client, lambda: de.LogisticRegression(tol=1e-10).fit(Xd, yd))
    assert first.fit_stats_["placement"] == "kept" and len(built) == first.fit_stats_["n_shards"] == 2
    second, built = _placement_tasks(client, lambda: de.LogisticRegression(C=0.3, tol=1e-10).fit(Xd, yd))
    assert second.fit_stats_["placement"] == "reused" and built == []
    # the same keys in another collection object (the same graph made anew) find them too, while the first lives
    def same_rows():
        return Xd.map_blocks(lambda b: b, dtype=Xd.dtype, name="same-rows-" + Xd.name)

    first_object = same_rows()
    again, built = _placement_tasks(client, lambda: de.LogisticRegression(C=0.3, tol=1e-10).fit(first_object, yd))
    assert again.fit_stats_["placement"] == "kept" and built  # another graph: placed, and kept beside
    again, built = _placement_tasks(client, lambda: de.LogisticRegression(C=0.3, tol=1e-10).fit(same_rows(), yd))
    assert again.fit_stats_["placement"] == "reused" and built == []
    assert len(_kept.held()) == 2
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        fresh = de.LogisticRegression(C=0.3, tol=1e-10).fit(Xd, yd)
    assert fresh.fit_stats_["placement"] == "placed"
    np.testing.assert_allclose(second.coef_, fresh.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(again.coef_, fresh.coef_, rtol=1e-12, atol=1e-14)


CLASSIFIERS = [
    lambda: de.LogisticRegression(class_weight="balanced", tol=1e-10),  # weights the shards' sample weights
    lambda: de.LinearSVC(tol=1e-10, max_iter=5000),  # the targets as +-1 columns
    lambda: de.LogisticRegression(tol=1e-10),  # after both: no class weight, the labels' codes
    lambda: de.LogisticRegressionCV(Cs=3, cv=3, tol=1e-8),  # the splits' roles in the shards' cache
]
REGRESSORS = [
    lambda: de.LinearRegression(alpha=0.1, tol=1e-10),
    lambda: de.LinearSVR(loss="squared_epsilon_insensitive", dual=False, tol=1e-10),  # the primal: layout-free
    lambda: de.LinearRegressionCV(alphas=3, cv=3, tol=1e-10),
]
NETWORKS = {  # the batches' cuts, the validation rows, the targets encoded for the network (a network's check
    # differs from a linear model's: its own kept shards, which a second network changes in between)
    "classifiers": [lambda: de.MLPClassifier(hidden_layer_sizes=(4,), max_iter=5, random_state=0,
                                             early_stopping=True, strategy="rounds"),
                    lambda: de.MLPClassifier(hidden_layer_sizes=(3, 2), max_iter=3, random_state=1, batch_size=50)],
    "regressors": [lambda: de.MLPRegressor(hidden_layer_sizes=(4,), max_iter=5, random_state=0, strategy="rounds"),
                   lambda: de.MLPRegressor(hidden_layer_sizes=(3,), max_iter=3, random_state=1, early_stopping=True)],
}


def _weights(m):
    return m.coefs_ + m.intercepts_ if hasattr(m, "coefs_") else [m.coef_, m.intercept_]


@pytest.mark.parametrize("task", ["classifiers", "regressors"])
def test_each_fit_on_kept_shards_gets_the_model_it_gets_alone(client, rng, task):
    """What a fit does to the shards (the targets' encoding, class weights, a network's cast, the splits) is
    undone when it ends.  The linear models on the kept shards, one after another, equal each fitted on a fresh
    placement (their sums do not depend on which rows a shard holds); a network, whose batches do, gives the same
    weights before and after the others on the same kept shards."""
    X, y, Xd, yd = _dask(rng)
    linear = CLASSIFIERS
    if task == "regressors":
        linear, yd = REGRESSORS, da.from_array(X @ np.arange(1.0, 6.0) + 0.1 * rng.normal(size=len(X)), chunks=700)
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        alone = [make().fit(Xd, yd) for make in linear]
    network, other = NETWORKS[task]
    before = network().fit(Xd, yd)
    after = [make().fit(Xd, yd) for make in linear] + [other().fit(Xd, yd), network().fit(Xd, yd)]
    assert before.fit_stats_["placement"] == "kept"
    assert "placed" not in [m.fit_stats_["placement"] for m in after]
    assert after[-2].fit_stats_["placement"] == after[-1].fit_stats_["placement"] == "reused"
    del after[-2]
    for a, b in zip(alone + [before], after):
        for wa, wb in zip(_weights(a), _weights(b)):
            np.testing.assert_allclose(wb, wa, rtol=1e-9, atol=1e-12, err_msg=type(a).__name__)
        np.testing.assert_allclose(b.predict(X), a.predict(X), rtol=1e-9, atol=1e-12)


def _limits(client):
    import psutil

    info = workers_info(client)
    return sum(int(w.get("memory_limit") or 0) or psutil.virtual_memory().total for w in info.values())


def test_kept_data_stays_within_its_share_of_the_workers_memory(client, rng):
    _, _, Xa, ya = _dask(rng)
    de.LogisticRegression().fit(Xa, ya)
    [(key_a, nbytes, busy)] = _kept.held()
    assert not busy and nbytes >= Xa.nbytes
    _, _, Xb, yb = _dask(np.random.default_rng(1))
    # room for one of them: the least recently used goes
    with dask.config.set({"dask-estimators.keep-placed": 1.5 * nbytes / _limits(client)}):
        assert de.LogisticRegression().fit(Xb, yb).fit_stats_["placement"] == "kept"
        assert [k for k, _, _ in _kept.held()] != [key_a] and len(_kept.held()) == 1
        assert de.LogisticRegression().fit(Xa, ya).fit_stats_["placement"] == "kept"  # placed again
    # no room for one: placed for its fit, released after; the kept one went before it was placed
    with dask.config.set({"dask-estimators.keep-placed": 0.5 * nbytes / _limits(client)}):
        _, _, Xc, yc = _dask(np.random.default_rng(2))
        assert de.LogisticRegression().fit(Xc, yc).fit_stats_["placement"] == "placed"
        assert _kept.held() == []


def _nothing_of_ours(client):
    return not any(v["actors"] or v["shards"] for v in client.run(_held).values())


def test_kept_data_goes_with_its_collection(client, rng):
    _, _, Xd, yd = _dask(rng)
    model = de.LogisticRegression().fit(Xd, yd)
    assert model.fit_stats_["placement"] == "kept" and len(_kept.held()) == 1
    assert not _nothing_of_ours(client)
    del Xd
    gc.collect()
    assert _kept.held() == []
    deadline = time.monotonic() + 30
    while not _nothing_of_ours(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _nothing_of_ours(client)


@pytest.mark.parametrize("by", ["address", "another client"])
def test_kept_data_of_a_scheduler_is_released_by_its_address_or_any_of_its_clients(client, rng, by):
    """release_kept takes what the estimators take: a scheduler address matched nothing (nor another Client of
    the same scheduler), and the kept shards stayed."""
    from dask_estimators.session import release_kept

    _, _, Xd, yd = _dask(rng)
    address = client.scheduler.address
    assert de.LogisticRegression(client=address).fit(Xd, yd).fit_stats_["placement"] == "kept"
    assert len(_kept.held()) == 1
    if by == "address":
        release_kept(address)
    else:
        with distributed.Client(address, set_as_default=False) as other:
            release_kept(other)
    assert _kept.held() == []
    deadline = time.monotonic() + 30
    while not _nothing_of_ours(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _nothing_of_ours(client)


def test_a_fit_beside_one_using_the_kept_data_places_its_own(client, rng):
    """Two fits at once on the same collections (a search's threads): one uses the kept shards, the other places
    its own for its fit; both get their models."""
    from concurrent.futures import ThreadPoolExecutor

    X, y, Xd, yd = _dask(rng)
    de.LogisticRegression().fit(Xd, yd)  # kept
    with ThreadPoolExecutor(2) as pool:
        models = list(pool.map(lambda C: de.LogisticRegression(C=C, tol=1e-10).fit(Xd, yd), [0.5, 0.5]))
    assert sorted(m.fit_stats_["placement"] for m in models) in (["placed", "reused"], ["reused", "reused"])
    np.testing.assert_allclose(models[0].coef_, models[1].coef_, rtol=1e-12, atol=1e-14)
    assert len(_kept.held()) == 1 and not _kept.held()[0][2]


def _counting_places(monkeypatch):
    from dask_estimators.engine.data import placement

    calls = []
    real = placement.place
    monkeypatch.setattr(placement, "place", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.fixture
def sent():
    """NumPy input sent to the workers, as to workers on other hosts (on the client's host it is handed over in
    shared memory, where the shards live in their actors and are not kept)."""
    with dask.config.set({"dask-estimators.shared-memory": False}):
        yield


def test_numpy_input_is_known_by_its_content(client, rng, monkeypatch, sent):
    """NumPy input is kept by its content: a copy of the same rows (a search cuts each fold anew for every
    candidate) reuses the shards, one changed value places anew, and every model is the one a fresh placement
    gives.  Between fits the kept shards hold nothing of the client's: its arrays can be freed."""
    import weakref

    X, y, _, _ = _dask(rng)
    places = _counting_places(monkeypatch)
    first = de.LogisticRegression(tol=1e-10).fit(X.copy(), y.copy())
    assert first.fit_stats_["placement"] == "kept" and len(places) == 1
    [(key, _, busy)] = _kept.held()
    assert not busy and _kept._KEPT[key].placement.sources is None
    X2 = X.copy()
    gone = weakref.ref(X2)
    second = de.LinearSVC(C=0.5, tol=1e-10, max_iter=5000).fit(X2, y.copy())
    assert second.fit_stats_["placement"] == "reused" and len(places) == 1
    del X2
    gc.collect()
    assert gone() is None
    changed = X.copy()
    changed[17, 3] += 1.0
    third = de.LogisticRegression(tol=1e-10).fit(changed, y)
    assert third.fit_stats_["placement"] == "kept" and len(places) == 2 and len(_kept.held()) == 2
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        fresh = [de.LinearSVC(C=0.5, tol=1e-10, max_iter=5000).fit(X, y), de.LogisticRegression(tol=1e-10).fit(changed, y)]
    assert [m.fit_stats_["placement"] for m in fresh] == ["placed", "placed"]
    for a, b in zip(fresh, [second, third]):
        np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(b.intercept_, a.intercept_, rtol=1e-9, atol=1e-12)
    assert not np.allclose(third.coef_, first.coef_, rtol=1e-6, atol=0)  # the changed value was not missed


def test_strided_input_is_known_by_its_values_in_order(client, rng, monkeypatch, sent):
    """A strided view is named by the digest of its values in C order, not by dask's token, which hashed its
    memory order without its strides: ``X[:, ::2]`` and its transpose (the same bytes in memory order) were one
    key, and the fit on the transpose was given the shards of the other.  Without a fast hash for dask (SHA-1)
    the view is still known, by our own digest."""
    from dask import hashing

    monkeypatch.setattr(hashing, "hashers", [hashing._hash_sha1])
    data = rng.normal(size=(300, 600))
    X = data[:, ::2]
    assert not X.flags.c_contiguous and not X.flags.f_contiguous
    y = X @ rng.normal(size=300) + 0.1 * rng.normal(size=300)
    first = de.LinearRegression().fit(X, y)
    assert first.fit_stats_["placement"] == "kept"
    assert de.LinearRegression(alpha=0.1).fit(np.array(X), y).fit_stats_["placement"] == "reused"
    turned = de.LinearRegression().fit(X.T, y)
    assert turned.fit_stats_["placement"] == "kept"
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        fresh = de.LinearRegression().fit(np.array(X.T), y)
    np.testing.assert_allclose(turned.coef_, fresh.coef_, rtol=1e-9, atol=1e-12)
    assert _kept._content_token(X) != _kept._content_token(X.T)


def test_object_arrays_are_known_by_every_value():
    """Object arrays (CharLSTM's texts) are named by the pickle of their values: dask's token joins strings with
    "-", so ["ab-cd", "ef"] and ["ab", "cd-ef"] were one key.  Objects other than strings and numbers are not
    named (not kept)."""
    a = np.array(["ab-cd", "ef"] * 50, dtype=object)
    b = np.array(["ab", "cd-ef"] * 50, dtype=object)
    assert _kept._content_token(a) != _kept._content_token(b)
    assert _kept._content_token(a) == _kept._content_token(a.copy())
    assert _kept._content_token(a) != _kept._content_token(a.reshape(10, 10))
    assert _kept._content_token(np.array([1, "1"], dtype=object)) != _kept._content_token(np.array(["1", 1], dtype=object))
    with pytest.raises(ValueError):
        _kept._content_token(np.array([object(), "x"], dtype=object))


@pytest.mark.parametrize("sparse", [False, True])
def test_workers_in_the_callers_process_keep_their_own_copy(rng, sparse):
    """Workers that are threads of the caller's process take the objects sent to them as they are: a shard
    kept the caller's own memory (an aligned NumPy array, a CSR's arrays), and a change the caller made to its
    array after the fit reached the kept data, which a later fit on the old content reused."""
    import scipy.sparse as sp

    from dask_estimators.engine import aligned_copy

    X = aligned_copy(rng.normal(size=(4000, 6)))
    if sparse:
        X[np.abs(X) < 0.5] = 0.0
    y = X @ np.arange(1.0, 7.0) + 0.1 * rng.normal(size=4000)
    make = sp.csr_matrix if sparse else (lambda a: a)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        original = X.copy()
        Xc = make(X)
        first = de.LinearRegression(client=c).fit(Xc, y)
        assert first.fit_stats_["placement"] == "kept"
        if sparse:
            Xc.data *= 10.0
        else:
            Xc[:, 3] *= 10.0
        again = de.LinearRegression(client=c).fit(make(original), y)
        assert again.fit_stats_["placement"] == "reused"
        np.testing.assert_allclose(again.coef_, first.coef_, rtol=1e-12)
        _kept.release_all()


def test_a_sparse_input_is_known_by_its_arrays(client, rng, sent):
    """A CSR X is named by the digests of its data, indices and indptr: a copy reuses its shards, a changed
    value does not."""
    import scipy.sparse as sp

    X, y, _, _ = _dask(rng)
    X[np.abs(X) < 0.8] = 0.0
    Xs = sp.csr_matrix(X)
    assert de.LogisticRegression().fit(Xs, y).fit_stats_["placement"] == "kept"
    assert de.LogisticRegression(C=0.5).fit(Xs.copy(), y).fit_stats_["placement"] == "reused"
    changed = Xs.copy()
    changed.data[-1] += 1.0
    assert de.LogisticRegression(C=0.5).fit(changed, y).fit_stats_["placement"] == "kept"
    assert len(_kept.held()) == 2


def test_numpy_input_in_shared_memory_is_not_kept(client, rng):
    """On the client's host the workers build their shards in their actors from the client's shared memory;
    kept, those actors would stop Dask from retiring the workers (tests/engine/test_churn.py)."""
    X, y, _, _ = _dask(rng)
    first = de.LogisticRegression().fit(X, y)
    assert first.fit_stats_["placement"] == "placed" and _kept.held() == []


def test_numpy_input_that_cannot_be_kept_is_not_hashed(client, rng, monkeypatch):
    """Input the workers take from the client's shared memory is placed anew by every fit: hashing it to look
    for a kept placement would be wasted (a read of all of X on the client).  Sent to the workers, it is
    hashed, once per array."""
    hashed = []
    real = _kept.digest
    monkeypatch.setattr(_kept, "digest", lambda a: hashed.append(np.shape(a)) or real(a))
    X, y, _, _ = _dask(rng)
    assert de.LogisticRegression().fit(X, y).fit_stats_["placement"] == "placed"
    assert hashed == []
    with dask.config.set({"dask-estimators.shared-memory": False}):
        assert de.LogisticRegression().fit(X, y).fit_stats_["placement"] == "kept"
    assert sorted(hashed) == [(3000,), (3000, 5)]


def test_kept_data_makes_room_before_a_fit_on_other_data_is_placed(client, rng, monkeypatch):
    """Under memory pressure the kept data goes before the next placement, not after it: a fit on other data
    that would not fit beside it in the budget finds it released when its own data is placed (the workers never
    hold both); data that fits beside it leaves it kept."""
    from dask_estimators.engine.data import placement

    _, _, Xa, ya = _dask(rng)
    de.LogisticRegression().fit(Xa, ya)
    [(key_a, nbytes, _)] = _kept.held()
    seen = []
    real = placement.place
    monkeypatch.setattr(placement, "place", lambda *a, **k: seen.append([k for k, _, _ in _kept.held()]) or real(*a, **k))
    _, _, Xb, yb = _dask(np.random.default_rng(1))
    with dask.config.set({"dask-estimators.keep-placed": 1.5 * nbytes / _limits(client)}):
        assert de.LogisticRegression().fit(Xb, yb).fit_stats_["placement"] == "kept"
    assert seen == [[]]  # released before B was placed
    assert [k for k, _, _ in _kept.held()] != [key_a] and len(_kept.held()) == 1
    _, _, Xc, yc = _dask(np.random.default_rng(2))
    with dask.config.set({"dask-estimators.keep-placed": 2.5 * nbytes / _limits(client)}):
        assert de.LogisticRegression().fit(Xc, yc).fit_stats_["placement"] == "kept"
    assert len(seen[-1]) == 1 and len(_kept.held()) == 2  # room for both: B stayed


# ------------------------------------------------------------------ the explicit handle
def test_kept_data_is_placed_once_for_every_fit_on_it_and_released_when_asked(client, rng):
    """``KeptData``: the first fit places, later fits of other hyperparameters and other estimators of the same
    validation reuse (no shard built), whatever ``keep-placed`` says (0 here); release frees the workers."""
    X, y, Xd, yd = _dask(rng)
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        with de.KeptData(Xd, yd) as data:
            first, built = _placement_tasks(client, lambda: de.LogisticRegression(tol=1e-10).fit(data))
            assert first.fit_stats_["placement"] == "kept" and len(built) == 2
            for make in (lambda: de.LogisticRegression(C=0.2, tol=1e-10), lambda: de.LinearSVC(tol=1e-10)):
                model, built = _placement_tasks(client, lambda: make().fit(data))
                assert model.fit_stats_["placement"] == "reused" and built == []
                alone = make().fit(X, y)  # the same model as a fit of its own
                np.testing.assert_allclose(model.coef_, alone.coef_, rtol=1e-8, atol=1e-12)
            assert len(_kept.held()) == 1 and data.nbytes >= X.nbytes
            assert "1 placement(s)" in repr(data)
        assert _kept.held() == []  # released at the end of the block
        deadline = time.monotonic() + 30
        while not _nothing_of_ours(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _nothing_of_ours(client)
        with pytest.raises(ValueError, match="released"):
            de.LogisticRegression().fit(data)


def test_kept_data_is_held_under_memory_pressure(client, rng):
    """A KeptData's placement stays when the budget is too small for it, and is not evicted to make room for
    other data (which goes instead); other data's placements still come and go."""
    _, _, Xa, ya = _dask(rng)
    data = de.KeptData(Xa, ya)
    with dask.config.set({"dask-estimators.keep-placed": 1e-12}):  # no room for anything
        assert de.LogisticRegression().fit(data).fit_stats_["placement"] == "kept"
        _, _, Xb, yb = _dask(np.random.default_rng(1))
        assert de.LogisticRegression().fit(Xb, yb).fit_stats_["placement"] == "placed"
        assert de.LogisticRegression(C=0.5).fit(data).fit_stats_["placement"] == "reused"
    assert len(_kept.held()) == 1
    data.release()
    assert _kept.held() == []


def test_fit_on_kept_data_takes_its_targets_only_from_it(client, rng):
    X, y, Xd, yd = _dask(rng)
    data = de.KeptData(Xd, yd)
    with pytest.raises(ValueError, match="takes y and sample_weight from the KeptData"):
        de.LogisticRegression().fit(data, yd)
    with pytest.raises(ValueError, match="requires y to be passed"):
        de.LogisticRegression().fit(Xd)
    mlp = de.MLPClassifier(hidden_layer_sizes=(3,), max_iter=2, random_state=0).fit(data)
    assert mlp.fit_stats_["placement"] == "kept"
    cv = de.LogisticRegressionCV(Cs=2, cv=3).fit(data)
    assert cv.fit_stats_["placement"] == "kept"  # its own validation: placed once, then held
    assert de.LogisticRegressionCV(Cs=3, cv=3).fit(data).fit_stats_["placement"] == "reused"
    data.release()
    assert _kept.held() == []


def test_a_networks_fit_after_workers_went_is_the_fit_placed_anew(rng):
    """A network's seeded batches are drawn per shard: kept shards of a two-worker cluster, rebuilt on the one
    worker left after a scale-down, gave another model than a fit placed on that worker (the model hung on the
    session's history).  A network is placed anew there; a linear model still reuses the shards (its model
    does not depend on them)."""
    X, y, Xd, yd = _dask(rng, n=1200, chunks=300)
    kw = dict(hidden_layer_sizes=(8,), max_iter=4, random_state=0, strategy="rounds", batch_size=100)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl, set_as_default=False) as c:
        de.MLPClassifier(client=c, **kw).fit(Xd, yd)
        de.LogisticRegression(client=c).fit(Xd, yd)
        cl.scale(1)
        deadline = time.monotonic() + 60
        while len(c.nthreads()) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        after = de.MLPClassifier(client=c, **kw).fit(Xd, yd)
        linear = de.LogisticRegression(client=c).fit(Xd, yd)
        with dask.config.set({"dask-estimators.keep-placed": 0}):
            fresh = de.MLPClassifier(client=c, **kw).fit(Xd, yd)
        assert after.fit_stats_["placement"] != "reused" and linear.fit_stats_["placement"] == "reused"
        for a, b in zip(after.coefs_, fresh.coefs_):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
        _kept.release_all(c)
