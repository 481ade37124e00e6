"""Sparse X placed on the workers: scipy.sparse from the client and dask arrays of sparse blocks.

Every shard must hold its rows of X as a torch sparse CSR tensor (the shard
contract: canonical, int32 indices where they fit, float values), equal to the input's rows
exactly, and nothing of size n x p may ever be dense.  All tests run on the
session's real process-based LocalCluster (2 workers).  Worker functions are
module level so the workers can unpickle them.
"""

import functools
import importlib

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from dask_estimators.engine import place
from dask_estimators.engine.data._worker import CSRRows, Shard
from dask_estimators.estimators._base import _check_block
from sparse_guard import forbid_densify  # tests/sparse_guard.py

check_sparse = functools.partial(_check_block, y_numeric=True, multi_output=False, accept_sparse=True)
check_dense_only = functools.partial(_check_block, y_numeric=True, multi_output=False)


@pytest.fixture(scope="module", autouse=True)
def _warm_workers(client):
    client.run(importlib.import_module, "dask_estimators.engine.data._worker")


def _csr(n=3001, d=40, density=0.1, seed=0, fmt="csr"):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format=fmt, random_state=rng, dtype=np.float64)
    X.data = rng.normal(size=X.nnz)  # signed, none zero
    return X


# ----------------------------------------------------------------- worker functions
def _contents(shard):
    """The shard's X as its three NumPy arrays with the contract's facts, and y."""
    import torch

    from dask_estimators.objectives._sparse import csr_parts, is_sparse

    X = shard.get("X")
    data, indices, indptr = csr_parts(X)
    return {
        "sparse": is_sparse(X),
        "layout": str(X.layout),
        "shape": tuple(X.shape),
        "dtypes": (str(X.values().dtype), str(X.crow_indices().dtype), str(X.col_indices().dtype)),
        "device": str(X.device),
        "n_rows": shard.n_rows,
        "data": data.copy(), "indices": indices.copy(), "indptr": indptr.copy(),
        "y": None if shard.get("y") is None else shard.get("y").numpy().copy(),
        "sizeof": shard.__sizeof__(),
        "repr": repr(shard),
        "strided": X.layout == torch.strided,
    }


def _sums(shard):
    """Raw per-shard sums a linear model needs, from the CSR arrays: X^T y, column sums, sum of squares, rows."""
    from dask_estimators.objectives._sparse import csr_parts

    data, indices, indptr = csr_parts(shard.get("X"))
    y = shard.get("y").numpy()
    d = shard.get("X").shape[1]
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    xty = np.bincount(indices, weights=data * y[rows], minlength=d)
    colsum = np.bincount(indices, weights=data, minlength=d)
    return xty, colsum, float((data * data).sum()), shard.n_rows


def _gather(p):
    """Every shard's contents, and the global rows it holds."""
    return list(zip(p.map(_contents), p.row_ranges))


def _assert_rows_equal(X, y, found):
    X = sp.csr_matrix(X)
    X.sum_duplicates()
    for c, ranges in found:
        assert c["sparse"] and c["layout"] == "torch.sparse_csr" and not c["strided"]
        assert c["dtypes"] == ("torch.float64", "torch.int32", "torch.int32")
        assert c["device"] == "cpu"
        rows = np.concatenate([np.arange(a, b) for a, b in ranges])
        assert c["shape"] == (len(rows), X.shape[1]) and c["n_rows"] == len(rows)
        got = sp.csr_matrix((c["data"], c["indices"], c["indptr"]), shape=c["shape"])
        want = X[rows]
        np.testing.assert_array_equal(c["indptr"], want.indptr)
        np.testing.assert_array_equal(c["indices"], want.indices)  # canonical: sorted in each row
        np.testing.assert_array_equal(c["data"], want.data)
        assert (got != want).nnz == 0
        for i in range(len(rows)):  # sorted, no duplicates
            cols = c["indices"][c["indptr"][i] : c["indptr"][i + 1]]
            assert np.all(np.diff(cols) > 0)
        if y is not None:
            np.testing.assert_array_equal(c["y"], np.asarray(y)[rows])
        # memory accounting counts the stored arrays, not n x p
        stored = c["data"].nbytes + c["indices"].nbytes + c["indptr"].nbytes
        assert stored <= c["sizeof"] - (0 if y is None else c["y"].nbytes) <= stored + 200
        assert "csr nnz=" in c["repr"]


def _assert_sums(X, y, parts):
    X = sp.csr_matrix(X)
    xty = sum(p[0] for p in parts)
    np.testing.assert_allclose(xty, X.T @ y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sum(p[1] for p in parts), np.asarray(X.sum(axis=0)).ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sum(p[2] for p in parts), X.multiply(X).sum(), rtol=1e-12)
    assert sum(p[3] for p in parts) == X.shape[0]


# ----------------------------------------------------------------- the Shard itself
def test_shard_put_takes_scipy_torch_and_csr_rows():
    import torch

    X = _csr(50, 7, fmt="coo")
    want = X.tocsr()
    for a in (X, want, sp.csr_array(want), CSRRows.of(want, 0, 50),
              torch.sparse_csr_tensor(torch.from_numpy(want.indptr.astype(np.int64)),
                                      torch.from_numpy(want.indices.astype(np.int64)),
                                      torch.from_numpy(want.data), size=want.shape, check_invariants=False),
              torch.from_numpy(want.toarray()).to_sparse_coo()):
        s = Shard({"X": a, "y": np.arange(50.0)}, device="cpu")
        t = s.get("X")
        assert t.layout == torch.sparse_csr and s.n_rows == 50
        assert t.crow_indices().dtype == torch.int32 and t.col_indices().dtype == torch.int32
        got = sp.csr_matrix((t.values().numpy(), t.col_indices().numpy(), t.crow_indices().numpy()), shape=t.shape)
        assert (got != want).nnz == 0
        nbytes = sum(v.nbytes for v in (t.values().numpy(), t.col_indices().numpy(), t.crow_indices().numpy()))
        assert s.__sizeof__() == nbytes + 50 * 8 + 200
    # float32 values stay float32 (the models that fit in float32)
    s = Shard({"X": want.astype(np.float32)}, device="cpu")
    assert s.get("X").values().dtype == torch.float32


def test_shard_fixes_duplicates_and_unsorted_indices_without_touching_the_input():
    import torch

    # row 0: columns 3, 1, 3 (unsorted, a duplicate); row 1: column 0
    X = sp.csr_matrix((np.array([1.0, 2.0, 4.0, 5.0]), np.array([3, 1, 3, 0]), np.array([0, 3, 4])), shape=(2, 4))
    before = (X.data.copy(), X.indices.copy())
    s = Shard({"X": X}, device="cpu")
    t = s.get("X")
    assert t.col_indices().tolist() == [1, 3, 0] and t.values().tolist() == [2.0, 5.0, 5.0]
    np.testing.assert_array_equal(X.data, before[0])
    np.testing.assert_array_equal(X.indices, before[1])
    assert t.layout == torch.sparse_csr


def test_csr_rows_are_views_of_the_matrix():
    X = _csr(100, 9)
    part = CSRRows.of(X, 30, 70)
    assert np.shares_memory(part.data, X.data) and np.shares_memory(part.indices, X.indices)
    assert (part.to_scipy() != X[30:70]).nnz == 0
    both = CSRRows.concat([CSRRows.of(X, 0, 30), X[30:100]], 9)
    assert (both.to_scipy() != X).nnz == 0 and both.indices.dtype == both.indptr.dtype == np.int32


def test_indices_past_int32_are_int64():
    """More columns than int32 holds (never dense: two stored values): the shard keeps int64 indices."""
    import torch

    d = 2**31 + 5
    X = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, d - 1], dtype=np.int64), np.array([0, 1, 2])), shape=(2, d))
    for a in (X, CSRRows.concat([CSRRows.of(X, 0, 1), CSRRows.of(X, 1, 2)], d)):
        t = Shard({"X": a}, device="cpu").get("X")
        assert t.crow_indices().dtype == torch.int64 and t.col_indices().dtype == torch.int64
        assert t.col_indices().tolist() == [0, d - 1]


# ----------------------------------------------------------------- NumPy-side (client) sparse input
KINDS = ["csr", "csc", "coo", "csr_array", "unsorted-duplicates"]


def _input(kind, n=3001, d=40):
    X = _csr(n, d)
    if kind in ("csc", "coo"):
        return X.asformat(kind)
    if kind == "csr_array":
        return sp.csr_array(X)
    if kind == "unsorted-duplicates":  # every row's entries reversed, and each row's first entry split in two
        rows = []
        for i in range(X.shape[0]):
            a, b = X.indptr[i], X.indptr[i + 1]
            idx, val = X.indices[a:b][::-1], X.data[a:b][::-1]
            if len(idx):
                idx, val = np.append(idx, idx[0]), np.append(val * 1.0, 0.0)
                val[0] -= 0.25
                val[-1] = 0.25
            rows.append((idx, val))
        indptr = np.concatenate([[0], np.cumsum([len(r[0]) for r in rows])])
        out = sp.csr_matrix((np.concatenate([r[1] for r in rows]), np.concatenate([r[0] for r in rows]), indptr),
                            shape=X.shape)
        assert not out.has_canonical_format
        return out
    return X


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_numpy_side_sparse_shards_hold_the_input_rows(client, kind, shared_memory):
    X = _input(kind)
    y = np.random.default_rng(1).normal(size=X.shape[0])
    with dask.config.set({"dask-estimators.shared-memory": shared_memory}):
        with place(client, {"X": X, "y": y}) as p:
            assert len(p.shards) == 2 and p.n_samples == X.shape[0]
            found = _gather(p)
            _assert_rows_equal(X, y, found)
            _assert_sums(X, y, p.map(_sums))
            if shared_memory and X.nnz * 8 >= (1 << 16):
                assert p._buffers  # the large arrays went through the client's shared memory


def test_numpy_side_sparse_parts_are_not_copied_on_the_client(client, monkeypatch):
    """The client cuts canonical CSR into views: the rows are never gathered into new nnz-sized arrays."""
    from dask_estimators.engine.data import placement as pl

    X = _csr()
    seen = []
    original = pl._rows_part

    def spy(a, start, stop):
        out = original(a, start, stop)
        seen.append(out)
        return out

    monkeypatch.setattr(pl, "_rows_part", spy)
    y = np.zeros(X.shape[0])
    with place(client, {"X": X, "y": y}) as p:
        _assert_rows_equal(X, y, _gather(p))
    parts = [s for s in seen if isinstance(s, CSRRows)]
    assert len(parts) == 2
    assert all(np.shares_memory(s.data, X.data) and np.shares_memory(s.indices, X.indices) for s in parts)


# ----------------------------------------------------------------- dask arrays of sparse blocks
def _dask_sparse(kind, X):
    if kind == "from_array":
        return da.from_array(X, chunks=(500, X.shape[1]), asarray=False)
    if kind == "map_blocks":  # dense blocks made sparse in the graph (the meta is sparse too)
        return da.from_array(X.toarray(), chunks=(700, X.shape[1])).map_blocks(
            sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0)))
    if kind == "coo-blocks":
        return da.from_array(X, chunks=(400, X.shape[1]), asarray=False).map_blocks(
            lambda b: b.tocoo(), dtype=X.dtype, meta=sp.coo_matrix((0, 0)))
    if kind == "column-chunks":  # chunked along the columns: joined as sparse before the shards are built
        return da.from_array(X, chunks=(600, 15), asarray=False)
    if kind == "unknown-chunks":
        a = da.from_array(X, chunks=(800, X.shape[1]), asarray=False)
        return a.map_blocks(lambda b: b, dtype=X.dtype, chunks=((np.nan,) * a.numblocks[0], (X.shape[1],)),
                            meta=sp.csr_matrix((0, 0)))
    raise ValueError(kind)


DASK_KINDS = ["from_array", "map_blocks", "coo-blocks", "column-chunks", "unknown-chunks"]


@pytest.mark.parametrize("kind", DASK_KINDS)
def test_dask_sparse_blocks_make_csr_shards(client, kind):
    X = _csr()
    y = np.random.default_rng(2).normal(size=X.shape[0])
    Xd = _dask_sparse(kind, X)
    yd = da.from_array(y, chunks=1000)  # partitioned differently from X
    with place(client, {"X": Xd, "y": yd}, check=check_sparse) as p:
        assert p.n_samples == X.shape[0]
        _assert_rows_equal(X, y, _gather(p))
        _assert_sums(X, y, p.map(_sums))


def test_dask_sparse_blocks_without_check_stay_sparse(client):
    X = _csr(1200, 30)
    y = np.arange(1200.0)
    with place(client, {"X": da.from_array(X, chunks=(300, 30), asarray=False),
                        "y": da.from_array(y, chunks=300)}) as p:
        _assert_rows_equal(X, y, _gather(p))


def test_dask_sparse_blocks_with_duplicates_are_made_canonical(client):
    X = _input("unsorted-duplicates", 1500, 25)
    y = np.ones(1500)
    with place(client, {"X": da.from_array(X, chunks=(400, 25), asarray=False), "y": da.from_array(y, chunks=400)},
               check=check_sparse) as p:
        _assert_rows_equal(X, y, _gather(p))


# ----------------------------------------------------------------- bad input, checked where it is
def test_nan_in_sparse_data_raises_on_the_numpy_path():
    import dask_estimators as de

    X = _csr(200, 10)
    X.data[17] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        de.LinearRegression().fit(X, np.ones(200))
    X.data[17] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        de.LinearRegression().fit(X, np.ones(200))


def _is_on_worker():
    from distributed import get_worker

    get_worker()  # raises outside a worker
    return True


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_in_a_sparse_block_raises_on_its_worker(client, bad):
    X = _csr(1200, 30)
    X.data[X.indptr[1000]] = bad  # in the third block
    Xd = da.from_array(X, chunks=(400, 30), asarray=False)
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)") as info:
        place(client, {"X": Xd, "y": da.from_array(np.ones(1200), chunks=400)}, check=check_sparse)
    # raised by the check in the task that built the shard, on a worker, and raised again here as it is: once,
    # without the worker's traceback (the task's InputRejected)
    assert type(info.value) is ValueError
    assert not any("build_shard" in str(e.name) for e in info.traceback)


def test_sparse_blocks_for_a_dense_only_check_raise_scikit_learns_error(client):
    X = _csr(600, 10)
    with pytest.raises(TypeError, match="Sparse data was passed for X, but dense data is required"):
        place(client, {"X": da.from_array(X, chunks=(300, 10), asarray=False),
                       "y": da.from_array(np.ones(600), chunks=300)}, check=check_dense_only)


def test_mixed_sparse_and_dense_blocks_raise(client):
    X = _csr(600, 10)
    Xd = da.from_array(X, chunks=(100, 10), asarray=False)
    # the first shard's rows (0-300) come from a sparse block and a dense one
    mixed = da.concatenate([Xd[:100], da.from_array(X[100:].toarray(), chunks=(500, 10))], axis=0)
    with pytest.raises(ValueError, match="mix sparse and dense"):
        place(client, {"X": mixed, "y": da.from_array(np.ones(600), chunks=600)})


# ----------------------------------------------------------------- nothing is ever dense


@pytest.fixture
def no_dense(client):
    client.run(forbid_densify, True)
    forbid_densify(True)
    try:
        yield
    finally:
        forbid_densify(False)
        client.run(forbid_densify, False)


def test_forbid_dense_does_forbid(no_dense, client):
    X = _csr(10, 5)
    with pytest.raises(AssertionError, match="toarray"):
        X.toarray()
    with pytest.raises(AssertionError, match="to_dense"):
        Shard({"X": X}, device="cpu").get("X").to_dense()
    assert all(client.run(_raises_on_worker).values())


def _raises_on_worker():
    try:
        sp.csr_matrix(np.eye(2)).toarray()
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("container", ["numpy", "dask"])
def test_placement_never_densifies(no_dense, client, container):
    # 4000 x 2^22: 134 GB if densified anywhere, a few hundred kB as CSR
    n, d = 4000, 1 << 22
    rng = np.random.default_rng(3)
    indptr = np.arange(n + 1) * 5
    indices = np.sort(rng.integers(0, d, (n, 5)), axis=1)
    X = sp.csr_matrix((rng.normal(size=n * 5), indices.ravel(), indptr), shape=(n, d))
    X.sum_duplicates()
    y = rng.normal(size=n)
    if container == "dask":
        X_in, y_in = da.from_array(X, chunks=(1000, d), asarray=False), da.from_array(y, chunks=1000)
    else:
        X_in, y_in = X, y
    with place(client, {"X": X_in, "y": y_in}, check=check_sparse) as p:
        _assert_sums(X, y, p.map(_sums))
        sizes = p.map(lambda s: s.__sizeof__())
    assert sum(sizes) < 50 * X.nnz  # O(nnz + n) per shard, not O(n * p)


def test_a_shard_pickles_and_moves_as_sparse():
    import pickle

    import torch

    s = Shard({"X": _csr(30, 6), "y": np.zeros(30)}, device="cpu")
    t = pickle.loads(pickle.dumps(s)).get("X")
    assert t.layout == torch.sparse_csr
    assert torch.equal(t.crow_indices(), s.get("X").crow_indices())
    if torch.cuda.is_available():  # pragma: no cover - only on a GPU machine
        g = Shard({"X": _csr(30, 6)}, device="cuda").get("X")
        assert g.layout == torch.sparse_csr and g.device.type == "cuda"
