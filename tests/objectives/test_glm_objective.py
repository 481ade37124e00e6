"""The GLM losses inside LinearObjective: value, derivatives by finite differences, shard sums, inference sums.

F(w) = (1/S) sum_i s_i loss(y_i, x_i . w + b) + l2/2 ||w||^2, loss the half deviance (up to terms in y alone).
"""

import numpy as np
import pytest
import torch

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import LinearObjective, LinearSpec
from dask_estimators.objectives import linear as lin
from dask_estimators.objectives.losses import get_loss
from dask_estimators.objectives.targets import prepare_targets

N, D = 40, 3
L2 = 0.2
H = 1e-6

#: (id, loss, loss_params)
GLMS = [
    ("poisson", "poisson", ()),
    ("gamma", "gamma", ()),
    ("tweedie-1.5", "tweedie", (("link", "log"), ("power", 1.5))),
    ("tweedie-3-fisher", "tweedie", (("link", "log"), ("power", 3.0))),
    ("tweedie-0-identity", "tweedie", (("link", "identity"), ("power", 0.0))),
    ("tweedie-0.5-fisher", "tweedie", (("link", "log"), ("power", 0.5))),
    ("tweedie-0-log", "tweedie", (("link", "log"), ("power", 0.0))),
]
glms = pytest.mark.parametrize("glm", GLMS, ids=[g[0] for g in GLMS])


def _data(glm, rng, weighted=True):
    X = rng.normal(scale=0.5, size=(N, D))
    loss = get_loss(glm[1], **dict(glm[2]))
    mu = loss.inverse_link(0.3 + X @ np.array([0.4, -0.3, 0.2]))
    if glm[1] == "poisson":
        y = rng.poisson(mu).astype(float)
    elif glm[2] and dict(glm[2])["power"] == 0.0:
        y = mu + rng.normal(size=N)
    else:
        y = rng.gamma(2.0, mu / 2.0)
        if glm[0] == "tweedie-1.5":
            y[::4] = 0.0
    s = rng.uniform(0.2, 2.0, size=N) if weighted else None
    return X, y, s


def _shard(glm, X, y, s):
    arrays = {"X": X, "y": y}
    if s is not None:
        arrays["sample_weight"] = s
    shard = Shard(arrays, device="cpu")
    prepare_targets(shard, glm[1], 1)
    return shard


def _spec(glm, fit_intercept=True):
    return LinearSpec(glm[1], D, 1, fit_intercept, loss_params=glm[2])


def _objective(glm, X, y, s, fit_intercept=True, bounds=None, l2=L2):
    bounds = bounds or [0, len(X)]
    shards = [
        _shard(glm, X[a:b], y[a:b], None if s is None else s[a:b]) for a, b in zip(bounds[:-1], bounds[1:])
    ]
    return LinearObjective(LocalEvaluator(shards), _spec(glm, fit_intercept), l2=l2)


def _point(fit_intercept, rng):
    return 0.3 * rng.normal(size=D + int(fit_intercept))


def _reference(glm, X, y, s, w, fit_intercept):
    """The documented objective in NumPy, from the half deviance (which differs from the loss by terms in y)."""
    loss = get_loss(glm[1], **dict(glm[2]))
    z = X @ w[:D] + (w[D] if fit_intercept else 0.0)
    s = np.ones(len(y)) if s is None else s
    return float((s * 0.5 * loss.deviance(y, loss.inverse_link(z))).sum() / s.sum() + 0.5 * L2 * w[:D] @ w[:D])


@glms
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_value_is_half_deviance_up_to_a_constant(glm, fit_intercept, rng):
    X, y, s = _data(glm, rng)
    obj = _objective(glm, X, y, s, fit_intercept)
    w1, w2 = _point(fit_intercept, rng), _point(fit_intercept, rng)
    f1, f2 = obj.fun_and_grad(w1)[0], obj.fun_and_grad(w2)[0]
    r1, r2 = _reference(glm, X, y, s, w1, fit_intercept), _reference(glm, X, y, s, w2, fit_intercept)
    np.testing.assert_allclose(f1 - f2, r1 - r2, rtol=1e-10, atol=1e-13)


@glms
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_gradient_and_hessian_finite_differences(glm, fit_intercept, rng):
    X, y, s = _data(glm, rng)
    obj = _objective(glm, X, y, s, fit_intercept)
    w = _point(fit_intercept, rng)
    _, g = obj.fun_and_grad(w)
    P = w.size
    fd = np.array([(obj.fun_and_grad(w + H * e)[0] - obj.fun_and_grad(w - H * e)[0]) / (2 * H) for e in np.eye(P)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    H_ = obj.hess(w)
    H_fd = np.column_stack([(obj.fun_and_grad(w + H * e)[1] - obj.fun_and_grad(w - H * e)[1]) / (2 * H)
                            for e in np.eye(P)])
    p = rng.normal(size=P)
    np.testing.assert_allclose(obj.hessp(w, p), H_ @ p, rtol=1e-12, atol=1e-13)
    assert np.linalg.eigvalsh(H_).min() > 0
    if get_loss(glm[1], **dict(glm[2])).fisher:
        # Fisher scoring: the solvers' Hessian is the expected one, not the derivative of the gradient;
        # the derivative of the gradient is the observed information (inference_sums' "observed")
        observed = np.asarray(lin.inference_sums(_shard(glm, X, y, s), w, obj.spec)[1]) / obj.sw_sum
        observed[np.diag_indices(D)] += L2
        np.testing.assert_allclose(observed, H_fd, rtol=1e-6, atol=1e-7)
        assert not np.allclose(H_, H_fd, rtol=1e-3)
    else:
        np.testing.assert_allclose(H_, H_fd, rtol=1e-6, atol=1e-7)


@glms
def test_shard_sums_equal_whole_data(glm, rng):
    X, y, s = _data(glm, rng)
    whole = _objective(glm, X, y, s)
    split = _objective(glm, X, y, s, bounds=[0, 7, 8, 25, N])
    w = _point(True, rng)
    p = rng.normal(size=w.size)
    fw, gw = whole.fun_and_grad(w)
    fs, gs = split.fun_and_grad(w)
    np.testing.assert_allclose(fs, fw, rtol=1e-13)
    np.testing.assert_allclose(gs, gw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(split.hessp(w, p), whole.hessp(w, p), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(split.hess(w), whole.hess(w), rtol=1e-12, atol=1e-14)
    iw, is_ = whole.inference(w), split.inference(w)
    for key in ("cov", "cov_robust", "dispersion", "df_resid"):
        np.testing.assert_allclose(is_[key], iw[key], rtol=1e-10, atol=1e-15)


@glms
def test_inference_sums_match_their_formulas(glm, rng):
    """fisher, observed, meat and pearson of inference_sums against NumPy, from the loss's own definitions."""
    X, y, s = _data(glm, rng)
    loss = get_loss(glm[1], **dict(glm[2]))
    w = _point(True, rng)
    fisher, observed, meat, pearson = lin.inference_sums(_shard(glm, X, y, s), w, _spec(glm))
    Xt = np.column_stack([X, np.ones(N)])
    z = Xt @ w
    mu = loss.inverse_link(z)
    p = loss.power
    if loss.link_name == "log":
        dmu = mu  # d mu / d z
        expected = mu ** (2 - p)
    else:
        dmu = np.ones(N)
        expected = mu ** (-p) if p else np.ones(N)
    score = (mu - y) * dmu / (mu ** p if p else 1.0)  # d loss / d z = (mu - y) / V(mu) * dmu/dz
    zt = torch.as_tensor(z[:, None])
    yt = torch.as_tensor(y[:, None])
    obs = loss.observed_curvature(zt, yt).numpy()[:, 0]
    np.testing.assert_allclose(fisher, Xt.T @ (Xt * (s * expected)[:, None]), rtol=1e-11)
    np.testing.assert_allclose(observed, Xt.T @ (Xt * (s * obs)[:, None]), rtol=1e-11)
    np.testing.assert_allclose(meat, Xt.T @ (Xt * (s * score ** 2)[:, None]), rtol=1e-10)
    np.testing.assert_allclose(float(pearson), (s * (y - mu) ** 2 / (mu ** p if p else 1.0)).sum(), rtol=1e-11)
    # the observed curvature is the derivative of the score
    h = 1e-6
    num = (loss.value_grad(zt + h, yt)[1] - loss.value_grad(zt - h, yt)[1]).numpy()[:, 0] / (2 * h)
    np.testing.assert_allclose(obs, num, rtol=1e-6, atol=1e-8)


def test_inference_rejects_several_outputs(rng):
    X = rng.normal(size=(10, D))
    shard = Shard({"X": X, "y": rng.normal(size=(10, 2))}, device="cpu")
    prepare_targets(shard, "squared", 2)
    with pytest.raises(ValueError, match="one output"):
        lin.inference_sums(shard, np.zeros(2 * (D + 1)), LinearSpec("squared", D, 2))


def test_fused_backend_refuses_a_loss_without_a_kernel(rng):
    """Tweedie's identity link has no numba kernel: 'auto' takes the torch path, 'fused' says why it cannot run."""
    glm = GLMS[4]
    X, y, s = _data(glm, rng)
    Xt = torch.as_tensor(X)
    spec = LinearSpec("tweedie", D, loss_params=glm[2])
    assert not lin._use_fused(Xt, spec)
    with pytest.raises(ValueError, match="fused kernel"):
        lin._use_fused(Xt, LinearSpec("tweedie", D, loss_params=glm[2], backend="fused"))
    from dask_estimators.objectives import _fused

    with pytest.raises(ValueError, match="no fused kernel"):
        _fused.value_grad(X, y[:, None], None, np.zeros((1, D)), np.zeros(1), "tweedie", 0.0, np.empty((N, 1)))


FUSED_GLMS = [g for g in GLMS if dict(g[2]).get("link", "log") == "log"]  # every log-link family


@pytest.mark.parametrize("glm", FUSED_GLMS, ids=[g[0] for g in FUSED_GLMS])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
def test_fused_and_torch_kernels_agree(glm, fit_intercept, weighted, rng):
    """Every log-link family has a one-pass numba kernel (Poisson's, Gamma's, and the general Tweedie one of any
    power, with the observed or the expected curvature): the same sums, curvature, Hessian products and Hessian
    as the torch kernels, also with linear predictors of +-30 (exp(30) and exp(-30) in the same sums)."""
    X, y, s = _data(glm, rng, weighted)
    X[:2] *= 60.0
    spec_f = LinearSpec(glm[1], D, 1, fit_intercept, loss_params=glm[2], backend="fused")
    spec_t = LinearSpec(glm[1], D, 1, fit_intercept, loss_params=glm[2], backend="torch")
    w = torch.as_tensor(_point(fit_intercept, rng))
    p = torch.as_tensor(rng.normal(size=w.numel()))
    sh_f, sh_t = _shard(glm, X, y, s), _shard(glm, X, y, s)
    assert lin._use_fused(sh_f.get("X"), spec_f)
    (lf, gf), (lt, gt) = to_host(lin.value_grad(sh_f, w, spec_f)), to_host(lin.value_grad(sh_t, w, spec_t))
    assert np.isfinite(lf) and np.all(np.isfinite(gf))
    np.testing.assert_allclose(lf, lt, rtol=1e-12)
    np.testing.assert_allclose(gf, gt, rtol=1e-11, atol=1e-11 * np.abs(gt).max())
    curv_f, curv_t = (np.asarray(sh.cache["linear_curv"]) for sh in (sh_f, sh_t))
    np.testing.assert_allclose(curv_f, curv_t, rtol=1e-12, atol=1e-300)
    hf, ht = to_host(lin.hessp(sh_f, p, spec_f)), to_host(lin.hessp(sh_t, p, spec_t))
    np.testing.assert_allclose(hf, ht, rtol=1e-11, atol=1e-11 * np.abs(ht).max())
