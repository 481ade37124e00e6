"""Dask input no one has computed, placed partition by partition against computing every block first, in one run.

    python benchmarks/bench_streaming.py                          # 1,000,000 x 100 parquet, medians of 3
    python benchmarks/bench_streaming.py --rows 100000 --repeat 1  # a smoke run

``LogisticRegression(max_iter=20, tol=0).fit`` on a dask dataframe read from 8 parquet files (not persisted),
on a ``LocalCluster(n_workers=2, threads_per_worker=1)`` warmed up by a first fit, with
``dask-estimators.keep-placed`` at 0 (each fit places its data).  Alternating, each repeat:

* ``streamed``: the default, each worker computes its partitions into its shard;
* ``blocks first``: the streamed placement turned off in this process (every block computed where Dask puts
  it, then copied into the shards), the way such input was placed before.

Both fits run the same 20 rounds; their difference is the placement.  The worker memory of the two ways is
``bench_memory.py``'s.  Writes ``streaming.json`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import run_record, shape_main, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(rows, cols, repeat, out_dir):
    import dask
    import dask.dataframe as dd
    import distributed
    import pandas as pd

    import dask_estimators as de
    from dask_estimators.engine.data import placement

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, cols))
    y = (X @ np.linspace(-1, 1, cols) > 0).astype(np.int64)
    streamed = placement._place_streamed
    times = {"streamed": [], "blocks first": []}
    with tempfile.TemporaryDirectory() as tmp, \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, distributed.Client(cluster), \
            dask.config.set({"dask-estimators.keep-placed": 0}):
        df = pd.DataFrame(X, columns=[f"f{i}" for i in range(cols)]).assign(target=y)
        for i, part in enumerate(np.array_split(np.arange(rows), 8)):
            df.iloc[part].to_parquet(Path(tmp) / f"part{i}.parquet")
        del df, X
        ddf = dd.read_parquet(tmp)
        Xd, yd = ddf.drop(columns="target"), ddf["target"]
        de.LogisticRegression(max_iter=5).fit(Xd, yd)  # warm: imports, kernels, the workers' pools
        coefs = {}
        try:
            for _ in range(repeat):
                for mode in times:
                    placement._place_streamed = streamed if mode == "streamed" else (lambda *a, **k: None)
                    t0 = time.perf_counter()
                    model = de.LogisticRegression(max_iter=20, tol=0).fit(Xd, yd)
                    times[mode].append(time.perf_counter() - t0)
                    coefs[mode] = model.coef_
        finally:
            placement._place_streamed = streamed
        np.testing.assert_allclose(coefs["streamed"], coefs["blocks first"], rtol=1e-8, atol=1e-12)
    med = {k: statistics.median(v) for k, v in times.items()}
    record = run_record("bench_streaming.py", rows=rows, cols=cols, files=8, repeat=repeat, workers=2,
                        threads_per_worker=1, seconds=med, all_seconds=times,
                        **{"streamed / blocks first": med["streamed"] / med["blocks first"]})
    write_results(out_dir, "streaming", record)
    print(json.dumps({k: record[k] for k in ("seconds", "streamed / blocks first")}, indent=2))


def main(argv=None):
    shape_main(run, __doc__, rows=1_000_000, argv=argv)


if __name__ == "__main__":
    main()
