"""The cross-validation kernels on a shard whose X is in host memory (NumPy and numba, no torch) against the same
kernels on its tensors.

A shard placed on a CPU keeps its dense arrays as NumPy, and the kernels of
``objectives/cv.py`` read them as such, so that a cross-validated fit never
imports torch on its worker.  The tensor path still serves sparse and GPU
shards; here it is forced by hiding the shard's host arrays, and both must give
the same sums: the splits' training weights, their losses and gradients in one
pass, the held-out sums of every metric and the Gram sums.
"""

import numpy as np
import pytest

from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import LinearSpec
from dask_estimators.objectives import cv as CV

N, D = 257, 5


def _shard(loss, rng, weighted, dtype, shuffled):
    X = (rng.normal(size=(N, D)) * np.arange(1, D + 1)).astype(dtype)
    K = 3 if loss == "multinomial" else 1
    y = {"squared": lambda: rng.normal(size=N), "binomial": lambda: rng.integers(0, 2, N).astype(float),
         "multinomial": lambda: rng.integers(0, K, N)}[loss]()
    arrays = {"X": X, "y": y}
    if weighted:
        arrays["sample_weight"] = rng.uniform(0.5, 2.0, N)
    shard = Shard(arrays, device="cpu")
    if shuffled:  # scattered held-out rows
        CV.set_roles(shard, np.where(rng.integers(0, 3, N)[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN))
    else:
        CV.assign_kfold(shard, [(0, N)], N, 3)
    sums = CV.prepare(shard, loss, K)
    return shard, K, sums


def _outputs(shard, spec, K, ws, metrics, shift):
    out = {"fold_sums": CV.fold_weight_sums(shard)}
    if K == 1:
        out["many"] = to_host(CV.fold_value_grad_many(shard, [0, 1, 2, None], ws, spec))
    for k in range(3):
        for metric in metrics:
            out[(k, metric)] = to_host(CV.heldout_sums(shard, k, ws[:2], spec, metric, True, shift))
    if spec.loss == "squared":
        out["gram"] = to_host(CV.gram_sums(shard, np.full(D + 1, 0.3), direct=(1,)))
    return out


@pytest.mark.parametrize("loss", ["binomial", "multinomial", "squared"])
@pytest.mark.parametrize("weighted", [False, True], ids=["nosw", "sw"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shuffled", [False, True], ids=["kfold", "scattered"])
def test_host_and_tensor_kernels_give_the_same_sums(loss, weighted, dtype, shuffled, monkeypatch):
    rng = np.random.default_rng(7)
    shard, K, sums = _shard(loss, rng, weighted, dtype, shuffled)
    spec = LinearSpec(loss, D, K, True, backend="fused")
    ws = 0.1 * rng.normal(size=(4, spec.n_params))
    metrics = ("squared_error", "r2") if loss == "squared" else ("accuracy", "log_loss")
    host = _outputs(shard, spec, K, ws, metrics, shift=0.2)
    assert not shard._tensors  # the host path made no tensor of the shard's arrays

    tensor_shard, _, tensor_sums = _shard(loss, np.random.default_rng(7), weighted, dtype, shuffled)
    monkeypatch.setattr(CV, "_host_x", lambda shard: None)  # the tensor path, as for a sparse or GPU shard
    tensor = _outputs(tensor_shard, spec, K, ws, metrics, shift=0.2)
    assert "X" in tensor_shard._tensors  # it did read the shard's tensors
    np.testing.assert_allclose(sums, tensor_sums, rtol=1e-13)
    rtol = 1e-10 if dtype == np.float64 else 2e-6  # float32 rows: the tensors' float32 products
    for key, want in tensor.items():
        got = host[key]
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max(), err_msg=str(key))
