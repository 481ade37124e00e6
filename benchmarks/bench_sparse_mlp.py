"""One MLP minibatch step on sparse X: the sparse first layer against densifying the minibatch.

    python benchmarks/bench_sparse_mlp.py               # 50_000 x 2**16 CSR, 30 non-zeros a row, batch 200
    python benchmarks/bench_sparse_mlp.py --quick       # 5_000 x 2**12, a smoke test
    python benchmarks/bench_sparse_mlp.py --rows 50000 --features 65536 --nnz 30 --batch 200 --hidden 100

What one worker does per step of ``MLPClassifier`` (two classes, one hidden
layer of ReLU units, float64), in this one process on one thread, for the
same seeded batches of one shard:

1. **sparse**: the batch's rows cut from the shard's CSR arrays
   (:func:`~dask_estimators.objectives.module.csr_rows`), the first layer a
   sparse-dense product and its weight gradient a sparse scatter
   (:func:`~dask_estimators.objectives.module.loss_grad_` on the CSR batch);
2. **dense batch**: the same rows, densified into a kept (batch, features)
   buffer, then the dense kernel (``loss_grad_`` on the dense batch): the
   most memory a densified minibatch may take is batch x features.

Both give the same loss and gradient (checked, to rounding).  Also timed for
scale: one step of the estimators' Adam (``torch_driver.make_optimizer``,
fused) over all the parameters: the first layer's weight is hidden x
features whichever way X is stored.

Prints a Markdown table: median milliseconds per step over ``--steps`` steps
after ``--warmup``, and the ratio dense batch / sparse.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import scipy.sparse as sp
import torch


def _csr(n, p, nnz, seed):
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.choice(p, size=(n, nnz), replace=True), axis=1)
    keep = np.ones((n, nnz), dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]  # no duplicates: canonical CSR
    counts = keep.sum(1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = cols[keep].astype(np.int64)
    data = rng.random(indices.shape[0])
    X = sp.csr_matrix((data, indices, indptr), shape=(n, p))
    y = (np.asarray(X[:, : p // 2].sum(1)).ravel() > np.asarray(X[:, p // 2 :].sum(1)).ravel()).astype(np.int64)
    return X, y


def _median_ms(fn, steps, warmup):
    for k in range(warmup):
        fn(k)
    times = []
    for k in range(warmup, warmup + steps):
        t0 = time.perf_counter()
        fn(k)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--features", type=int, default=2**16)
    ap.add_argument("--nnz", type=int, default=30)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=100)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.features, args.steps, args.warmup = 5_000, 2**12, 5, 1

    from dask_estimators.engine.data._worker import Shard
    from dask_estimators.objectives import module as M
    from dask_estimators.optim.torch_driver import TrainConfig, make_optimizer

    torch.set_num_threads(1)
    X, y = _csr(args.rows, args.features, args.nnz, 0)
    Xt = torch.sparse_csr_tensor(torch.from_numpy(X.indptr), torch.from_numpy(X.indices), torch.from_numpy(X.data),
                                 size=X.shape, check_invariants=False)
    shard = Shard({"X": Xt, "y": y}, device="cpu")
    spec = M.MLPSpec(args.features, (args.hidden,), 1, "relu", "logistic")
    M.prepare(shard, spec, 0)
    n_steps = -(-args.rows // args.batch)
    w = torch.from_numpy(M.glorot_init(spec, np.random.RandomState(0)))
    g = torch.empty_like(w)
    work_sparse, work_dense = {}, {}
    dense_buf = torch.empty((args.batch, args.features), dtype=torch.float64)

    def batch(k):
        return M.take(shard, M.batch_rows(shard, (0, k // n_steps, k % n_steps, n_steps, True)))

    def sparse_step(k):
        Xb, yb, _ = batch(k)
        return spec.loss_grad_(w, Xb, yb, None, g, 1.0, work_sparse)

    def dense_step(k):
        Xb, yb, _ = batch(k)
        d = dense_buf[: Xb.shape[0]]
        d.zero_()
        crow, col, val = Xb.crow_indices(), Xb.col_indices(), Xb.values()
        rows = torch.repeat_interleave(torch.arange(Xb.shape[0]), crow[1:] - crow[:-1])
        d.index_put_((rows, col), val)
        return spec.loss_grad_(w, d, yb, None, g, 1.0, work_dense)

    # the same numbers both ways
    l_s = sparse_step(0)
    g_s = g.clone()
    l_d = dense_step(0)
    np.testing.assert_allclose(l_s, l_d, rtol=1e-10)
    np.testing.assert_allclose(g_s.numpy(), g.numpy(), rtol=1e-9, atol=1e-12)

    params = [p.detach().clone().requires_grad_() for p in M.param_views(spec, w)]
    for p, gv in zip(params, M.param_views(spec, g)):
        p.grad = gv.clone()
    opt = make_optimizer(params, TrainConfig(solver="adam"))

    t_sparse = _median_ms(sparse_step, args.steps, args.warmup)
    t_dense = _median_ms(dense_step, args.steps, args.warmup)
    t_adam = _median_ms(lambda k: opt.step(), args.steps, args.warmup)
    print(f"X: {args.rows} x {args.features} CSR, {X.nnz} non-zeros ({X.nnz / args.rows:.1f} a row); "
          f"batch {args.batch}, hidden ({args.hidden},), float64, one thread")
    print()
    print("| per step | ms |")
    print("|---|---|")
    print(f"| sparse first layer (cut + forward + backward) | {t_sparse:.2f} |")
    print(f"| densified batch (cut + densify + forward + backward) | {t_dense:.2f} |")
    print(f"| Adam step over all {spec.n_params} parameters | {t_adam:.2f} |")
    print()
    print(f"ratio densified / sparse: {t_dense / t_sparse:.1f}x")


if __name__ == "__main__":
    main()
