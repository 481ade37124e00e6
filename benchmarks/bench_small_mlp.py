"""The default MLPs on scikit-learn's bundled data sets: ours against scikit-learn's, in one run.

    python benchmarks/bench_small_mlp.py                # every set, medians of 3
    python benchmarks/bench_small_mlp.py --repeat 1     # a smoke run (no timing claims)

What a first script fits: ``MLPClassifier()`` / ``MLPRegressor()`` with their
defaults (100 ReLU units, Adam, batches of 200, up to ``max_iter`` epochs
with scikit-learn's stopping rule) on standardised iris, diabetes, breast
cancer and digits, and one ``make_classification(20,000, 40)``.  The four
bundled sets also run with ``max_iter=1000`` and no stopping rule
(``tol=0``), where the cost of an epoch shows.  These networks are small,
so each epoch is a millisecond or two of arithmetic: what two ranks pay to
meet at every step, and each epoch's and each fit's fixed costs, decide
the ratio.

Per set, alternating: scikit-learn's fit (``--cores`` BLAS threads), then
ours on the embedded cluster (``--cores`` worker processes of one thread;
started and warmed by one untimed fit before the first set).  Both fits must
run the same number of epochs.  The ratio is scikit-learn's median seconds
over ours.  Writes ``small_mlp.json`` and ``small_mlp.md`` to ``--out``
(default ``benchmarks/results``).  Nothing here gates CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_engine import RESULTS, _table  # noqa: E402
from bench_mlp import environment  # noqa: E402


def data_sets():
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    out = {}
    for name, load, classify in [("iris", datasets.load_iris, True), ("diabetes", datasets.load_diabetes, False),
                                 ("breast cancer", datasets.load_breast_cancer, True),
                                 ("digits", datasets.load_digits, True)]:
        X, y = load(return_X_y=True)
        if not classify:
            y = (y - y.mean()) / y.std()
        out[name] = (StandardScaler().fit_transform(X), y, classify)
    X, y = datasets.make_classification(20_000, 40, n_informative=10, random_state=0)
    out["make_classification(20,000, 40)"] = (StandardScaler().fit_transform(X), y, True)
    return out


def _fit(module, classify, X, y, params):
    from sklearn.exceptions import ConvergenceWarning

    est = (module.MLPClassifier if classify else module.MLPRegressor)(random_state=0, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(X, y)
        return time.perf_counter() - t0, est


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import sklearn.neural_network as sk
    from threadpoolctl import threadpool_limits

    import dask_estimators as de
    from dask_estimators.engine.cluster import client as embedded

    sets = data_sets()
    client = embedded.get_embedded_client(args.cores)
    rows = []
    try:
        X, y, _ = sets["iris"]
        _fit(de, True, X, y, {"client": client})  # the cluster's first fit: its imports and compilation
        for runs in ({}, {"max_iter": 1000, "tol": 0.0, "n_iter_no_change": 10**9}):
            for name, (X, y, classify) in sets.items():
                if runs and X.shape[0] > 5_000:  # 1000 epochs of 20,000 rows: minutes, and no new finding
                    continue
                sk_s, ours_s = [], []
                for _ in range(args.repeat):
                    with threadpool_limits(args.cores):
                        s, ref = _fit(sk, classify, X, y, runs)
                    o, est = _fit(de, classify, X, y, {**runs, "client": client})
                    assert est.n_iter_ == ref.n_iter_, (name, est.n_iter_, ref.n_iter_)
                    sk_s.append(s)
                    ours_s.append(o)
                rec = {"data set": name, "rows": X.shape[0], "epochs": ref.n_iter_, "tol": "0" if runs else "1e-4",
                       "scikit-learn s": statistics.median(sk_s), "ours s": statistics.median(ours_s),
                       "ours' epochs s": sum(r["seconds"] for r in est.history_),
                       "strategy": est.fit_stats_["strategy"]}
                rec["ratio"] = rec["scikit-learn s"] / rec["ours s"]
                rows.append(rec)
                print(f"{name:34s} {rec['epochs']:5d} epochs  scikit-learn {rec['scikit-learn s']:.3f} s  "
                      f"ours {rec['ours s']:.3f} s  ratio {rec['ratio']:.2f}", flush=True)
    finally:
        embedded.close_embedded_cluster()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "small_mlp.json").write_text(json.dumps({"env": environment(args.cores), "rows": rows}, indent=1))
    cols = ["data set", "rows", "tol", "epochs", "scikit-learn s", "ours s", "ours' epochs s", "ratio"]
    (args.out / "small_mlp.md").write_text(
        "Default MLPs on small data sets: scikit-learn's seconds / ours (medians of "
        f"{args.repeat}; `python benchmarks/bench_small_mlp.py`)\n\n" + _table(rows, cols))


if __name__ == "__main__":
    main()
