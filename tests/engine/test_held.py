"""Shards held by their worker beside Dask's data store (dask_estimators.engine.data._held), on worker processes
of a cluster of this module's own:

* a worker that spills everything it can (its spill threshold below its own baseline, so Dask's memory monitor
  evicts every task result it holds) never writes a shard to disk, and the fit on it is the fit without spilling;
* a shard goes when its key does, with every transport;
* a kept shard whose handle Dask moves off a retiring worker is built again from its source for the next fit.
"""

from __future__ import annotations

import time

import dask
import dask.array as da
import distributed
import numpy as np
import pytest
from leftovers import _nothing_held

import dask_estimators as de
from dask_estimators.engine import place
from dask_estimators.engine.data import _held
from dask_estimators.engine.data._held import HeldShard, ShardGone, held_keys
from dask_estimators.engine.data._worker import Shard, resolve

pytestmark = pytest.mark.timeout(300)

#: Dask's memory monitor spills every task result it can: the spill threshold is far below a worker's baseline.
SPILL_ALL = {
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": 0.01,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
}


@pytest.fixture(scope="module")
def spilling():
    """Two worker processes whose memory monitor spills all it can (1% of 8 GB: 80 MB, under a worker's
    baseline) every 100 ms."""
    with dask.config.set(SPILL_ALL):  # the nannies hand the config to their workers
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None, memory_limit="8GB")
    client = distributed.Client(cluster, set_as_default=False)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client
    finally:
        client.close()
        cluster.close()


def _data(seed=0, n=40_000, d=25):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def _spilled(dask_worker):
    """The bytes the worker's data store holds on disk, and whether its memory monitor spills (a spill threshold)."""
    return dask_worker.data.spilled_total.disk, dask_worker.memory_manager.memory_spill_fraction


def _held_here(dask_worker):
    return [str(k) for k in held_keys(dask_worker)], {str(k): type(v).__name__ for k, v in dask_worker.data.items()}


def _disk_after_a_while(client, seconds=1.0):
    time.sleep(seconds)  # ten turns of the memory monitor
    return client.run(_spilled)


@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_a_worker_that_spills_all_it_can_never_writes_a_shard_to_disk(spilling, transport):
    X, y = _data()
    Xd, yd = da.from_array(X, chunks=(5000, X.shape[1])), da.from_array(y, chunks=5000)
    shard_bytes = X.nbytes // 2
    with dask.config.set({"dask-estimators.transport": transport}):
        with place(spilling, {"X": Xd + 0, "y": yd}) as p:  # + 0: computed into shards of the placement's own
            found = _disk_after_a_while(spilling)
            assert all(frac == 0.01 for _, frac in found.values())  # the monitor does spill on these workers
            assert all(disk < shard_bytes / 20 for disk, _ in found.values()), found
            held = spilling.run(_held_here)
            assert sorted(k for keys, _ in held.values() for k in keys) == sorted(s.key for s in p.shards)
            handles = {k for _, data in held.values() for k, kind in data.items() if kind == "HeldShard"}
            assert handles <= {s.key for s in p.shards}  # what Dask stores for a shard: its handle (if not spilled)
            sums = p.map(lambda shard: float(shard.get("X").sum()))
            np.testing.assert_allclose(sum(sums), X.sum(), rtol=1e-12)
    assert _nothing_held(spilling) is True  # released with the placement: the shards went with their keys


def test_the_fit_on_workers_that_spill_all_they_can_is_the_fit_without(spilling, client):
    X, y = _data(1)
    Xd, yd = da.from_array(X, chunks=(5000, X.shape[1])), da.from_array(y, chunks=5000)
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        model = de.LogisticRegression(client=spilling, tol=1e-10).fit(Xd, yd)
        assert all(disk < X.nbytes / 40 for disk, _ in spilling.run(_spilled).values())
        ref = de.LogisticRegression(client=client, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    assert _nothing_held(spilling) is True


@pytest.mark.usefixtures("spread")
def test_a_kept_shard_whose_handle_dask_moves_off_a_retiring_worker_is_built_again_for_the_next_fit(client):
    X, y = _data(2)
    Xd, yd = da.from_array(X, chunks=(5000, X.shape[1])), da.from_array(y, chunks=5000)
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster,
                                                                                        set_as_default=False) as c:
        c.wait_for_workers(3, timeout=120)
        first = de.LogisticRegression(client=c, tol=1e-10).fit(Xd, yd)
        assert first.fit_stats_["placement"] == "kept"
        holding = sorted(w for w, (keys, _) in c.run(_held_here).items() if keys)
        gone = holding[0]
        moved = c.retire_workers([gone], close_workers=True)  # no actor between fits: Dask moves the handles
        assert gone in moved
        after = c.run(_held_here)
        handles = {k for _, data in after.values() for k, kind in data.items() if kind == "HeldShard"}
        held = {k for keys, _ in after.values() for k in keys}
        assert handles - held  # a handle now on a worker that does not hold its shard
        second = de.LogisticRegression(client=c, C=0.5, tol=1e-10).fit(Xd, yd)
        assert second.fit_stats_["placement"] == "reused"
        # the workers are asked first: no actor is made on a handle with nothing behind it, whose failed task
        # the worker logged as an error (with a ShardGone traceback) on every such fit
        logged = [m for lines in c.get_worker_logs().values() for _, m in lines if "ShardGone" in m]
        assert not logged, logged[0]
        with dask.config.set({"dask-estimators.keep-placed": 0}):
            ref = de.LogisticRegression(client=client, C=0.5, tol=1e-10).fit(X, y)
        np.testing.assert_allclose(second.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
        assert _nothing_held(c) is True


def _hold_after(seconds):
    """Task body: a shard held after ``seconds`` (a build still running when its future is cancelled)."""
    time.sleep(seconds)
    return _held.hold(Shard({"X": np.ones((10, 2))}, device="cpu"))


def test_a_build_cancelled_while_it_runs_leaves_no_shard_held(spilling):
    kept = spilling.submit(_hold_after, 0.0, pure=False)
    kept.result()  # a handle
    running = spilling.submit(_hold_after, 1.0, pure=False)
    deadline = time.monotonic() + 30
    while not any(spilling.processing().values()):  # the task started on its worker
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)
    running.cancel()
    time.sleep(1.5)  # it ends, and Dask drops its result
    held = {k for keys, _ in spilling.run(_held_here).values() for k in keys}
    assert held == {str(kept.key)}
    del kept
    deadline = time.monotonic() + 30
    while any(keys for keys, _ in spilling.run(_held_here).values()):
        assert time.monotonic() < deadline, "the released handle's shard is still held"
        time.sleep(0.1)


def test_hold_without_plugin_add_returns_the_shard(monkeypatch):
    shard = Shard({"X": np.ones((3, 2))}, device="cpu")
    assert _held.hold(shard) is shard and resolve(shard) is shard  # outside a task: nothing to hold it
    with pytest.raises(ShardGone, match="outside a Dask task"):
        resolve(HeldShard("build_shard_task-1"))

    class WorkerWithoutPlugins:  # a distributed without Worker.plugin_add
        address = "tcp://127.0.0.1:1"

    monkeypatch.setattr(_held, "_task_worker", lambda: (WorkerWithoutPlugins(), "build_shard_task-1"))
    assert _held.hold(shard) is shard  # the task's result is the shard itself, as Dask stores any result
