"""Small fits: scikit-learn's bundled data sets and a grid search over them, ours against scikit-learn.

    python benchmarks/bench_small_fits.py              # medians of 5 (the searches: of 3)
    python benchmarks/bench_small_fits.py --repeat 3

A linear fit of a small problem (under ``dask-estimators.worker-solve-below``
stored values times outputs) places its data on one worker and runs its
whole solve there, in one task.  Per workload, in this one process,
alternating, on one ``LocalCluster(n_workers=--cores, threads_per_worker=1)``
started and warmed up first (a fresh cluster's first fit is
``bench_first_contact.py``'s):

* ``sklearn``: scikit-learn's estimator of the same objective, ``--cores`` BLAS threads;
* ``ours``: the default, one task on one worker;
* ``ours-rounds``: the same fit with ``worker-solve-below = 0``: the data on
  every worker, one distributed round per evaluation (what every fit did before).

The grid search is scikit-learn's ``GridSearchCV(cv=5)`` over 5 values of C: 26 fits, each
placing its own fold; ``dask_estimators.model_selection.GridSearchCV`` places the data once and runs the 25
fits on one worker in one task, and the refit in a second; ``LogisticRegressionCV`` places its data once and runs
the 50 path fits and the refit of its search on one worker, in two tasks.
The back-to-back workload is 10 fits of iris in a loop, each starting as the
last ends (``dask-estimators.send-interval``).  Seconds are medians; the
ratios are ours / scikit-learn.

Then the threshold: ``LogisticRegression`` on ``n x 20`` Gaussian data
(binary) with ``n x 20`` around the default threshold (2**20 to 2**23 values),
the solver on one worker (the setting above the size) against the rounds
(the setting at 0).  Writes ``small_fits.json`` and ``small_fits.md`` to ``--out``.
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

from bench_engine import RESULTS, _table  # noqa: E402


class _BackToBack:
    """``k`` fits of fresh estimators one after the other, as a script's loop or a search runs them."""

    def __init__(self, make, k):
        self.make, self.k = make, k

    def fit(self, X, y):
        for _ in range(self.k):
            self.make().fit(X, y)
        return self


def _workloads():
    from sklearn import linear_model as lm
    from sklearn import svm
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
    from sklearn.model_selection import GridSearchCV
    from sklearn.preprocessing import StandardScaler

    import dask_estimators as de
    from dask_estimators.model_selection import GridSearchCV as PlacedGridSearchCV

    iris = load_iris(return_X_y=True)
    Xc, yc = load_breast_cancer(return_X_y=True)
    cancer = (StandardScaler().fit_transform(Xc), yc)
    diabetes = load_diabetes(return_X_y=True)
    rng = np.random.default_rng(0)
    X3 = rng.normal(size=(5000, 20))
    script = (X3, (X3[:, 0] > 0).astype(int))
    grid = {"C": [0.01, 0.1, 1.0, 10.0, 100.0]}
    return [
        ("LogisticRegression, iris 150x4, 3 classes", iris,
         lambda c: de.LogisticRegression(client=c), lambda: lm.LogisticRegression()),
        ("LogisticRegression, breast cancer 569x30", cancer,
         lambda c: de.LogisticRegression(client=c), lambda: lm.LogisticRegression()),
        ("LogisticRegression, the three-line script's 5000x20", script,
         lambda c: de.LogisticRegression(client=c), lambda: lm.LogisticRegression()),
        ("LinearRegression, diabetes 442x10", diabetes,
         lambda c: de.LinearRegression(client=c), lambda: lm.LinearRegression()),
        ("PoissonRegressor, diabetes 442x10 (y / 100)", (diabetes[0], diabetes[1] / 100),
         lambda c: de.PoissonRegressor(client=c), lambda: lm.PoissonRegressor()),
        ("LinearSVC, breast cancer 569x30", cancer,
         lambda c: de.LinearSVC(client=c), lambda: svm.LinearSVC()),
        ("LogisticRegression, iris: 10 fits back to back", iris,
         lambda c: _BackToBack(lambda: de.LogisticRegression(client=c), 10),
         lambda: _BackToBack(lm.LogisticRegression, 10)),
        ("GridSearchCV(LogisticRegression, 5 C, cv=5), breast cancer: 26 fits", cancer,
         lambda c: GridSearchCV(de.LogisticRegression(client=c), grid, cv=5),
         lambda: GridSearchCV(lm.LogisticRegression(), grid, cv=5)),
        ("dask_estimators' GridSearchCV, the same search", cancer,
         lambda c: PlacedGridSearchCV(de.LogisticRegression(client=c), grid, cv=5),
         lambda: GridSearchCV(lm.LogisticRegression(), grid, cv=5)),
        ("LogisticRegressionCV(10 C, cv=5), breast cancer: 51 fits", cancer,
         lambda c: de.LogisticRegressionCV(client=c), lambda: lm.LogisticRegressionCV()),
        ("LogisticRegressionCV(10 C, cv=5), iris, 3 classes: 51 fits", iris,
         lambda c: de.LogisticRegressionCV(client=c), lambda: lm.LogisticRegressionCV()),
    ]


def _seconds(make, X, y):
    t0 = time.perf_counter()
    make().fit(X, y)
    return time.perf_counter() - t0


def run(cores=2, repeat=5):
    import dask
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    rows = []
    with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (X, y), ours, sk in _workloads():
            reps = max(1, repeat // 2 + 1) if "CV" in name else repeat
            off = {"dask-estimators.worker-solve-below": 0}
            first = _seconds(lambda: ours(client), X, y)  # this workload's first fit on the (warm) cluster
            with dask.config.set(off):
                _seconds(lambda: ours(client), X, y)
            times = {"sklearn": [], "ours": [], "ours-rounds": []}
            for _ in range(reps):
                with threadpool_limits(cores):
                    times["sklearn"].append(_seconds(sk, X, y))
                times["ours"].append(_seconds(lambda: ours(client), X, y))
                with dask.config.set(off):
                    times["ours-rounds"].append(_seconds(lambda: ours(client), X, y))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append({"workload": name, "sklearn s": med["sklearn"], "ours s": med["ours"],
                         "ours first s": first, "ours-rounds s": med["ours-rounds"],
                         "ours / sklearn": med["ours"] / med["sklearn"],
                         "ours-rounds / sklearn": med["ours-rounds"] / med["sklearn"],
                         "repeat": reps, "times": times})
            print(f"  {name}: ours {med['ours']:.4f} s, rounds {med['ours-rounds']:.4f} s, "
                  f"sklearn {med['sklearn']:.4f} s", file=sys.stderr, flush=True)
        threshold = _threshold(client, repeat)
    return {"workloads": rows, "threshold": threshold}


def _threshold(client, repeat):
    import dask

    import dask_estimators as de

    rng = np.random.default_rng(0)
    out = []
    for values in (2**20, 2**21, 2**22, 2**23):
        n = values // 20
        X = rng.normal(size=(n, 20))
        y = (X[:, 0] + X[:, 1] + rng.normal(size=n) > 0).astype(int)
        times = {"on one worker": [], "rounds": []}
        for key, below in (("on one worker", 2**40), ("rounds", 0)):
            with dask.config.set({"dask-estimators.worker-solve-below": below}):
                _seconds(lambda: de.LogisticRegression(client=client), X, y)  # this size's first fit, untimed
        for _ in range(max(1, repeat // 2 + 1)):
            for key, below in (("on one worker", 2**40), ("rounds", 0)):
                with dask.config.set({"dask-estimators.worker-solve-below": below}):
                    times[key].append(_seconds(lambda: de.LogisticRegression(client=client), X, y))
        med = {k: statistics.median(v) for k, v in times.items()}
        out.append({"values": values, "rows": n, "on one worker s": med["on one worker"], "rounds s": med["rounds"],
                    "one worker / rounds": med["on one worker"] / med["rounds"], "times": times})
        print(f"  threshold {values:,} values: one worker {med['on one worker']:.3f} s, rounds {med['rounds']:.3f} s",
              file=sys.stderr, flush=True)
    return out


COLS = ["workload", "sklearn s", "ours s", "ours / sklearn", "ours-rounds s", "ours-rounds / sklearn", "ours first s"]


def markdown(out):
    return ("## Small fits: one task on one worker\n\n"
            "Medians (`ours first s`: the workload's first fit, on a warm cluster); `ours-rounds`: the same fit "
            "with `dask-estimators.worker-solve-below = 0`, one distributed round per evaluation.\n\n"
            + _table(out["workloads"], COLS)
            + "\nAround the threshold: `LogisticRegression` on n x 20 (binary), the solver on one worker against "
              "the rounds, medians.\n\n"
            + _table(out["threshold"], ["values", "rows", "on one worker s", "rounds s", "one worker / rounds"]))


def summary_rows(out):
    """The README table's rows: the first workload (iris) and the grid search, ours against scikit-learn."""
    rows = out["workloads"]
    return [{"benchmark": f"{r['workload']}, s", "ours": r["ours s"], "anchor": f"sklearn {r['sklearn s']:.3g}",
             "ours / anchor": r["ours / sklearn"]}
            for r in (rows[0], next(r for r in rows if r["workload"].startswith("GridSearchCV")))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    out = run(args.cores, args.repeat)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "small_fits.json").write_text(json.dumps(out, indent=1))
    (args.out / "small_fits.md").write_text(markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
