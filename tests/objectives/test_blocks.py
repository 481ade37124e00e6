"""The CPU kernels walk a shard in row blocks: the result must not depend on the block size."""

import numpy as np
import pytest

from dask_estimators.engine import LocalEvaluator, Shard
from dask_estimators.objectives import LinearObjective, LinearSpec, linear
from dask_estimators.objectives.targets import prepare_targets


@pytest.mark.parametrize("loss,k", [("binomial", 1), ("multinomial", 3), ("squared", 2), ("squared_hinge", 3)])
def test_blocked_kernels_equal_one_block(monkeypatch, rng, loss, k):
    n, d = 1003, 7
    X = rng.normal(size=(n, d))
    y = rng.normal(size=(n, k)) if loss == "squared" else rng.integers(0, max(k, 2), size=n)
    sw = rng.uniform(0.1, 2.0, size=n)
    n_out = 1 if loss == "binomial" else k
    spec = LinearSpec(loss, d, n_out, True)
    w = rng.normal(size=spec.n_params) * 0.3
    p = rng.normal(size=spec.n_params)

    def evaluate():
        shard = Shard({"X": X, "y": y, "sample_weight": sw}, device="cpu")
        prepare_targets(shard, loss, n_out)
        obj = LinearObjective(LocalEvaluator([shard]), spec, l2=0.1)
        f, g = obj.fun_and_grad(w)
        return f, g, obj.hessp(w, p), obj.hess(w)

    whole = evaluate()
    monkeypatch.setattr(linear, "BLOCK_BYTES", 8 * d * 256)  # 256-row blocks, the last one short
    assert len(linear._row_blocks(Shard({"X": X}, device="cpu").get("X"))) == 4
    blocked = evaluate()
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
