"""Data that already lives in Dask: ours on dask input, against ours on NumPy input and scikit-learn, in one run.

    python benchmarks/bench_dask_input.py            # 1M and 200k rows, parquet, memory
    python benchmarks/bench_dask_input.py --quick    # 200k rows, smaller parquet and memory parts

Parts, each next to its anchors in this one run:

1. ``LogisticRegression`` on ``make_classification(n, 100)``.  The contestants
   alternate, ``--repeat`` times (medians reported):

   * ``sklearn``: scikit-learn's lbfgs on the NumPy arrays, ``--cores`` BLAS threads;
   * ``ours-numpy``: ours on the NumPy arrays (the client hands them over);
   * ``ours-dask``: ours on the same data as a persisted dask array of 8 row
     blocks, already on the workers before the clock starts.

   For ours, ``setup_seconds`` is the fit's time outside the optimizer's
   rounds (placement, validation, the fitted attributes), and ``setup_share``
   its part of the fit.  ``first_fit_fresh_cluster`` times one dask-input fit
   on a cluster started just before (worker imports and compilation included).
2. The 1M x 100 data (200k with ``--quick``) as 8 parquet files:
   ``dd.read_parquet`` and ours' fit on ``drop(columns="target")`` and
   ``["target"]``, against ``pandas.read_parquet`` and scikit-learn's fit.
3. Worker memory during a fit on dask input computed on the workers
   (``bench_memory``), as peak growth over the worker's baseline divided by the
   shard's bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def _cluster(cores):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    return cluster, Client(cluster, set_as_default=False)


def _blocks(X, y, client, n_blocks=8):
    import dask.array as da
    from distributed import futures_of, wait

    rows = -(-X.shape[0] // n_blocks)
    Xd, yd = client.persist([da.from_array(X, chunks=(rows, X.shape[1])), da.from_array(y, chunks=rows)])
    with client.as_current():
        wait(futures_of(Xd) + futures_of(yd))
    return Xd, yd


def logistic(n, *, cores=2, repeat=3, d=100):
    """Rows for the three contestants at n x d, plus ours' first dask fit on a fresh cluster."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = make_classification(n, d, random_state=0)
    cluster, client = _cluster(cores)
    try:
        Xd, yd = _blocks(X, y, client)
        t0 = time.perf_counter()
        first = de.LogisticRegression(client=client).fit(Xd, yd)
        first_seconds = time.perf_counter() - t0
        de.LogisticRegression(client=client).fit(X[:2000], y[:2000])  # the NumPy path's imports, out of the timings
        times = {k: [] for k in ("sklearn", "ours-numpy", "ours-dask")}
        setup = {k: [] for k in ("ours-numpy", "ours-dask")}
        models = {}
        for _ in range(repeat):
            with threadpool_limits(cores):
                t0 = time.perf_counter()
                models["sklearn"] = SkLogisticRegression().fit(X, y)
                times["sklearn"].append(time.perf_counter() - t0)
            for key, args in (("ours-numpy", (X, y)), ("ours-dask", (Xd, yd))):
                t0 = time.perf_counter()
                models[key] = de.LogisticRegression(client=client).fit(*args)
                times[key].append(time.perf_counter() - t0)
                setup[key].append(times[key][-1] - models[key].fit_stats_["seconds"])
    finally:
        client.close()
        cluster.close()
    base = statistics.median(times["sklearn"])
    numpy_ours = statistics.median(times["ours-numpy"])
    rows = []
    for key, ts in times.items():
        m = models[key]
        row = dict(n=n, d=d, what=key, seconds=statistics.median(ts), first_seconds=ts[0],
                   ratio_to_sklearn=statistics.median(ts) / base, n_iter=int(np.ravel(m.n_iter_)[0]),
                   max_coef_diff_to_sklearn=float(np.abs(m.coef_ - models["sklearn"].coef_).max()))
        if key in setup:
            row.update(setup_seconds=statistics.median(setup[key]),
                       setup_share=statistics.median(setup[key]) / statistics.median(ts),
                       ratio_to_ours_numpy=statistics.median(ts) / numpy_ours,
                       rows_per_shard=m.fit_stats_["rows_per_shard"])
        if key == "ours-dask":
            row.update(first_fit_fresh_cluster=first_seconds, first_fit_setup_seconds=first_seconds
                       - first.fit_stats_["seconds"])
        rows.append(row)
    return rows


def parquet(n, *, cores=2, repeat=3, d=100):
    """(ours: read_parquet + fit) against (pandas read_parquet + scikit-learn's fit) on 8 files."""
    import dask.dataframe as dd
    import pandas as pd
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = make_classification(n, d, random_state=0)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(d)])
    df["target"] = y
    del X, y
    times = {"sklearn+pandas": [], "ours+dask": []}
    with tempfile.TemporaryDirectory() as path:
        for i, rows in enumerate(np.array_split(np.arange(n), 8)):
            df.iloc[rows].to_parquet(f"{path}/part{i}.parquet")
        del df
        cluster, client = _cluster(cores)
        try:
            de.LogisticRegression(client=client).fit(np.random.rand(2000, d), np.arange(2000) % 2)
            for _ in range(repeat):
                with threadpool_limits(cores):
                    t0 = time.perf_counter()
                    pdf = pd.read_parquet(path)
                    sk = SkLogisticRegression().fit(pdf.drop(columns="target"), pdf["target"])
                    times["sklearn+pandas"].append(time.perf_counter() - t0)
                del pdf
                t0 = time.perf_counter()
                ddf = dd.read_parquet(path)
                ours = de.LogisticRegression(client=client).fit(ddf.drop(columns="target"), ddf["target"])
                times["ours+dask"].append(time.perf_counter() - t0)
            y_parts = ddf["target"].optimize().npartitions
        finally:
            client.close()
            cluster.close()
    base = statistics.median(times["sklearn+pandas"])
    return [dict(n=n, d=d, what=k, seconds=statistics.median(ts), first_seconds=ts[0],
                 ratio=statistics.median(ts) / base, target_partitions=y_parts,
                 max_coef_diff=float(np.abs(ours.coef_ - sk.coef_).max())) for k, ts in times.items()]


def memory(gb, cores):
    """Worker memory on dask input computed on the workers: peak growth over the shard's bytes."""
    import bench_memory

    out = bench_memory.main(["--gb", str(gb), "--workers", str(cores)])
    return [dict(worker=name, shard_MB=w["shard_MB"], placement_peak_MB=w["placement_peak_growth_MB"],
                 optimization_peak_MB=w["optimization_peak_growth_MB"],
                 optimization_peak_over_shard=w["optimization_peak_growth_MB"] / w["shard_MB"],
                 after_MB=w["after_growth_MB"], after_pools_closed_MB=w.get("after_pools_closed_growth_MB"))
            for name, w in out["workers"].items()]


def _copy_worker(rows, d, barrier, out):
    """One process: copy ``rows`` x ``d`` float64 into memory already faulted in, plain and validated."""
    from dask_estimators._validation import copy_if_finite

    src = np.random.default_rng(0).standard_normal((rows, d))
    dst = np.ones_like(src)
    copy_if_finite(src[:8], dst[:8])  # compiled or loaded from the cache, out of the timing
    barrier.wait()
    t0 = time.perf_counter()
    np.copyto(dst, src)
    plain = time.perf_counter() - t0
    barrier.wait()
    t0 = time.perf_counter()
    copy_if_finite(src, dst)
    out.put((plain, time.perf_counter() - t0))


def copy_floor(n=1_000_000, d=100, cores=2):
    """The shard copy's floor: ``cores`` processes at once, each copying its n / cores rows (plain, and validated)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(cores), ctx.Queue()
    procs = [ctx.Process(target=_copy_worker, args=(n // cores, d, barrier, out)) for _ in range(cores)]
    for p in procs:
        p.start()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return dict(n=n, d=d, processes=cores, MB_per_process=n // cores * d * 8 / 1e6,
                copyto_s=max(t for t, _ in times), copy_and_check_s=max(t for _, t in times))


TABLES = {
    "logistic": ("LogisticRegression on dask input (persisted, 8 blocks)",
                 ["n", "what", "seconds", "first_seconds", "ratio_to_sklearn", "ratio_to_ours_numpy",
                  "setup_seconds", "setup_share", "first_fit_fresh_cluster", "n_iter", "max_coef_diff_to_sklearn"]),
    "parquet": ("Parquet files: read and fit", ["n", "what", "seconds", "first_seconds", "ratio",
                                                "target_partitions", "max_coef_diff"]),
    "memory": ("Worker memory during a fit on dask input", ["worker", "shard_MB", "placement_peak_MB",
                                                            "optimization_peak_MB", "optimization_peak_over_shard",
                                                            "after_MB", "after_pools_closed_MB"]),
}


def run(cores=2, quick=False):
    sizes = [200_000] if quick else [1_000_000, 200_000]
    out = {"logistic": []}
    for n in sizes:
        out["logistic"] += logistic(n, cores=cores, repeat=1 if quick else 3)
        print(f"  dask input n={n:,} done", file=sys.stderr, flush=True)
    out["parquet"] = parquet(200_000 if quick else 1_000_000, cores=cores, repeat=1 if quick else 3)
    print("  parquet done", file=sys.stderr, flush=True)
    out["memory"] = memory(0.2 if quick else 0.8, cores)
    return out


def summary_rows(out):
    """README rows: dask input against our NumPy input and scikit-learn; parquet; memory."""
    rows = []
    for r in out["logistic"]:
        if r["what"] != "ours-dask":
            continue
        label = f"LogisticRegression {r['n']:,}x{r['d']} from a persisted dask array, fit s"
        rows.append({"benchmark": label, "ours": r["seconds"],
                     "anchor": f"scikit-learn {r['seconds'] / r['ratio_to_sklearn']:.3g}",
                     "ours / anchor": r["ratio_to_sklearn"]})
        rows.append({"benchmark": label, "ours": r["seconds"],
                     "anchor": f"ours on NumPy {r['seconds'] / r['ratio_to_ours_numpy']:.3g}",
                     "ours / anchor": r["ratio_to_ours_numpy"]})
        rows.append({"benchmark": "same, set-up before the first round, s", "ours": r["setup_seconds"],
                     "anchor": f"whole fit {r['seconds']:.3g}", "ours / anchor": r["setup_share"]})
    p = {r["what"]: r for r in out["parquet"]}
    rows.append({"benchmark": f"{p['ours+dask']['n']:,}x{p['ours+dask']['d']} in 8 parquet files, read + fit, s",
                 "ours": p["ours+dask"]["seconds"],
                 "anchor": f"pandas + scikit-learn {p['sklearn+pandas']['seconds']:.3g}",
                 "ours / anchor": p["ours+dask"]["ratio"]})
    worst = max(out["memory"], key=lambda r: r["optimization_peak_over_shard"])
    rows.append({"benchmark": "worker memory during a fit on dask input, MB over baseline",
                 "ours": worst["optimization_peak_MB"], "anchor": f"shard {worst['shard_MB']:.4g}",
                 "ours / anchor": worst["optimization_peak_over_shard"]})
    return rows


def markdown(out):
    from bench_engine import _table

    parts = []
    for key, (title, cols) in TABLES.items():
        parts += [f"\n## {title}\n\n", _table(out[key], cols)]
    return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--copy-floor", action="store_true", help="only the shard copy's floor (1M x 100 on --cores)")
    args = ap.parse_args(argv)
    if args.copy_floor:
        floor = copy_floor(cores=args.cores)
        print(json.dumps(floor, indent=2))
        return floor
    out = run(args.cores, args.quick)
    print(markdown(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
