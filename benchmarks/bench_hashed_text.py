"""Hashed text: a linear model on a CSR matrix whose columns mostly store no value, ours against scikit-learn.

    python benchmarks/bench_hashed_text.py                 # 20,000 documents, 2^18 hashed columns, 20 classes
    python benchmarks/bench_hashed_text.py --rows 5000     # a smoke test

The documents: ``--rows`` strings of 30 words drawn from a vocabulary of ``--vocabulary`` words, each class
shifting which words it draws; ``HashingVectorizer(n_features=2**--bits, alternate_sign=False)`` makes the
CSR matrix, whose stored columns are about the vocabulary's (the rest of the hash space stores nothing).

Contestants, in this one process, alternating, ``--repeat`` times (medians reported):

* ``sklearn``: ``sklearn.svm.LinearSVC(dual=False)`` and ``sklearn.linear_model.LogisticRegression()`` on
  the CSR matrix;
* ``ours``: ``dask_estimators.LinearSVC(dual=False)`` and ``LogisticRegression()`` on the same matrix, on a
  ``LocalCluster(n_workers=--cores, threads_per_worker=1)`` (started before, and warmed by a small fit);
* ``ours, first fit on a fresh cluster``: the same fit, once, as the first on a ``Client(LocalCluster(...))``
  started just before it (its cluster's start not timed);
* and two searches on the first ``--cv-rows`` documents (0 leaves them out): ``LogisticRegressionCV(Cs=3,
  cv=3)``, scikit-learn's and ours, and ``GridSearchCV(LogisticRegression(), {"C": [0.1, 1, 10]}, cv=3)``,
  scikit-learn's search (``n_jobs=-1``) around scikit-learn's estimator and ours
  (``dask_estimators.model_selection``) around ours.

Each row gives the seconds of ``fit``, the ratio to scikit-learn's, the growth of the client's resident
memory over the fit (the largest, sampled every 20 ms), the workers' summed peak over their resident memory
before the fit, the columns the solver saw (``fit_stats_["solved_columns"]``; all of them without it) and
the agreement of the predictions with scikit-learn's.  Writes ``hashed_text.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def make_text(n, vocabulary, n_classes, bits, seed=0):
    from sklearn.feature_extraction.text import HashingVectorizer

    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocabulary)])
    y = rng.integers(0, n_classes, n)
    docs = [" ".join(words[(rng.integers(0, vocabulary, 30) + 37 * c) % vocabulary]) for c in y]
    return HashingVectorizer(n_features=2**bits, alternate_sign=False).fit_transform(docs), y


class Peak:
    """The largest value of ``read()`` over a block, sampled every 20 ms in a thread, less its value before."""

    def __init__(self, read):
        self.read, self.peak, self._stop = read, 0.0, threading.Event()

    def __enter__(self):
        self.base = self.read()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read() - self.base)
            self._stop.wait(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read() - self.base)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--vocabulary", type=int, default=5_000)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--bits", type=int, default=18)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cv-rows", type=int, default=10_000, help="LogisticRegressionCV's documents; 0: none")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    import psutil
    from distributed import Client, LocalCluster
    from sklearn import linear_model, svm
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = make_text(args.rows, args.vocabulary, args.classes, args.bits)
    me = psutil.Process()
    models = {"LinearSVC(dual=False)": (lambda: svm.LinearSVC(dual=False), lambda: de.LinearSVC(dual=False), X, y),
              "LogisticRegression()": (linear_model.LogisticRegression, de.LogisticRegression, X, y)}
    if args.cv_rows:
        from sklearn import model_selection

        from dask_estimators.model_selection import GridSearchCV

        grid = {"C": [0.1, 1.0, 10.0]}
        models[f"LogisticRegressionCV(Cs=3, cv=3), {args.cv_rows} documents"] = (
            lambda: linear_model.LogisticRegressionCV(Cs=3, cv=3), lambda: de.LogisticRegressionCV(Cs=3, cv=3),
            X[: args.cv_rows], y[: args.cv_rows])
        models[f"GridSearchCV(LogisticRegression(), 3 C, cv=3), {args.cv_rows} documents"] = (
            lambda: model_selection.GridSearchCV(linear_model.LogisticRegression(), grid, cv=3, n_jobs=-1),
            lambda: GridSearchCV(de.LogisticRegression(), grid, cv=3), X[: args.cv_rows], y[: args.cv_rows])
    rows = []
    with LocalCluster(n_workers=args.cores, threads_per_worker=1) as cluster, Client(cluster) as client:
        de.LogisticRegression().fit(X[:500], y[:500])

        def workers_rss():
            return sum(client.run(lambda: __import__("psutil").Process().memory_info().rss).values()) / 2**20

        for name, (theirs, ours, Xm, ym) in models.items():
            got = {"sklearn": [], "ours": []}
            for _ in range(args.repeat):
                for who, make in (("sklearn", theirs), ("ours", ours)):
                    with Peak(lambda: me.memory_info().rss / 2**20) as mem, \
                            Peak(workers_rss if who == "ours" else (lambda: 0.0)) as wmem:
                        t = time.perf_counter()
                        with threadpool_limits(args.cores):
                            est = make().fit(Xm, ym)
                        seconds = time.perf_counter() - t
                    got[who].append((seconds, mem.peak, wmem.peak, est))
            got["ours, first fit on a fresh cluster"] = [_first_fit(ours, Xm, ym, args.cores, me)]
            ref = got["sklearn"][0][3]
            for who in got:
                est = got[who][0][3]
                s = statistics.median(g[0] for g in got[who])
                rows.append({
                    "model": name, "who": who, "seconds": round(s, 3),
                    "ratio": round(s / statistics.median(g[0] for g in got["sklearn"]), 3),
                    "client_mb": round(statistics.median(g[1] for g in got[who]), 1),
                    "workers_mb": round(statistics.median(g[2] for g in got[who]), 1) if who == "ours" else None,
                    "solved_columns": getattr(getattr(est, "best_estimator_", est), "fit_stats_", {}).get(
                        "solved_columns", X.shape[1]),
                    "agree": round(float(np.mean(est.predict(Xm) == ref.predict(Xm))), 4),
                })
    config = dict(vars(args), out=str(args.out), columns_stored=int(len(np.unique(X.indices))), nnz=int(X.nnz))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hashed_text.json").write_text(json.dumps({"config": config, "rows": rows}, indent=1))
    print(f"{args.rows} documents x 2^{args.bits} columns, {config['columns_stored']} stored, {args.classes} classes")
    print("| model | who | s | / scikit-learn | client MB | workers MB | solved columns | agree |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['who']} | {r['seconds']} | {r['ratio']} | {r['client_mb']} | "
              f"{r['workers_mb'] if r['workers_mb'] is not None else ''} | {r['solved_columns']} | {r['agree']} |")


def _first_fit(make, X, y, cores, me):
    """``make().fit(X, y)`` as the first fit on a ``Client(LocalCluster(...))`` started just before (not timed):
    (seconds, the client's memory growth, 0 (the workers' is not sampled), the estimator)."""
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    with LocalCluster(n_workers=cores, threads_per_worker=1) as cluster, Client(cluster):
        with Peak(lambda: me.memory_info().rss / 2**20) as mem:
            t = time.perf_counter()
            with threadpool_limits(cores):
                est = make().fit(X, y)
            seconds = time.perf_counter() - t
    return seconds, mem.peak, 0.0, est


if __name__ == "__main__":
    main()
