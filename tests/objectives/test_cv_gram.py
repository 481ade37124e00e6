"""The Gram kernel of LinearRegressionCV (objectives.cv.gram_sums): shard sums against whole-data values.

For disjoint held-out sets (k-fold; a predefined split that never holds
some rows out), overlapping ones (shuffle splits) and
splits that leave rows out, with and without sample weights, on float64 and
float32 X: the sums over two shards add up to the sums NumPy gives on the
whole data, for all rows, each split's held-out rows and the requested
splits' training rows.
"""

import numpy as np
import pytest

from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import cv as CV


def _roles(kind, n, rng):
    if kind in ("kfold", "predefined"):  # disjoint held-out sets; "predefined" never holds out a quarter of the rows
        fold = np.arange(n) % (3 if kind == "kfold" else 4)
        return np.where(fold[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN).astype(np.int8)
    roles = np.zeros((3, n), dtype=np.int8)
    for k in range(3):
        perm = rng.permutation(n)
        roles[k, perm[: n // 4]] = CV.TEST
        roles[k, perm[n // 4 : (n // 4) * 3 if kind == "leave_out" else n]] = CV.TRAIN
    return roles


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True], ids=["nosw", "sw"])
@pytest.mark.parametrize("kind", ["kfold", "predefined", "shuffle", "leave_out"])
def test_gram_sums_on_shards_equal_the_whole_data(kind, weighted, dtype, monkeypatch):
    monkeypatch.setattr(CV, "_GRAM_BLOCK", 17)  # several blocks per shard
    rng = np.random.default_rng(0)
    n, d = 90, 4
    X = (rng.normal(size=(n, d)) * [1, 10, 0.1, 1] + [0, 1e3, 0, -5]).astype(dtype)
    y = rng.normal(size=n) + 50
    s = rng.uniform(0.5, 2.0, n) if weighted else None
    roles = _roles(kind, n, rng)
    direct = [0, 2] if kind == "leave_out" else []
    shift = np.append(X.astype(np.float64).mean(0), y.mean())
    cut = 37
    total = 0
    for rows in (slice(0, cut), slice(cut, n)):
        arrays = {"X": X[rows], "y": y[rows]}
        if weighted:
            arrays["sample_weight"] = s[rows]
        shard = Shard(arrays, device="cpu")
        CV.set_roles(shard, roles[:, rows])
        CV.prepare(shard, "squared", 1)
        total = total + to_host(CV.gram_sums(shard, shift, direct))
    Z = np.column_stack([X.astype(np.float64) - shift[:d], y - shift[d], np.ones(n)])
    sw = np.ones(n) if s is None else s

    def moments(mask):
        return Z[mask].T @ (Z[mask] * sw[mask, None])

    assert total.shape == (1 + 3 + len(direct), d + 2, d + 2) and total.dtype == np.float64
    np.testing.assert_allclose(total[0], moments(np.ones(n, bool)), rtol=1e-12, atol=1e-9)
    for k in range(3):
        np.testing.assert_allclose(total[1 + k], moments(roles[k] == CV.TEST), rtol=1e-12, atol=1e-9)
    for i, k in enumerate(direct):
        np.testing.assert_allclose(total[4 + i], moments(roles[k] == CV.TRAIN), rtol=1e-12, atol=1e-9)


# ------------------------------------------------------------- several splits' models in one fused pass
@pytest.mark.parametrize("loss", ["binomial", "squared", "squared_hinge", "poisson"])
@pytest.mark.parametrize("weighted", [False, True], ids=["nosw", "sw"])
@pytest.mark.parametrize("intercept", [True, False], ids=["b", "nob"])
def test_fused_many_equals_each_split_alone_and_the_torch_kernel(loss, weighted, intercept):
    """fold_value_grad_many on the numba path: each split's loss and gradient are its lone fused evaluation's,
    and the torch path's (every split's model one output of the kernel, with its own weight column)."""
    import torch

    from dask_estimators.objectives import LinearSpec
    from dask_estimators.objectives import _fused
    from dask_estimators.objectives import linear as lin

    if not _fused.AVAILABLE:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(1)
    n, d = 301, 7  # odd: the kernels' two streams meet at a middle row
    X = rng.normal(size=(n, d))
    y = {"binomial": rng.integers(0, 2, n), "squared_hinge": rng.integers(0, 2, n),
         "squared": rng.normal(size=n), "poisson": rng.poisson(1.5, n)}[loss].astype(float)
    arrays = {"X": X, "y": y}
    if weighted:
        arrays["sample_weight"] = rng.uniform(0.5, 2.0, n)
    shard = Shard(arrays, device="cpu")
    CV.assign_kfold(shard, [(0, n)], n, 4)
    CV.prepare(shard, loss, 1)
    folds = [0, 2, None, 3]  # None: all rows
    spec = LinearSpec(loss, d, 1, intercept)
    ws = torch.as_tensor(0.1 * rng.normal(size=(len(folds), spec.n_params)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # "auto" takes the fused kernel on a one-thread worker
    try:
        assert lin._use_fused(shard.get("X"), spec)
        losses, grads = to_host(CV.fold_value_grad_many(shard, folds, ws, spec))
        for i, k in enumerate(folds):
            lone_loss, lone_grad = to_host(CV.on_fold(shard, k, lin.value_grad, ws[i], spec))
            np.testing.assert_allclose(losses[i], lone_loss, rtol=1e-12)
            np.testing.assert_allclose(grads[i], lone_grad, rtol=1e-11, atol=1e-12)
        t_losses, t_grads = to_host(CV.fold_value_grad_many(shard, folds, ws, LinearSpec(loss, d, 1, intercept,
                                                                                           backend="torch")))
        np.testing.assert_allclose(losses, t_losses, rtol=1e-12)
        np.testing.assert_allclose(grads, t_grads, rtol=1e-11, atol=1e-12)
        # a split converges and drops out: the next round's fewer columns
        losses2, _ = to_host(CV.fold_value_grad_many(shard, folds[1:], ws[1:], spec))
        np.testing.assert_allclose(losses2, losses[1:], rtol=1e-12)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("rows", ["scattered", "one_range", "none"])
def test_rows_product_equals_the_product_of_the_gathered_rows(rows, monkeypatch):
    """The held-out predictions X[idx] @ W: scattered rows gathered a block at a time (several blocks here), one
    range read in place, and no rows at all."""
    import torch

    monkeypatch.setattr(CV, "_GATHER_BYTES", 7 * 5 * 8)  # 7 rows of 5 float64 per block
    rng = np.random.default_rng(1)
    X = torch.from_numpy(rng.normal(size=(60, 5)))
    Wt = torch.from_numpy(rng.normal(size=(5, 3)))
    idx = {"scattered": np.sort(rng.choice(60, size=23, replace=False)), "one_range": np.arange(10, 34),
           "none": np.arange(0)}[rows]
    got = CV._rows_product(X, torch.from_numpy(idx), Wt).numpy()
    np.testing.assert_allclose(got, X.numpy()[idx] @ Wt.numpy(), rtol=1e-13, atol=1e-13)
    assert got.shape == (len(idx), 3)
