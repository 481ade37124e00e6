"""Pointwise losses: values, derivatives by finite differences, numerical stability (float64)."""

import numpy as np
import pytest
import torch

from dask_estimators.objectives._pointwise import LOSSES, get_loss

EPS = 0.3  # epsilon of the epsilon-insensitive loss
KINK_GAP = 0.05  # test points stay this far from the kinks of the piecewise losses
H = 1e-6


def _targets(name, n, K, rng):
    if name == "squared":
        return torch.as_tensor(rng.normal(size=(n, K)))
    if name == "binomial":
        return torch.as_tensor(rng.integers(0, 2, size=(n, 1)).astype(np.float64))
    if name == "multinomial":
        return torch.as_tensor(rng.integers(0, K, size=n))
    if name == "squared_hinge":
        return torch.as_tensor(np.where(rng.integers(0, 2, size=(n, K)) == 1, 1.0, -1.0))
    if name == "squared_epsilon_insensitive":
        return torch.as_tensor(rng.normal(size=(n, 1)))
    raise AssertionError(name)


def _away_from_kinks(name, z, y):
    """Whether the generalized Hessian equals the true one in a neighbourhood of z."""
    if name == "squared_hinge":
        return bool((torch.abs(1.0 - y * z) > KINK_GAP).all())
    if name == "squared_epsilon_insensitive":
        return bool((torch.abs(torch.abs(z - y) - EPS) > KINK_GAP).all())
    return True


def _case(name, rng, n=7):
    K = 1 if name in ("binomial", "squared_epsilon_insensitive") else 3
    loss = get_loss(name, epsilon=EPS)
    y = _targets(name, n, K, rng)
    for _ in range(100):
        z = torch.as_tensor(rng.normal(scale=2.0, size=(n, K)))
        if _away_from_kinks(name, z, y):
            break
    else:  # pragma: no cover
        raise AssertionError("could not draw a point away from the kinks")
    return loss, z, y


def _numpy_loss(name, z, y):
    z, y = z.numpy(), y.numpy()
    if name == "squared":
        return 0.5 * (z - y) ** 2
    if name == "binomial":
        return np.logaddexp(0.0, z) - y * z
    if name == "multinomial":
        m = z.max(1, keepdims=True)
        lse = m + np.log(np.exp(z - m).sum(1, keepdims=True))
        return lse - z[np.arange(len(y)), y][:, None]
    if name == "squared_hinge":
        return np.maximum(0.0, 1.0 - y * z) ** 2
    if name == "squared_epsilon_insensitive":
        return np.maximum(0.0, np.abs(z - y) - EPS) ** 2
    raise AssertionError(name)


def test_registry_and_get_loss():
    assert set(LOSSES) == {"squared", "binomial", "multinomial", "squared_hinge", "squared_epsilon_insensitive"}
    for name in LOSSES:
        assert get_loss(name).name == name
    assert get_loss("squared_epsilon_insensitive", epsilon=0.5).params["epsilon"] == 0.5
    with pytest.raises(ValueError, match="Unknown loss"):
        get_loss("hinge")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_value_matches_formula(name, rng):
    loss, z, y = _case(name, rng)
    val, g, curv = loss.value_grad(z, y)
    expected = _numpy_loss(name, z, y)
    assert val.dtype == g.dtype == curv.dtype == torch.float64
    assert tuple(val.shape) == expected.shape
    assert g.shape == z.shape
    np.testing.assert_allclose(val.numpy(), expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradient_finite_differences(name, rng):
    loss, z, y = _case(name, rng)
    _, g, _ = loss.value_grad(z, y)
    fd = np.empty(z.shape)
    for idx in np.ndindex(*z.shape):
        zp, zm = z.clone(), z.clone()
        zp[idx] += H
        zm[idx] -= H
        fd[idx] = (float(loss.value_grad(zp, y)[0].sum()) - float(loss.value_grad(zm, y)[0].sum())) / (2 * H)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_hvp_finite_differences(name, rng):
    loss, z, y = _case(name, rng)
    _, _, curv = loss.value_grad(z, y)
    for _ in range(3):
        v = torch.as_tensor(rng.normal(size=z.shape))
        hv = loss.hvp(curv, v)
        gp = loss.value_grad(z + H * v, y)[1]
        gm = loss.value_grad(z - H * v, y)[1]
        fd = (gp - gm) / (2 * H)
        np.testing.assert_allclose(hv.numpy(), fd.numpy(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_hvp_is_linear_and_symmetric(name, rng):
    loss, z, y = _case(name, rng)
    _, _, curv = loss.value_grad(z, y)
    u = torch.as_tensor(rng.normal(size=z.shape))
    v = torch.as_tensor(rng.normal(size=z.shape))
    hu, hv = loss.hvp(curv, u), loss.hvp(curv, v)
    np.testing.assert_allclose(float((u * hv).sum()), float((v * hu).sum()), rtol=1e-12)
    np.testing.assert_allclose(loss.hvp(curv, 2.0 * u - v).numpy(), (2.0 * hu - hv).numpy(), rtol=1e-12, atol=1e-14)
    # positive semi-definite: every loss here is convex in z
    assert float((u * hu).sum()) >= -1e-12


def test_squared_hinge_generalized_hessian_at_kink():
    loss = get_loss("squared_hinge")
    z = torch.tensor([[1.0], [2.0], [-0.5]], dtype=torch.float64)
    y = torch.tensor([[1.0], [1.0], [1.0]], dtype=torch.float64)
    val, g, curv = loss.value_grad(z, y)
    np.testing.assert_array_equal(val.numpy().ravel(), [0.0, 0.0, 2.25])
    np.testing.assert_array_equal(g.numpy().ravel(), [0.0, 0.0, -3.0])
    np.testing.assert_array_equal(curv.numpy().ravel(), [0.0, 0.0, 2.0])


def test_epsilon_insensitive_flat_inside_tube():
    loss = get_loss("squared_epsilon_insensitive", epsilon=0.5)
    y = torch.zeros(4, 1, dtype=torch.float64)
    z = torch.tensor([[0.2], [-0.4], [1.5], [-2.0]], dtype=torch.float64)
    val, g, curv = loss.value_grad(z, y)
    np.testing.assert_allclose(val.numpy().ravel(), [0.0, 0.0, 1.0, 2.25])
    np.testing.assert_allclose(g.numpy().ravel(), [0.0, 0.0, 2.0, -3.0])
    np.testing.assert_allclose(curv.numpy().ravel(), [0.0, 0.0, 2.0, 2.0])


def test_epsilon_zero_is_twice_squared(rng):
    z = torch.as_tensor(rng.normal(size=(6, 1)))
    y = torch.as_tensor(rng.normal(size=(6, 1)))
    v0, g0, _ = get_loss("squared_epsilon_insensitive").value_grad(z, y)
    v1, g1, _ = get_loss("squared").value_grad(z, y)
    np.testing.assert_allclose(v0.numpy(), 2 * v1.numpy(), rtol=1e-14)
    np.testing.assert_allclose(g0.numpy(), 2 * g1.numpy(), rtol=1e-14)


# ------------------------------------------------------------------ stability
@pytest.mark.parametrize("m", [800.0, 1e4])
def test_binomial_extreme_margins(m):
    loss = get_loss("binomial")
    z = torch.tensor([[-m], [-m], [m], [m]], dtype=torch.float64)
    y = torch.tensor([[1.0], [0.0], [1.0], [0.0]], dtype=torch.float64)
    val, g, curv = loss.value_grad(z, y)
    for t in (val, g, curv):
        assert torch.isfinite(t).all()
    np.testing.assert_allclose(val.numpy().ravel(), [m, 0.0, 0.0, m], rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(g.numpy().ravel(), [-1.0, 0.0, 0.0, 1.0], atol=1e-300)
    np.testing.assert_allclose(curv.numpy().ravel(), 0.0, atol=1e-300)


def test_binomial_moderate_margins():
    """Around the softplus switch-over (|z| ~ 20) loss and gradient stay close to the exact values."""
    loss = get_loss("binomial")
    zs = np.array([-40.0, -20.5, -19.5, -1e-3, 0.0, 1e-3, 19.5, 20.5, 40.0])
    z = torch.as_tensor(zs[:, None])
    for yv in (0.0, 1.0):
        y = torch.full_like(z, yv)
        val, g, _ = loss.value_grad(z, y)
        exact = np.logaddexp(0.0, zs) - yv * zs
        np.testing.assert_allclose(val.numpy().ravel(), exact, rtol=1e-9, atol=3e-9)
        np.testing.assert_allclose(g.numpy().ravel(), 1.0 / (1.0 + np.exp(-zs)) - yv, rtol=1e-14, atol=1e-300)


def test_binomial_negative_class_tail_exact():
    """y=0, z << 0 (well classified): softplus(z) = log1p(exp(z)) keeps full relative accuracy."""
    loss = get_loss("binomial")
    zs = np.array([-15.0, -20.5, -30.0, -40.0])
    val, _, _ = loss.value_grad(torch.as_tensor(zs[:, None]), torch.zeros(4, 1, dtype=torch.float64))
    np.testing.assert_allclose(val.numpy().ravel(), np.log1p(np.exp(zs)), rtol=1e-13)


def test_binomial_positive_class_tail_exact():
    """y=1, z >> 0 (well classified): the loss is log1p(exp(-z)) and must keep its relative accuracy."""
    loss = get_loss("binomial")
    zs = np.array([15.0, 20.5, 30.0, 40.0])
    val, g, _ = loss.value_grad(torch.as_tensor(zs[:, None]), torch.ones(4, 1, dtype=torch.float64))
    np.testing.assert_allclose(val.numpy().ravel(), np.log1p(np.exp(-zs)), rtol=1e-13)


@pytest.mark.parametrize("scale", [800.0, 1e4, 1e8])
def test_multinomial_huge_logits(scale):
    loss = get_loss("multinomial")
    z = torch.tensor([[scale, -scale, 0.0], [scale, -scale, 0.0], [-scale, -scale, -scale]], dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    val, g, p = loss.value_grad(z, y)
    for t in (val, g, p):
        assert torch.isfinite(t).all()
    # lse - z_y cancels at the scale of the logits: rounding of a few ulp(scale)
    np.testing.assert_allclose(val.numpy().ravel(), [0.0, 2 * scale, np.log(3.0)], rtol=1e-14, atol=8e-16 * scale)
    # p = exp(z - lse) inherits the rounding of lse (a few ulp(scale)); torch.softmax would not
    np.testing.assert_allclose(p.numpy().sum(1), 1.0, rtol=0, atol=1e-15 * scale)
    np.testing.assert_allclose(g.numpy()[0], [0.0, 0.0, 0.0], atol=1e-300)
    np.testing.assert_allclose(g.numpy()[1], [1.0, -1.0, 0.0], atol=1e-300)
    v = torch.ones_like(z)
    assert torch.isfinite(loss.hvp(p, v)).all()
    np.testing.assert_allclose(loss.hvp(p, v).numpy(), 0.0, atol=1e-15 * scale)  # softmax is shift invariant
