"""Placed input kept between fits: the second fit on the same data against the first, in one run.

    python benchmarks/bench_kept.py                       # 1,000,000 x 100, 3 repeats
    python benchmarks/bench_kept.py --rows 200000 --repeat 1   # a smoke run

A ``LocalCluster`` of 2 worker processes with 1 thread each, warmed up by a
small fit first (the imports are not measured here: ``bench_first_contact.py``
has them).  For each input form (a persisted dask array, a dask dataframe
read from parquet files, not persisted, and NumPy arrays copied anew for each
fit, as a search cuts each fold anew for each candidate, sent to the workers
as to workers on other hosts: on the client's host NumPy input is handed over
in shared memory, lives in the shards' actors and is not kept), each repeat:

1. ``LogisticRegression(C=0.5).fit`` with ``dask-estimators.keep-placed`` at 0
   (``"placed"``: placed and released, as every fit did before the data was
   kept), the first fit on the collection;
2. ``LogisticRegression().fit`` places the data again and keeps it
   (``"kept"``): against 1, the cost of keeping it;
3. ``LogisticRegression(C=0.5).fit`` on the same collection (``"reused"``):
   against 2, what keeping saves;

then the kept data is released.  "Outside the rounds" is the fit's wall
time less its rounds' seconds (``fit_stats_["seconds"]``): the set-up before
the first round (validation, placement, the targets' encoding) and the
solver's own time on the client.  scikit-learn's ``LogisticRegression`` on
the same rows as NumPy is the anchor, in the same run (this machine sets
``OPENBLAS_CORETYPE``; run this script with it and ``OPENBLAS_L2_SIZE``
unset when comparing with scikit-learn).  Medians of ``--repeat``.  Writes
``kept.json`` and ``kept.md`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import run_record, shape_main, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NUMPY = "NumPy, a copy for each fit"
#: the input forms, in the order of the tables
FORMS = ("persisted dask array", "parquet, not persisted", NUMPY)


def _fit(make, data):
    X, y = data()
    t0 = time.perf_counter()
    model = make().fit(X, y)
    wall = time.perf_counter() - t0
    stats = model.fit_stats_
    return {"wall": wall, "outside_rounds": wall - stats["seconds"], "rounds": stats["rounds"],
            "placement": stats["placement"], "coef": model.coef_}


def run(rows, cols, repeat, out_dir):
    import dask
    import dask.array as da
    import dask.dataframe as dd
    import distributed
    import pandas as pd
    from sklearn.linear_model import LogisticRegression as SkLogistic

    import dask_estimators as de
    from dask_estimators.session import release_kept

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, cols))
    y = (X @ rng.normal(size=cols) + rng.normal(size=rows) > 0).astype(np.int64)
    results = {}
    with tempfile.TemporaryDirectory() as tmp, \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, distributed.Client(cluster):
        df = pd.DataFrame(X, columns=[f"f{i}" for i in range(cols)]).assign(target=y)
        for i, part in enumerate(np.array_split(np.arange(rows), 8)):
            df.iloc[part].to_parquet(Path(tmp) / f"part{i}.parquet")
        del df
        with dask.config.set({"dask-estimators.worker-solve-below": 0}):  # every worker warms up
            de.LogisticRegression().fit(da.from_array(X[:2000], chunks=1000), da.from_array(y[:2000], chunks=1000))
        release_kept()

        def array_input():
            Xd = da.from_array(X, chunks=(rows // 8, cols)).persist()
            yd = da.from_array(y, chunks=rows // 8).persist()
            distributed.wait([Xd, yd])
            return Xd, yd

        def parquet_input():
            ddf = dd.read_parquet(tmp)
            return ddf.drop(columns="target"), ddf["target"]

        def numpy_input():
            return X, y

        for form, make_input in zip(FORMS, (array_input, parquet_input, numpy_input)):
            runs = {"placed": [], "kept": [], "reused": []}
            for _ in range(repeat):
                # NumPy input: a copy for each fit, found by its content, not by the object
                def data(inp=make_input(), copy=form == NUMPY):
                    return tuple(a.copy() for a in inp) if copy else inp

                # NumPy input sent to the workers, as to other hosts: handed over in shared memory, it is not kept
                with dask.config.set({"dask-estimators.shared-memory": form != NUMPY}):
                    with dask.config.set({"dask-estimators.keep-placed": 0}):
                        runs["placed"].append(_fit(lambda: de.LogisticRegression(C=0.5), data))
                    runs["kept"].append(_fit(lambda: de.LogisticRegression(), data))
                    runs["reused"].append(_fit(lambda: de.LogisticRegression(C=0.5), data))
                got = [r[-1]["placement"] for r in runs.values()]
                assert got == ["placed", "kept", "reused"], got
                np.testing.assert_allclose(runs["reused"][-1]["coef"], runs["placed"][-1]["coef"], rtol=1e-8)
                del data
                release_kept()
            results[form] = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "outside_rounds")}
                             for k, v in runs.items()}
        sk = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            SkLogistic(C=0.5).fit(X, y)
            sk.append(time.perf_counter() - t0)
        results["scikit-learn, NumPy"] = statistics.median(sk)
    record = run_record("bench_kept.py", rows=rows, cols=cols, repeat=repeat, workers=2, threads_per_worker=1,
                        results=results)
    commit = record["commit"]
    sk_s = results["scikit-learn, NumPy"]
    lines = [f"# Placed input kept between fits: {rows:,} x {cols}, 2 workers x 1 thread",
             "", f"`{record['command']}` at {commit}, {record['machine']}; medians of {repeat}.", "",
             "| input | fit | wall s | outside the rounds s | outside the rounds / the kept fit's | wall / scikit-learn |",
             "|---|---|---|---|---|---|"]
    for form in FORMS:
        first = results[form]["kept"]["outside_rounds"]
        for k, label in (("placed", "placed and released"), ("kept", "placed and kept"),
                         ("reused", "on the kept data")):
            r = results[form][k]
            lines.append(f"| {form} | {label} | {r['wall']:.3f} | {r['outside_rounds']:.3f} | "
                         f"{r['outside_rounds'] / first:.3f} | {r['wall'] / sk_s:.2f} |")
    lines += ["", f"scikit-learn `LogisticRegression(C=0.5)` on the NumPy rows: {sk_s:.3f} s."]
    write_results(out_dir, "kept", record, lines)


def main(argv=None):
    shape_main(run, __doc__, rows=1_000_000, argv=argv)


if __name__ == "__main__":
    main()
