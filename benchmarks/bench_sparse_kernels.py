"""The two paths of the linear kernels on a sparse CSR shard, one thread: numba CSR kernels against torch.

    python benchmarks/bench_sparse_kernels.py                  # 300k x 2^20, 40 non-zeros a row
    python benchmarks/bench_sparse_kernels.py --rows 20000 --repeat 2   # a smoke test

Each kernel of :mod:`dask_estimators.objectives.linear` (``value_grad`` then
``hessp`` at its point) runs on one shard built as a worker holds it (a torch
sparse CSR tensor, float64, int32 indices) with ``backend="fused"`` (the
numba CSR kernels) and ``backend="torch"`` (torch's sparse products
``X @ W.T`` and ``X.t() @ G``), ``--repeat`` times after one warm-up call;
the minimum is reported in milliseconds, with the ratio torch / numba (above
1: numba is faster).  Column indices are drawn uniformly, so the coefficient
reads and gradient writes are scattered over the 2^20 columns as with hashed
features.  The CSR itself is O(nnz): 12M non-zeros take 192 MB.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np


def make_csr(rows, features, nnz_row, seed=0):
    """A canonical CSR (sorted, distinct columns per row) as a torch sparse tensor, without a dense step."""
    import torch

    rng = np.random.default_rng(seed)
    cols = rng.integers(0, features, size=(rows, nnz_row))
    cols.sort(axis=1)
    cols[:, 1:] = np.maximum(cols[:, 1:], cols[:, :-1] + 1)  # distinct: shift duplicates right
    np.minimum(cols, features - 1, out=cols)  # (the rare row that runs off the end is fixed below)
    bad = np.any(np.diff(cols, axis=1) <= 0, axis=1)
    cols[bad] = np.arange(nnz_row)
    indptr = np.arange(0, rows * nnz_row + 1, nnz_row, dtype=np.int64)
    vals = rng.random(rows * nnz_row)
    return torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(cols.reshape(-1).astype(np.int64)),
                                   torch.from_numpy(vals), size=(rows, features))


def timings(rows, features, nnz_row, repeat, losses):
    import torch

    from dask_estimators.engine.data._worker import Shard
    from dask_estimators.objectives import linear as lin
    from dask_estimators.objectives.targets import prepare_targets

    torch.set_num_threads(1)
    X = make_csr(rows, features, nnz_row)
    rng = np.random.default_rng(1)
    out = {}
    for loss in losses:
        K = 3 if loss == "multinomial" else 1
        y = rng.integers(0, K if K > 1 else 2, rows)
        if loss == "squared":
            y = rng.normal(size=rows)
        shard = Shard({"X": X, "y": y}, device="cpu")
        prepare_targets(shard, loss, K)
        w = torch.from_numpy(rng.normal(scale=0.01, size=K * (features + 1)))
        for backend in ("fused", "torch"):
            spec = lin.LinearSpec(loss, features, K, True, backend=backend)
            for name, f in (("value_grad", lambda: lin.value_grad(shard, w, spec)),
                            ("hessp", lambda: lin.hessp(shard, w, spec))):
                f()
                ts = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    f()
                    ts.append(time.perf_counter() - t0)
                out[f"{name} {loss} {backend}"] = 1e3 * min(ts)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--features", type=int, default=1 << 20)
    ap.add_argument("--nnz", type=int, default=40, help="non-zeros a row")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--losses", default="squared,binomial,multinomial")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Sparse")
    t = timings(args.rows, args.features, args.nnz, args.repeat, args.losses.split(","))
    if args.json:
        print(json.dumps(t))
        return
    print(f"{args.rows} x {args.features} CSR, {args.nnz} non-zeros a row, 1 thread; min of {args.repeat}, ms")
    for key in sorted({k.rsplit(" ", 1)[0] for k in t}):
        a, b = t[f"{key} fused"], t[f"{key} torch"]
        print(f"{key:28s} numba {a:9.1f}   torch {b:9.1f}   torch/numba {b / a:5.2f}")


if __name__ == "__main__":
    main()
