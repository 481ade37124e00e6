"""LogisticRegression fit time against scikit-learn's lbfgs on make_classification(n, 100), 2 local workers.

    python benchmarks/bench_logistic.py 1000000
    python benchmarks/bench_logistic.py 200000

Both fits run in the same process, twice each, alternating; the ratio is ours / scikit-learn's.
"""

import sys
import time

from distributed import Client, LocalCluster
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.metrics import log_loss

import dask_estimators as de


def main(n):
    X, y = make_classification(n, 100, random_state=0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster):
        de.LogisticRegression().fit(X[:1000], y[:1000])  # warm the workers (imports)
        for _ in range(2):
            t0 = time.perf_counter()
            sk = SkLogisticRegression().fit(X, y)
            t_sk = time.perf_counter() - t0
            t0 = time.perf_counter()
            ours = de.LogisticRegression().fit(X, y)
            t_ours = time.perf_counter() - t0
            st = ours.fit_stats_
            print(f"n={n} sklearn {t_sk:.2f}s ({sk.n_iter_[0]} it)  ours {t_ours:.2f}s ({ours.n_iter_[0]} it, "
                  f"{st['rounds']} rounds, {st['seconds']:.2f}s in rounds)  ratio {t_ours / t_sk:.2f}")
        print(f"accuracy {sk.score(X, y):.6f} / {ours.score(X, y):.6f}; "
              f"log-loss {log_loss(y, sk.predict_proba(X)):.10f} / {log_loss(y, ours.predict_proba(X)):.10f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
