"""Cluster churn under a running fit, on real worker processes (issue 26, section 2).

Real clusters change while a fit runs: autoscaling adds workers, preemption
retires them gracefully, and workers die inside a kernel.  Each test changes
the cluster in the middle of an optimization (between two rounds, or while a
worker sits inside a kernel) and checks that the fit ends with the model of an
undisturbed fit:

* a worker **added** mid-fit: the fit goes on with its shards (no recovery,
  the same shards), and the next fit places a shard on the new worker too;
* a worker **retired** mid-fit with ``client.retire_workers``: with the
  tasks transport its shard is rebuilt from its source on a surviving
  worker; with actors (the default) Dask refuses to retire a worker holding
  an actor, so the fit goes on undisturbed and the worker retires after it;
* a worker **killed inside a kernel**: the kernel sleeps on one worker (a
  test hook wraps it) and the worker is killed with SIGKILL while it sleeps.

The tests run on a cluster of their own (``churn``), since they scale it up
and down and kill its workers.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import dask
import dask.array as da
import numpy as np
import psutil
import pytest

import dask_estimators as de
from dask_estimators.engine.rounds import evaluator as ev_mod
from process_cluster import ProcessCluster  # tests/process_cluster.py
from dask_estimators.engine.cluster._watch import workers_info

N_WORKERS = 3
TIGHT = dict(tol=1e-10, max_iter=500)
pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("spread")]  # the rounds' churn


@pytest.fixture(scope="module")
def churn():
    cluster = ProcessCluster(N_WORKERS)
    yield cluster
    cluster.close()


@pytest.fixture
def cc(churn):
    """The churn cluster's client, back to ``N_WORKERS`` workers (scaled back, or started again)."""
    return churn.ready()


def _data(container, n=6000, d=6):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    if container == "dask":
        return da.from_array(X, chunks=(1000, d)), da.from_array(y, chunks=1000)
    return X, y


def _at_round(monkeypatch, k, action):
    """Run ``action(evaluator)`` on the client just before the ``k``-th round of the fit (1-based)."""
    original = ev_mod.DistributedEvaluator._round
    seen = {"rounds": 0, "done": False}

    def _round(ev, fn, args):
        seen["rounds"] += 1
        if seen["rounds"] == k and not seen["done"]:
            seen["done"] = True
            action(ev)
        return original(ev, fn, args)

    monkeypatch.setattr(ev_mod.DistributedEvaluator, "_round", _round)
    return seen


def _close(a, b, rtol):
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=rtol, atol=1e-10)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=rtol, atol=1e-10)


@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_worker_added_mid_fit(churn, cc, monkeypatch, transport):
    X, y = _data("numpy")
    # each fit places its data (a kept placement would be reused on the workers it was placed on)
    with dask.config.set({"dask-estimators.transport": transport, "dask-estimators.keep-placed": 0}):
        ref = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        assert ref.fit_stats_["n_shards"] == N_WORKERS

        def add(ev):
            churn.cluster.scale(N_WORKERS + 1)
            cc.wait_for_workers(N_WORKERS + 1, timeout=120)

        seen = _at_round(monkeypatch, 3, add)
        est = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        monkeypatch.undo()
        assert seen["done"] and seen["rounds"] > 3
        assert len(workers_info(cc)) == N_WORKERS + 1
        # the running fit kept its shards: nothing was re-placed, and its model is the undisturbed one
        assert est.fit_stats_["recoveries"] == 0
        assert est.fit_stats_["n_shards"] == N_WORKERS
        _close(est, ref, 1e-12)
        # the next fit uses the new worker too
        after = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
    assert after.fit_stats_["n_shards"] == N_WORKERS + 1
    assert sum(after.fit_stats_["rows_per_shard"]) == len(y)
    _close(after, ref, 1e-6)


@pytest.mark.parametrize("container", ["numpy", "dask"])
@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_worker_retired_gracefully_mid_fit(cc, monkeypatch, container, transport):
    X, y = _data(container)
    with dask.config.set({"dask-estimators.transport": transport}):
        ref = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        retired = {}

        def retire(ev):
            w = ev.placement.workers[1]
            retired["worker"] = w
            retired["result"] = cc.retire_workers([w], close_workers=True)

        seen = _at_round(monkeypatch, 3, retire)
        t0 = time.monotonic()
        est = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        seconds = time.monotonic() - t0
        monkeypatch.undo()
    assert seen["done"]
    assert sum(est.fit_stats_["rows_per_shard"]) == len(y)
    if transport == "actors":
        # Dask does not retire a worker that holds an actor (its RetireWorker policy says "can't be moved"):
        # the fit goes on undisturbed on all its shards, and the worker retires once the fit has let go of it
        assert retired["result"] == {}
        assert retired["worker"] in workers_info(cc)
        assert est.fit_stats_["recoveries"] == 0
        _close(est, ref, 1e-12)
        deadline = time.monotonic() + 60  # the fit's actors are released as it returns, the scheduler hears later
        while retired["worker"] not in cc.retire_workers([retired["worker"]], close_workers=True):
            assert time.monotonic() < deadline, "the worker could not retire after the fit"
            time.sleep(0.5)
    else:
        # the shard's task result was copied off the retiring worker; the fit re-placed it from its source
        assert retired["worker"] in retired["result"]
        assert est.fit_stats_["recoveries"] == 1
        assert est.fit_stats_["n_shards"] == ref.fit_stats_["n_shards"]
        _close(est, ref, 1e-6)
    assert retired["worker"] not in workers_info(cc)
    print(f"retired {retired['worker']} mid-fit ({container}, {transport}): fit in {seconds:.1f} s, "
          f"max |coef diff| = {np.max(np.abs(est.coef_ - ref.coef_)):.3g}")


class SleepOnce:
    """A kernel wrapper: on the worker process ``pid`` it writes its pid to ``flag`` and sleeps; elsewhere, or
    once ``flag`` exists, it is the kernel itself.  (The test hook that holds a worker inside a kernel.)"""

    def __init__(self, fn, pid, flag, seconds=120.0):
        self.fn, self.pid, self.flag, self.seconds = fn, pid, flag, seconds
        self.__name__ = getattr(fn, "__name__", "kernel")

    def __call__(self, shard, *args):
        if os.getpid() == self.pid and not os.path.exists(self.flag):
            with open(self.flag + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.flag + ".tmp", self.flag)
            time.sleep(self.seconds)
        return self.fn(shard, *args)


@pytest.mark.parametrize("container", ["numpy", "dask"])
@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_worker_killed_inside_a_kernel(cc, monkeypatch, tmp_path, container, transport):
    X, y = _data(container)
    flag = str(tmp_path / "sleeping")
    killed = {}
    with dask.config.set({"dask-estimators.transport": transport}):
        ref = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        original = ev_mod.DistributedEvaluator._round
        rounds = {"n": 0}

        def _round(ev, fn, args):
            rounds["n"] += 1
            if rounds["n"] == 4 and not killed:
                w = ev.placement.workers[1]
                pid = cc.run(os.getpid, workers=[w])[w]
                killed["worker"], killed["pid"] = w, pid

                def kill_when_asleep():
                    deadline = time.monotonic() + 60
                    while not os.path.exists(flag) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    if os.path.exists(flag):
                        killed["slept"] = int(open(flag).read())
                        os.kill(pid, signal.SIGKILL)

                killer = threading.Thread(target=kill_when_asleep, daemon=True)
                killer.start()
                killed["thread"] = killer
                fn = SleepOnce(fn, pid, flag)
            return original(ev, fn, args)

        monkeypatch.setattr(ev_mod.DistributedEvaluator, "_round", _round)
        t0 = time.monotonic()
        est = de.LogisticRegression(client=cc, **TIGHT).fit(X, y)
        seconds = time.monotonic() - t0
        monkeypatch.undo()
    killed["thread"].join(5)
    assert killed.get("slept") == killed["pid"], "the worker never slept inside the kernel"
    assert not psutil.pid_exists(killed["pid"]) or psutil.Process(killed["pid"]).status() == psutil.STATUS_ZOMBIE
    assert est.fit_stats_["recoveries"] == 1
    assert sum(est.fit_stats_["rows_per_shard"]) == len(y)
    _close(est, ref, 1e-6)
    print(f"killed {killed['worker']} inside a kernel ({container}, {transport}): fit in {seconds:.1f} s")
