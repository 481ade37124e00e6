"""The tree-sum's same-host hand-over through shared memory (engine/data/_shared.py).

On the session's process-based cluster: sums of large arrays travel as
segment references and equal np.sum; the client's total is its own memory and
stays right after the segments are reused by later trees; parts are never
written; a worker on "another host" gets its sums over the network; the
config switch turns it off.  In one process: pickles are small, a reused
segment is an error and never another sum's numbers, and segments are pooled.
"""

import gc
import os
import pickle

import dask
import numpy as np
import pytest
from distributed import wait

from dask_estimators.engine.data import _shared, _worker
from dask_estimators.engine.rounds import reduce
from dask_estimators.engine.rounds.reduce import tree_sum

BIG = _shared.MIN_BYTES // 8 + 3  # float64 elements: just above the size that goes through shared memory


def _workers(c):
    return sorted(c.ncores())  # asked now: the cached scheduler_info can predate a worker restart


def _make(seed, size):
    return (float(seed), np.random.default_rng(seed).standard_normal(size), np.arange(3.0) * seed)


def _parts(client, n, size, seed0=0, where=None):
    ws = _workers(client)
    where = where or [ws[i % len(ws)] for i in range(n)]
    futs = [client.submit(_make, seed0 + i, size, workers=[w], pure=False) for i, w in enumerate(where)]
    wait(futs)
    return futs, where, [_make(seed0 + i, size) for i in range(n)]


def _expected(values):
    return (sum(v[0] for v in values), np.sum([v[1] for v in values], axis=0), np.sum([v[2] for v in values], axis=0))


def _assert_total(got, values):
    want = _expected(values)
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=1e-12)


def _held(dask_worker, key):
    """The type of what a worker holds under ``key`` and how many of its arrays are in segments."""
    if key not in dask_worker.data:
        return None
    v = dask_worker.data[key]
    leaves = []
    if isinstance(v, _shared.Shared):
        _shared._map(lambda x: leaves.append(isinstance(x, _shared._Leaf)), v._leaves)
    return type(v).__name__, sum(leaves)


def _held_on_workers(client, key):
    return [h for h in client.run(_held, key=key).values() if h is not None]


# --------------------------------------------------------------------- on the cluster
@pytest.mark.parametrize("fan_in", [2, 3])
@pytest.mark.parametrize("n_parts", [2, 5])
def test_tree_sum_of_large_arrays_travels_through_shared_memory(client, n_parts, fan_in):
    futs, where, values = _parts(client, n_parts, BIG)
    total = tree_sum(client, futs, where, fan_in=fan_in)
    wait(total)
    # the total is held on its worker as a Shared: only references to its segments leave that process
    assert _held_on_workers(client, total.key) == [("Shared", 1)]
    got = total.result()
    _assert_total(got, values)
    assert got[1].flags.owndata and got[1].flags.writeable  # the client copied it out: its own memory
    for part, v in zip(client.gather(futs), values):  # no add wrote into a part
        np.testing.assert_array_equal(part[1], v[1])


def test_client_total_survives_reuse_of_the_segments(client):
    """A later tree reuses the segments; a total already returned must not change with them."""
    futs, where, values = _parts(client, 4, BIG)
    first = tree_sum(client, futs, where).result()
    snapshot = first[1].copy()
    del futs
    for k in range(3):  # the same sizes: the pooled segments of the first tree are taken again
        futs2, where2, values2 = _parts(client, 4, BIG, seed0=100 + 10 * k)
        _assert_total(tree_sum(client, futs2, where2).result(), values2)
        del futs2
    np.testing.assert_array_equal(first[1], snapshot)
    _assert_total(first, values)


def test_sums_for_another_host_go_over_the_network(client, monkeypatch):
    """A worker whose host token differs from its consumer's hands over plain arrays (and the sum is right)."""
    ws = _workers(client)
    pids = client.run(os.getpid)
    monkeypatch.setitem(_shared._IDS, ws[1], ("another-host", pids[ws[1]]))
    monkeypatch.setitem(_shared._IDS, ws[0], (_shared.host_token(), pids[ws[0]]))
    futs, where, values = _parts(client, 4, BIG, where=[ws[0], ws[0], ws[1], ws[1]])
    adds, placed_on = reduce._plan(4, where, 2)
    shares = reduce._shares(client, adds, placed_on, 4)
    # add 0 on ws0 feeds the root on ws0 and then the client (same host): "copy"; add 1 on ws1 feeds ws0: plain
    assert [a[1] for a in adds] == [ws[0], ws[1], ws[0]]
    assert shares == ["copy", None, "copy"]
    _assert_total(tree_sum(client, futs, where).result(), values)


def test_shared_memory_switch_off_sends_plain_arrays(client):
    futs, where, values = _parts(client, 3, BIG)
    with dask.config.set({"dask-estimators.shared-memory": False}):
        total = tree_sum(client, futs, where)
        wait(total)
        assert _held_on_workers(client, total.key) == [("tuple", 0)]
        _assert_total(total.result(), values)


def test_small_results_are_not_put_in_segments(client):
    futs, where, values = _parts(client, 3, 10)
    total = tree_sum(client, futs, where)
    wait(total)
    assert _held_on_workers(client, total.key) == [("Shared", 0)]
    _assert_total(total.result(), values)


# --------------------------------------------------------------------- in one process
def test_a_shared_sum_pickles_as_references_and_maps_back():
    a, b = np.random.default_rng(0).standard_normal((2, BIG))
    s = _worker.add((1.0, a), (2.0, b), share="map")
    assert isinstance(s, _shared.Shared)
    blob = pickle.dumps(s)
    assert len(blob) < 1000 < a.nbytes
    got = pickle.loads(blob)  # in this process: its own segment, in place
    assert got[0] == 3.0
    np.testing.assert_array_equal(got[1], a + b)
    assert np.shares_memory(got[1], s.nested[1])


def test_a_reused_segment_is_an_error_not_another_sum():
    a = np.ones(BIG)
    s = _worker.add(a, a, share="copy")
    blob = pickle.dumps(s)
    del s
    gc.collect()  # the key released: the segment goes back to the pool
    t = _worker.add(a, 3 * a, share="copy")  # same size: takes that segment again, with a new lease
    with pytest.raises(_shared.SharedMemoryError, match="reused"):
        pickle.loads(blob)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t)), 4.0)


def test_segments_are_pooled_and_add_into_keeps_its_segment():
    a = np.full(BIG, 2.0)
    s = _worker.add(a, a, share="map")
    fd = s._leaves.ref.fd
    out = _worker.add_into(s, a, share="copy")
    assert out is s and out.copy and out._leaves.ref.fd == fd  # summed in place, in the same segment
    np.testing.assert_array_equal(out.nested, 6.0)
    np.testing.assert_array_equal(a, 2.0)
    del s, out
    gc.collect()
    again = _worker.add(a, a, share="map")
    assert again._leaves.ref.fd == fd  # the freed segment was taken again
    # a plain result of a shared first operand keeps its segment leased until it is dropped
    plain = _worker.add_into(again, a)
    del again
    gc.collect()
    assert any(k[0] == fd for k in _shared._live) and all(m.fd != fd for m, _ in _shared._POOL._free)
    np.testing.assert_array_equal(plain, 6.0)
    del plain
    gc.collect()
    assert any(m.fd == fd for m, _ in _shared._POOL._free)


def test_sums_that_cannot_be_held_in_place_stay_plain():
    ints, floats = np.arange(BIG), np.full(BIG, 0.5)
    s = _worker.add(ints, floats, share="map")  # int + float: not a sum an int segment can hold
    assert not isinstance(s._leaves, _shared._Leaf)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(s)), ints + 0.5)


# ----------------------------------------------------------- the actors' tree (the default transport)
def _shard_result(shard, seed, size):
    """Kernel: a nested result with a large array that depends on the shard and the round's seed."""
    rows = float(shard.get("X").shape[0])
    return (rows * seed, np.random.default_rng(seed).standard_normal(size) * rows, np.arange(3.0) * rows)


def _sent_leaves(dask_worker):
    """On a worker (``client.run``): per ShardActor it holds, how many arrays of its last subtotal were
    handed over in segments (None: nothing held in shared memory)."""
    from dask_estimators.engine.data._actor import ShardActor

    out = []
    for actor in dask_worker.state.actors.values():
        if isinstance(actor, ShardActor) and actor.shard is not None:  # live: this placement's (closed ones drop it)
            if actor._sent is None:
                out.append(None)
            else:
                leaves = []
                _shared._map(lambda x: leaves.append(isinstance(x, _shared._Leaf)), actor._sent._leaves)
                out.append(sum(leaves))
    return out


@pytest.mark.parametrize("switch", [True, False])
def test_actor_tree_hands_large_subtotals_over_in_shared_memory(client, switch):
    from dask_estimators.engine import DistributedEvaluator, place

    X = np.ones((10, 2))
    with dask.config.set({"dask-estimators.shared-memory": switch}), place(client, {"X": X}, transport="actors") as p:
        ev = DistributedEvaluator(p)
        assert len(p.actors) == 2
        rows = [float(r) for r in p.n_rows]
        shares = ev._actor_shares([[p.actors[1]], []])
        assert shares == (["copy", "map"] if switch else [None, None])
        for seed in range(4):  # consecutive rounds: each total is its own, never a reused segment's numbers
            got = ev(_shard_result, seed, BIG)
            want = [_shard_result(type("S", (), {"get": lambda self, k, r=r: np.ones((int(r), 2))})(), seed, BIG)
                    for r in rows]
            _assert_total(got, want)
            got[1][:] = 0.0  # the client's total is its own memory
        held = [x for v in client.run(_sent_leaves).values() for x in v]
        # switched on, each actor's last subtotal had its large array (only) in a segment; off, none
        assert held == ([1, 1] if switch else [None, None])


def _second_worker_on_another_host(client, monkeypatch):
    """The workers, sorted; the second one's identity made to say "another host" for this test."""
    ws = _workers(client)
    pids = client.run(os.getpid)
    monkeypatch.setitem(_shared._IDS, ws[0], (_shared.host_token(), pids[ws[0]]))
    monkeypatch.setitem(_shared._IDS, ws[1], ("another-host", pids[ws[1]]))
    return ws


def test_actor_tree_to_another_host_sends_plain_arrays(client, monkeypatch):
    from dask_estimators.engine import DistributedEvaluator, place

    ws = _second_worker_on_another_host(client, monkeypatch)
    with place(client, {"X": np.ones((10, 2))}, transport="actors") as p:
        ev = DistributedEvaluator(p)
        children = [[p.actors[1]], []]
        first = p.workers.index(ws[0])
        shares = ev._actor_shares(children if first == 0 else [[p.actors[1]], []])
        # the child is on "another host" than its parent: plain; the root answers the client on this host
        assert shares[1] is None
        assert shares[0] == ("copy" if p.workers[0] == ws[0] else None)


def _write_to_args(shard, w):
    """Kernel: the sum of ``w`` (a tensor) as received, whether it lies in a memfd segment; then writes into it."""
    total = float(w.sum())
    address = w.data_ptr()
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    mapped = any(int(r[0].split("-")[0], 16) <= address < int(r[0].split("-")[1], 16)
                 and len(r) > 5 and "memfd:dask-estimators" in r[5] for r in regions)
    w[:] = -1.0  # a reader's own pages (copy-on-write): the other actor and the client still see theirs
    return (total, float(mapped))


@pytest.mark.parametrize("switch", [True, False])
def test_actor_rounds_map_large_arguments_copy_on_write(client, switch):
    from dask_estimators.engine import DistributedEvaluator, place
    from dask_estimators.engine.data._actor import Payload

    rng = np.random.default_rng(0)
    with dask.config.set({"dask-estimators.shared-memory": switch}), \
            place(client, {"X": np.ones((10, 2))}, transport="actors") as p:
        ev = DistributedEvaluator(p)
        for _ in range(3):  # consecutive rounds reuse the pooled segment: each sees its own parameters
            w = rng.standard_normal(BIG)
            keep = w.copy()
            total, mapped = ev(_write_to_args, w)
            assert ev._share_args is switch  # decided with the actors' tree, at the first round
            assert total == pytest.approx(2 * keep.sum(), rel=1e-12)  # neither actor saw the other's writes
            assert mapped == (2.0 if switch else 0.0)
            np.testing.assert_array_equal(w, keep)  # nor did the client
    shared = _shared.share_args((np.ones(BIG), "spec"), _worker._add)
    payload = Payload.pack(_write_to_args, shared)
    assert payload.buffers == [] and len(payload.data) < 10_000  # references, not the 1 MB array


def test_actor_rounds_to_another_host_send_their_arguments(client, monkeypatch):
    from dask_estimators.engine import DistributedEvaluator, place

    _second_worker_on_another_host(client, monkeypatch)
    with place(client, {"X": np.ones((10, 2))}, transport="actors") as p:
        ev = DistributedEvaluator(p)
        w = np.random.default_rng(1).standard_normal(BIG)
        total, mapped = ev(_write_to_args, w)
        assert not ev._share_args
        assert total == pytest.approx(2 * w.sum(), rel=1e-12) and mapped == 0.0
