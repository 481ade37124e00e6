"""Placement: every input type ends up as one aligned shard per worker, rows aligned.

All tests run on the session's real process-based LocalCluster (2 workers).
Kernels and shard functions are module level so the workers can unpickle them.
"""

import functools
import importlib
import gc
import time

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_estimators.engine import DistributedEvaluator, Placement, is_aligned, is_dask_collection, place
from dask_estimators.estimators._base import _check_block

TRANSPORTS = ["actors", "tasks"]
KINDS = ["numpy", "numpy-large", "pandas", "dask-known", "dask-unknown-mask", "dask-unknown-ddf", "dask-dataframe"]
CHUNKS7 = (30, 11, 45, 7, 52, 19, 47)  # 7 uneven row chunks, 211 rows
N, P = sum(CHUNKS7), 4
N_LARGE = 5003  # X parts above the engine's 64 KiB threshold: same-host placement through /dev/shm

check_regression = functools.partial(_check_block, y_numeric=True, multi_output=False)


@pytest.fixture(scope="module", autouse=True)
def _warm_workers(client):
    """Import the engine on every worker at once (it pulls in torch and scikit-learn)."""
    client.run(importlib.import_module, "dask_estimators.engine.data._worker")


# ----------------------------------------------------------------- worker functions
def _moments(shard):
    """Raw sums a linear model needs: X^T (s y), sum s y^2, sum s, rows."""
    X, y, s = shard.get("X"), shard.get("y"), shard.get("sample_weight")
    if s is None:
        s = y * 0 + 1
    return X.T @ (y * s), (s * y * y).sum(), s.sum(), shard.n_rows


def _layout(shard):
    """Per array: (aligned and C-contiguous, contiguous, dtype, rows)."""
    return {
        name: (is_aligned(a), bool(a.is_contiguous()), str(a.dtype), int(a.shape[0]))
        for name, a in ((name, shard.get(name)) for name in shard.data)
    }


def _rows(shard):
    """The shard's rows as one matrix [X | y | sample_weight] (to check row alignment)."""
    cols = [shard.get("X").reshape(shard.n_rows, -1), shard.get("y").reshape(-1, 1)]
    if shard.get("sample_weight") is not None:
        cols.append(shard.get("sample_weight").reshape(-1, 1))
    import torch

    return torch.cat(cols, dim=1)


def _held(keys, dask_worker=None):
    """Which of ``keys`` this worker holds, in memory or as actors."""
    return sorted(str(k) for k in keys if k in dask_worker.data or k in dask_worker.state.actors)


def _actor_shards(keys, dask_worker=None):
    """For each of ``keys`` that is an actor here: does it still hold a shard?"""
    actors = dask_worker.state.actors
    return {str(k): getattr(actors[k], "shard", None) is not None for k in keys if k in actors}


def _all_keys(dask_worker=None):
    return sorted(str(k) for k in list(dask_worker.data) + list(dask_worker.state.actors))


# ----------------------------------------------------------------------- helpers
def _data(rng, n=N, weighted=True):
    X = rng.standard_normal((n, P))
    y = rng.standard_normal(n)
    sw = rng.uniform(0.1, 2.0, n) if weighted else None
    return X, y, sw


def _expected(X, y, sw):
    s = np.ones(len(y)) if sw is None else sw
    return X.T @ (y * s), float((s * y * y).sum()), float(s.sum()), len(y)


def _inputs(kind, X, y, sw):
    """(arrays passed to place, the NumPy X, y, sw they hold)."""
    if kind in ("numpy", "numpy-large"):
        return {"X": X, "y": y, "sample_weight": sw}, (X, y, sw)
    if kind == "pandas":  # estimators convert pandas with np.asarray before placing
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(P)], index=np.arange(len(y))[::-1] * 3)
        ys = pd.Series(y, index=df.index)
        sws = None if sw is None else pd.Series(sw, index=df.index)
        arrays = {"X": np.asarray(df), "y": np.asarray(ys), "sample_weight": None if sws is None else np.asarray(sws)}
        return arrays, (X, y, sw)
    if kind == "dask-known":
        # X: 7 uneven row chunks and 2 column blocks; y and sw chunked differently (rechunked to X's rows)
        dX = da.from_array(X, chunks=(CHUNKS7, (2, P - 2)))
        dy = da.from_array(y, chunks=(100, 100, 11))
        dsw = None if sw is None else da.from_array(sw, chunks=(50,))
        return {"X": dX, "y": dy, "sample_weight": dsw}, (X, y, sw)
    if kind == "dask-unknown-mask":
        keep = y > -0.5
        dX = da.from_array(X, chunks=(CHUNKS7, P))
        dy = da.from_array(y, chunks=(CHUNKS7,))
        dm = dy > -0.5
        dsw = None if sw is None else da.from_array(sw, chunks=(CHUNKS7,))[dm]
        arrays = {"X": dX[dm], "y": dy[dm], "sample_weight": dsw}
        assert np.isnan(arrays["X"].shape[0])
        return arrays, (X[keep], y[keep], None if sw is None else sw[keep])
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(P)])
    df["y"] = y
    if sw is not None:
        df["w"] = sw
    ddf = dd.from_pandas(df, npartitions=7)
    cols = [f"f{j}" for j in range(P)]
    if kind == "dask-unknown-ddf":
        arrays = {
            "X": ddf[cols].to_dask_array(),
            "y": ddf["y"].to_dask_array(),
            "sample_weight": None if sw is None else ddf["w"].to_dask_array(),
        }
        assert np.isnan(arrays["X"].chunks[0]).all()
        return arrays, (X, y, sw)
    assert kind == "dask-dataframe"
    return {"X": ddf[cols], "y": ddf["y"], "sample_weight": None if sw is None else ddf["w"]}, (X, y, sw)


def _assert_moments(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-10)
    assert got[1] == pytest.approx(want[1], rel=1e-10)
    assert got[2] == pytest.approx(want[2], rel=1e-10)
    assert got[3] == want[3]


def _poll(fn, timeout=120.0):
    """fn() until it is truthy or the timeout passes; returns the last value (no timing is asserted)."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


# ------------------------------------------------------------------------- tests
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "unweighted"])
@pytest.mark.parametrize("kind", KINDS)
def test_sum_over_shards_equals_whole_data(client, rng, kind, weighted, transport):
    X, y, sw = _data(rng, n=N_LARGE if kind == "numpy-large" else N, weighted=weighted)
    arrays, (Xe, ye, swe) = _inputs(kind, X, y, sw)
    with place(client, arrays, transport=transport) as p:
        assert isinstance(p, Placement)
        assert p.transport == transport
        assert p.n_samples == len(ye)
        assert sum(p.n_rows) == len(ye) and all(n > 0 for n in p.n_rows)
        assert len(p.shards) == len(p.workers) <= 2
        assert len(set(p.workers)) == len(p.workers)  # one shard per worker
        assert set(p.workers) <= set(client.ncores())  # asked now: the cached scheduler_info may predate a restart
        got = DistributedEvaluator(p)(_moments)
        layouts = p.map(_layout)
        rows = p.map(_rows)
    _assert_moments(got, _expected(Xe, ye, swe))

    # every shard array is a 64-byte aligned, C-contiguous float64 buffer with the shard's rows
    names = {"X", "y"} | ({"sample_weight"} if weighted else set())
    assert len(layouts) == len(p.n_rows)
    for layout, n in zip(layouts, p.n_rows):
        assert set(layout) == names
        for name, (aligned, contiguous, dtype, n_rows) in layout.items():
            assert aligned, f"{name} is not 64-byte aligned and C-contiguous on its worker"
            assert contiguous
            assert dtype == "torch.float64"
            assert n_rows == n

    # every row of [X | y | sw] is on exactly one worker, and the arrays stay row-aligned
    got_rows = np.concatenate(rows, axis=0)
    want_rows = np.column_stack([Xe, ye] + ([swe] if weighted else []))
    assert got_rows.shape == want_rows.shape
    order = lambda a: a[np.lexsort(a.T[::-1])]  # noqa: E731
    np.testing.assert_array_equal(order(got_rows), order(want_rows))


def test_numpy_split_keeps_row_order(client, rng):
    X, y, sw = _data(rng, n=101)
    with place(client, {"X": X, "y": y, "sample_weight": sw}, transport="tasks") as p:
        rows = p.map(_rows)
        assert len(p.shards) == 2
    np.testing.assert_array_equal(np.concatenate(rows), np.column_stack([X, y, sw]))


def test_pandas_dataframe_and_series_as_numpy(client, rng):
    """The path estimators take: pandas -> np.asarray -> place, also with an odd index."""
    X, y, sw = _data(rng)
    df = pd.DataFrame(X, index=pd.RangeIndex(1000, 1000 + N))
    arrays = {"X": np.asarray(df), "y": np.asarray(pd.Series(y, index=df.index)), "sample_weight": sw}
    with place(client, arrays, transport="tasks") as p:
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fewer_rows_than_workers(client, rng, n):
    X, y, sw = _data(rng, n=n)
    with place(client, {"X": X, "y": y, "sample_weight": sw}) as p:
        assert p.n_samples == n
        assert len(p.shards) == min(n, 2)
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))


def test_workers_argument_restricts_placement(client, rng):
    X, y, sw = _data(rng)
    w0 = sorted(client.ncores())[0]
    with place(client, {"X": X, "y": y, "sample_weight": sw}, workers=[w0]) as p:
        assert p.workers == [w0]
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))


@pytest.mark.parametrize("as_dask", [False, True])
def test_a_callable_workers_argument_gets_the_row_count(client, rng, as_dask):
    """``workers=`` as a callable: called with the number of rows (for dask input of unknown length, once they are
    counted), and the data goes where it says; None there means all workers."""
    X, y, sw = _data(rng)
    w0 = sorted(client.ncores())[0]
    asked = []

    def choose(n_rows):
        asked.append(n_rows)
        return [w0] if len(asked) == 1 else None

    arrays = {"X": X, "y": y, "sample_weight": sw}
    if as_dask:  # row blocks of unknown length, as a dataframe's values are
        arrays = {k: dd.from_pandas(pd.DataFrame(v) if v.ndim == 2 else pd.Series(v), npartitions=3).to_dask_array()
                  for k, v in arrays.items()}
    with place(client, arrays, workers=choose) as p:
        assert p.workers == [w0] and p.n_samples == len(X)
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))
    with place(client, {"X": X, "y": y}, workers=choose) as p:  # None: every worker
        assert sorted(p.workers) == sorted(client.ncores())
    assert asked == [len(X), len(X)]


def test_is_dask_collection():
    X = np.ones((4, 2))
    assert not is_dask_collection(X)
    assert not is_dask_collection(pd.DataFrame(X))
    assert is_dask_collection(da.from_array(X))
    assert is_dask_collection(dd.from_pandas(pd.DataFrame(X), npartitions=2))
    assert is_dask_collection(dd.from_pandas(pd.Series(X[:, 0]), npartitions=2))


# ------------------------------------------------------------- mismatched inputs
def test_numpy_length_mismatch_raises(client, rng):
    X, y, sw = _data(rng)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        place(client, {"X": X, "y": y[:-1]})
    with pytest.raises(ValueError, match=rf"^sample_weight.shape == \({len(X) - 1},\), expected \({len(X)},\)!$"):
        place(client, {"X": X, "y": y, "sample_weight": sw[:-1]})


def test_dask_known_chunks_length_mismatch_raises(client, rng):
    X, y, _ = _data(rng)
    with pytest.raises(ValueError):
        place(client, {"X": da.from_array(X, chunks=(CHUNKS7, P)), "y": da.from_array(y[:-1], chunks=50)})


def test_dask_unknown_chunks_length_mismatch_raises(client, rng):
    X, y, _ = _data(rng)
    dX = da.from_array(X, chunks=(CHUNKS7, P))
    dy = da.from_array(y, chunks=(CHUNKS7,))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        place(client, {"X": dX[dy > 0], "y": dy[dy > 0.5]})


def test_numpy_mixed_with_dask_raises(client, rng):
    X, y, _ = _data(rng)
    with pytest.raises(TypeError, match="dask collection"):
        place(client, {"X": da.from_array(X, chunks=(CHUNKS7, P)), "y": y})


# ------------------------------------------------------------------- validation
def _with_nan(kind, X, y, sw, where):
    X, y = X.copy(), y.copy()
    row = sum(CHUNKS7[:3]) + 2  # inside the 4th chunk
    (X if where == "X" else y)[row, ...] = np.nan
    return _inputs(kind, X, y, sw)[0]


@pytest.mark.parametrize("where", ["X", "y"])
@pytest.mark.parametrize("kind", ["dask-known", "dask-dataframe"])
def test_nan_in_one_dask_chunk_raises_with_check(client, rng, kind, where):
    X, y, sw = _data(rng)
    arrays = _with_nan(kind, X, y, sw, where)
    with pytest.raises(ValueError, match="NaN"):
        place(client, arrays, check=check_regression)


def test_negative_weight_in_dask_chunk_raises_with_check(client, rng):
    """A check that refuses negative weights (LinearRegression's, as scikit-learn's) raises scikit-learn's error
    from the one block that has one; the default check takes them (as scikit-learn's other estimators)."""
    X, y, sw = _data(rng)
    sw[150] = -1.0
    arrays, _ = _inputs("dask-known", X, y, sw)
    with pytest.raises(ValueError, match="^Negative values in data passed to `sample_weight`.$"):
        place(client, arrays, check=functools.partial(check_regression, negative_weights=False))
    with place(client, arrays, check=check_regression) as p:
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))


@pytest.mark.parametrize("kind", ["dask-known", "dask-unknown-mask", "dask-dataframe"])
def test_check_runs_on_valid_dask_input(client, rng, kind):
    X, y, sw = _data(rng)
    arrays, (Xe, ye, swe) = _inputs(kind, X, y, sw)
    with place(client, arrays, check=check_regression) as p:
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(Xe, ye, swe))


# ------------------------------------------------------------- empty partitions
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_empty_dask_array_chunks_are_no_error(client, rng, transport):
    X, y, sw = _data(rng, n=46)
    chunks = (0, 20, 0, 15, 0, 11, 0)
    arrays = {
        "X": da.from_array(X, chunks=(chunks, P)),
        "y": da.from_array(y, chunks=(chunks,)),
        "sample_weight": da.from_array(sw, chunks=(chunks,)),
    }
    with place(client, arrays, check=check_regression, transport=transport) as p:
        assert p.n_samples == 46
        assert all(n > 0 for n in p.n_rows)
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X, y, sw))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_empty_dask_dataframe_partitions_are_no_error(client, rng, transport):
    X, y, sw = _data(rng, n=60)
    keep = np.zeros(60, bool)
    keep[12:15] = keep[45:48] = True
    df = pd.DataFrame(X, columns=list("abcd")).assign(y=y, w=sw, keep=keep)
    # rows only in the 2nd and 5th of 6 partitions: most partitions are empty, maybe a whole worker's
    ddf = dd.from_pandas(df, npartitions=6)
    ddf = ddf[ddf["keep"]]
    sizes = ddf.map_partitions(len).compute().tolist()
    assert 0 in sizes and sum(sizes) == 6
    arrays = {"X": ddf[list("abcd")], "y": ddf["y"], "sample_weight": ddf["w"]}
    with place(client, arrays, check=check_regression, transport=transport) as p:
        assert p.n_samples == 6
        assert all(n > 0 for n in p.n_rows)
        got = DistributedEvaluator(p)(_moments)
    _assert_moments(got, _expected(X[keep], y[keep], sw[keep]))


def test_all_partitions_empty_raises(client, rng):
    X, y, _ = _data(rng)
    dX = da.from_array(X, chunks=(CHUNKS7, P))
    dy = da.from_array(y, chunks=(CHUNKS7,))
    with pytest.raises(ValueError, match="0 sample"):
        place(client, {"X": dX[dy > 1e9], "y": dy[dy > 1e9]})
    with pytest.raises(ValueError, match="0 sample"):
        place(client, {"X": X[:0], "y": y[:0]})


# ------------------------------------------------------------------------ release
def _on_workers(client, keys):
    return set().union(*map(set, client.run(_held, list(keys)).values()))


def _on_scheduler(client, keys):
    keys = list(keys)
    return set(client.run_on_scheduler(lambda dask_scheduler: [k for k in keys if k in dask_scheduler.tasks]))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", ["numpy", "dask-known"])
def test_release_drops_shards_from_workers(client, rng, kind, transport):
    X, y, sw = _data(rng)
    arrays, _ = _inputs(kind, X, y, sw)
    p = place(client, arrays, transport=transport)
    DistributedEvaluator(p)(_moments)
    shard_keys = {f.key for f in p.shards}
    actor_keys = {f.key for f in p._actor_futures}
    assert len(actor_keys) == (len(shard_keys) if transport == "actors" else 0)
    assert _on_workers(client, shard_keys | actor_keys) == {str(k) for k in shard_keys | actor_keys}

    p.release()
    assert p.shards == [] and p.actors == []
    # the shard data is gone from the scheduler and from every worker
    assert _poll(lambda: not _on_workers(client, shard_keys)), _on_workers(client, shard_keys)
    assert _poll(lambda: not _on_scheduler(client, shard_keys))
    assert not (set().union(*client.has_what().values()) & shard_keys)
    # actors (if any are still there) hold no shard
    for held in client.run(_actor_shards, list(actor_keys)).values():
        assert not any(held.values())
    # and once the client's garbage is collected, the actors are gone too
    gc.collect()
    assert _poll(lambda: not _on_workers(client, actor_keys) and not _on_scheduler(client, actor_keys))


def test_release_drops_actors_without_garbage_collection(client, rng):
    X, y, sw = _data(rng)
    gc.collect()
    gc.disable()
    try:
        p = place(client, {"X": X, "y": y, "sample_weight": sw}, transport="actors")
        DistributedEvaluator(p)(_moments)
        actor_keys = {f.key for f in p._actor_futures}
        p.release()
        gone = _poll(lambda: not _on_workers(client, actor_keys) and not _on_scheduler(client, actor_keys), 1.0)
    finally:
        gc.enable()
        gc.collect()
    assert gone


def test_failed_dask_placement_leaves_nothing_on_workers(client, rng):
    X, y, sw = _data(rng)
    before = set().union(*map(set, client.run(_all_keys).values()))
    arrays = _with_nan("dask-known", X, y, sw, "X")
    with pytest.raises(ValueError, match="NaN"):
        place(client, arrays, check=check_regression)
    gc.collect()

    def leftovers():
        now = set().union(*map(set, client.run(_all_keys).values()))
        return {k for k in now - before if k.startswith("_pack")}

    assert _poll(lambda: not leftovers(), 1.0), leftovers()


def test_context_manager_releases(client, rng):
    X, y, sw = _data(rng)
    with place(client, {"X": X, "y": y, "sample_weight": sw}, transport="tasks") as p:
        keys = {f.key for f in p.shards}
        assert _on_workers(client, keys)
    assert p.shards == []
    assert _poll(lambda: not _on_workers(client, keys))


def test_invalid_transport_raises(client, rng):
    X, y, _ = _data(rng, n=10)
    with pytest.raises(ValueError, match="transport"):
        place(client, {"X": X, "y": y}, transport="carrier-pigeon")


@pytest.mark.parametrize("kind", ["numpy", "numpy-large", "dask-known"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_shard_that_cannot_be_built_fails_the_placement(client, rng, kind, transport):
    """The error of a failed shard build reaches the caller of place(), whatever the input and transport."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the workers have CUDA: device='cuda' builds")
    X, y, sw = _data(rng, n=N_LARGE if kind == "numpy-large" else N)
    arrays, _ = _inputs(kind, X, y, sw)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        place(client, arrays, device="cuda", transport=transport)


def _first_column(shard):
    return shard.get("X")[:, 0].cpu().numpy()


@pytest.mark.parametrize("kind", ["numpy", "dask-uneven", "dask-empty-chunks"])
def test_row_ranges_name_each_shards_rows(client, rng, kind):
    """row_ranges gives the global position of every row of every shard (cross-validation folds use it)."""
    n = 301
    X = np.column_stack([np.arange(n, dtype=float), rng.standard_normal(n)])
    if kind == "dask-uneven":
        X = da.from_array(X, chunks=(37, -1))
    elif kind == "dask-empty-chunks":
        X = da.concatenate([da.from_array(X[:100], chunks=(50, -1)), da.zeros((0, 2), chunks=(0, 2)),
                            da.from_array(X[100:], chunks=(67, -1))])
    with place(client, {"X": X}) as p:
        assert len(p.row_ranges) == len(p.shards)
        firsts = p.map(_first_column)
        seen = []
        for ranges, col, rows in zip(p.row_ranges, firsts, p.n_rows):
            positions = np.concatenate([np.arange(a, b) for a, b in ranges])
            assert len(positions) == rows
            np.testing.assert_array_equal(col, positions)  # X[:, 0] is the row's global position
            seen.append(positions)
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(n))
