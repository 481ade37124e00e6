"""Our GridSearchCV, and scikit-learn's around our LogisticRegression, against scikit-learn's search, in one run.

    python benchmarks/bench_search.py                          # 200,000 x 100, medians of 3
    python benchmarks/bench_search.py --rows 20000 --repeat 1  # a smoke run

``GridSearchCV(Pipeline([StandardScaler(), LogisticRegression()]), {C: 5 values}, cv=5)`` on
``make_classification(rows, 100)``: 25 fits and the refit.  Each fit of a candidate gets its fold's rows
cut anew, and the pipeline's scaler fitted anew, so the same fold reaches our estimator as a new NumPy
array with the same content five times.  Rows, in this one process, on one
``LocalCluster(n_workers=2, threads_per_worker=1)`` started and warmed up first:

* ``scikit-learn``: the search over scikit-learn's ``LogisticRegression`` with ``n_jobs=-1`` (the anchor);
* ``scikit-learn, n_jobs=None``: the same, one candidate at a time;
* ``ours: dask_estimators.model_selection.GridSearchCV``: our search over ours: the scaler fitted once per
  fold, each fold's scaled rows placed once, and the five candidates' fits on it in lockstep;
* ``ours, data kept``: the search over ours (``n_jobs=None``), the default ``dask-estimators.keep-placed``:
  each fold is placed once and the other candidates' fits find it by its content;
* ``ours, placed for every fit``: the same with ``keep-placed`` at 0, as every fit placed before.

Ours send the folds to the workers as to workers on other hosts (``dask-estimators.shared-memory`` false):
on the client's host NumPy input is handed over in shared memory, lives in the shards' actors, and is not
kept.

This machine sets ``OPENBLAS_CORETYPE``; run with it and ``OPENBLAS_L2_SIZE`` unset when comparing with
scikit-learn.  The same ``best_params_`` is checked, and ``mean_test_score`` to 1e-4.  Writes
``search.json`` and ``search.md`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import run_record, shape_main, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CS = [0.001, 0.01, 0.1, 1.0, 10.0]


def _search(estimator, n_jobs, ours=False):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if ours:
        from dask_estimators.model_selection import GridSearchCV
    pipe = Pipeline([("scale", StandardScaler()), ("clf", estimator)])
    return GridSearchCV(pipe, {"clf__C": CS}, cv=5, n_jobs=n_jobs)


def run(rows, cols, repeat, out_dir):
    import dask
    import distributed
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression as SkLogistic

    import dask_estimators as de
    from dask_estimators.session import release_kept

    X, y = make_classification(rows, cols, n_informative=cols // 2, random_state=0)
    rows_of = {
        "scikit-learn": lambda: _search(SkLogistic(max_iter=1000), -1),
        "scikit-learn, n_jobs=None": lambda: _search(SkLogistic(max_iter=1000), None),
        "ours: dask_estimators.model_selection.GridSearchCV": lambda: _search(de.LogisticRegression(max_iter=1000),
                                                                                None, ours=True),
        "ours, data kept": lambda: _search(de.LogisticRegression(max_iter=1000), None),
        "ours, placed for every fit": lambda: _search(de.LogisticRegression(max_iter=1000), None),
    }
    times = {k: [] for k in rows_of}
    fitted = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        _search(de.LogisticRegression(), None).fit(X[:5000], y[:5000])  # warm: imports, kernels
        release_kept()
        for _ in range(repeat):
            for name, make in rows_of.items():
                keep = 0 if name == "ours, placed for every fit" else dask.config.get("dask-estimators.keep-placed")
                with dask.config.set({"dask-estimators.keep-placed": keep, "dask-estimators.shared-memory": False}):
                    t0 = time.perf_counter()
                    fitted[name] = make().fit(X, y)
                    times[name].append(time.perf_counter() - t0)
                release_kept()
    sk = fitted["scikit-learn"]
    for name, s in fitted.items():
        assert s.best_params_ == sk.best_params_, (name, s.best_params_, sk.best_params_)
        np.testing.assert_allclose(s.cv_results_["mean_test_score"], sk.cv_results_["mean_test_score"], atol=1e-4)
    med = {k: statistics.median(v) for k, v in times.items()}
    record = run_record("bench_search.py", rows=rows, cols=cols, repeat=repeat, workers=2, threads_per_worker=1,
                        Cs=CS, folds=5, best_params=sk.best_params_, seconds=med, all_seconds=times)
    commit = record["commit"]
    lines = [f"# scikit-learn's GridSearchCV(Pipeline(StandardScaler, LogisticRegression)), {len(CS)} C x 5 folds, "
             f"{rows:,} x {cols}", "",
             f"`{record['command']}` at {commit}, {record['machine']}, 2 workers x 1 thread; medians of {repeat}.",
             "", "| search over | s | / scikit-learn (n_jobs=-1) |", "|---|---|---|"]
    for name, s in med.items():
        lines.append(f"| {name} | {s:.2f} | {s / med['scikit-learn']:.2f} |")
    write_results(out_dir, "search", record, lines)


def main(argv=None):
    shape_main(run, __doc__, rows=200_000, argv=argv)


if __name__ == "__main__":
    main()
