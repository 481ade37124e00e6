"""The collective mode's rendezvous and group teardown, on the session cluster (two worker processes)."""

import socket
import time

from distributed.comm import get_address_host

from dask_estimators.engine.ddp.collective import _identity_and_port, process_group, run_collective


def _sum_ranks(shard, comm):
    import torch
    import torch.distributed as dist

    with process_group(comm, teardown_behind=True):
        t = torch.full((3,), float(comm.rank + 1))
        dist.all_reduce(t)
        return t.tolist()


def _group_after_lock():
    """(whether this worker's group lock could be taken, whether a default group exists then)."""
    import torch.distributed as dist

    from dask_estimators.engine.ddp.collective import _PG_LOCK

    got = _PG_LOCK.acquire(timeout=30)
    try:
        return got, dist.is_initialized()
    finally:
        if got:
            _PG_LOCK.release()


def test_groups_torn_down_behind_follow_each_other_and_are_gone_once_the_lock_is_free(two_ranks):
    # back to back: each group on a worker waits for the teardown of the one before
    for _ in range(4):
        assert run_collective(two_ranks, _sum_ranks) == [[3.0] * 3] * 2
    states = two_ranks.client.run(_group_after_lock, workers=sorted(set(two_ranks.workers)))
    assert list(states.values()) == [(True, False)] * 2


def _fail_in_group(shard, comm):
    """Leave the block with an error; report the group and the lock as the error leaves it."""
    import torch.distributed as dist

    from dask_estimators.engine.ddp.collective import _PG_LOCK

    try:
        with process_group(comm, teardown_behind=True):
            raise ValueError("boom")
    except ValueError:
        return _PG_LOCK.locked(), dist.is_initialized()


def test_a_block_that_fails_destroys_its_group_before_the_error_leaves(two_ranks):
    assert run_collective(two_ranks, _fail_in_group) == [(False, False)] * 2
    assert run_collective(two_ranks, _sum_ranks) == [[3.0] * 3] * 2  # and the next group forms


def _served(port, dask_worker=None):
    """On a worker: take the store server its last :func:`_identity_and_port` made (as rank 0 would)."""
    from dask_estimators.engine.ddp.collective import _SERVED

    return _SERVED.pop(port, (None,))[0] is not None


def test_one_round_names_each_process_and_serves_rank_zeros_store(client):
    """One round names each worker's process and starts rank 0's store, which takes connections before any rank
    has started; the other workers serve nothing."""
    import datetime

    import torch.distributed as dist

    workers = sorted(client.nthreads())
    host = get_address_host(workers[0])
    found = client.run(_identity_and_port, workers[0], host, 30.0, workers=workers)
    port = found[workers[0]][1]
    assert isinstance(port, int) and 0 < port < 65536 and found[workers[0]][2] is True
    assert [found[w][1:] for w in workers[1:]] == [(None, False)] * (len(workers) - 1)
    assert len({ident for ident, _, _ in found.values()}) == len(workers)  # one process per worker
    peer = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=10))
    peer.set("k", "v")
    assert peer.get("k") == b"v"
    assert client.run(_served, port) == {w: w == workers[0] for w in workers}


def _serve_nothing():
    """On a worker: a torch whose store cannot serve port 0 (it reports port 0), as an old one might."""
    import torch.distributed as dist

    from dask_estimators.engine.ddp import collective

    class NoPort:
        port = 0

        def __init__(self, *a, **k):
            pass

    real, dist.TCPStore = dist.TCPStore, NoPort
    try:
        return collective._identity_and_port("me", "127.0.0.1", 5.0, dask_worker=type("W", (), {"address": "me"}))
    finally:
        dist.TCPStore = real


def _unserved(on):
    """On a worker: its identity round serves no store (``on``), or serves again (its original function)."""
    from dask_estimators.engine.ddp import collective

    if not on:  # how many servers it took away
        patched = collective._identity_and_port
        collective._identity_and_port = patched.original
        return patched.taken

    def unserved(rank0, host, timeout=120.0, dask_worker=None):
        ident, port, served = unserved.original(rank0, host, timeout, dask_worker=dask_worker)
        if served:
            collective._SERVED.pop(port)  # the server goes: rank 0 serves the port itself
            unserved.taken += 1
        return ident, port, False

    unserved.original, unserved.taken = collective._identity_and_port, 0
    collective._identity_and_port = unserved


def test_where_no_store_can_be_served_a_free_port_is_named_and_rank_zero_serves_it(client, two_ranks):
    w = sorted(client.nthreads())[0]
    ident, port, served = client.run(_serve_nothing, workers=[w])[w]
    assert isinstance(port, int) and port > 0 and served is False
    assert client.run(_served, port, workers=[w]) == {w: False}
    client.run(_unserved, True)
    try:  # the ranks then start as before: rank 0 makes its store, the others look for it first
        assert run_collective(two_ranks, _sum_ranks) == [[3.0] * 3] * 2
    finally:
        taken = client.run(_unserved, False)
    assert sum(taken.values()) == 1  # rank 0's worker's server, taken away before the ranks started


def test_a_store_no_rank_takes_is_dropped_after_its_timeout(client):
    workers = sorted(client.nthreads())
    host = get_address_host(workers[0])
    first = client.run(_identity_and_port, workers[0], host, 0.5, workers=[workers[0]])[workers[0]][1]
    time.sleep(0.6)
    second = client.run(_identity_and_port, workers[0], host, 30.0, workers=[workers[0]])[workers[0]][1]
    assert client.run(_served, first, workers=[workers[0]]) == {workers[0]: False}  # expired at the second call
    assert client.run(_served, second, workers=[workers[0]]) == {workers[0]: True}


def _report_epochs(shard, comm, n):
    for k in range(n + comm.rank):  # rank 1 sends one more than rank 0
        comm.report({"rank": comm.rank, "k": k})
    return n


def test_every_event_reaches_the_client_once_in_the_order_sent(two_ranks):
    """A rank's events go through the scheduler: the first may come before the scheduler has the client's
    subscription, and the last after the ranks' results.  Every run hands each one on, each rank's in order,
    before it returns; run back to back, with events sent at once by both ranks."""
    for n in (1, 3, 8):
        for _ in range(5):
            seen = []
            out = run_collective(two_ranks, _report_epochs, n, on_event=seen.append)
            assert out == [n, n]
            for rank in (0, 1):
                assert [m["k"] for m in seen if m["rank"] == rank] == list(range(n + rank))
            assert len(seen) == 2 * n + 1
            assert all("_seq" not in m and "_rank" not in m for m in seen)


def test_events_come_out_in_order_and_the_missing_ones_from_the_schedulers_log():
    from dask_estimators.engine.ddp.collective import _Events

    seen = []
    ev = _Events(seen.append)
    ev((0.0, {"_rank": 0, "_seq": 2, "v": "c"}))  # early: waits for 0 and 1
    ev((0.0, {"_rank": 0, "_seq": 1, "v": "b"}))
    ev((0.0, {"_rank": 1, "_seq": 0, "v": "x"}))  # another rank's first: its own numbering, handed on at once
    assert seen == [{"v": "x"}]

    class Log:  # the scheduler's log of the topic: every message sent, 0 among them
        calls = 0

        def get_events(self, topic):
            self.calls += 1
            return tuple((0.0, {"_rank": 0, "_seq": k, "v": "abcd"[k]}) for k in range(4)) + (
                (0.0, {"_rank": 1, "_seq": 0, "v": "x"}), (0.0, {"_rank": 1, "_seq": 1, "v": "y"}))

    log = Log()
    ev.complete(log, "t", (4, 2))
    assert [m["v"] for m in seen] == ["x", "a", "b", "c", "d", "y"] and log.calls == 1
    ev((0.0, {"_rank": 0, "_seq": 3, "v": "d"}))  # a late copy of one handed on already is dropped
    assert len(seen) == 6


def test_a_listening_socket_is_seen_in_the_kernels_table():
    from dask_estimators.engine.ddp.collective import _listening_here, _wait_listening

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not _listening_here(port)  # bound, not listening
        s.listen()
        assert _listening_here(port)
        _wait_listening("127.0.0.1", port, 5.0, local=True)  # returns at once
    assert not _listening_here(port)


def test_a_scheduler_that_cannot_be_asked_for_the_missing_events_ends_the_wait():
    from dask_estimators.engine.ddp.collective import _Events

    seen = []

    class Gone:
        def get_events(self, topic):
            raise OSError("Timed out trying to connect")

    ev = _Events(seen.append)
    ev((0.0, {"_rank": 0, "_seq": 0, "v": "a"}))
    ev.complete(Gone(), "t", (3,))  # returns at once: the records come with the results
    assert [m["v"] for m in seen] == ["a"]


def _alone(shard, comm):
    import torch
    import torch.distributed as dist

    from dask_estimators.engine.ddp import _shm_allreduce

    with process_group(comm, teardown_behind=True) as store:
        t = torch.full((3,), 2.0)
        dist.all_reduce(t)
        ar = _shm_allreduce.create(comm.rank, comm.world_size, 64, comm.timeout, store=store)
        try:
            u = torch.arange(3.0)
            same = ar.allreduce_(u) is u and u.tolist() == [0.0, 1.0, 2.0]
            ar.barrier()  # alone: returns at once
        finally:
            ar.close()
        return comm.world_size, comm.port, type(store).__name__, t.tolist(), same


def test_a_single_rank_needs_no_identity_round_and_no_store_server(client, monkeypatch):
    """One shard: no workers to name, no port; the group's store is in the rank's process (a HashStore), and
    its shared-memory sums return at once."""
    import numpy as np

    from dask_estimators.engine import place

    rounds = []
    real = type(client).run
    monkeypatch.setattr(type(client), "run", lambda self, fn, *a, **k: rounds.append(fn) or real(self, fn, *a, **k))
    with place(client, {"X": np.zeros((4, 1))}, workers=sorted(client.nthreads())[:1]) as p:
        assert len(p.shards) == 1
        assert run_collective(p, _alone) == [(1, None, "HashStore", [2.0] * 3, True)]
    assert _identity_and_port not in rounds
