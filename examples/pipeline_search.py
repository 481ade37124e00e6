"""Example 1: a Pipeline and GridSearchCV, then the same search run over the cluster.

``StandardScaler`` + :class:`dask_estimators.LogisticRegression` on scikit-learn's
breast-cancer data (569 rows, 30 features, bundled with scikit-learn).

1. ``GridSearchCV`` on the client: scikit-learn runs the folds one after the
   other, and every ``fit`` is a distributed fit on the cluster.
2. The same search with joblib's Dask backend: the folds themselves become
   Dask tasks.  A fit inside a task finds the worker's client and secedes from
   the worker's thread pool while it waits, so the nested fits do not starve
   the cluster.

Both searches must pick the same ``C``.

    python examples/pipeline_search.py           # 6 values of C, 5 folds
    python examples/pipeline_search.py --quick   # 3 values of C, 3 folds
"""

from __future__ import annotations

import argparse
import time

import joblib
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import resolve_client


def main(quick: bool = False) -> dict:
    """Run both searches; return the chosen ``C`` of each and the held-out accuracy."""
    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    pipe = make_pipeline(StandardScaler(), de.LogisticRegression())
    grid = {"logisticregression__C": [0.01, 0.1, 1.0] if quick else [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]}
    cv = 3 if quick else 5

    t0 = time.perf_counter()
    local = GridSearchCV(pipe, grid, cv=cv).fit(X_tr, y_tr)
    t_local = time.perf_counter() - t0
    print(f"GridSearchCV, folds on the client: best {local.best_params_}, CV accuracy "
          f"{local.best_score_:.4f} ({t_local:.1f} s)")

    client = resolve_client()  # your active client, else the embedded LocalCluster
    t0 = time.perf_counter()
    with joblib.parallel_backend("dask", client=client):
        remote = GridSearchCV(pipe, grid, cv=cv, n_jobs=-1).fit(X_tr, y_tr)
    t_remote = time.perf_counter() - t0
    print(f"GridSearchCV, folds as Dask tasks:  best {remote.best_params_}, CV accuracy "
          f"{remote.best_score_:.4f} ({t_remote:.1f} s)")

    test_accuracy = remote.score(X_te, y_te)
    print(f"Held-out accuracy of the refitted pipeline: {test_accuracy:.4f}")
    return {
        "best_C_local": local.best_params_["logisticregression__C"],
        "best_C_dask": remote.best_params_["logisticregression__C"],
        "cv_accuracy": remote.best_score_,
        "test_accuracy": test_accuracy,
        "grid": grid["logisticregression__C"],
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller grid and fewer folds")
    main(**vars(ap.parse_args()))
