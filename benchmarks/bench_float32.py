"""float32 against float64 X: linear fits, the bytes the workers hold, MLP epochs, in one run.

    python benchmarks/bench_float32.py                            # 1,000,000 x 100, 3 repeats
    python benchmarks/bench_float32.py --rows 200000 --repeat 1   # a smoke run

A ``LocalCluster`` of 2 worker processes with 1 thread each, warmed up first
in both dtypes (the kernels' compilation is not measured here).  Each repeat,
alternating:

1. ``LogisticRegression(C=0.5)`` on a persisted dask array of the rows, in
   float64 then in float32 (each fit places its data and releases it:
   ``dask-estimators.keep-placed`` 0), and on the float32 rows as NumPy;
2. scikit-learn's ``LogisticRegression(C=0.5)`` on the float32 NumPy rows,
   the anchor (this machine sets ``OPENBLAS_CORETYPE``; run this script with
   it and ``OPENBLAS_L2_SIZE`` unset when comparing with scikit-learn);
3. ``MLPClassifier``, 5 epochs of Adam (``tol=0``) on three shapes of the MLP
   matrix (``bench_mlp_matrix.py``), 50,000 rows of NumPy input, in float64
   then float32: samples per second.

The bytes are the fits' own account of X on the workers
(``fit_stats_["x_bytes_per_pass"]``: the shards' X, all of it read by each
pass).  Medians of ``--repeat``.  Writes ``float32.json`` and ``float32.md``
to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import run_record, shape_main, write_results  # noqa: E402

#: (d, hidden, batch, classes) of three cells of bench_mlp_matrix.py, relu
MLP_SHAPES = ((100, (100,), 256, 2), (300, (512,), 128, 10), (784, (256, 128), 200, 10))
MLP_ROWS = 50_000
EPOCHS = 5


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(rows, cols, repeat, out_dir):
    import dask
    import dask.array as da
    import distributed
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression as SkLogistic

    import dask_estimators as de

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, cols))
    y = (X @ rng.normal(size=cols) + rng.normal(size=rows) > 0).astype(np.int64)
    X32 = X.astype(np.float32)
    linear = {k: [] for k in ("dask float64", "dask float32", "NumPy float32", "scikit-learn NumPy float32")}
    mlp = {}
    stats = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster), \
            dask.config.set({"dask-estimators.keep-placed": 0}):
        chunks = (-(-rows // 8), cols)
        Xd = {np.float64: da.from_array(X, chunks=chunks).persist(),
              np.float32: da.from_array(X32, chunks=chunks).persist()}
        yd = da.from_array(y, chunks=chunks[0]).persist()
        distributed.wait([*Xd.values(), yd])
        with dask.config.set({"dask-estimators.worker-solve-below": 0}):  # every worker compiles both dtypes
            for a in (X[:2000], X32[:2000]):
                de.LogisticRegression().fit(da.from_array(a, chunks=1000), da.from_array(y[:2000], chunks=1000))
        coefs = {}
        for _ in range(repeat):
            for dtype, name in ((np.float64, "dask float64"), (np.float32, "dask float32")):
                t, model = _timed(lambda: de.LogisticRegression(C=0.5).fit(Xd[dtype], yd))
                linear[name].append(t)
                stats[name] = {k: model.fit_stats_[k] for k in ("x_dtype", "x_bytes_per_pass", "rounds")}
                coefs[name] = model.coef_.astype(np.float64)
            t, model = _timed(lambda: de.LogisticRegression(C=0.5).fit(X32, y))
            linear["NumPy float32"].append(t)
            t, _ = _timed(lambda: SkLogistic(C=0.5).fit(X32, y))
            linear["scikit-learn NumPy float32"].append(t)
        rel = float(np.abs(coefs["dask float32"] - coefs["dask float64"]).max()
                    / np.abs(coefs["dask float64"]).max())
        for d, hidden, batch, k in MLP_SHAPES:
            Xm, ym = make_classification(n_samples=MLP_ROWS, n_features=d, n_informative=min(d, 20), n_classes=k,
                                         random_state=0)
            cell = f"d={d} {'-'.join(map(str, hidden))} relu b={batch} {k} classes"
            times = {"float64": [], "float32": []}
            for dtype in times:  # the first fit of each dtype compiles its kernels
                de.MLPClassifier(hidden, batch_size=batch, max_iter=1, tol=0).fit(Xm[:5000].astype(dtype), ym[:5000])
            for _ in range(repeat):
                for dtype in times:
                    t, _ = _timed(lambda: de.MLPClassifier(hidden, batch_size=batch, max_iter=EPOCHS, tol=0,
                                                           learning_rate_init=1e-3, random_state=0)
                                  .fit(Xm.astype(dtype), ym))
                    times[dtype].append(t)
            mlp[cell] = {dt: MLP_ROWS * EPOCHS / statistics.median(v) for dt, v in times.items()}
    med = {k: statistics.median(v) for k, v in linear.items()}
    record = run_record("bench_float32.py", rows=rows, cols=cols, repeat=repeat, workers=2, threads_per_worker=1,
                        linear_seconds=med, linear_all_seconds=linear, linear_stats=stats,
                        coef_rel_diff_float32_float64=rel, mlp_samples_per_s=mlp, mlp_rows=MLP_ROWS, epochs=EPOCHS)
    f64, sk = med["dask float64"], med["scikit-learn NumPy float32"]
    lines = [f"# float32 against float64: LogisticRegression {rows:,} x {cols}, MLPs, 2 workers x 1 thread", "",
             f"`{record['command']}` at {record['commit']}, {record['machine']}; medians of {repeat}.", "",
             "| LogisticRegression(C=0.5) on | fit s | / ours float64 | / scikit-learn float32 | X on the workers MB |",
             "|---|---|---|---|---|"]
    for name, s in med.items():
        mb = stats.get(name, {}).get("x_bytes_per_pass")
        lines.append(f"| {name} | {s:.3f} | {s / f64:.2f} | {s / sk:.2f} | {'' if mb is None else f'{mb / 1e6:.0f}'} |")
    lines += ["", f"Coefficients, float32 against float64: {rel:.1e} relative.", "",
              f"| MLPClassifier, {EPOCHS} epochs of Adam, {MLP_ROWS:,} rows | float64 samples/s | float32 samples/s "
              "| float32 / float64 |", "|---|---|---|---|"]
    for cell, r in mlp.items():
        lines.append(f"| {cell} | {r['float64']:,.0f} | {r['float32']:,.0f} | {r['float32'] / r['float64']:.2f} |")
    write_results(out_dir, "float32", record, lines)


def main(argv=None):
    shape_main(run, __doc__, rows=1_000_000, argv=argv)


if __name__ == "__main__":
    main()
