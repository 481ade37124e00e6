"""Pointwise losses in torch, written once for CPU and CUDA.

Every loss sees raw predictions ``z`` of shape (n, K) and targets ``y`` in the
loss's own encoding, and returns the losses per sample and output (n, K), or
(n, 1) for ``multinomial``, their derivative with respect to ``z`` (n, K), and
the curvature state a Hessian-vector product needs.
The formulas are numerically stable: ``log1p(exp(-|z|))``/``logsumexp`` never form
``exp`` of a large number, so a margin of -800 gives a loss of 800, not inf.

========================== ===================================== ===================
loss                        per-sample loss                        targets
========================== ===================================== ===================
``squared``                 ``1/2 * (z_k - y_k)^2``              float (n, K)
``binomial``                ``log(1 + exp(z)) - y z``              float {0, 1} (n, 1)
``multinomial``             ``logsumexp(z) - z_y``                 int codes (n,)
``squared_hinge``           ``max(0, 1 - y_k z_k)^2``              float {-1, 1} (n, K)
``squared_epsilon_insensitive`` ``max(0, |z - y| - epsilon)^2``   float (n, 1)
========================== ===================================== ===================

For every loss except ``multinomial`` the Hessian with respect to ``z`` is
diagonal, and ``curv`` is that diagonal (n, K); squared hinge and the
epsilon-insensitive loss use the generalized Hessian (the derivative of the
piecewise-linear gradient).  For ``multinomial`` ``curv`` is the softmax
``p`` and the Hessian-vector product is ``p * v - p * <p, v>``.
"""

from __future__ import annotations

import torch


class Loss:
    """Base class: separable losses with a diagonal Hessian in ``z``."""

    name = "loss"
    coupled = False

    def __init__(self, **params):
        self.params = params

    def value_grad(self, z, y):  # pragma: no cover - interface
        raise NotImplementedError

    def hvp(self, curv, v):
        """Hessian (in ``z``) times ``v``, per sample."""
        return curv * v


class Squared(Loss):
    name = "squared"

    def value_grad(self, z, y):
        r = z - y
        return 0.5 * (r * r), r, torch.ones_like(r)


class Binomial(Loss):
    name = "binomial"

    def value_grad(self, z, y):
        p = torch.sigmoid(z)
        # log(1 + exp(z)) - y z, written so neither tail cancels or overflows
        loss = torch.clamp_min(z, 0.0) - y * z + torch.log1p(torch.exp(-z.abs()))
        return loss, p - y, p * (1.0 - p)


class Multinomial(Loss):
    name = "multinomial"
    coupled = True

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


class SquaredHinge(Loss):
    name = "squared_hinge"

    def value_grad(self, z, y):
        m = torch.clamp_min(1.0 - y * z, 0.0)
        return m * m, -2.0 * y * m, 2.0 * (m > 0).to(z.dtype)


class SquaredEpsilonInsensitive(Loss):
    name = "squared_epsilon_insensitive"

    def value_grad(self, z, y):
        eps = self.params.get("epsilon", 0.0)
        r = z - y
        a = torch.clamp_min(r.abs() - eps, 0.0)
        return a * a, 2.0 * torch.sign(r) * a, 2.0 * (a > 0).to(z.dtype)


LOSSES = {cls.name: cls for cls in (Squared, Binomial, Multinomial, SquaredHinge, SquaredEpsilonInsensitive)}


def get_loss(name: str, **params) -> Loss:
    """Build a loss by name: one of ``LOSSES``."""
    try:
        return LOSSES[name](**params)
    except KeyError:
        raise ValueError(f"Unknown loss {name!r}; expected one of {sorted(LOSSES)}.") from None
