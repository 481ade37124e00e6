"""The few private torch entry points the training loop uses, each behind a check with a public fallback.

Four private pieces make a small MLP's steps and epochs faster on CPU:

- ``torch._fused_adam_``: the fused Adam kernel called straight on the
  optimizer's own state (:class:`~dask_estimators.optim.torch_driver._FusedAdamStep`),
  skipping ``torch.optim``'s Python wrapper around it;
- ``torch._foreach_add_``: the L2 term added to every weight's gradient in one call;
- ``torch._foreach_copy_``: the copies of the parameters and the optimizer's
  tensors a ddp rank keeps at each epoch's end, in one call;
- ``torch.ops.aten.{sigmoid,tanh,threshold}_backward``: the hidden
  activations' derivatives written in place by autograd's own kernels.

Each is used only when :func:`enabled` and the entry point exists in the
installed torch; otherwise the public path runs: ``optimizer.step()``, one
``Tensor.add_`` per weight, one ``Tensor.copy_`` per tensor, and the
derivative as tensor arithmetic in the same order as the aten kernels (so
the numbers are the same to the bit).
``DASK_ESTIMATORS__PRIVATE_TORCH=0`` in a process's environment (a worker
inherits its nanny's; the setting ``private-torch`` of docs/clusters.md) turns them all off; ``tests/optim/test_torch_fallback.py``
fits with and without them and compares.
"""

from __future__ import annotations

import functools

import torch

from . import _env

__all__ = ["enabled", "has", "foreach_add_", "foreach_add_fn", "foreach_copy_", "act_backward"]

#: The environment variable of the setting ``private-torch``
ENV = _env.variables("private-torch")[0]


def enabled() -> bool:
    """Whether private torch entry points may be used in this process (the environment says, default yes)."""
    return _env.switched_on("private-torch")


def has(name: str) -> bool:
    """Whether private entry point ``name`` ("torch._fused_adam_", "aten.tanh_backward", ...) may be used here."""
    return enabled() and _exists(name)


def _exists(name: str) -> bool:
    try:
        if name.startswith("aten."):
            return hasattr(getattr(torch.ops.aten, name[5:]), "grad_input")
        return hasattr(torch, name.split(".", 1)[1])
    except (AttributeError, RuntimeError):
        return False


def foreach_add_(tensors, others, alpha) -> None:
    """``t += alpha * o`` for each pair, in place: one ``torch._foreach_add_`` call, or a loop of ``add_``."""
    foreach_add_fn()(tensors, others, alpha)


def foreach_add_fn():
    """The ``foreach_add_(tensors, others, alpha)`` this process would run now, for a loop that calls it each
    step (the choice, which reads the environment, made once)."""
    return _foreach_add_private if has("torch._foreach_add_") else _foreach_add_public


def _foreach_add_private(tensors, others, alpha) -> None:
    torch._foreach_add_(tensors, others, alpha=alpha)


def _foreach_add_public(tensors, others, alpha) -> None:
    for t, o in zip(tensors, others):
        t.add_(o, alpha=alpha)


def foreach_copy_(dst, src) -> None:
    """``d.copy_(s)`` for each pair (same shapes): one ``torch._foreach_copy_`` call, or a loop of ``copy_``."""
    if has("torch._foreach_copy_"):
        torch._foreach_copy_(dst, src)
        return
    for d, s in zip(dst, src):
        d.copy_(s)


def _public_backward():
    """The derivatives as public tensor arithmetic, in place on ``da``, in the aten kernels' order of operations."""
    return {
        "identity": lambda da, a: da,
        "logistic": lambda da, a: da.mul_(1.0 - a).mul_(a),  # aten: grad * (1 - y) * y
        # aten: grad * (1 - y * y), its 1 - y * y one fused multiply-add (addcmul's, not a * a then 1 - it)
        "tanh": lambda da, a: da.mul_(torch.addcmul(torch.ones_like(a), a, a, value=-1.0)),
        "relu": lambda da, a: da.masked_fill_(a <= 0, 0.0),  # aten threshold_backward: 0 where y <= 0
    }


def _aten_backward():
    aten = torch.ops.aten
    return {
        "identity": lambda da, a: da,
        "logistic": lambda da, a: aten.sigmoid_backward.grad_input(da, a, grad_input=da),
        "tanh": lambda da, a: aten.tanh_backward.grad_input(da, a, grad_input=da),
        "relu": lambda da, a: aten.threshold_backward.grad_input(da, a, 0, grad_input=da),
    }


def act_backward(name: str):
    """``f(da, a)``: ``da`` times the derivative of hidden activation ``name`` at output ``a``, in place on ``da``."""
    return _backward_table(enabled())[name]


@functools.lru_cache(maxsize=None)
def _backward_table(private: bool) -> dict:
    ops = ("sigmoid_backward", "tanh_backward", "threshold_backward")
    return _aten_backward() if private and all(_exists(f"aten.{op}") for op in ops) else _public_backward()
