"""LinearSVC's dual method on one shard against spread over the workers, with scikit-learn's LIBLINEAR as anchor.

    python benchmarks/bench_svm_dual.py                  # 20 features, 1k to 200k rows
    python benchmarks/bench_svm_dual.py --rows 1000 5000 # chosen sizes

For each size, alternating, ``--repeat`` times (medians reported), all with
``loss="hinge"``, ``dual=True``, ``C=0.1`` and ``tol=1e-4``:

* ``sklearn``: ``sklearn.svm.LinearSVC`` (LIBLINEAR, one thread);
* ``one shard``: ours with the data on one worker, up to 100 of LIBLINEAR's
  iterations per round (``dask-estimators.dual-one-shard-below`` above the size);
* ``spread``: ours with one shard per worker, one CoCoA+ pass per round
  (``dask-estimators.dual-one-shard-below = 0``).

Each row gives seconds, ``n_iter_``, the rounds, and ``ratio`` = seconds /
scikit-learn's.  Where ``spread`` overtakes ``one shard`` is where the default
of ``dask-estimators.dual-one-shard-below`` belongs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

KW = dict(loss="hinge", dual=True, C=0.1, tol=1e-4, max_iter=1000)


def run(client, rows=(1000, 10_000, 50_000, 200_000), d=20, repeat=3):
    import dask
    from sklearn.datasets import make_classification
    from sklearn.svm import LinearSVC as SkSVC

    import dask_estimators as de

    out = []
    de.LinearSVC(client=client, **KW).fit(*make_classification(200, d, random_state=0))  # the workers' imports
    for n in rows:
        X, y = make_classification(n, d, n_informative=10, random_state=0)
        times = {"sklearn": [], "one shard": [], "spread": []}
        fitted = {}
        for _ in range(repeat):
            t = time.perf_counter()
            fitted["sklearn"] = SkSVC(**KW).fit(X, y)
            times["sklearn"].append(time.perf_counter() - t)
            for what, below in (("one shard", 2**62), ("spread", 0)):
                with dask.config.set({"dask-estimators.dual-one-shard-below": below}):
                    t = time.perf_counter()
                    fitted[what] = de.LinearSVC(client=client, **KW).fit(X, y)
                    times[what].append(time.perf_counter() - t)
        sk = statistics.median(times["sklearn"])
        for what, ts in times.items():
            m = fitted[what]
            stats = getattr(m, "fit_stats_", {})
            out.append({"n": n, "d": d, "what": what, "seconds": statistics.median(ts),
                        "ratio": statistics.median(ts) / sk, "n_iter": int(np.ravel(m.n_iter_)[0]),
                        "shards": stats.get("n_shards", ""), "rounds": stats.get("dual_rounds", "")})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1000, 10_000, 50_000, 200_000])
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    from bench_engine import _table

    with LocalCluster(n_workers=args.cores, threads_per_worker=1, processes=True) as cluster, Client(cluster) as c:
        out = run(c, args.rows, args.features, args.repeat)
    print(_table(out, ["n", "d", "what", "seconds", "ratio", "n_iter", "shards", "rounds"]))


if __name__ == "__main__":
    main()
