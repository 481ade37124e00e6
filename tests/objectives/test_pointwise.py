"""Pointwise losses: values, derivatives by finite differences, numerical stability (float64).

Every loss of the registry is tested, the GLM families in several variants
(power and link of the Tweedie loss).
"""

import numpy as np
import pytest
import torch

from dask_estimators.objectives.losses import LOSSES, get_loss

EPS = 0.3  # epsilon of the epsilon-insensitive loss
KINK_GAP = 0.05  # test points stay this far from the kinks of the piecewise losses
H = 1e-6


#: (id, registry name, parameters): every loss once, the Tweedie loss at powers and links where the
#: formulas or the curvature used (observed or expected) differ.
CASES = [(name, name, {"epsilon": EPS}) for name in sorted(LOSSES) if name != "tweedie"] + [
    ("tweedie-log-p1.5", "tweedie", {"power": 1.5, "link": "log"}),
    ("tweedie-log-p3", "tweedie", {"power": 3.0, "link": "log"}),
    ("tweedie-log-p0", "tweedie", {"power": 0.0, "link": "log"}),
    ("tweedie-log-p1", "tweedie", {"power": 1.0, "link": "log"}),
    ("tweedie-log-p2", "tweedie", {"power": 2.0, "link": "log"}),
    ("tweedie-identity-p0", "tweedie", {"power": 0.0, "link": "identity"}),
    ("tweedie-identity-p1", "tweedie", {"power": 1.0, "link": "identity"}),
    ("tweedie-identity-p1.5", "tweedie", {"power": 1.5, "link": "identity"}),
    ("tweedie-identity-p2", "tweedie", {"power": 2.0, "link": "identity"}),
]
CASE_IDS = [c[0] for c in CASES]
cases = pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
GLM = ("poisson", "gamma", "tweedie")


def _glm_targets(loss, n, rng):
    """Targets in the loss's domain: zeros where allowed, negatives where allowed."""
    low, _, low_in, _ = loss.y_interval
    y = rng.gamma(2.0, 1.0, size=(n, 1))
    if low == -np.inf:
        y = rng.normal(size=(n, 1))
    elif low_in:
        y[::3] = 0.0
    return torch.as_tensor(y)


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


def _case(case, rng, n=7):
    _, name, params = case
    K = 1 if name in ("binomial", "squared_epsilon_insensitive") + GLM else 3
    loss = get_loss(name, **params)
    y = _glm_targets(loss, n, rng) if name in GLM else _targets(name, n, K, rng)
    identity = getattr(loss, "link_name", "log") == "identity" and loss.power != 0
    for _ in range(100):
        z = torch.as_tensor(rng.normal(scale=2.0, size=(n, K)))
        if name in GLM:
            z = z / 2.0
        if identity:  # the mean must be positive
            z = torch.as_tensor(rng.uniform(0.3, 3.0, size=(n, K)))
        if _away_from_kinks(name, z, y):
            break
    else:  # pragma: no cover
        raise AssertionError("could not draw a point away from the kinks")
    return loss, z, y


def _numpy_loss(case, z, y):
    _, name, params = case
    z, y = z.numpy(), y.numpy()
    if name in GLM:  # half deviance minus its value at mu = y (a term in y alone)
        p = {"poisson": 1.0, "gamma": 2.0}.get(name, params.get("power"))
        link = params.get("link", "log")
        mu = np.exp(z) if link == "log" else z
        def h(m):  # the documented loss as a function of the mean
            if link == "log" and p == 1:
                return m - y * np.log(m)
            if link == "log" and p == 2:
                return np.log(m) + y / m
            if p == 0:
                return 0.5 * (m - y) ** 2
            if p == 1:
                return m - y * np.log(m)
            if p == 2:
                return np.log(m) + y / m
            return m ** (2 - p) / (2 - p) - y * m ** (1 - p) / (1 - p)
        return h(mu)
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
    assert set(LOSSES) == {
        "squared", "binomial", "multinomial", "squared_hinge", "squared_epsilon_insensitive", "poisson", "gamma",
        "tweedie",
    }
    for name in LOSSES:
        assert get_loss(name).name == name
    assert get_loss("squared_epsilon_insensitive", epsilon=0.5).params["epsilon"] == 0.5
    with pytest.raises(ValueError, match="Unknown loss"):
        get_loss("hinge")


@cases
def test_value_matches_formula(case, rng):
    loss, z, y = _case(case, rng)
    val, g, curv = loss.value_grad(z, y)
    expected = _numpy_loss(case, z, y)
    assert val.dtype == g.dtype == curv.dtype == torch.float64
    assert tuple(val.shape) == expected.shape
    assert g.shape == z.shape
    np.testing.assert_allclose(val.numpy(), expected, rtol=1e-13, atol=1e-15)


@cases
def test_gradient_finite_differences(case, rng):
    loss, z, y = _case(case, rng)
    _, g, _ = loss.value_grad(z, y)
    fd = np.empty(z.shape)
    for idx in np.ndindex(*z.shape):
        zp, zm = z.clone(), z.clone()
        zp[idx] += H
        zm[idx] -= H
        fd[idx] = (float(loss.value_grad(zp, y)[0].sum()) - float(loss.value_grad(zm, y)[0].sum())) / (2 * H)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-8)


@cases
def test_hvp_finite_differences(case, rng):
    """The observed curvature is the derivative of the gradient (for the Fisher-scoring losses too)."""
    loss, z, y = _case(case, rng)
    curv = loss.observed_curvature(z, y)
    for _ in range(3):
        v = torch.as_tensor(rng.normal(size=z.shape))
        hv = loss.hvp(curv, v)
        gp = loss.value_grad(z + H * v, y)[1]
        gm = loss.value_grad(z - H * v, y)[1]
        fd = (gp - gm) / (2 * H)
        np.testing.assert_allclose(hv.numpy(), fd.numpy(), rtol=1e-6, atol=1e-8)


@cases
def test_hvp_is_linear_and_symmetric(case, rng):
    loss, z, y = _case(case, rng)
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


# ------------------------------------------------------------------ GLM families
GLM_CASES = [c for c in CASES if c[1] in GLM]


@pytest.mark.parametrize("case", GLM_CASES, ids=[c[0] for c in GLM_CASES])
def test_glm_expected_curvature_and_solver_curvature(case, rng):
    """E[observed curvature] at y ~ mu: the observed curvature is linear in y, so the expectation is its value
    at y = mu.  The solvers' curvature is the expected one exactly where the observed one can be negative."""
    loss, z, y = _case(case, rng)
    mu = torch.as_tensor(loss.inverse_link(z.numpy()))
    np.testing.assert_allclose(
        loss.expected_curvature(z, y).numpy(), loss.observed_curvature(z, mu).numpy(), rtol=1e-12, atol=1e-300
    )
    assert (loss.expected_curvature(z, y) > 0).all()
    _, _, curv = loss.value_grad(z, y)
    p, link = loss.power, loss.link_name
    fisher = (p < 1 or p > 2) if link == "log" else p > 1
    assert loss.fisher == fisher
    used = loss.expected_curvature(z, y) if fisher else loss.observed_curvature(z, y)
    np.testing.assert_array_equal(curv.numpy(), used.numpy())
    if not fisher:
        assert (curv >= 0).all()


def test_glm_observed_curvature_can_be_negative_where_fisher_is_used():
    """Why Fisher scoring: Tweedie p=3 (log link) at y far below mu has a negative observed curvature."""
    loss = get_loss("tweedie", power=3.0, link="log")
    z = torch.tensor([[2.0]], dtype=torch.float64)
    y = torch.tensor([[0.01]], dtype=torch.float64)
    assert float(loss.observed_curvature(z, y)) < 0
    assert float(loss.value_grad(z, y)[2]) > 0


@pytest.mark.parametrize("case", GLM_CASES, ids=[c[0] for c in GLM_CASES])
def test_glm_deviance_is_twice_the_loss_above_its_minimum(case, rng):
    """deviance(y, mu) = 2 (loss(mu) - loss(mu = y)); zero at mu = y; link and inverse link are inverses."""
    loss, z, y = _case(case, rng)
    y = y.clamp_min(0.05) if (loss.power > 0 or loss.link_name == "log") else y  # mu = y must be a mean
    mu = loss.inverse_link(z.numpy())
    np.testing.assert_allclose(loss.link(mu), z.numpy(), rtol=1e-13)
    at_y = torch.as_tensor(loss.link(y.numpy()))
    dev = loss.deviance(y.numpy(), mu)
    expected = 2.0 * (loss.value_grad(z, y)[0] - loss.value_grad(at_y, y)[0]).numpy()
    np.testing.assert_allclose(dev, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(loss.deviance(y.numpy(), y.numpy()), 0.0, atol=1e-12)
    pearson = ((y.numpy() - mu) ** 2 / (mu ** loss.power if loss.power else 1.0))
    np.testing.assert_allclose(loss.pearson(z, y).numpy(), pearson, rtol=1e-12)


@pytest.mark.parametrize("case", [c for c in GLM_CASES if c[2].get("link", "log") == "log"],
                         ids=[c[0] for c in GLM_CASES if c[2].get("link", "log") == "log"])
@pytest.mark.parametrize("zv", [700.0, -700.0])
def test_glm_large_linear_predictor_is_finite(case, zv):
    """Where the loss's largest exponential reaches exp(700) (near the largest finite one), the log-link losses
    and their derivatives are finite: no inf, no NaN, y = 0 included (where y * exp((1 - p) z) would be 0 * inf).
    For Poisson and Gamma that is z = +-700 itself."""
    loss = get_loss(case[1], **case[2])
    low, _, low_in, _ = loss.y_interval
    ys = [0.0, 1.0, 3.0] if (low == -np.inf or low_in) else [0.5, 1.0, 3.0]
    p = loss.power
    zv = zv / max(abs(2.0 - p), abs(1.0 - p))  # exp((2 - p) z) and exp((1 - p) z) stay within exp(700)
    if case[1] in ("poisson", "gamma"):
        assert abs(zv) == 700.0
    z = torch.full((3, 1), zv, dtype=torch.float64)
    y = torch.tensor(ys, dtype=torch.float64).reshape(3, 1)
    val, g, curv = loss.value_grad(z, y)
    for t in (val, g, curv, loss.observed_curvature(z, y), loss.expected_curvature(z, y)):
        assert torch.isfinite(t).all(), t
    if zv > 0 and p >= 1:  # (y - mu)^2 / mu^p ~ mu^(2 - p): finite here, though mu^2 is not
        assert torch.isfinite(loss.pearson(z, y)).all()


@pytest.mark.parametrize(
    "name, params, bad, good, sk",
    [
        ("poisson", {}, [-1.0, 2.0], [0.0, 2.0], "HalfPoissonLoss"),
        ("gamma", {}, [0.0, 2.0], [0.1, 2.0], "HalfGammaLoss"),
        ("tweedie", {"power": 1.5}, [-0.5], [0.0, 3.0], "HalfTweedieLoss"),
        ("tweedie", {"power": 3.0}, [0.0], [0.1], "HalfTweedieLoss"),
        ("tweedie", {"power": 1.5, "link": "identity"}, [-1.0], [0.0], "HalfTweedieLossIdentity"),
    ],
)
def test_glm_y_domain_messages_as_scikit_learn(name, params, bad, good, sk):
    from sklearn._loss import loss as sk_loss

    loss = get_loss(name, **params)
    loss.check_y(np.asarray(good))
    with pytest.raises(ValueError, match=f"out of the valid range of the loss '{sk}'"):
        loss.check_y(np.asarray(bad))
    sk_cls = getattr(sk_loss, sk)
    sk_obj = sk_cls(power=params["power"]) if "power" in params else sk_cls()
    assert not sk_obj.in_y_true_range(np.asarray(bad)) and sk_obj.in_y_true_range(np.asarray(good))
    get_loss("tweedie", power=0.0).check_y(np.array([-5.0, 0.0]))  # any real


def test_unknown_link_rejected():
    with pytest.raises(ValueError, match="link must be"):
        get_loss("tweedie", link="logit")
