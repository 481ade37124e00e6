"""The GLM families at one shape, ours against scikit-learn, in one run: each family's fit time.

    python benchmarks/bench_glm_families.py                       # 1M x 50, medians of 3
    python benchmarks/bench_glm_families.py --rows 20000 --repeat 1   # a smoke test

Unset ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` in the command that times against scikit-learn.

The data: X standard normal (float64, C order) scaled by 0.1, the linear predictor ``0.3 + X @ w`` with
``w`` normal / sqrt(d), y drawn from each family's distribution with that mean (Poisson counts; Gamma of shape
2; compound Poisson-Gamma for Tweedie 1.5, which has exact zeros; inverse Gaussian, as Tweedie power 3).
One NumPy array each, the same for both contestants.

Contestants, alternating, ``--repeat`` times (medians reported), ``alpha=1e-4``, ``solver="lbfgs"``,
``tol=1e-6``, ``max_iter=1000`` (scikit-learn's objective): scikit-learn's ``PoissonRegressor``,
``GammaRegressor`` and ``TweedieRegressor(power=p, link="log")`` on ``--cores`` BLAS threads, and ours of the
same names on ``--cores`` worker processes of one thread each (a process-based LocalCluster, warm: one untimed
fit of each on 1,000 rows first).  Each row: seconds, iterations, the largest relative difference of the
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

ALPHA, TOL = 1e-4, 1e-6
FAMILIES = [("poisson", None), ("gamma", None), ("tweedie", 1.5), ("tweedie", 3.0)]


def make_data(family, power, n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = np.ascontiguousarray(0.1 * rng.standard_normal((n, d)))
    mu = np.exp(0.3 + X @ (rng.standard_normal(d) / np.sqrt(d)))
    if family == "poisson":
        y = rng.poisson(mu).astype(np.float64)
    elif family == "gamma":
        y = rng.gamma(2.0, mu / 2.0)
    elif power == 3.0:
        y = rng.wald(mu, 4.0)  # inverse Gaussian of mean mu
    else:  # compound Poisson-Gamma (Tweedie 1 < p < 2): a Poisson number of Gamma summands, zeros included
        p, phi = power, 1.0
        lam = mu ** (2 - p) / (phi * (2 - p))
        shape, scale = (2 - p) / (p - 1), phi * (p - 1) * mu ** (p - 1)
        counts = rng.poisson(lam)
        y = np.where(counts > 0, rng.gamma(np.maximum(counts * shape, 1e-12), scale), 0.0)
    return X, y


def estimators(family, power, client):
    import sklearn.linear_model as skl

    import dask_estimators as de

    common = {"alpha": ALPHA, "tol": TOL, "max_iter": 1000, "solver": "lbfgs"}
    if family == "poisson":
        return skl.PoissonRegressor(**common), de.PoissonRegressor(client=client, **common)
    if family == "gamma":
        return skl.GammaRegressor(**common), de.GammaRegressor(client=client, **common)
    return (skl.TweedieRegressor(power=power, link="log", **common),
            de.TweedieRegressor(power=power, link="log", client=client, **common))


def run(client, n, d, cores, repeat):
    from sklearn.base import clone
    from threadpoolctl import threadpool_limits

    rows = []
    for family, power in FAMILIES:
        X, y = make_data(family, power, n, d)
        sk, ours = estimators(family, power, client)
        clone(ours).fit(X[:1000], y[:1000])  # not timed: the workers' first use of the kernel
        clone(sk).fit(X[:1000], y[:1000])
        times, fitted = {"sklearn": [], "ours": []}, {}
        for _ in range(repeat):
            with threadpool_limits(cores):
                t = time.perf_counter()
                fitted["sklearn"] = clone(sk).fit(X, y)
                times["sklearn"].append(time.perf_counter() - t)
            t = time.perf_counter()
            fitted["ours"] = clone(ours).fit(X, y)
            times["ours"].append(time.perf_counter() - t)
        ref = np.append(fitted["sklearn"].coef_, fitted["sklearn"].intercept_)
        label = family if power is None else f"tweedie {power:g}"
        for what in ("sklearn", "ours"):
            m = fitted[what]
            coef = np.append(m.coef_, m.intercept_)
            rows.append({"family": label, "n": n, "d": d, "what": what, "seconds": statistics.median(times[what]),
                         "n_iter": int(np.ravel(m.n_iter_)[0]),
                         "max_rel_coef_diff": float(np.max(np.abs(coef - ref) / np.maximum(np.abs(ref), 1e-3)))})
        rows[-1]["ratio"] = rows[-1]["seconds"] / rows[-2]["seconds"]
        print(f"  {label} done", file=sys.stderr, flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_engine import _table

    with LocalCluster(n_workers=args.cores, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        rows = run(client, args.rows, args.features, args.cores, args.repeat)
    print(_table(rows, ["family", "n", "d", "what", "seconds", "ratio", "n_iter", "max_rel_coef_diff"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
