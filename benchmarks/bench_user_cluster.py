"""The first fit on a cluster the user started: a fresh ``Client(LocalCluster())``, against the warm fit and scikit-learn.

    python benchmarks/bench_user_cluster.py                        # 1,000,000 x 100, 3 fresh processes per way
    python benchmarks/bench_user_cluster.py --rows 200000 --repeat 1   # a smoke run

Each repeat is a fresh Python process that makes ``make_classification(rows,
cols)``, starts ``LocalCluster(n_workers=2, threads_per_worker=1)`` (its
workers know nothing of this package: no preload), persists the data as a
dask array of 8 row blocks, and then times ``LogisticRegression().fit`` on it:

1. the first fit, with the package met in one of three places:
   ``"imported before the client"`` (``import dask_estimators as de`` with
   the script's other imports, ``de.LogisticRegression`` first read on the
   line of the fit: the usual script, whose client warms its workers as it
   connects), ``"class read before the data"`` (the class read right after
   the client was made) or ``"imported at the fit"`` (``import
   dask_estimators`` itself on the line of the fit, timed with it: nothing
   of ours ran before the fit, which the warm-up then cannot hide);
2. the warm fit: three more fits with ``dask-estimators.keep-placed`` at 0
   (each places the data again, as the first did), median;
3. scikit-learn's ``LogisticRegression`` on the same rows as NumPy, in the
   same process (this machine sets ``OPENBLAS_CORETYPE``; run this script
   with it and ``OPENBLAS_L2_SIZE`` unset when comparing with scikit-learn).

The workers' imports of torch and scikit-learn are recorded too (neither is
needed by a linear fit).  Medians over ``--repeat`` processes of each way.
Writes ``user_cluster.json`` and ``user_cluster.md`` to ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

WAYS = ("imported before the client", "class read before the data", "imported at the fit")


def _loaded():
    return sorted(m for m in ("torch", "sklearn") if m in sys.modules)


def one_process(rows: int, cols: int, way: str) -> dict:
    """One fresh process's measurements (run with ``--child``)."""
    import dask
    import dask.array as da
    import numpy as np
    from distributed import Client, LocalCluster, futures_of, wait
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression
    from threadpoolctl import threadpool_limits

    if way != "imported at the fit":
        import dask_estimators as de

    X, y = make_classification(rows, cols, random_state=0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        if way == "class read before the data":
            de.LogisticRegression  # noqa: B018 - the first read, as a from-import after the client makes it
        block = -(-rows // 8)
        Xd, yd = client.persist([da.from_array(X, chunks=(block, cols)), da.from_array(y, chunks=block)])
        wait(futures_of(Xd) + futures_of(yd))
        t0 = time.perf_counter()
        if way == "imported at the fit":
            import dask_estimators as de
        first = de.LogisticRegression().fit(Xd, yd)
        first_s = time.perf_counter() - t0
        warm = []
        with dask.config.set({"dask-estimators.keep-placed": 0}):
            for _ in range(3):
                t0 = time.perf_counter()
                de.LogisticRegression().fit(Xd, yd)
                warm.append(time.perf_counter() - t0)
        loaded = sorted({m for v in client.run(_loaded).values() for m in v})
    with threadpool_limits(2):
        t0 = time.perf_counter()
        SkLogisticRegression().fit(X, y)
        sk_s = time.perf_counter() - t0
    return dict(way=way, first_fit=first_s, first_fit_rounds=first.fit_stats_["seconds"],
                warm_fit=statistics.median(warm), sklearn=sk_s, worker_modules=loaded,
                n_iter=int(np.ravel(first.n_iter_)[0]))


def run(rows: int, cols: int, repeat: int, out_dir: Path) -> dict:
    from bench_engine import run_record, write_results

    runs = []
    for _ in range(repeat):
        for way in WAYS:  # alternating, one fresh process each
            cmd = [sys.executable, __file__, "--child", str(rows), str(cols), way]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows_out = []
    for way in WAYS:
        mine = [r for r in runs if r["way"] == way]
        med = {k: statistics.median(r[k] for r in mine) for k in ("first_fit", "warm_fit", "sklearn")}
        rows_out.append(dict(way=way, **med, first_minus_warm=med["first_fit"] - med["warm_fit"],
                             first_over_sklearn=med["first_fit"] / med["sklearn"],
                             worker_modules=sorted({m for r in mine for m in r["worker_modules"]})))
    record = run_record("bench_user_cluster.py", rows=rows, cols=cols, repeat=repeat, results=rows_out, runs=runs)
    lines = [
        f"# The first fit on a fresh `Client(LocalCluster())`: LogisticRegression {rows:,} x {cols}, persisted dask",
        "",
        f"`{record['command']}` at {record['commit']}, {record['machine']}; medians of {repeat} fresh processes "
        "per row.",
        "",
        "| the package met | first fit s | warm fit s | first - warm s | scikit-learn s "
        "| first / scikit-learn | on the workers after the fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows_out:
        lines.append(f"| {r['way']} | {r['first_fit']:.3f} | {r['warm_fit']:.3f} | {r['first_minus_warm']:.3f} "
                     f"| {r['sklearn']:.3f} | {r['first_over_sklearn']:.2f} "
                     f"| {', '.join(r['worker_modules']) or 'neither torch nor scikit-learn'} |")
    write_results(out_dir, "user_cluster", record, lines)
    return record


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(one_process(int(argv[1]), int(argv[2]), argv[3])))
        return
    from bench_engine import shape_main

    shape_main(run, __doc__, rows=1_000_000, argv=argv)


if __name__ == "__main__":
    main()
