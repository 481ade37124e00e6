"""Same-host placement through the client's shared memory gives the same shards as scatter, leaves no files
behind, and reuses the memory of released placements only."""

import dataclasses
import os

import dask
import numpy as np
import pytest

from dask_estimators.engine import DistributedEvaluator, is_aligned, place
from dask_estimators.engine.data import _shm


def _sums(shard, w):
    X, y = shard.get("X"), shard.get("y")
    return (X.T @ (y * w[0])), float(y.sum()), float(shard.n_rows)


def _layout(shard):
    X = shard.get("X")
    return is_aligned(X), bool(X.numpy().flags.writeable), X.numpy().base is not None


def _files():
    return {f for f in os.listdir(_shm.SHM_DIR) if f.startswith("dask-estimators-")} if os.path.isdir(_shm.SHM_DIR) else set()


@pytest.mark.skipif(not _shm._memfd_available(), reason="no memfd")
def test_shared_memory_and_scatter_agree(client, rng):
    X = rng.normal(size=(20_000, 8))  # above MIN_BYTES, so X travels through shared memory
    y = rng.normal(size=20_000)
    before = _files()
    results = {}
    for shm in (True, False):
        with dask.config.set({"dask-estimators.shared-memory": shm}):
            with place(client, {"X": X, "y": y}) as p:
                assert p.n_samples == 20_000
                assert all(a for a, _, _ in p.map(_layout))
                results[shm] = DistributedEvaluator(p)(_sums, np.array([2.0]))
                assert _files() == before  # memfds: no file in /dev/shm at any time
    expected = (X.T @ (2.0 * y), y.sum(), 20_000.0)
    for shm, got in results.items():
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_write_read_roundtrip_and_pooling(rng):
    if not _shm._memfd_available():
        pytest.skip("no memfd")
    a = rng.normal(size=(300, 50))
    h = _shm.write(a)
    b = _shm.read(h)
    np.testing.assert_array_equal(a, b)
    assert b.ctypes.data % 64 == 0 and b.flags.writeable
    assert h.path in _shm._in_use
    _shm.release(h)
    assert h.path not in _shm._in_use
    # about the same size (within SLACK): the next write takes the same memory, and overwrites it
    c = rng.normal(size=(290, 50))
    h2 = _shm.write(c)
    assert h2.path == h.path
    np.testing.assert_array_equal(_shm.read(h2), c)
    _shm.release(h2)
    # much smaller: a memfd of its own
    h3 = _shm.write(np.ones(10))
    assert h3.path != h.path
    _shm.release(h3)
    with pytest.raises(_shm.NotShared):
        _shm.read(_shm.Handle("/proc/self/fd/999999", (3,), "<f8"))


def _mapped_sum(shard):
    return float(shard.get("X").sum())


@pytest.mark.skipif(not _shm._memfd_available(), reason="no memfd")
def test_placements_reuse_the_client_memory_only_once_released(client, rng):
    """A placement holds its memory until it is released; the next one of the same size then writes into it."""
    X1, X2 = rng.normal(size=(20_000, 8)), rng.normal(size=(20_000, 8))
    p1 = place(client, {"X": X1})
    paths1 = {h["X"].path for h in p1._buffers}
    assert len(paths1) == 2 and paths1 <= set(_shm._in_use)
    with place(client, {"X": X2}) as p2:  # p1 still holds its memory: p2 gets other memfds
        assert paths1.isdisjoint(h["X"].path for h in p2._buffers)
        assert sum(p1.map(_mapped_sum)) == pytest.approx(X1.sum(), rel=1e-12)
        assert sum(p2.map(_mapped_sum)) == pytest.approx(X2.sum(), rel=1e-12)
    p1.release()
    assert p1._buffers == [] and paths1.isdisjoint(_shm._in_use)
    with place(client, {"X": X2}) as p3:  # released memory is taken again, and holds the new rows
        assert {h["X"].path for h in p3._buffers} & paths1
        assert sum(p3.map(_mapped_sum)) == pytest.approx(X2.sum(), rel=1e-12)


@pytest.mark.skipif(not _shm._memfd_available(), reason="no memfd")
def test_a_placement_never_released_gives_its_memory_back_when_collected(client, rng):
    import gc

    p = place(client, {"X": rng.normal(size=(20_000, 8))})
    paths = {h["X"].path for h in p._buffers}
    assert paths <= set(_shm._in_use)
    p.shards, p.actors, p._actor_futures = [], [], []  # drop the futures without release()
    del p
    gc.collect()
    assert paths.isdisjoint(_shm._in_use)


def test_a_handle_from_another_host_is_not_mapped():
    # /proc/<pid>/fd/<fd> names the writer's memfd only in its own pid namespace: elsewhere the same path may be
    # another process's file, so a handle is mapped only where the writer's host token is this process's
    a = np.arange(_shm.MIN_BYTES // 8 + 1, dtype=np.float64)
    h = _shm.write(a)
    assert h is not None
    try:
        np.testing.assert_array_equal(_shm.read(h), a)
        for token in (None, h.token + ":another-namespace"):
            with pytest.raises(_shm.NotShared, match="not visible"):
                _shm.read(dataclasses.replace(h, token=token))
    finally:
        _shm.release(h)


@pytest.mark.skipif(not _shm._memfd_available(), reason="no memfd")
@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_a_worker_that_cannot_open_the_memory_gets_the_bytes(client, rng, monkeypatch, transport):
    """A worker the client takes for one of its host's, but which cannot open the client's memory (here: its
    handles name another pid namespace), gets its part over the network; the shards are the data."""
    from dask_estimators.engine.data import placement

    real = _shm.write
    written = []

    def elsewhere(a):
        h = real(a)
        written.append(h)
        return None if h is None else dataclasses.replace(h, token=h.token + ":another-namespace")

    monkeypatch.setattr(_shm, "write", elsewhere)
    sent = []
    scatter = placement._scatter_part
    monkeypatch.setattr(placement, "_scatter_part", lambda *a: sent.append(a[2]) or scatter(*a))
    X = rng.normal(size=(20_000, 8))  # above MIN_BYTES: X is written to the client's memory first
    y = rng.normal(size=20_000)
    with place(client, {"X": X, "y": y}, transport=transport) as p:
        assert written and sorted(sent) == sorted(p.workers) and len(p.workers) >= 2
        assert p._buffers == []  # no worker maps the client's memory
        got = DistributedEvaluator(p)(_sums, np.array([1.0]))
    np.testing.assert_allclose(got[0], X.T @ y, rtol=1e-12)
    assert {h.path for h in written}.isdisjoint(_shm._in_use)  # the memory went back to the pool


def test_scattered_parts_are_sent_at_once(client, rng, monkeypatch):
    """Without shared memory (other hosts) the parts go to their workers concurrently, not one after the other.

    Each send waits at a barrier for the other: sent in turn, the first would wait alone and break it.
    """
    import threading

    from dask_estimators.engine.data import placement

    n_workers = len(client.nthreads())
    assert n_workers >= 2
    barrier = threading.Barrier(n_workers, timeout=30)
    real = placement._scatter_part
    calls = []

    def meeting(*args):
        calls.append(threading.current_thread().name)
        barrier.wait()  # raises BrokenBarrierError after 30 s if the sends run in turn
        return real(*args)

    monkeypatch.setattr(placement, "_scatter_part", meeting)
    X = rng.normal(size=(1000, 4))
    y = X @ np.arange(4.0)
    with dask.config.set({"dask-estimators.shared-memory": False}):
        with place(client, {"X": X, "y": y}) as p:
            assert len(calls) == n_workers == len(p.shards)
            got = DistributedEvaluator(p)(_sums, np.array([1.0]))
    np.testing.assert_allclose(got[0], X.T @ y, rtol=1e-12)


def _rows_and_dtypes(shard):
    return shard.get("X").numpy().copy(), shard.get("y").numpy().copy(), shard.dtypes["y"].name, _layout(shard)


def test_large_parts_travel_in_pieces_and_make_the_same_shards(client, rng, monkeypatch, spread):
    """Across hosts a part of more than two pieces' bytes goes as several messages, copied in as they come."""
    from dask_estimators import LogisticRegression
    from dask_estimators.engine.data import placement

    X = rng.normal(size=(3001, 7))
    y = (X[:, 0] > 0).astype(np.int32)
    with dask.config.set({"dask-estimators.keep-placed": 0}):  # not kept: the fit below places it anew
        reference = LogisticRegression(client=client).fit(X, y)
    pieces = []
    real = placement._send_in_pieces

    def counting(client_, part, w, device):
        pieces.append(-(-sum(a.nbytes for a in part.values()) // placement.PIECE_BYTES))
        return real(client_, part, w, device)

    monkeypatch.setattr(placement, "PIECE_BYTES", 4096)  # about 70 rows a piece
    monkeypatch.setattr(placement, "_send_in_pieces", counting)
    with dask.config.set({"dask-estimators.shared-memory": False}):
        with place(client, {"X": X, "y": y}) as p:
            got = p.map(_rows_and_dtypes)
        assert len(pieces) == len(got) and min(pieces) > 10
        np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), X)
        np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), y)
        assert {g[2] for g in got} == {"int32"}  # the label dtype the client gave, as one message keeps it
        assert all(aligned and writeable for aligned, writeable, _ in (g[3] for g in got))
        est = LogisticRegression(client=client).fit(X, y)
    assert len(pieces) == 2 * len(got)
    np.testing.assert_array_equal(est.coef_, reference.coef_)
    np.testing.assert_array_equal(est.classes_, reference.classes_)


def test_a_part_with_labels_or_small_goes_as_one_message(rng):
    from dask_estimators.engine.data import placement

    big = rng.normal(size=(2 * placement.PIECE_BYTES // 8 + 1,))
    assert placement._in_pieces({"X": big})
    assert not placement._in_pieces({"X": big[:1000]})
    assert not placement._in_pieces({"X": big, "y": np.array(["a"] * big.size)})  # labels: the one-message path
