"""Example 3: many small models trained in parallel with ``client.map``; the best one is kept.

The field report's simple-parallelism case: when each model is small, there is
nothing to distribute inside a fit, and the cluster is best used to train many
models at once, one per task.  This needs no dask-estimators at all, only the
cluster; the winner is then refitted with dask-estimators on all the data.

1. Scatter the training and validation sets to every worker once.
2. ``client.map`` one task per hyperparameter setting: each trains a small
   scikit-learn ``MLPClassifier`` on scikit-learn's digits (1,797 images of
   8x8 pixels) in its worker and returns the validation accuracy and the
   fitted model.
3. Keep the best, and refit its settings with
   :class:`dask_estimators.MLPClassifier` (same parameters, same objective)
   on the training and validation sets together.

    python examples/client_map_search.py           # 24 settings
    python examples/client_map_search.py --quick   # 6 settings
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import resolve_client


def train_one(params, X_train, y_train, X_val, y_val):
    """One task: fit one small network in this worker; return (validation accuracy, params, model)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier(max_iter=60, random_state=0, **params).fit(X_train, y_train)
    return model.score(X_val, y_val), params, model


def settings(quick: bool) -> list[dict]:
    """The grid: hidden layer sizes x L2 strength x initial learning rate."""
    hidden = [(16,), (32,), (64,)] + ([] if quick else [(64, 32)])
    alpha = [1e-4, 1e-1] if quick else [1e-4, 1e-2, 1e-1]
    lr = [1e-3] if quick else [1e-3, 1e-2]
    return [dict(hidden_layer_sizes=h, alpha=a, learning_rate_init=r)
            for h, a, r in itertools.product(hidden, alpha, lr)]


def split():
    """Digits, scaled on the training part: train, validation, train + validation and test sets."""
    X, y = load_digits(return_X_y=True)
    X_tv, X_test, y_tv, y_test = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
    X_tr, X_val, y_tr, y_val = train_test_split(X_tv, y_tv, test_size=0.25, stratify=y_tv, random_state=0)
    scaler = StandardScaler().fit(X_tr)
    X_tr, X_val, X_tv, X_test = (scaler.transform(a) for a in (X_tr, X_val, X_tv, X_test))
    return X_tr, y_tr, X_val, y_val, X_tv, y_tv, X_test, y_test


def main(quick: bool = False) -> dict:
    """Train every setting as one task, keep the best; return its settings and accuracies."""
    client = resolve_client()  # your active client, else the embedded LocalCluster
    X_tr, y_tr, X_val, y_val, X_tv, y_tv, X_test, y_test = split()

    grid = settings(quick)
    t0 = time.perf_counter()
    # scattered once, broadcast to every worker; the tasks receive them by reference
    data = client.scatter([X_tr, y_tr, X_val, y_val], broadcast=True)
    futures = client.map(train_one, grid, *[[d] * len(grid) for d in data], pure=False)
    results = client.gather(futures)
    seconds = time.perf_counter() - t0
    results.sort(key=lambda r: -r[0])
    for score, params, _ in results:
        print(f"  validation accuracy {score:.4f}  {params}")
    best_score, best_params, best_model = results[0]
    print(f"{len(grid)} models in {seconds:.1f} s on {len(client.nthreads())} workers; "
          f"best: {best_params} ({best_score:.4f})")

    t0 = time.perf_counter()
    refit = de.MLPClassifier(max_iter=60, random_state=0, **best_params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        refit.fit(X_tv, y_tv)
    test_accuracy = refit.score(X_test, y_test)
    print(f"Best setting refitted with dask-estimators on train + validation ({time.perf_counter() - t0:.1f} s): "
          f"test accuracy {test_accuracy:.4f} (the kept task model: {best_model.score(X_test, y_test):.4f})")
    return {
        "n_models": len(results),
        "grid": grid,
        "best_params": best_params,
        "best_validation_accuracy": best_score,
        "validation_accuracies": [r[0] for r in results],
        "validation_by_setting": [(r[1], r[0]) for r in results],
        "test_accuracy": test_accuracy,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 settings instead of 24")
    main(**vars(ap.parse_args()))
