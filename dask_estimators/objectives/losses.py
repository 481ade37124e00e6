"""One class per loss: everything the linear models need to know about it.

A loss class owns, in one place:

- the pointwise value, derivative and curvature in torch
  (:meth:`Loss.value_grad`, :meth:`Loss.hvp`), one code path for CPU and CUDA;
- the code of its one-pass numba kernel in :mod:`._fused` (``numba_code``,
  None when it has none: its shards then take the torch path);
- the link and inverse link that ``predict`` uses (:meth:`Loss.link`,
  :meth:`Loss.inverse_link`, NumPy);
- the check of y's domain (:meth:`Loss.check_y`, NumPy, with scikit-learn's
  message, the same for NumPy input and for each block of dask input);
- the encoding of the targets on a shard (:meth:`Loss.prepare_targets`);
- for inference and D^2: the unit deviance, the expected curvature (Fisher
  information per sample) and the squared Pearson residual.

Losses are built by name through :func:`get_loss`, which raises on an unknown
name; :data:`LOSSES` is the registry.  The ideas follow scikit-learn's
``sklearn/_loss/loss.py`` (a class per loss, half deviances, links, the
domain of y) and its ``LinearModelLoss`` (our :mod:`.linear`).

Every loss sees raw predictions ``z`` (the linear predictor) of shape (n, K)
and targets ``y`` in the loss's own encoding, and returns the losses per sample
and output (n, K), or (n, 1) for ``multinomial``, their derivative with respect
to ``z`` (n, K), and the curvature state a Hessian-vector product needs.  The
formulas are numerically stable: ``log1p(exp(-|z|))``/``logsumexp`` never form
``exp`` of a large number, so a margin of -800 gives a binomial loss of 800,
not inf; the log-link losses stay finite for linear predictors up to about
+-700 (where ``exp`` itself is still finite).

================================ ========================================= =====================
loss                              per-sample loss (up to terms in y alone)   targets
================================ ========================================= =====================
``squared``                       ``1/2 (z - y)^2``                          float (n, K)
``binomial``                      ``log(1 + exp(z)) - y z``                  float {0, 1} (n, 1)
``multinomial``                   ``logsumexp(z) - z_y``                     int codes (n,)
``squared_hinge``                 ``max(0, 1 - y z)^2``                      float {-1, 1} (n, K)
``squared_epsilon_insensitive``   ``max(0, |z - y| - epsilon)^2``            float (n, 1)
``poisson``                       ``exp(z) - y z``                           float >= 0 (n, 1)
``gamma``                         ``z + y exp(-z)``                          float > 0 (n, 1)
``tweedie``                       ``mu^(2-p)/(2-p) - y mu^(1-p)/(1-p)``      see :class:`Tweedie`
================================ ========================================= =====================

The regression losses of the GLM families are half deviances, as in
scikit-learn: ``poisson`` is ``HalfPoissonLoss``, ``gamma`` ``HalfGammaLoss``,
``tweedie`` ``HalfTweedieLoss`` (log link) or ``HalfTweedieLossIdentity``.

For every loss except ``multinomial`` the Hessian with respect to ``z`` is
diagonal, and ``curv`` is that diagonal (n, K); squared hinge and the
epsilon-insensitive loss use the generalized Hessian (the derivative of the
piecewise-linear gradient).  Where the observed curvature of a non-canonical
link can be negative (see :class:`Tweedie`), ``curv`` is the expected one
(Fisher scoring), so the solvers' Hessian stays positive semi-definite; the
gradient is always exact.  For ``multinomial`` ``curv`` is the softmax ``p``
and the Hessian-vector product is ``p * v - p * <p, v>``.

Adding a loss: subclass :class:`Loss`, register it in :data:`LOSSES`, and
test it in ``tests/objectives/test_pointwise.py`` (see ``docs/contributing.md``).
"""

from __future__ import annotations

import math

import numpy as np

from .._lazy import lazy_module
from . import _host as _shard

# the pointwise maths runs on the workers; the client only uses links and checks
torch = lazy_module("torch")

__all__ = [
    "Loss", "Squared", "Binomial", "Multinomial", "SquaredHinge", "SquaredEpsilonInsensitive",
    "Poisson", "Gamma", "Tweedie", "LOSSES", "get_loss",
]

_ALL_REALS = (-math.inf, math.inf, False, False)


def _array(shard, name, like=None):
    """The shard's array ``name`` to prepare: NumPy where the shard keeps it in host memory (``Shard.host``: no
    tensor, no torch), else its tensor; with ``like`` (an array of either kind) in ``like``'s kind."""
    if like is None:
        return _shard.array(shard, name)
    return _shard.host(shard, name) if isinstance(like, np.ndarray) else shard.get(name)


def _xp(a):
    """The array module of ``a``: NumPy for a NumPy array, torch for a tensor."""
    return np if isinstance(a, np.ndarray) else torch


def _float64(a):
    """``a`` (NumPy or a tensor) as float64 of its own kind."""
    return a.astype(np.float64) if isinstance(a, np.ndarray) else a.to(torch.float64)


def _values(values, like):
    """float64 ``values`` as an array of ``like``'s kind (NumPy, or a tensor on its device)."""
    a = np.asarray(values, dtype=np.float64)
    return a if isinstance(like, np.ndarray) else torch.as_tensor(a, device=like.device)


def _class_weights(shard, codes, class_weight):
    """Multiply the shard's sample weights by the class weight of each row's class."""
    if class_weight is None:
        return
    s = _array(shard, "sample_weight", codes)
    cw = _values(class_weight, codes)[codes]
    shard.put("sample_weight", cw * s if s is not None else cw)


class Loss:
    """Base class: a separable loss with a diagonal Hessian in ``z``.

    Subclasses set the class attributes and implement :meth:`value_grad`;
    the defaults describe a regression loss with the identity link.

    Parameters
    ----------
    **params
        The loss's own parameters (``epsilon``, ``power``, ``link``); others
        are kept and ignored, so one call can build any loss.
    """

    #: Registry name.
    name = "loss"
    #: Whether the Hessian couples the outputs of one sample (softmax).
    coupled = False
    #: Code of the branch of the one-pass numba kernels in :mod:`._fused`, None: torch kernels only.
    numba_code: int | None = None
    #: Whether the targets are class codes (a classifier's loss).
    classification = False
    #: Whether the dispersion of the family is fixed at 1 (Poisson, binomial) rather than estimated.
    fixed_dispersion = False
    #: scikit-learn's class for the same loss, named in error messages.
    sklearn_name = "BaseLoss"

    def __init__(self, **params):
        self.params = params

    def kernel(self):
        """``(code, parameter)`` of this loss's one-pass numba kernel in :mod:`._fused` (the parameter: epsilon,
        or the Tweedie power), or None where it has none (its shards take the torch path)."""
        return None if self.numba_code is None else (self.numba_code, 0.0)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in sorted(self.params.items()))})"

    # ---------------------------------------------------------------- torch
    def value_grad(self, z, y):  # pragma: no cover - interface
        """``(loss (n, K), dloss/dz (n, K), curv)`` at raw predictions ``z`` and encoded targets ``y``."""
        raise NotImplementedError

    def hvp(self, curv, v):
        """Hessian (in ``z``) times ``v``, per sample."""
        return curv * v

    def observed_curvature(self, z, y):
        """d^2 loss / dz^2 per sample (n, K): the observed information."""
        return self.value_grad(z, y)[2]

    def expected_curvature(self, z, y):
        """The expectation of :meth:`observed_curvature` under the model: the Fisher information per sample."""
        return self.observed_curvature(z, y)

    def pearson(self, z, y):
        """Squared Pearson residual ``(y - mu)^2 / V(mu)`` per sample (n, K)."""
        mu = self.inverse_link_torch(z)
        return (y - mu) ** 2 / self.variance_torch(mu)

    def inverse_link_torch(self, z):
        return z

    def variance_torch(self, mu):
        return torch.ones_like(mu)

    # ---------------------------------------------------------------- NumPy
    #: ``(low, high, low_inclusive, high_inclusive)``: where y may lie.
    y_interval = _ALL_REALS

    def check_y(self, y):
        """Raise scikit-learn's ``ValueError`` when a value of ``y`` lies outside the loss's domain.

        Examples
        --------
        >>> get_loss("poisson").check_y(np.array([0.0, 2.0]))
        >>> get_loss("gamma").check_y(np.array([0.0, 2.0]))
        Traceback (most recent call last):
            ...
        ValueError: Some value(s) of y are out of the valid range of the loss 'HalfGammaLoss'.
        """
        low, high, low_in, high_in = self.y_interval
        if low == -math.inf and high == math.inf:
            return
        y = np.asarray(y)
        ok_low = np.all(y >= low) if low_in else np.all(y > low)
        ok_high = np.all(y <= high) if high_in else np.all(y < high)
        if not (ok_low and ok_high):
            raise ValueError(f"Some value(s) of y are out of the valid range of the loss {self.sklearn_name!r}.")

    def link(self, mu):
        """The link ``g``: mean -> linear predictor (NumPy)."""
        return np.asarray(mu, dtype=np.float64)

    def inverse_link(self, z):
        """The inverse link: linear predictor -> mean, what ``predict`` returns (NumPy)."""
        return np.asarray(z)

    def mean_inside(self, mu) -> bool:
        """Whether the constant mean ``mu`` lies inside the open domain of the mean, where the loss is finite."""
        return True

    def deviance(self, y, mu):
        """Unit deviance per sample (NumPy): zero where ``mu == y``, used by D^2."""
        return (np.asarray(y) - mu) ** 2

    # ---------------------------------------------------------------- shard
    def prepare_targets(self, shard, n_outputs: int, class_weight=None):
        """Encode the shard's ``y`` for this loss in place (regression: float64 (n, K))."""
        y = _float64(_array(shard, "y"))
        shard.put("y", y.reshape(y.shape[0], -1))


class Squared(Loss):
    name = "squared"
    numba_code = 0
    sklearn_name = "HalfSquaredError"

    def value_grad(self, z, y):
        r = z - y
        return 0.5 * (r * r), r, torch.ones_like(r)


class Binomial(Loss):
    name = "binomial"
    numba_code = 1
    classification = True
    fixed_dispersion = True
    sklearn_name = "HalfBinomialLoss"

    def value_grad(self, z, y):
        p = torch.sigmoid(z)
        # log(1 + exp(z)) - y z, written so neither tail cancels or overflows
        loss = torch.clamp_min(z, 0.0) - y * z + torch.log1p(torch.exp(-z.abs()))
        return loss, p - y, p * (1.0 - p)

    def inverse_link_torch(self, z):
        return torch.sigmoid(z)

    def variance_torch(self, mu):
        return mu * (1.0 - mu)

    def link(self, mu):
        mu = np.asarray(mu, dtype=np.float64)
        return np.log(mu) - np.log1p(-mu)

    def inverse_link(self, z):
        from scipy.special import expit

        return expit(z)

    def deviance(self, y, mu):
        from scipy.special import xlogy

        y = np.asarray(y, dtype=np.float64)
        return 2.0 * (xlogy(y, y / mu) + xlogy(1.0 - y, (1.0 - y) / (1.0 - mu)))

    def prepare_targets(self, shard, n_outputs, class_weight=None):
        codes = _array(shard, "y")
        shard.put("y", _float64(codes == 1).reshape(-1, 1))
        _class_weights(shard, codes, class_weight)


class Multinomial(Loss):
    name = "multinomial"
    coupled = True
    numba_code = 4
    classification = True
    fixed_dispersion = True
    sklearn_name = "HalfMultinomialLoss"

    def value_grad(self, z, y):
        lse = torch.logsumexp(z, dim=1, keepdim=True)
        p = torch.softmax(z, dim=1)
        loss = lse - z.gather(1, y.view(-1, 1))
        g = p.clone()
        g[torch.arange(z.shape[0], device=z.device), y] -= 1.0
        return loss, g, p

    def hvp(self, p, v):
        pv = p * v
        return pv - p * pv.sum(1, keepdim=True)

    def prepare_targets(self, shard, n_outputs, class_weight=None):
        codes = _array(shard, "y")
        shard.put("y", codes)
        _class_weights(shard, codes, class_weight)


class SquaredHinge(Loss):
    name = "squared_hinge"
    numba_code = 2
    classification = True

    def value_grad(self, z, y):
        m = torch.clamp_min(1.0 - y * z, 0.0)
        return m * m, -2.0 * y * m, 2.0 * (m > 0).to(z.dtype)

    def prepare_targets(self, shard, n_outputs, class_weight=None):
        """y in {-1, 1}: (n, 1) for two classes, one-vs-rest (n, K) otherwise.

        One-vs-rest weights a sample's output k by ``class_weight[k]`` when it
        belongs to class k and leaves it as is otherwise (LIBLINEAR's
        one-vs-rest weighting).
        """
        codes = _array(shard, "y")
        xp = _xp(codes)
        if n_outputs == 1:
            shard.put("y", _float64(xp.where(codes == 1, 1.0, -1.0)).reshape(-1, 1))
            _class_weights(shard, codes, class_weight)
            return
        onehot = codes[:, None] == _values(np.arange(n_outputs), codes)
        shard.put("y", _float64(xp.where(onehot, 1.0, -1.0)))
        if class_weight is not None:
            s = _array(shard, "sample_weight", codes)
            per_output = xp.where(onehot, _values(class_weight, codes)[None, :], _values(1.0, codes))
            base = s.reshape(-1, 1) if s is not None else 1.0
            shard.put("sample_weight", per_output * base)


class SquaredEpsilonInsensitive(Loss):
    name = "squared_epsilon_insensitive"
    numba_code = 3

    def kernel(self):
        return self.numba_code, float(self.params.get("epsilon", 0.0))

    def value_grad(self, z, y):
        eps = self.params.get("epsilon", 0.0)
        r = z - y
        a = torch.clamp_min(r.abs() - eps, 0.0)
        return a * a, 2.0 * torch.sign(r) * a, 2.0 * (a > 0).to(z.dtype)


# ---------------------------------------------------------------- GLM families
class Tweedie(Loss):
    """Half Tweedie deviance with power ``p`` and a log or identity link (scikit-learn's ``HalfTweedieLoss``).

    With the log link, ``mu = exp(z)`` and, up to terms in y alone::

        loss = exp((2 - p) z) / (2 - p) - y exp((1 - p) z) / (1 - p)
             = exp(z) - y z          (p = 1, Poisson)
             = z + y exp(-z)         (p = 2, Gamma)
             = (exp(z) - y)^2 / 2    (p = 0, normal)

    With the identity link (``mu = z``, which must stay positive for ``p > 0``)
    ``loss = mu^(2-p)/(2-p) - y mu^(1-p)/(1-p)``, ``mu - y log(mu)`` for
    ``p = 1``, ``log(mu) + y / mu`` for ``p = 2`` and ``(z - y)^2 / 2`` for
    ``p = 0``.

    Curvature used by the solvers: the observed one (the true Hessian) where
    it cannot be negative: log link with ``1 <= p <= 2`` (for ``p = 1`` the
    link is canonical and observed equals expected), identity link with
    ``0 <= p <= 1``.  Elsewhere (log link with ``p < 1`` or ``p > 2``,
    identity link with ``p > 1``) the observed curvature is negative for some
    ``y`` and the expected one, ``mu^(2-p)`` (log) or ``mu^(-p)`` (identity),
    is used instead: Fisher scoring.

    Domain of y: any real for ``p <= 0``, ``y >= 0`` for ``0 < p < 2``,
    ``y > 0`` for ``p >= 2``, as scikit-learn.

    Parameters
    ----------
    power : float, default=1.5
    link : {"log", "identity"}, default="log"
    """

    name = "tweedie"
    _default_power = 1.5

    def __init__(self, **params):
        super().__init__(**params)
        self.power = float(params.get("power", self._default_power))
        self.link_name = params.get("link", "log")
        if self.link_name not in ("log", "identity"):
            raise ValueError(f"link must be 'log' or 'identity', got {self.link_name!r}.")
        p = self.power
        if self.link_name == "log":
            self.fisher = p < 1 or p > 2
        else:
            self.fisher = p > 1
        self.sklearn_name = "HalfTweedieLoss" if self.link_name == "log" else "HalfTweedieLossIdentity"

    @property
    def y_interval(self):
        if self.power <= 0:
            return _ALL_REALS
        if self.power < 2:
            return (0.0, math.inf, True, False)
        return (0.0, math.inf, False, False)

    @property
    def fixed_dispersion(self):
        return self.power == 1

    def kernel(self):
        """The log link's numba kernels, for every power: Poisson's and Gamma's at 1 and 2, else the general
        one with the observed curvature (``1 < p < 2``) or the expected one (Fisher scoring, ``p < 1`` or
        ``p > 2``, and the normal family's ``p = 0``, whose loss is formed as ``(mu - y)^2 / 2``).  The
        identity link has none."""
        if self.link_name != "log":
            return None
        p = self.power
        if p == 1:
            return LOSSES["poisson"].numba_code, 0.0
        if p == 2:
            return LOSSES["gamma"].numba_code, 0.0
        return (_TWEEDIE_EXPECTED if self.fisher else _TWEEDIE_OBSERVED), p

    # --- torch
    def _terms(self, z, y):
        """(loss, gradient, observed curvature, expected curvature) per sample."""
        p = self.power
        if self.link_name == "log":
            if p == 1:
                mu = torch.exp(z)
                return mu - y * z, mu - y, mu, mu
            if p == 2:
                e = y * torch.exp(-z)
                return z + e, 1.0 - e, e, torch.ones_like(z)
            if p == 0:  # normal with log link: (mu - y)^2 / 2, no cancellation of two large terms
                mu = torch.exp(z)
                r = mu - y
                return 0.5 * r * r, mu * r, mu * (2.0 * mu - y), mu * mu
            a = torch.exp((2.0 - p) * z)
            # y exp((1-p) z) with y = 0 is 0 even where the exponential overflows
            b = torch.where(y != 0, y * torch.exp((1.0 - p) * z), torch.zeros((), dtype=z.dtype, device=z.device))
            return a / (2.0 - p) - b / (1.0 - p), a - b, (2.0 - p) * a - (1.0 - p) * b, a
        mu = z
        if p == 0:
            r = mu - y
            one = torch.ones_like(r)
            return 0.5 * r * r, r, one, one
        # outside mu > 0 the loss is +inf (not a mean of the family); its derivatives are left NaN-free
        pos = mu > 0
        safe = torch.where(pos, mu, torch.ones((), dtype=mu.dtype, device=mu.device))
        inv_p = safe ** (-p)
        if p == 1:
            loss = safe - y * torch.log(safe)
        elif p == 2:
            loss = torch.log(safe) + y / safe
        else:
            loss = safe ** (2.0 - p) / (2.0 - p) - y * safe ** (1.0 - p) / (1.0 - p)
        grad = inv_p * (safe - y)
        obs = inv_p * ((1.0 - p) * safe + p * y) / safe
        loss = torch.where(pos, loss, torch.full((), math.inf, dtype=mu.dtype, device=mu.device))
        return loss, grad, obs, inv_p

    def value_grad(self, z, y):
        loss, grad, obs, exp_ = self._terms(z, y)
        return loss, grad, exp_ if self.fisher else obs

    def observed_curvature(self, z, y):
        return self._terms(z, y)[2]

    def expected_curvature(self, z, y):
        return self._terms(z, y)[3]

    def inverse_link_torch(self, z):
        return torch.exp(z) if self.link_name == "log" else z

    def variance_torch(self, mu):
        return mu ** self.power if self.power != 0 else torch.ones_like(mu)

    def pearson(self, z, y):
        p = self.power
        if self.link_name == "log":  # (y mu^(-p/2) - mu^(1-p/2))^2: neither mu^2 nor mu^-p is formed (overflow)
            return (y * torch.exp(-0.5 * p * z) - torch.exp((1.0 - 0.5 * p) * z)) ** 2
        return super().pearson(z, y)

    # --- NumPy
    def link(self, mu):
        mu = np.asarray(mu, dtype=np.float64)
        return np.log(mu) if self.link_name == "log" else mu

    def inverse_link(self, z):
        return np.exp(z) if self.link_name == "log" else np.asarray(z)

    def mean_inside(self, mu) -> bool:
        # the log link's mean is positive for every z; the identity link's must be made so for p > 0
        return self.link_name == "log" or self.power <= 0 or mu > 0

    def deviance(self, y, mu):
        from scipy.special import xlogy

        y = np.asarray(y, dtype=np.float64)
        p = self.power
        if p == 0:
            return (y - mu) ** 2
        if p == 1:
            return 2.0 * (xlogy(y, y / mu) - y + mu)
        if p == 2:
            return 2.0 * (np.log(mu / y) + y / mu - 1.0)
        return 2.0 * (
            np.power(np.maximum(y, 0.0), 2.0 - p) / ((1.0 - p) * (2.0 - p))
            - y * np.power(mu, 1.0 - p) / (1.0 - p)
            + np.power(mu, 2.0 - p) / (2.0 - p)
        )


#: The codes of the general log-link Tweedie kernel in :mod:`._fused` (the power is its parameter).
_TWEEDIE_OBSERVED, _TWEEDIE_EXPECTED = 7, 8


class Poisson(Tweedie):
    """Half Poisson deviance with the log link (canonical): ``exp(z) - y z``; scikit-learn's ``HalfPoissonLoss``."""

    name = "poisson"
    numba_code = 5
    _default_power = 1.0

    def __init__(self, **params):
        super().__init__(**{**params, "power": 1.0, "link": "log"})
        self.sklearn_name = "HalfPoissonLoss"


class Gamma(Tweedie):
    """Half Gamma deviance with the log link: ``z + y exp(-z)``; scikit-learn's ``HalfGammaLoss``.

    The link is not canonical, but the observed curvature ``y exp(-z)`` is
    positive for every ``y > 0``, so the solvers use the true Hessian;
    inference uses the expected information (1 per sample).
    """

    name = "gamma"
    numba_code = 6
    _default_power = 2.0

    def __init__(self, **params):
        super().__init__(**{**params, "power": 2.0, "link": "log"})
        self.sklearn_name = "HalfGammaLoss"


LOSSES = {
    cls.name: cls
    for cls in (Squared, Binomial, Multinomial, SquaredHinge, SquaredEpsilonInsensitive, Poisson, Gamma, Tweedie)
}


def get_loss(name: str, **params) -> Loss:
    """Build a loss by name: one of ``LOSSES``; an unknown name raises ``ValueError``.

    Examples
    --------
    >>> get_loss("tweedie", power=3.0, link="log").y_interval
    (0.0, inf, False, False)
    >>> get_loss("hinge")
    Traceback (most recent call last):
        ...
    ValueError: Unknown loss 'hinge'; expected one of ['binomial', 'gamma', 'multinomial', 'poisson', 'squared', 'squared_epsilon_insensitive', 'squared_hinge', 'tweedie'].
    """
    try:
        cls = LOSSES[name]
    except KeyError:
        raise ValueError(f"Unknown loss {name!r}; expected one of {sorted(LOSSES)}.") from None
    return cls(**params)
