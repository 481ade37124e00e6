"""LogisticRegression fit time on make_classification(n, 100), C=1, next to its anchors, in one run.

    python benchmarks/bench_logistic.py 1000000          # and 200000; --dask-ml-rows N to cap dask-ml

Contestants, each timed in this one process, alternating, ``--repeat`` times (the median is reported):

* ``sklearn``: ``sklearn.linear_model.LogisticRegression(solver="lbfgs")`` with
  BLAS and OpenMP limited to ``--cores`` threads (threadpoolctl);
* ``numpy+scipy``: the same objective in NumPy (``X @ w``, ``logaddexp``,
  ``X.T @ g``) minimised by ``scipy.optimize.minimize(method="L-BFGS-B")`` in
  this process, ``--cores`` BLAS threads: the single-process limit, with no
  validation or bookkeeping;
* ``dask-ml``: ``dask_ml.linear_model.LogisticRegression(solver="lbfgs")`` on a
  dask array of one chunk per worker (when dask-ml is installed: the ``bench`` extra);
* ``ours``: ``dask_estimators.LogisticRegression()`` on a process-based
  ``LocalCluster(n_workers=--cores, threads_per_worker=1)``; the fit time
  includes placing the data on the workers.

Each row gives the seconds (the median over the repeats, and the first
repeat's alone: ours' first fit of a size allocates the shared memory that
later fits of about that size reuse), the ratio to scikit-learn, iterations,
and the accuracy and log-loss on the training data (the targets compare them
to 4 decimals).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.metrics import log_loss
from threadpoolctl import threadpool_limits


class NumpyLogistic:
    """Binary logistic regression, sklearn's objective (C=1, intercept unpenalised), NumPy + scipy L-BFGS-B."""

    def __init__(self, C=1.0, tol=1e-4, max_iter=100):
        self.C, self.tol, self.max_iter = C, tol, max_iter

    def fit(self, X, y):
        n, d = X.shape
        t = (y == 1).astype(np.float64)
        l2 = 1.0 / (self.C * n)

        def fun(w):
            z = X @ w[:d] + w[d]
            f = np.logaddexp(0.0, z).sum() - t @ z
            g = expit(z) - t
            grad = np.empty(d + 1)
            grad[:d] = X.T @ g / n + l2 * w[:d]
            grad[d] = g.sum() / n
            return f / n + 0.5 * l2 * w[:d] @ w[:d], grad

        res = minimize(fun, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                       options={"maxiter": self.max_iter, "gtol": self.tol, "ftol": 64 * np.finfo(float).eps})
        self.coef_, self.intercept_, self.n_iter_ = res.x[None, :d], res.x[d:], np.array([res.nit])
        return self

    def predict_proba(self, X):
        p = expit(X @ self.coef_[0] + self.intercept_[0])
        return np.column_stack([1 - p, p])


def _dask_ml(X, y, workers):
    import dask.array as da
    from dask_ml.linear_model import LogisticRegression as DmlLogisticRegression

    chunk = -(-X.shape[0] // workers)
    Xd, yd = da.from_array(X, chunks=(chunk, -1)).persist(), da.from_array(y, chunks=chunk).persist()
    return DmlLogisticRegression(solver="lbfgs", C=1.0), Xd, yd


def _row(name, seconds, model, X, y, n_iter):
    p = model.predict_proba(X)[:, 1]
    return dict(what=name, seconds=seconds, n_iter=int(n_iter), accuracy=float(np.mean((p > 0.5) == (y == 1))),
                log_loss=float(log_loss(y, p)))


def run(client, n, *, cores=2, repeat=2, dask_ml_rows=None, d=100):
    """Time every contestant on make_classification(n, d); returns the rows (the first is scikit-learn)."""
    import dask_estimators as de

    X, y = make_classification(n, d, random_state=0)
    de.LogisticRegression().fit(X[:2000], y[:2000])  # worker imports and JIT out of the timings
    times = {k: [] for k in ("sklearn", "numpy+scipy", "ours")}
    models = {}
    for _ in range(repeat):
        with threadpool_limits(cores):
            t0 = time.perf_counter()
            models["sklearn"] = SkLogisticRegression().fit(X, y)
            times["sklearn"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            models["numpy+scipy"] = NumpyLogistic().fit(X, y)
            times["numpy+scipy"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        models["ours"] = de.LogisticRegression().fit(X, y)
        times["ours"].append(time.perf_counter() - t0)
    rows = [_row(k, statistics.median(times[k]), models[k], X, y, models[k].n_iter_[0]) for k in times]
    for r in rows:  # ours' first fit of this size pays for fresh shared memory; later ones reuse it (engine/data/_shm.py)
        r["first_seconds"] = times[r["what"]][0]
    rows[-1].update(rounds=models["ours"].fit_stats_["rounds"], seconds_in_rounds=models["ours"].fit_stats_["seconds"])
    try:
        import dask_ml  # noqa: F401
    except ImportError:
        dask_ml_rows = 0
    if dask_ml_rows is None or dask_ml_rows >= n:
        est, Xd, yd = _dask_ml(X, y, len(client.nthreads()))
        t0 = time.perf_counter()
        est.fit(Xd, yd)
        rows.append(_row("dask-ml", time.perf_counter() - t0, est, X, y, getattr(est, "n_iter_", -1) or -1))
        rows[-1]["first_seconds"] = rows[-1]["seconds"]
    base = rows[0]["seconds"]
    for r in rows:
        r.update(n=n, d=d, workers=cores, ratio_to_sklearn=r["seconds"] / base)
    ours = next(r["seconds"] for r in rows if r["what"] == "ours")
    for r in rows:
        r["ours_speedup"] = r["seconds"] / ours
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=1_000_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dask-ml-rows", type=int, default=None, help="run dask-ml only up to this n")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=args.cores, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        rows = run(client, args.n, cores=args.cores, repeat=args.repeat, dask_ml_rows=args.dask_ml_rows)
    for r in rows:
        print(f"{r['what']:12s} {r['seconds']:7.2f} s (first {r['first_seconds']:.2f} s)  "
              f"x{r['ratio_to_sklearn']:.2f} of sklearn  "
              f"ours {r['ours_speedup']:.1f}x faster  it={r['n_iter']}  acc={r['accuracy']:.6f}  "
              f"log-loss={r['log_loss']:.6f}")
    return rows


if __name__ == "__main__":
    main()
