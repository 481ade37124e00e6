"""Cross-validated search on one placement: ours against scikit-learn's CV estimators, in one run.

    python benchmarks/bench_cv.py                 # 200k x 100 and 1M x 100
    python benchmarks/bench_cv.py --quick         # 200k x 100 only
    python benchmarks/bench_cv.py --rows 2000     # a smoke run (no timing claims)

Parts, each next to its anchor in this one run (``--repeat`` times, alternating; medians), after
untimed warm-up fits of ours on 20k rows (a fresh cluster's first fit is measured by
``bench_first_contact.py``):

1. ``LogisticRegressionCV`` with 5 values of C and 5 folds on
   ``make_classification(n, 100)``:

   * ``sklearn``: ``sklearn.linear_model.LogisticRegressionCV(Cs=5, cv=5)``
     (lbfgs, warm-started path), ``--cores`` BLAS threads;
   * ``ours-batched``: ``dask_estimators.LogisticRegressionCV(Cs=5, cv=5)``,
     the folds' L-BFGS runs in lockstep (one pass over X per round for all
     folds), on a ``LocalCluster(n_workers=--cores, threads_per_worker=1)``;
   * ``ours-sequential``: the same with ``path_method="sequential"`` (the
     folds one after the other, each with the fused one-model kernel).

   Both of ours include placing the data.  Each row gives the seconds, the
   ratio to scikit-learn, the distributed rounds, and whether ``C_`` is
   scikit-learn's.
2. ``LinearRegressionCV(alphas=5, l1_ratio=0.5)`` against ``ElasticNetCV``
   with the same grid size on ``make_regression(n, 100)``: ``ours`` with the
   default solver (coordinate descent on each fold's Gram matrix, summed on
   the workers in one pass), and ``ours-...-lbfgs-paths`` with
   ``solver="lbfgs"`` (the folds' paths, one distributed round per step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

N_CS, N_FOLDS = 5, 5


def _cluster(cores):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    return cluster, Client(cluster, set_as_default=False)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def logistic(client, n, *, cores=2, repeat=1, d=100):
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegressionCV as SkCV
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = make_classification(n, d, n_informative=d // 2, random_state=0)

    def sk():
        with threadpool_limits(cores), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return SkCV(Cs=N_CS, cv=N_FOLDS, l1_ratios=None, scoring=None, use_legacy_attributes=True).fit(X, y)

    def ours(method):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return de.LogisticRegressionCV(Cs=N_CS, cv=N_FOLDS, path_method=method, client=client).fit(X, y)

    runs = {"sklearn": sk, "ours-batched": lambda: ours("batched"), "ours-sequential": lambda: ours("sequential")}
    times: dict = {k: [] for k in runs}
    fitted: dict = {}
    for _ in range(repeat):
        for key, fn in runs.items():
            t, fitted[key] = _timed(fn)
            times[key].append(t)
    ref = statistics.median(times["sklearn"])
    rows = []
    for key in runs:
        est = fitted[key]
        rows.append({"n": n, "d": d, "what": key, "seconds": statistics.median(times[key]),
                     "ratio_to_sklearn": statistics.median(times[key]) / ref,
                     "rounds": getattr(est, "fit_stats_", {}).get("rounds"), "C_": float(est.C_[0]),
                     "same_C_as_sklearn": bool(est.C_[0] == fitted["sklearn"].C_[0])})
    return rows


def elastic_net(client, n, *, cores=2, repeat=1, d=100):
    from sklearn.datasets import make_regression
    from sklearn.linear_model import ElasticNetCV
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = make_regression(n, d, n_informative=d // 2, noise=10.0, random_state=0)

    def sk():
        with threadpool_limits(cores):
            return ElasticNetCV(alphas=N_CS, l1_ratio=0.5, cv=N_FOLDS).fit(X, y)

    def ours(solver="auto"):
        return de.LinearRegressionCV(alphas=N_CS, l1_ratio=0.5, cv=N_FOLDS, tol=1e-6, solver=solver,
                                     client=client).fit(X, y)

    # "auto" is coordinate descent on the Gram sums (one pass over X); "lbfgs" the fold paths, a round per step
    runs = {"sklearn-ElasticNetCV": sk, "ours-LinearRegressionCV": ours,
            "ours-LinearRegressionCV-lbfgs-paths": lambda: ours("lbfgs")}
    times: dict = {k: [] for k in runs}
    fitted: dict = {}
    for _ in range(repeat):
        for key, fn in runs.items():
            t, fitted[key] = _timed(fn)
            times[key].append(t)
    ref = statistics.median(times["sklearn-ElasticNetCV"])
    sk_alpha = fitted["sklearn-ElasticNetCV"].alpha_
    return [{"n": n, "d": d, "what": key, "seconds": statistics.median(times[key]),
             "ratio_to_sklearn": statistics.median(times[key]) / ref, "alpha_": float(fitted[key].alpha_),
             "same_alpha_as_sklearn": bool(np.isclose(fitted[key].alpha_, sk_alpha, rtol=1e-9))} for key in runs]


TABLES = {
    "logistic": ("LogisticRegressionCV, 5 C x 5 folds", ["n", "what", "seconds", "ratio_to_sklearn", "rounds",
                                                          "C_", "same_C_as_sklearn"]),
    "elastic_net": ("LinearRegressionCV against ElasticNetCV, 5 alphas x 5 folds",
                    ["n", "what", "seconds", "ratio_to_sklearn", "alpha_", "same_alpha_as_sklearn"]),
}


def _warm_up(client):
    """Untimed fits on 20k rows: the fresh cluster's workers load their kernels before the timed runs.

    The first fit on a fresh cluster pays that once (about 2 s; see
    ``bench_first_contact.py``); the rows here compare the searches themselves.
    """
    import warnings

    from sklearn.datasets import make_classification, make_regression

    import dask_estimators as de

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        X, y = make_classification(20_000, 100, random_state=1)
        for method in ("batched", "sequential"):
            de.LogisticRegressionCV(Cs=2, cv=2, path_method=method, client=client).fit(X, y)
        X, y = make_regression(20_000, 100, random_state=1)
        for solver in ("auto", "lbfgs"):
            de.LinearRegressionCV(alphas=2, cv=2, solver=solver, client=client).fit(X, y)


def run(cores=2, quick=False, rows=None, repeat=1):
    sizes = [rows] if rows else ([200_000] if quick else [200_000, 1_000_000])
    out = {"logistic": [], "elastic_net": []}
    cluster, client = _cluster(cores)
    try:
        _warm_up(client)
        for n in sizes:
            out["logistic"] += logistic(client, n, cores=cores, repeat=repeat)
            out["elastic_net"] += elastic_net(client, n, cores=cores, repeat=repeat)
            print(f"  cv n={n:,} done", file=sys.stderr, flush=True)
    finally:
        client.close()
        cluster.close()
    return out


def summary_rows(out):
    """README rows: our lockstep search against scikit-learn's CV estimators."""
    rows = []
    for r in out["logistic"]:
        if r["what"] == "ours-batched":
            sk = next(s for s in out["logistic"] if s["n"] == r["n"] and s["what"] == "sklearn")
            rows.append({"benchmark": f"LogisticRegressionCV 5 C x 5 folds, {r['n']:,}x{r['d']}, s",
                         "ours": r["seconds"], "anchor": f"scikit-learn {sk['seconds']:.3g}",
                         "ours / anchor": r["ratio_to_sklearn"]})
    for r in out["elastic_net"]:
        if r["what"] == "ours-LinearRegressionCV":
            sk = next(s for s in out["elastic_net"] if s["n"] == r["n"] and s["what"].startswith("sklearn"))
            rows.append({"benchmark": f"LinearRegressionCV vs ElasticNetCV 5 alphas x 5 folds, {r['n']:,}x{r['d']}, s",
                         "ours": r["seconds"], "anchor": f"scikit-learn {sk['seconds']:.3g}",
                         "ours / anchor": r["ratio_to_sklearn"]})
    return rows


def markdown(out):
    from bench_engine import _table

    parts = []
    for key, (title, cols) in TABLES.items():
        parts += [f"\n## {title}\n\n", _table(out[key], cols)]
    return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k rows only")
    ap.add_argument("--rows", type=int, help="one size of this many rows (smoke runs)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    out = run(args.cores, args.quick, args.rows, args.repeat)
    print(markdown(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
