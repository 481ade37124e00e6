"""Workers that Dask paused (their memory above ``distributed.worker.memory.pause``): a fit that needs a task on one
raises :class:`WorkerPausedError` after ``dask-estimators.paused-wait`` seconds, where it waited forever; a pause
that ends in time, or one during the rounds (actor calls run on a paused worker), leaves the fit's model as it is.

A cluster of its own, whose memory monitor never pauses or resumes a worker: the tests pause and resume the
workers themselves (``dask_worker.status``), so that the pauses last exactly as long as each test says.
"""

from __future__ import annotations

import threading
import time

import dask
import dask.array as da
import distributed
import numpy as np
import pytest

import dask_estimators as de
from dask_estimators.engine import WorkerPausedError
from dask_estimators.engine.cluster import _watch
from dask_estimators.engine.rounds import evaluator as ev_mod

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("spread")]

#: settings of every fit here: rounds over both workers, nothing kept between fits
FIT = {"dask-estimators.keep-placed": 0, "dask-estimators.min-step-flops-per-worker": 0}


def _set_status(name, dask_worker=None):
    from distributed.core import Status

    dask_worker.status = getattr(Status, name)


@pytest.fixture(scope="module")
def paused_cluster():
    with dask.config.set({"distributed.worker.memory.pause": False, "distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                           memory_limit="2GiB")
    with dask.config.set({"distributed.comm.timeouts.connect": "10s"}):  # how long a scatter waits for a worker
        client = distributed.Client(cluster, set_as_default=False)
    try:
        client.wait_for_workers(2, timeout=60)
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture
def pc(paused_cluster):
    """The cluster's client, both workers running at the start and at the end of the test."""
    client = paused_cluster
    client.run(_set_status, "running")
    yield client
    client.run(_set_status, "running")


def _data(n=4000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + rng.normal(size=n) > 0).astype(int)
    return X, y


def _worker(client, i=0):
    return sorted(_watch.alive_workers(client))[i]


@pytest.mark.parametrize("shared_memory", [True, False])
def test_a_worker_paused_for_good_is_a_clear_error(pc, shared_memory):
    """Paused before the fit: placing its shard is a task that never starts.  The fit raises within the wait set,
    naming the worker, and the cluster serves the next fit once the worker runs again."""
    X, y = _data()
    with dask.config.set(FIT):
        ref = de.LogisticRegression(client=pc).fit(X, y)
    w = _worker(pc)
    pc.run(_set_status, "paused", workers=[w])
    t0 = time.monotonic()
    with dask.config.set({**FIT, "dask-estimators.paused-wait": 2, "dask-estimators.shared-memory": shared_memory}):
        # without shared memory the rows go by distributed's scatter, which sends to running workers only and
        # gives up after the client's connect timeout: the same error then
        with pytest.raises(WorkerPausedError, match="paused") as info:
            de.LogisticRegression(client=pc).fit(X, y)
        took = time.monotonic() - t0
        assert isinstance(info.value, MemoryError)
        assert info.value.workers == {w} and w in str(info.value) and "memory_limit of 2,048 MiB" in str(info.value)
        assert took < 120, took
        pc.run(_set_status, "running", workers=[w])
        model = de.LogisticRegression(client=pc).fit(X, y)
    np.testing.assert_array_equal(model.coef_, ref.coef_)


def test_a_pause_that_ends_within_the_wait_leaves_the_fit_as_it_is(pc):
    """Paused at the fit's start, running again 2 s later: the fit waits for it and gives the undisturbed model."""
    X, y = _data(seed=1)
    with dask.config.set(FIT):
        ref = de.LogisticRegression(client=pc).fit(X, y)
    w = _worker(pc, 1)
    pc.run(_set_status, "paused", workers=[w])
    timer = threading.Timer(2.0, lambda: pc.run(_set_status, "running", workers=[w]))
    timer.start()
    try:
        with dask.config.set({**FIT, "dask-estimators.paused-wait": 30}):
            model = de.LogisticRegression(client=pc).fit(X, y)
    finally:
        timer.join()
    np.testing.assert_array_equal(model.coef_, ref.coef_)
    assert model.n_iter_ == ref.n_iter_


def test_a_pause_during_the_rounds_does_not_stop_them(pc, monkeypatch):
    """Paused after the placement (before round 3), for the rest of the fit, with a health check every slice: the
    rounds go through the actors, which a paused worker still runs, so the fit ends with the undisturbed model."""
    X, y = _data(seed=2)
    with dask.config.set(FIT):
        ref = de.LogisticRegression(client=pc).fit(X, y)
    w = _worker(pc)
    original = ev_mod.DistributedEvaluator._round
    state = {"rounds": 0}

    def _round(ev, fn, args):
        state["rounds"] += 1
        if state["rounds"] == 3:
            pc.run(_set_status, "paused", workers=[w])
        return original(ev, fn, args)

    monkeypatch.setattr(ev_mod.DistributedEvaluator, "_round", _round)
    monkeypatch.setattr(_watch, "SLICE", 0.001)  # every wait's health checks run, pause included
    with dask.config.set({**FIT, "dask-estimators.paused-wait": 0}):
        model = de.LogisticRegression(client=pc).fit(X, y)
    assert state["rounds"] > 3
    np.testing.assert_array_equal(model.coef_, ref.coef_)


@pytest.mark.parametrize("chunks", [1000, 4000], ids=["streamed", "computed-first"])
def test_dask_input_with_every_worker_paused_is_a_clear_error(pc, chunks):
    """A dask array's blocks may be computed on any worker: with every worker paused they wait in the scheduler,
    and the fit raises naming them all; once they run again the same input fits.  Four blocks stream into the
    shards, each worker computing its own; one block (fewer than the workers) is computed first, anywhere."""
    X, y = _data(seed=3)
    dX, dy = da.from_array(X, chunks=chunks), da.from_array(y, chunks=chunks)
    with dask.config.set(FIT):
        ref = de.LogisticRegression(client=pc).fit(X, y)
    pc.run(_set_status, "paused")
    with dask.config.set({**FIT, "dask-estimators.paused-wait": 2}):
        with pytest.raises(WorkerPausedError, match="paused") as info:
            de.LogisticRegression(client=pc).fit(dX, dy)
        assert info.value.workers == _watch.alive_workers(pc)
        pc.run(_set_status, "running")
        model = de.LogisticRegression(client=pc).fit(dX, dy)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6, atol=1e-8)


def _busy(name):
    distributed.Event(name).wait(60)


def test_a_task_handed_to_a_worker_before_it_paused_is_a_clear_error(pc):
    """A worker may pause after the scheduler handed it a task of the fit (a dask block's data arriving in the
    graph fills its memory): the scheduler says ``processing``, the task waits unstarted on the paused worker,
    and the fit waited forever.  Here each worker's one thread is busy when the fit's tasks arrive, and the
    workers pause before it is free: the fit raises, and once they run again the same input fits."""
    X, y = _data(seed=5)
    dX, dy = da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)
    with dask.config.set(FIT):
        ref = de.LogisticRegression(client=pc).fit(X, y)
    release = distributed.Event("paused-test-busy", client=pc)
    workers = sorted(_watch.alive_workers(pc))
    blockers = [pc.submit(_busy, "paused-test-busy", workers=[w], pure=False) for w in workers]
    out = {}

    def fit():
        try:
            out["model"] = de.LogisticRegression(client=pc).fit(dX, dy)
        except Exception as e:  # noqa: BLE001 - reported below
            out["error"] = e

    with dask.config.set({**FIT, "dask-estimators.paused-wait": 2}):
        thread = threading.Thread(target=fit)
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                pc.processing()[w][1:] for w in workers):  # a task of the fit waits behind each blocker
            time.sleep(0.05)
        pc.run(_set_status, "paused")
        release.set()
        distributed.wait(blockers, timeout=60)
        thread.join(120)
        assert not thread.is_alive(), "the fit still waits on the paused workers"
        assert isinstance(out.get("error"), WorkerPausedError), out
        pc.run(_set_status, "running")
        model = de.LogisticRegression(client=pc).fit(dX, dy)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
