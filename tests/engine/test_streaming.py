"""Dask input no one has computed (parquet files, a graph of random blocks) is placed by streaming: each worker
computes its partitions one after another in one task and appends them to its shard.  Its peak memory is the shard
and the partitions in flight, not every block beside the shard.  Input whose partitions cannot be computed on
their own (a reduction over all rows) or do not line up is placed the other way, and gives the same model.

On the session's real process-based LocalCluster (tests/conftest.py).
"""

from __future__ import annotations

import gc

import dask
import dask.array as da
import dask.dataframe as dd
import distributed
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression as SkLinearRegression
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.svm import LinearSVC as SkLinearSVC

import dask_estimators as de
from dask_estimators.engine.data import _dask_input as D
from dask_estimators.session import release_kept
from dask_estimators.engine.cluster._watch import workers_info

TIGHT = dict(tol=1e-10, max_iter=500)


def _frame(rng, n, d, partitions, path):
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n) > 0).astype(np.int64)
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(d)]).assign(y=y)
    path.mkdir()
    for i, part in enumerate(np.array_split(np.arange(n), partitions)):
        df.iloc[part].to_parquet(path / f"part.{i:03d}.parquet", index=False)
    return X, y


def _tasks(client, fit):
    """The model ``fit()`` returns, and the names of the tasks the cluster ran for it."""
    with distributed.get_task_stream(client) as ts:
        model = fit()
    return model, [str(t["key"]) for t in ts.data]


def test_a_parquet_fit_builds_each_shard_in_one_task_and_matches_scikit_learn(client, rng, tmp_path):
    X, y = _frame(rng, 3000, 6, 8, tmp_path / "pq")
    ddf = dd.read_parquet(tmp_path / "pq")
    cols = [c for c in ddf.columns if c != "y"]
    est, keys = _tasks(client, lambda: de.LogisticRegression(**TIGHT).fit(ddf[cols], ddf["y"]))
    streamed = [k for k in keys if "build_shard_streaming" in k]
    assert len(streamed) == est.fit_stats_["n_shards"] == len(workers_info(client))
    # the files were read inside those tasks, not as tasks of their own, and no block was built the other way
    assert not [k for k in keys if "read_parquet" in k or "build_shard_task" in k]
    assert sum(est.fit_stats_["rows_per_shard"]) == 3000
    ref = SkLogisticRegression(**TIGHT).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)


def test_inputs_the_partitions_share_or_that_do_not_line_up_are_placed_the_other_way(client, rng):
    X = rng.standard_normal((2000, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + 1.0
    Xd = da.from_array(X, chunks=(250, 4))
    centred = Xd - Xd.mean(axis=0)  # every partition needs every block: streamed, each worker would compute all
    assert D.stream_parts({"X": centred, "y": da.from_array(y, chunks=250)}) is None
    est, keys = _tasks(client, lambda: de.LinearRegression(tol=1e-12).fit(centred, da.from_array(y, chunks=250)))
    assert [k for k in keys if "build_shard_task" in k] and not [k for k in keys if "build_shard_streaming" in k]
    ref = SkLinearRegression().fit(X - X.mean(axis=0), y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7)

    # two frames of unknown lengths, as many partitions, other rows in each: found on the workers, then placed
    # by row position
    def rows(a, b):
        return pd.DataFrame(X[a:b], columns=list("abcd"))

    def target(a, b):
        return pd.Series(y[a:b], name="t")

    Xf = dd.from_map(rows, [0, 100, 1100, 1500], [100, 1100, 1500, 2000])
    yf = dd.from_map(target, [0, 500, 1000, 1500], [500, 1000, 1500, 2000])
    assert D.stream_parts({"X": Xf, "y": yf}) is not None  # which cannot be told before they are computed
    est = de.LinearRegression(tol=1e-12).fit(Xf, yf)
    np.testing.assert_allclose(est.coef_, SkLinearRegression().fit(X, y).coef_, rtol=1e-7)
    assert sum(est.fit_stats_["rows_per_shard"]) == 2000
    # the streaming task that found them misaligned is an answer, not a failure: no worker logs it as an error
    logged = [m for lines in client.get_worker_logs().values() for _, m in lines if "Misaligned" in m]
    assert not logged, logged[0]


def _draw(d, folder):
    """A random projection, recorded in ``folder`` each time it is drawn."""
    import os
    import uuid

    W = np.random.default_rng().standard_normal((d, d))
    np.save(os.path.join(folder, uuid.uuid4().hex + ".npy"), W)
    return W


def test_a_task_the_partitions_share_that_is_not_data_is_computed_once(client, rng, tmp_path):
    """A random draw every block uses (dask.delayed, not pure by default): streamed, each worker drew its own, and
    the fit matched none of them; Dask computes it once.  So does the fit now, placed the other way."""
    X = rng.standard_normal((2000, 5))
    beta = np.arange(1.0, 6.0)
    W = dask.delayed(_draw)(5, str(tmp_path))
    Z = da.from_array(X, chunks=(500, 5)).map_blocks(np.matmul, W, dtype=float)
    y = da.from_array(X @ beta, chunks=500)
    assert D.stream_parts({"X": Z, "y": y}) is None
    est = de.LinearRegression(tol=1e-12).fit(Z, y)
    [drawn] = [np.load(f) for f in tmp_path.glob("*.npy")]
    np.testing.assert_allclose(est.coef_, np.linalg.solve(drawn, beta), rtol=1e-8, atol=1e-10)


def test_a_merge_and_a_shuffle_fit_as_dask_computes_them(client, rng):
    """A hash join's and a p2p shuffle's tasks, shared by every partition, were sent to be computed again in each
    streaming task: a merge failed to pickle its local functions, a shuffle with a new column raised
    P2PConsistencyError.  They are computed on the cluster, once."""
    n = 3000
    pdf = pd.DataFrame({"key": rng.integers(0, 50, n), "a": rng.standard_normal(n)})
    lookup = pd.DataFrame({"key": np.arange(50), "b": rng.standard_normal(50)})
    pdf["y"] = 2.0 * pdf.a - pdf.key.map(lookup.set_index("key").b) + 0.1
    merged = dd.from_pandas(pdf, npartitions=4).merge(dd.from_pandas(lookup, npartitions=3), on="key")
    shuffled = dd.from_pandas(pdf, npartitions=4).shuffle("key")
    shuffled = shuffled.assign(k2=shuffled.key * 1.0)
    for frame, cols in ((merged, ["a", "b"]), (shuffled, ["a", "k2"])):
        est = de.LinearRegression(tol=1e-12).fit(frame[cols], frame.y)
        computed = frame.compute()
        ref = SkLinearRegression().fit(computed[cols], computed.y)
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-7, atol=1e-10)


def test_a_constant_every_partition_uses_is_streamed(client, rng):
    """A small array multiplied into every block is computed again by each worker: the input still streams."""
    Xd = da.random.default_rng(1).standard_normal((4000, 5), chunks=(500, 5))
    y = Xd @ np.linspace(-1, 1, 5) + 0.5
    assert D.stream_parts({"X": Xd, "y": y}) is not None
    est, keys = _tasks(client, lambda: de.LinearRegression(tol=1e-12).fit(Xd, y))
    assert [k for k in keys if "build_shard_streaming" in k]
    np.testing.assert_allclose(est.coef_, np.linspace(-1, 1, 5), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est.intercept_, 0.5, rtol=1e-9)


def _reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident memory (VmHWM) starts again from the current one


def _memory():
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                name, kb = line.split()[:2]
                fields[name[:-1]] = int(kb) * 1024
    return fields


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/clear_refs"), reason="needs Linux's clear_refs")
def test_worker_peak_memory_of_a_parquet_fit_stays_within_a_quarter_over_its_shard(client, rng, tmp_path):
    n, d = 240_000, 50  # 96 MB of X, 48 per worker, in 48 files of 2 MB
    _frame(rng, n, d, 48, tmp_path / "pq")
    ddf = dd.read_parquet(tmp_path / "pq")
    cols = [c for c in ddf.columns if c != "y"]
    # the imports and kernels a first fit pays for, paid before the measurement
    de.LogisticRegression(max_iter=3).fit(ddf[cols].partitions[:2], ddf["y"].partitions[:2])
    release_kept()
    client.run(gc.collect)
    before = client.run(_memory)
    client.run(_reset_peak)
    with dask.config.set({"dask-estimators.keep-placed": 0}):
        est = de.LogisticRegression(max_iter=20).fit(ddf[cols], ddf["y"])
    after = client.run(_memory)
    rows = est.fit_stats_["rows_per_shard"]
    assert len(rows) == len(before) and max(rows) - min(rows) <= n // 48  # a shard on each, equal to a file
    for w in before:
        growth = after[w]["VmHWM"] - before[w]["VmRSS"]
        # all its blocks beside the shard, computed first and copied in, would be twice the shard
        assert growth <= 1.25 * max(rows) * (d + 1) * 8, (w, growth / (max(rows) * (d + 1) * 8))


def test_arrays_beside_dataframes_pair_the_rows_of_the_same_blocks(client, rng):
    """Dask lists the keys of arrays and dataframes optimised together grouped by kind, a dataframe's in no fixed
    order: X from ``to_dask_array()`` beside y a series paired one block's rows with another's targets (R^2 near
    0, no error), and weights given as an array took y's place.  Both ways of placing them match scikit-learn."""
    n = 1000
    pdf = pd.DataFrame(rng.standard_normal((n, 3)), columns=list("abc"))
    pdf["y"] = 2.0 * pdf.a - pdf.b + 0.5 * pdf.c + 0.1 * rng.standard_normal(n)
    pdf["w"] = rng.uniform(0.5, 2.0, n)
    ddf = dd.from_pandas(pdf, npartitions=5, sort=False)
    X, y, w = ddf[list("abc")].to_dask_array(), ddf["y"] * 1.0, ddf["w"].to_dask_array()
    blocks = D.persist_blocks(client, {"y": y, "X": X, "w": w, "y1": y + 1})
    got = {k: np.concatenate([np.asarray(b) for b in client.gather(fs)]) for k, fs in blocks.items()}
    np.testing.assert_array_equal(got["y"], pdf.y)
    np.testing.assert_array_equal(got["X"], pdf[list("abc")])
    np.testing.assert_array_equal(got["w"], pdf.w)
    np.testing.assert_array_equal(got["y1"], pdf.y + 1)
    del blocks
    ref = SkLinearRegression().fit(pdf[list("abc")], pdf.y, sample_weight=pdf.w)
    est = de.LinearRegression(tol=1e-12).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7)
    # placed the other way (a LinearSVC's shards are cut by class): the persisted blocks in the same order
    labels = (ddf.y > 0).astype(int)
    est, names = _tasks(client, lambda: de.LinearSVC(tol=1e-10, max_iter=5000).fit(X, labels, sample_weight=w))
    assert [k for k in names if "build_shard_task" in k]
    ref = SkLinearSVC(tol=1e-10, max_iter=5000).fit(pdf[list("abc")], pdf.y > 0, sample_weight=pdf.w)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4)


def test_a_parquet_read_dask_fuses_into_fewer_blocks_is_placed_the_other_way(client, rng, tmp_path):
    """A parquet read with a column no input uses: Dask fuses its small files into fewer blocks, and persisting the
    projections gives collections naming blocks that have no future (dask/dask#12488).  The fit takes the
    futures of the optimised graph's own keys."""
    X, y = _frame(rng, 1500, 4, 5, tmp_path / "pq")
    ddf = dd.read_parquet(tmp_path / "pq")
    cols = ["x0", "x2"]  # x1 and x3 unused
    est, names = _tasks(client, lambda: de.LinearSVC(tol=1e-10, max_iter=5000).fit(ddf[cols], ddf["y"]))
    assert [k for k in names if "build_shard_task" in k]
    ref = SkLinearSVC(tol=1e-10, max_iter=5000).fit(X[:, [0, 2]], y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4)
    blocks = D.persist_blocks(client, {"X": ddf[cols], "y": ddf["y"]})
    assert len(blocks["X"]) == len(blocks["y"]) < 5, len(blocks["X"])  # fused
    assert sum(client.gather(client.map(D.n_rows, blocks["X"]))) == 1500
