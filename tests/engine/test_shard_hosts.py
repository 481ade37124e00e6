"""Hosted placements (``place(..., hosted=True)``): each shard's actor is held by its worker's long-lived
``ShardHost``, so a placement takes one direct call per worker and no scheduler round.

On the session's process cluster (2 workers).  The shards must answer every call an actor of their own does
(a map, the evaluator's tree and gather rounds), the hosts must be made once per worker and hold nothing
after a release.
"""

import importlib
import threading
import time

import dask
import numpy as np
import pytest

from dask_estimators.engine import DistributedEvaluator, place
from dask_estimators.engine.data import placement as pl
from dask_estimators.engine.data._actor import HostedShard, ShardHost
from dask_estimators.engine.cluster._watch import workers_info


@pytest.fixture(scope="module", autouse=True)
def _warm_workers(client):
    client.run(importlib.import_module, "dask_estimators.engine.data._worker")


def _moments(shard):
    X, y = shard.get("X"), shard.get("y")
    return X.T @ y, (y * y).sum(), shard.n_rows


def _rows(shard):
    return int(shard.n_rows)


def _first_row(shard):
    return shard.get("X")[0].cpu().numpy()


def _hosts_on(dask_worker):
    """This worker's shard hosts: key -> the tokens of the shards each holds."""
    return {str(k): sorted(a.held) for k, a in dask_worker.state.actors.items() if isinstance(a, ShardHost)}


def _held_tokens(client) -> set:
    return {t for hosts in client.run(_hosts_on).values() for ts in hosts.values() for t in ts}


def _host_keys(client) -> dict:
    return {w: sorted(hosts) for w, hosts in client.run(_hosts_on).items()}


def _poll(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _data(rng, n=301, d=4):
    return rng.standard_normal((n, d)), rng.standard_normal(n)


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("reduction", ["tree", "single", "gather"])
def test_hosted_shards_sum_as_the_whole_data(client, rng, reduction, shared_memory):
    """Every round of the evaluator reaches both hosted shards (in the tree, the root calls its hosted child
    from its worker), through the client's shared memory or with the bytes in the call."""
    X, y = _data(rng)
    with dask.config.set({"dask-estimators.shared-memory": shared_memory}):
        with place(client, {"X": X, "y": y}, hosted=True) as p:
            assert len(p.actors) == 2 and all(isinstance(a, HostedShard) for a in p.actors)
            assert {a.token for a in p.actors} <= _held_tokens(client)
            g, yy, n = DistributedEvaluator(p, reduction=reduction)(_moments)
            assert p.map(_rows) == p.n_rows and sum(p.n_rows) == len(y) == int(n)
            np.testing.assert_allclose(p.map(_first_row), [X[0], X[p.n_rows[0]]])
    np.testing.assert_allclose(g, X.T @ y, rtol=1e-12)
    np.testing.assert_allclose(yy, y @ y, rtol=1e-12)


def test_hosts_are_made_once_per_worker_and_hold_nothing_after_release(client, rng):
    """One host per worker for this client (other clients of the cluster have their own), the same one for
    every placement, holding nothing once the placements are released."""
    X, y = _data(rng)
    place(client, {"X": X, "y": y}, hosted=True).release()
    mine = {w: str(f.key) for w, (f, _) in pl._HOSTS[client].items()}
    assert sorted(mine) == sorted(workers_info(client))
    tokens = set()
    for _ in range(3):
        with place(client, {"X": X, "y": y}, hosted=True) as p:
            tokens |= {a.token for a in p.actors}
            on_workers = client.run(_hosts_on)
            assert {w: str(f.key) for w, (f, _) in pl._HOSTS[client].items()} == mine  # no new host
            for a, w in zip(p.actors, p.workers):
                assert a.token in on_workers[w][mine[w]]  # held by this client's host on its worker
    assert len(tokens) == 6
    assert _poll(lambda: not _held_tokens(client) & tokens), _held_tokens(client) & tokens


def test_a_shard_that_cannot_be_built_fails_the_hosted_placement(client, rng):
    X, y = _data(rng)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        place(client, {"X": X, "y": y[:-1]}, hosted=True)
    with pytest.raises(Exception, match="(?i)cuda"):  # no CUDA on these workers: the shard's own error
        place(client, {"X": X, "y": y}, hosted=True, device="cuda")
    assert _poll(lambda: not _held_tokens(client))
    with place(client, {"X": X, "y": y}, hosted=True) as p:  # and the next placement works
        assert sum(p.map(_rows)) == len(y)


def test_placements_in_threads_share_one_host_per_worker(client, rng):
    X, y = _data(rng)
    pl._HOSTS.pop(client, None)  # as a new client: no host known yet
    errors, sums = [], []

    def fit():
        try:
            with place(client, {"X": X, "y": y}, hosted=True) as p:
                sums.append(DistributedEvaluator(p)(_moments)[0])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=fit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(sums) == 4
    for s in sums:
        np.testing.assert_allclose(s, X.T @ y, rtol=1e-12)
    assert len(pl._HOSTS[client]) == 2
    live = {str(f.key) for f, _ in pl._HOSTS[client].values()}
    assert _poll(lambda: {k for keys in _host_keys(client).values() for k in keys} >= live)


def test_hosts_go_once_idle_so_that_dask_can_retire_their_workers(monkeypatch):
    """Dask retires no worker that holds an actor, and the hosts lived as long as their client: after any small
    fit its worker could not be retired (an adaptive cluster could not scale down).  Back-to-back placements
    still share them; once none holds shards for ``HOST_IDLE`` seconds they go, and the worker retires."""
    import distributed

    monkeypatch.setattr(pl, "HOST_IDLE", 0.5)
    X = np.random.default_rng(0).normal(size=(300, 3))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        keys = []
        for _ in range(2):  # within the idle time: the same hosts
            with place(c, {"X": X}, hosted=True) as p:
                assert sum(p.map(_rows)) == 300
            keys.append(sorted(str(f.key) for f, _ in pl._HOSTS[c].values()))
        assert keys[0] == keys[1] and len(keys[0]) == 2
        assert _poll(lambda: not any(c.run(lambda dask_worker: list(dask_worker.state.actors)).values()), 10)
        worker = sorted(c.nthreads())[0]
        assert worker in c.retire_workers(workers=[worker])
        assert _poll(lambda: worker not in c.nthreads(), 10)
        with place(c, {"X": X}, hosted=True) as p:  # new hosts on the worker left
            assert sum(p.map(_rows)) == 300 and set(p.workers) == set(c.nthreads())
