"""Same-host placement through /dev/shm gives the same shards as scatter, and leaves no files behind."""

import os

import dask
import numpy as np
import pytest

from dask_estimators.engine import DistributedEvaluator, _shm, is_aligned, place


def _sums(shard, w):
    X, y = shard.get("X"), shard.get("y")
    return (X.T @ (y * w[0])), float(y.sum()), float(shard.n_rows)


def _layout(shard):
    X = shard.get("X")
    return is_aligned(X), bool(X.numpy().flags.writeable), X.numpy().base is not None


def _files():
    return {f for f in os.listdir(_shm.SHM_DIR) if f.startswith("dask-estimators-")} if os.path.isdir(_shm.SHM_DIR) else set()


@pytest.mark.skipif(not _shm._available(), reason="no writable /dev/shm")
def test_shared_memory_and_scatter_agree(client, rng):
    X = rng.normal(size=(20_000, 8))  # above MIN_BYTES, so X travels through /dev/shm
    y = rng.normal(size=20_000)
    before = _files()
    results = {}
    for shm in (True, False):
        with dask.config.set({"dask-estimators.shared-memory": shm}):
            with place(client, {"X": X, "y": y}) as p:
                assert p.n_samples == 20_000
                assert all(a for a, _, _ in p.map(_layout))
                results[shm] = DistributedEvaluator(p)(_sums, np.array([2.0]))
                assert _files() == before  # unlinked once the shards were built
    expected = (X.T @ (2.0 * y), y.sum(), 20_000.0)
    for shm, got in results.items():
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_write_read_roundtrip(rng):
    if not _shm._available():
        pytest.skip("no writable /dev/shm")
    a = rng.normal(size=(300, 50))
    h = _shm.write(a)
    try:
        b = _shm.read(h)
        np.testing.assert_array_equal(a, b)
        assert b.ctypes.data % 64 == 0 and b.flags.writeable
    finally:
        _shm.unlink(h)
    assert not os.path.exists(h.path)
    with pytest.raises(_shm.NotShared):
        _shm.read(h)
