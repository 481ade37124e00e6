"""Dask input: the placement plan, row alignment across partitionings, balance and one computation.

The plan and the segments are pure functions (checked exhaustively on small
cases); the rest runs on the session's real process-based LocalCluster.
"""

import functools
import os

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_estimators.engine.data import _dask_input as D
from dask_estimators.engine.data._worker import RowSegments
from dask_estimators.engine import place
from dask_estimators.estimators._base import _check_block

check_regression = functools.partial(_check_block, y_numeric=True, multi_output=False)


# ------------------------------------------------------------------------ the plan
def _rows_of_plan(layout):
    rows = [r for _, ranges in layout for a, b in ranges for r in range(a, b)]
    return sorted(rows), {w: sum(b - a for a, b in ranges) for w, ranges in layout}


@pytest.mark.parametrize("seed", range(30))
def test_plan_takes_every_row_once_and_stays_balanced(seed):
    rng = np.random.default_rng(seed)
    workers = [f"w{i}" for i in range(rng.integers(1, 5))]
    lengths = list(rng.integers(0, 50, rng.integers(1, 12)))
    holders = [list(rng.choice(workers + ["gone"], size=rng.integers(0, 3), replace=False)) for _ in lengths]
    total = int(sum(lengths))
    layout = D.plan(lengths, holders, workers)
    rows, load = _rows_of_plan(layout)
    assert rows == list(range(total))  # every row exactly once
    if total:
        assert max(load.values()) <= max(1, np.ceil(total / len(workers) * D.IMBALANCE))


def test_plan_keeps_blocks_where_they_are_within_the_imbalance():
    # 5 blocks on a, 3 on b: a keeps its 5 (1.25 x the mean), nothing moves
    layout = D.plan([10] * 8, [["a"]] * 5 + [["b"]] * 3, ["a", "b"])
    assert dict(layout) == {"a": [(0, 50)], "b": [(50, 80)]}


def test_plan_moves_rows_off_a_worker_that_holds_everything():
    layout = D.plan([10] * 8, [["a"]] * 8, ["a", "b"])
    _, load = _rows_of_plan(layout)
    assert load == {"a": 50, "b": 30}  # a keeps up to 1.25 x the mean; b is filled with the rest
    layout = D.plan([10] * 8, [["a"]] * 8, ["a", "b"], imbalance=1.0)
    assert _rows_of_plan(layout)[1] == {"a": 40, "b": 40}


def test_segments_follow_every_inputs_block_boundaries():
    rng = np.random.default_rng(1)
    for _ in range(50):
        total = int(rng.integers(1, 60))
        cuts = {k: np.sort(rng.choice(np.arange(1, total), size=min(total - 1, rng.integers(0, 5)), replace=False))
                for k in ("X", "y")}
        lengths = {k: np.diff(np.concatenate([[0], c, [total]])).tolist() for k, c in cuts.items()}
        offsets = {k: D.offsets_of(v) for k, v in lengths.items()}
        a = int(rng.integers(0, total))
        b = int(rng.integers(a + 1, total + 1))
        segments, refs = D.segments_for([(a, b)], offsets)
        row = a
        for seg in segments:
            for name, idx, start in seg.starts:
                k, blk = refs[idx]
                assert k == name
                # the segment lies inside one block of this input, at the right place
                assert offsets[k][blk] + start == row
                assert start + seg.rows <= lengths[k][blk]
            row += seg.rows
        assert row == b


# ----------------------------------------------------------------- on the cluster
def _moments(shard):
    X, y = shard.get("X"), shard.get("y")
    return X.T @ y, shard.n_rows


def _check_moments(p, X, y):
    got = p.map(_moments)
    np.testing.assert_allclose(sum(g[0] for g in got), X.T @ y, rtol=1e-12)
    assert sum(g[1] for g in got) == len(y)


def test_inputs_partitioned_differently_are_aligned_by_row(client, rng):
    X, y = rng.standard_normal((211, 4)), rng.standard_normal(211)
    cases = [
        (dd.from_pandas(pd.DataFrame(X), npartitions=7), dd.from_pandas(pd.Series(y), npartitions=3)),
        (dd.from_pandas(pd.DataFrame(X), npartitions=5), da.from_array(y, chunks=100)),
        (da.from_array(X, chunks=(30, 4)), da.from_array(y, chunks=(7, 200, 4))),
    ]
    for dX, dy in cases:
        with place(client, {"X": dX, "y": dy}, check=check_regression) as p:
            _check_moments(p, X, y)


def test_inconsistent_lengths_of_dask_inputs_raise(client, rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(99)
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[100, 99\]"):
        place(client, {"X": dd.from_pandas(pd.DataFrame(X), npartitions=4), "y": da.from_array(y, chunks=40)})


def test_skewed_blocks_give_balanced_shards(client, rng):
    """All 8 blocks on one worker: the other worker still gets its share of the rows."""
    X, y = rng.standard_normal((8000, 5)), rng.standard_normal(8000)
    w0 = sorted(client.ncores())[0]
    dX, dy = client.persist([da.from_array(X, chunks=(1000, 5)), da.from_array(y, chunks=1000)], workers=[w0])
    from distributed import futures_of, wait

    wait([dX, dy])

    assert set().union(*client.who_has(futures_of(dX)).values()) == {w0}
    with place(client, {"X": dX, "y": dy}, check=check_regression) as p:
        assert len(p.n_rows) == 2
        assert max(p.n_rows) <= 1.3 * np.mean(p.n_rows)
        _check_moments(p, X, y)


def _counted(block, path):
    with open(os.path.join(path, f"{os.getpid()}-{os.urandom(6).hex()}"), "w"):
        pass
    return block


def test_an_unpersisted_graph_is_computed_once(client, rng, tmp_path):
    """X and y taken from one graph: each of its blocks is computed exactly once, never on the client."""
    data = rng.standard_normal((600, 5))
    base = da.from_array(data, chunks=(100, 5)).map_blocks(_counted, str(tmp_path), meta=np.empty((0, 0)))
    dX, dy = base[:, :4], base[:, 4]
    with place(client, {"X": dX, "y": dy}, check=check_regression) as p:
        _check_moments(p, data[:, :4], data[:, 4])
    calls = os.listdir(tmp_path)
    assert len(calls) == 6, calls
    assert not any(c.startswith(f"{os.getpid()}-") for c in calls)  # nothing ran in the client's process


def _holds_any(prefixes, dask_worker=None):
    return sorted(str(k) for k in dask_worker.data if any(p in str(k) for p in prefixes))


def test_blocks_of_an_unpersisted_graph_are_freed_after_placement(client, rng, tmp_path):
    """The blocks computed for the shards do not stay on the workers (Dask frees them, nothing deletes by hand)."""
    import time

    data = rng.standard_normal((600, 5))
    base = da.from_array(data, chunks=(100, 5)).map_blocks(_counted, str(tmp_path), meta=np.empty((0, 0)))
    dX, dy = base[:, :4], base[:, 4]
    names = [dX.name, dy.name, base.name]
    with place(client, {"X": dX, "y": dy}, check=check_regression):
        deadline = time.monotonic() + 30
        while any(client.run(_holds_any, names).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(client.run(_holds_any, names).values())


def test_persisted_input_stays_the_callers(client, rng):
    X, y = rng.standard_normal((400, 3)), rng.standard_normal(400)
    dX, dy = client.persist([da.from_array(X, chunks=(100, 3)), da.from_array(y, chunks=100)])
    with place(client, {"X": dX, "y": dy}, check=check_regression) as p:
        _check_moments(p, X, y)
    # the caller's blocks are still in memory on the workers, and still usable
    from distributed import futures_of

    assert all(f.status == "finished" for f in futures_of(dX))
    assert all(client.who_has(futures_of(dX)).values())
    np.testing.assert_array_equal(dX.compute(), X)


def _reads_the_callers_blocks(dask_worker=None):
    """For each shard on this worker: whether its X is the blocks Dask holds, read where they lie (no copy)."""
    import gc

    from dask_estimators.engine.data._worker import Shard

    held = [v for v in dask_worker.data.values() if isinstance(v, np.ndarray)]
    out = []
    for shard in (o for o in gc.get_objects() if isinstance(o, Shard)):
        x = shard.data.get("X")
        out.append(isinstance(x, RowSegments) and x.owned_bytes == 0
                   and all(any(np.shares_memory(p, h) for h in held) for p in x.parts))
    return out


def _peak_reset(dask_worker=None):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM starts again from the current resident memory


def _peak_and_now():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith(("VmHWM", "VmRSS")))
    return {k: int(v.split()[0]) * 1024 for k, v in fields.items()}


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's clear_refs")
def test_a_fit_on_persisted_input_reads_the_callers_blocks_without_a_second_copy(client, rng):
    """The user's persisted blocks are the shards' X: a worker's peak over its memory before the fit (which held
    the blocks already) stays under a quarter of the X it holds, and the model is the one fit on NumPy."""
    import gc

    import dask

    import dask_estimators as de
    from dask_estimators.session import release_kept

    n, d = 240_000, 50  # 96 MB of X, 48 MB a worker, in blocks of 2 MB
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) + rng.standard_normal(n) > 0).astype(np.int64)
    dX, dy = client.persist([da.from_array(X, chunks=(5000, d)), da.from_array(y, chunks=5000)])
    de.LogisticRegression(max_iter=3).fit(dX[:10_000], dy[:10_000])  # imports and kernels, paid before
    release_kept()
    client.run(gc.collect)
    client.run(_peak_reset)
    before = client.run(_peak_and_now)
    with dask.config.set({"dask-estimators.keep-placed": 1}):
        est = de.LogisticRegression(tol=1e-10, max_iter=200).fit(dX, dy)
        after = client.run(_peak_and_now)
        reads = client.run(_reads_the_callers_blocks)
        release_kept()
    assert est.fit_stats_["n_shards"] == len(before) and all(v == [True] for v in reads.values()), reads
    for w in before:
        x_bytes = max(est.fit_stats_["rows_per_shard"]) * d * 8
        growth = after[w]["VmHWM"] - before[w]["VmRSS"]
        assert growth <= 0.25 * x_bytes, (w, growth / x_bytes)  # a copy of the blocks would be 1.0
    ref = de.LogisticRegression(tol=1e-10, max_iter=200).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-6, atol=1e-8)


def test_a_failing_block_raises_its_error(client, rng):
    def boom(b):
        raise ZeroDivisionError("block failed")

    dX = da.from_array(rng.standard_normal((40, 2)), chunks=(10, 2)).map_blocks(boom, dtype=float)
    with pytest.raises(ZeroDivisionError, match="block failed"):
        place(client, {"X": dX, "y": da.ones(40, chunks=10)})


# ------------------------------------------------------- the shard build, in process
class _Recording:
    """A check that records the rows of X it was shown, then applies ``inner``."""

    def __init__(self, inner):
        self.inner, self.x_rows = inner, []

    def __call__(self, arrays):
        self.x_rows.append(np.shape(arrays["X"])[0])
        return self.inner(arrays)


def _build(check, X, y, cut=37):
    segments, refs = D.segments_for([(0, len(y))], {"X": D.offsets_of([cut, len(y) - cut]),
                                                     "y": D.offsets_of([len(y)])})
    blocks = {"X": [X[:cut], X[cut:]], "y": [y]}
    shard = D.build_shard("cpu", check, ["X", "y"], segments, len(y), *(blocks[k][j] for k, j in refs))
    return shard


def test_float_x_blocks_are_read_where_they_lie_and_checked_without_a_copy(rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    check = _Recording(check_regression)
    shard = _build(check, X, y)
    segs = shard.data["X"]
    assert isinstance(segs, RowSegments) and segs.starts == (0, 37)
    assert np.shares_memory(segs.parts[0], X[:37]) and np.shares_memory(segs.parts[1], X[37:])
    assert shard.nbytes() == y.nbytes  # X's blocks are counted where Dask keeps them, not again here
    assert [a for a, _ in shard.row_parts("X")] == [0, 37]
    np.testing.assert_array_equal(shard.get("X").numpy(), X)  # joined for a kernel that needs one array
    np.testing.assert_array_equal(shard.get("y").numpy(), y)
    assert shard.nbytes() == y.nbytes + X.nbytes  # and that copy is the shard's own
    assert check.x_rows == [0, 0]  # the check saw each segment's y, and X only as a view of no rows


def test_rows_of_one_block_cut_by_the_targets_blocks_are_one_part(rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    segments, refs = D.segments_for([(0, 100)], {"X": D.offsets_of([100]), "y": D.offsets_of([30, 30, 40])})
    blocks = {"X": [X], "y": [y[:30], y[30:60], y[60:]]}
    shard = D.build_shard("cpu", check_regression, ["X", "y"], segments, 100, *(blocks[k][j] for k, j in refs))
    assert len(segments) == 3 and [a for a, _ in shard.row_parts("X")] == [0]
    assert np.shares_memory(shard.row_parts("X")[0][1], X)
    np.testing.assert_array_equal(shard.get("y").numpy(), y)


def test_a_block_giving_the_shard_less_than_half_its_rows_is_copied(rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    segments, refs = D.segments_for([(0, 70)], {"X": D.offsets_of([60, 40]), "y": D.offsets_of([100])})
    blocks = {"X": [X[:60], X[60:]], "y": [y]}
    shard = D.build_shard("cpu", check_regression, ["X", "y"], segments, 70, *(blocks[k][j] for k, j in refs))
    (a0, p0), (a1, p1) = shard.row_parts("X")
    assert (a0, a1) == (0, 60) and np.shares_memory(p0, X) and not np.shares_memory(p1, X)
    np.testing.assert_array_equal(shard.host("X"), X[:70])


def test_x_blocks_of_another_layout_are_copied_into_one_array(rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    shard = _build(check_regression, np.asfortranarray(X), y)
    assert type(shard.data["X"]) is np.ndarray
    np.testing.assert_array_equal(shard.host("X"), X)


def test_other_dtypes_go_through_the_check(rng):
    X, y = rng.standard_normal((100, 3)).astype(np.float32), rng.standard_normal(100)
    check = _Recording(check_regression)
    shard = _build(check, X, y)
    assert shard.get("X").dtype == torch_float64()
    np.testing.assert_array_equal(shard.get("X").numpy(), X.astype(np.float64))
    assert sum(check.x_rows) == 100


def torch_float64():
    import torch

    return torch.float64


@pytest.mark.parametrize("bad, message", [(np.nan, "Input X contains NaN"), (np.inf, "Input X contains infinity")])
def test_non_finite_x_raises_the_checks_own_error(rng, bad, message):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    X[60, 1] = bad
    with pytest.raises(ValueError, match=message):
        _build(check_regression, X, y)


def test_a_check_that_allows_nan_keeps_the_copy(rng):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    X[5, 0] = np.nan

    def lenient(arrays):
        return {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}

    shard = _build(lenient, X, y)
    np.testing.assert_array_equal(shard.get("X").numpy(), X)  # NaN where it was, every other value copied


def test_a_column_major_block_of_large_finite_values_is_placed(rng):
    # the copy of a column-major block checks a sum, which overflows here: the block's own check has the last word
    X = np.full((100, 3), 1e308) * rng.choice([-1.0, 1.0], size=(100, 3))
    X[:, 0] = np.abs(X[:, 0])  # a column whose sum overflows
    frame = pd.DataFrame(X.T.copy().T, columns=list("abc"))
    y = rng.standard_normal(100)
    segments, refs = D.segments_for([(0, 100)], {"X": D.offsets_of([100]), "y": D.offsets_of([100])})
    shard = D.build_shard("cpu", check_regression, ["X", "y"], segments, 100, frame, pd.Series(y))
    np.testing.assert_array_equal(shard.get("X").numpy(), X)


@pytest.mark.parametrize("layout", ["one-block", "columns-apart"])
def test_float_dataframe_blocks_take_the_one_pass_copy(rng, layout):
    X, y = rng.standard_normal((100, 3)), rng.standard_normal(100)
    if layout == "one-block":
        frame = pd.DataFrame(X.T.copy().T, columns=list("abc"))  # column-major, as parquet gives it
    else:
        frame = pd.DataFrame({c: X[:, j].copy() for j, c in enumerate("abc")})
    check = _Recording(check_regression)
    segments, refs = D.segments_for([(0, 100)], {"X": D.offsets_of([100]), "y": D.offsets_of([100])})
    shard = D.build_shard("cpu", check, ["X", "y"], segments, 100, frame, pd.Series(y))
    np.testing.assert_array_equal(shard.get("X").numpy(), X)
    assert check.x_rows == [0]
    frame.iloc[40, 2] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        D.build_shard("cpu", check_regression, ["X", "y"], segments, 100, frame, pd.Series(y))
