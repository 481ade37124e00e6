"""Our GridSearchCV, and scikit-learn's around our LogisticRegression, against scikit-learn's search, in one run.

    python benchmarks/bench_search.py                          # 200,000 x 100, medians of 3
    python benchmarks/bench_search.py --rows 20000 --repeat 1  # a smoke run
    python benchmarks/bench_search.py --parts mlp              # the MLP grid alone

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
* ``ours, placed for every fit``: the same with ``keep-placed`` at 0, as every fit placed before;
* ``scikit-learn's own work, around DummyClassifier``: scikit-learn's search (``n_jobs=None``) around an
  estimator that does nothing: each fit's rows cut and scaled, and the scores.  No search around any
  estimator, ours included, goes below it (one candidate at a time).

Then a regression search, ``GridSearchCV(Pipeline(MinMaxScaler, LinearRegression))`` over 5 alphas x 5 folds
on ``make_regression(rows, cols)``, against scikit-learn's over ``Ridge`` with the same penalties
(``Ridge(alpha * n_train)``) and ``n_jobs=-1``; the same best alpha and mean test scores to 1e-4 are checked.
Written to ``search_regression.json`` and ``search_regression.md``.

Then an MLP grid, ``GridSearchCV(MLPClassifier(max_iter=5), {hidden_layer_sizes: (50,), (100,); alpha: 1e-4,
1e-2}, cv=3)`` on ``make_classification(40000, 100)`` (``--mlp-rows``): scikit-learn's search over its MLP
with ``n_jobs=-1`` (the anchor), ours over ours (X placed whole on each worker once, each split's candidates
that take the same batches trained in lockstep on one worker), and scikit-learn's search over ours (each of
the 12 fits and the refit on its own, on both workers).  Written to ``search_mlp.json`` and ``search_mlp.md``.

Ours send the folds to the workers as to workers on other hosts (``dask-estimators.shared-memory`` false):
on the client's host NumPy input is handed over in shared memory, lives in the shards' actors, and is not
kept.

This machine sets ``OPENBLAS_CORETYPE``; run with it and ``OPENBLAS_L2_SIZE`` unset when comparing with
scikit-learn.  The same ``best_params_`` is checked, and ``mean_test_score`` to 1e-4.  Writes
``search.json`` and ``search.md`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import RESULTS, run_record, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CS = [0.001, 0.01, 0.1, 1.0, 10.0]


def _search(estimator, n_jobs, ours=False, grid=None):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if ours:
        from dask_estimators.model_selection import GridSearchCV
    pipe = Pipeline([("scale", StandardScaler()), ("clf", estimator)])
    return GridSearchCV(pipe, grid or {"clf__C": CS}, cv=5, n_jobs=n_jobs)


def run(rows, cols, repeat, out_dir):
    import dask
    import distributed
    from sklearn.datasets import make_classification
    from sklearn.dummy import DummyClassifier
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
        "scikit-learn's own work, around DummyClassifier": lambda: _search(DummyClassifier(), None, grid={
            "clf__strategy": ["prior"] * len(CS)}),
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
        if "DummyClassifier" in name:
            continue
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


ALPHAS = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]


def run_regression(rows, cols, repeat, out_dir):
    """``GridSearchCV(Pipeline(MinMaxScaler, LinearRegression))`` over 5 alphas x 5 folds against scikit-learn's
    search over ``Ridge`` with the same penalties (``Ridge(alpha * n_train)``), ``n_jobs=-1``."""
    import distributed
    from sklearn.datasets import make_regression
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV as SkSearch
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler

    import dask_estimators as de
    from dask_estimators.model_selection import GridSearchCV

    X, y = make_regression(rows, cols, n_informative=cols // 2, noise=30.0, random_state=0)
    y = y + 500.0
    n_train = rows - rows // 5

    def ours():
        return GridSearchCV(Pipeline([("scale", MinMaxScaler()), ("reg", de.LinearRegression())]),
                            {"reg__alpha": ALPHAS}, cv=5)

    def theirs():
        return SkSearch(Pipeline([("scale", MinMaxScaler()), ("reg", Ridge())]),
                        {"reg__alpha": [a * n_train for a in ALPHAS]}, cv=5, n_jobs=-1)

    times = {"scikit-learn (Ridge)": [], "ours: dask_estimators.model_selection.GridSearchCV": []}
    fitted = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        ours().fit(X[:5000], y[:5000])
        theirs().fit(X[:5000], y[:5000])
        for _ in range(repeat):
            for name, make in zip(times, (theirs, ours)):
                t0 = time.perf_counter()
                fitted[name] = make().fit(X, y)
                times[name].append(time.perf_counter() - t0)
    sk, us = (fitted[k] for k in times)
    assert sk.best_index_ == us.best_index_, (sk.best_index_, us.best_index_)
    np.testing.assert_allclose(us.cv_results_["mean_test_score"], sk.cv_results_["mean_test_score"], atol=1e-4)
    med = {k: statistics.median(v) for k, v in times.items()}
    record = run_record("bench_search.py", rows=rows, cols=cols, repeat=repeat, workers=2, threads_per_worker=1,
                        alphas=ALPHAS, folds=5, best_alpha=ALPHAS[us.best_index_], seconds=med, all_seconds=times)
    lines = [f"# GridSearchCV(Pipeline(MinMaxScaler, LinearRegression)), {len(ALPHAS)} alpha x 5 folds, "
             f"{rows:,} x {cols}", "",
             f"`{record['command']}` at {record['commit']}, {record['machine']}, 2 workers x 1 thread; medians of "
             f"{repeat}.", "", "| search over | s | / scikit-learn (n_jobs=-1) |", "|---|---|---|"]
    first = next(iter(med))
    for name, v in med.items():
        lines.append(f"| {name} | {v:.2f} | {v / med[first]:.2f} |")
    write_results(out_dir, "search_regression", record, lines)


MLP_GRID = {"hidden_layer_sizes": [(50,), (100,)], "alpha": [1e-4, 1e-2]}


def run_mlp(rows, repeat, out_dir):
    import distributed
    from sklearn.datasets import make_classification
    from sklearn.model_selection import GridSearchCV as SkSearch
    from sklearn.neural_network import MLPClassifier as SkMLP

    import dask_estimators as de
    from dask_estimators.model_selection import GridSearchCV

    X, y = make_classification(rows, 100, n_informative=20, random_state=0)
    ours = de.MLPClassifier(max_iter=5, random_state=0)
    times = {"scikit-learn": [], "ours: dask_estimators.model_selection.GridSearchCV": [],
             "scikit-learn's GridSearchCV over ours": []}
    fitted = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 5 epochs, as the grid asks
        SkSearch(SkMLP(max_iter=1), MLP_GRID, cv=3, n_jobs=-1).fit(X[:3000], y[:3000])  # loky's processes
        GridSearchCV(ours, MLP_GRID, cv=3).fit(X[:3000], y[:3000])  # kernels
        for _ in range(repeat):
            t0 = time.perf_counter()
            fitted["scikit-learn"] = SkSearch(SkMLP(max_iter=5, random_state=0), MLP_GRID, cv=3, n_jobs=-1).fit(X, y)
            times["scikit-learn"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fitted["ours"] = GridSearchCV(ours, MLP_GRID, cv=3).fit(X, y)
            times["ours: dask_estimators.model_selection.GridSearchCV"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fitted["scikit-learn's over ours"] = SkSearch(ours, MLP_GRID, cv=3).fit(X, y)
            times["scikit-learn's GridSearchCV over ours"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: {p: str(v) for p, v in s.best_params_.items()} for k, s in fitted.items()}
    scores = {k: [float(v) for v in s.cv_results_["mean_test_score"]] for k, s in fitted.items()}
    record = run_record("bench_search.py", mlp_rows=rows, repeat=repeat, workers=2, threads_per_worker=1,
                        grid={k: [str(v) for v in vs] for k, vs in MLP_GRID.items()}, folds=3, epochs=5,
                        best_params=best, mean_test_score=scores, seconds=med, all_seconds=times)
    lines = [f"# GridSearchCV(MLPClassifier(max_iter=5)), 2 hidden sizes x 2 alpha x 3 folds, {rows:,} x 100", "",
             f"`{record['command']}` at {record['commit']}, {record['machine']}, 2 workers x 1 thread; medians of "
             f"{repeat}.", "", "| search over | s | / scikit-learn (n_jobs=-1) |", "|---|---|---|"]
    for name, s in med.items():
        lines.append(f"| {name} | {s:.2f} | {s / med['scikit-learn']:.2f} |")
    lines += ["", "| | best candidate | mean test scores |", "|---|---|---|"]
    for k in fitted:
        lines.append(f"| {k} | {best[k]} | {', '.join(f'{v:.4f}' for v in scores[k])} |")
    write_results(out_dir, "search_mlp", record, lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--cols", type=int, default=100)
    ap.add_argument("--mlp-rows", type=int, default=40_000, help="the MLP grid's rows; 0 leaves it out")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--parts", nargs="+", choices=["classification", "regression", "mlp"],
                    default=["classification", "regression", "mlp"], help="the searches to time (default: all)")
    args = ap.parse_args(argv)
    if "classification" in args.parts:
        run(args.rows, args.cols, args.repeat, args.out)
    if "regression" in args.parts:
        run_regression(args.rows, args.cols, args.repeat, args.out)
    if args.mlp_rows and "mlp" in args.parts:
        run_mlp(args.mlp_rows, args.repeat, args.out)


if __name__ == "__main__":
    main()
