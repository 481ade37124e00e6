"""The public fallbacks of the private torch entry points (dask_estimators/_torch_api.py) give the same numbers.

The fallbacks run where ``DASK_ESTIMATORS__PRIVATE_TORCH=0`` or where the
installed torch lacks an entry point.  The fit test starts workers with that
variable set and fits the torch path (float32: float64 batches on CPU take
the numba kernel, which uses none of them) with both strategies' loops.
"""

import numpy as np
import pytest
import torch

from dask_estimators import _torch_api
from dask_estimators.optim.torch_driver import TrainConfig, fast_step, make_optimizer


@pytest.mark.parametrize("act", ["identity", "logistic", "tanh", "relu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_public_derivatives_equal_autograds_kernels_bit_for_bit(act, dtype):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(257, 33, generator=g, dtype=torch.float64).to(dtype) * 3
    z[0, :5] = 0.0  # relu's threshold itself
    a = {"identity": z.clone(), "logistic": torch.sigmoid(z), "tanh": torch.tanh(z), "relu": torch.relu(z)}[act]
    da = torch.randn(z.shape, generator=g, dtype=torch.float64).to(dtype)
    # autograd's own derivative of the activation, from its input
    zz = z.clone().requires_grad_()
    out = {"identity": lambda t: t * 1, "logistic": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu}[act](zz)
    (ref,) = torch.autograd.grad(out, zz, da)
    private = _torch_api._aten_backward()[act](da.clone(), a)
    public = _torch_api._public_backward()[act](da.clone(), a)
    assert torch.equal(public, private)
    assert torch.equal(public, ref)


def test_the_switch_and_the_checks(monkeypatch):
    assert _torch_api.enabled()
    assert _torch_api.has("torch._fused_adam_") and _torch_api.has("aten.tanh_backward")
    assert not _torch_api.has("torch._no_such_entry_point_") and not _torch_api.has("aten.no_such_backward")
    ts, os_ = [torch.ones(3), torch.ones(2)], [torch.arange(3.0), torch.arange(2.0)]
    _torch_api.foreach_add_(ts, os_, alpha=0.5)
    assert _torch_api.has("torch._foreach_copy_")
    copies = [torch.zeros(3), torch.zeros(2, dtype=torch.float64)]
    _torch_api.foreach_copy_(copies, os_)
    monkeypatch.setenv(_torch_api.ENV, "0")
    assert not _torch_api.enabled() and not _torch_api.has("torch._fused_adam_")
    assert _torch_api.act_backward("tanh") is _torch_api._backward_table(False)["tanh"]
    assert _torch_api._backward_table(False) is not _torch_api._backward_table(True)
    us = [torch.ones(3), torch.ones(2)]
    _torch_api.foreach_add_(us, os_, alpha=0.5)  # the loop of add_
    assert all(torch.equal(t, u) for t, u in zip(ts, us))
    again = [torch.zeros(3), torch.zeros(2, dtype=torch.float64)]
    _torch_api.foreach_copy_(again, os_)  # the loop of copy_
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(copies, again))
    assert torch.equal(again[0], os_[0]) and again[1].dtype == torch.float64
    # without the private kernel, fast_step is torch.optim's own step
    p = [torch.zeros(3, requires_grad=True)]
    opt = make_optimizer(p, TrainConfig(solver="adam"))
    assert fast_step(opt) == opt.step


@pytest.fixture(scope="module")
def public_only_client():
    """Two worker processes started with DASK_ESTIMATORS__PRIVATE_TORCH=0 (they inherit this process's environment)."""
    import os

    from distributed import Client, LocalCluster

    old = os.environ.get(_torch_api.ENV)
    os.environ[_torch_api.ENV] = "0"
    try:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None)
    finally:
        if old is None:
            del os.environ[_torch_api.ENV]
        else:
            os.environ[_torch_api.ENV] = old
    with cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
        yield client


@pytest.mark.parametrize("strategy", ["ddp", "rounds"])
@pytest.mark.parametrize("act", ["logistic", "tanh", "relu"])
def test_fit_without_private_torch_equals_the_fit_with_it(client, public_only_client, strategy, act):
    import dask_estimators as de

    assert set(public_only_client.run(_torch_api.enabled).values()) == {False}
    assert set(client.run(_torch_api.enabled).values()) == {True}
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 7)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(int) + (X[:, 2] > 0.8)
    kw = dict(hidden_layer_sizes=(9, 5), activation=act, batch_size=64, max_iter=4, tol=0.0, random_state=0,
              alpha=1e-3, strategy=strategy)
    with pytest.warns(Warning):  # ConvergenceWarning: 4 epochs
        ref = de.MLPClassifier(**kw, client=client).fit(X, y)
    with pytest.warns(Warning):
        pub = de.MLPClassifier(**kw, client=public_only_client).fit(X, y)
    assert ref.coefs_[0].dtype == np.float32
    for a, b in zip(ref.coefs_ + ref.intercepts_, pub.coefs_ + pub.intercepts_):
        np.testing.assert_array_equal(a, b)
    assert ref.loss_curve_ == pub.loss_curve_
