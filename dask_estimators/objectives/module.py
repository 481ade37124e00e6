"""A torch network seen as one flat float vector: per-shard sums of loss and gradient (autograd).

Knows nothing of Dask.  The kernels run on a worker's shard, on its device
(CUDA when it has one, the same code on CPU), and return raw sums:

``value_grad(shard, w, spec, batch) -> (loss_sum, grad_sum, weight_sum, n_rows)``

``loss_sum`` is the sum over the batch rows of ``sample_weight * loss`` and
``grad_sum`` its gradient with respect to the flat parameters ``w``.  The
client divides by the tree-summed ``weight_sum`` and adds the L2 penalty
once, so the sum over shards is exact.

The objective of a batch B is scikit-learn's (``MLPClassifier``/``MLPRegressor``)::

    sum_{i in B} s_i * loss_i / sum_{i in B} s_i  +  alpha / 2 * ||W||^2 / sum_{i in B} s_i

with ``loss_i`` the log-loss (softmax for several classes, logistic for two
classes or for multilabel outputs, summed over the outputs), half the
squared error summed over the outputs (identity output) or the Poisson
deviance half ``exp(z) - y z + y log y - y`` (exp output); ``W`` holds the
weights of every layer, not the biases.

Flat layout: the parameters in ``module.parameters()`` order, that is for
each layer its weight of shape (fan_out, fan_in) then its bias.

Sparse X: a shard's ``X`` may be a torch sparse CSR tensor (see
:mod:`._sparse`).  The first layer is then a sparse-dense product
(:func:`sparse_linear`, its weight gradient :func:`sparse_linear_weight_grad`),
the hidden layers stay dense, and a minibatch is cut from the shard's CSR
arrays (:func:`csr_rows`): nothing of size rows x features is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from scipy.special import expit, softmax

from .. import _torch_api
from .._lazy import lazy_module
from ._sparse import csr_parts, is_sparse

# the compiled kernels, and numba with them, load where a kernel first runs (the workers): the client of a
# ddp fit builds the network's spec and its starting point only (importing numba would slow its start;
# docs/design-measurements.md has the measurement)
_fused_mlp = lazy_module("dask_estimators.objectives._fused_mlp")

__all__ = [
    "NetworkProblem",
    "ACTIVATIONS",
    "MLPSpec",
    "build_module",
    "flatten",
    "unflatten",
    "glorot_init",
    "forward_numpy",
    "prepare",
    "value_grad",
    "loss_grad_",
    "loss_grad_kernel",
    "first_uses",
    "take",
    "take_rows",
    "param_views",
    "validation_stats",
    "batch_slice",
    "batch_cuts",
    "set_batch_cuts",
    "BatchOrder",
    "rows_of_ranges",
    "random_state_of",
    "shuffle_state",
    "set_batch_order",
    "epoch_order",
    "csr_rows",
    "sparse_linear",
    "sparse_linear_weight_grad",
    "SparseInputLinear",
]

@runtime_checkable
class NetworkProblem(Protocol):
    """What the training loops (both strategies) need of a network: :class:`MLPSpec`, the character LSTM's spec.

    ``hand_gradient`` declares whether the problem offers ``loss_grad_(w, X,
    y, sw, g, scale, work, rows)``, a backward by hand into one flat gradient
    buffer without autograd, over the rows ``rows`` of X, y and sw (all of
    them when None) (the MLPs); without it the loops use autograd on
    :meth:`build`'s module (and, with ddp, ``DistributedDataParallel``).
    """

    hand_gradient: ClassVar[bool]

    @property
    def torch_dtype(self) -> torch.dtype: ...

    @property
    def loss_scale(self) -> float:
        """The factor on the data term of the loss the loops report and stop on (the gradient keeps the sum)."""

    @property
    def n_params(self) -> int: ...

    def build(self, device="cpu", dtype=None) -> torch.nn.Module:
        """The module, on ``device``, in ``dtype`` (default: the problem's)."""

    def loss(self, z, y, sw):
        """Sum of the (weighted) per-row losses of the module's output ``z``."""

    def penalty_mask(self) -> np.ndarray:
        """Flat entries covered by the L2 penalty."""

    def weight_flags(self) -> list:
        """For each tensor of ``module.parameters()``: penalised or not."""


ACTIVATIONS = ("identity", "logistic", "tanh", "relu")
OUTPUTS = ("softmax", "logistic", "identity", "exp")


@dataclass(frozen=True)
class MLPSpec:
    """The architecture: sizes, hidden activation, output link and dtype."""

    n_features: int
    hidden: tuple
    n_outputs: int
    activation: str = "relu"
    out: str = "identity"  # "softmax" (several classes), "logistic" (two classes, multilabel), "identity", "exp"
    dtype: str = "float64"

    #: Offers :meth:`loss_grad_` (see :class:`NetworkProblem`).
    hand_gradient: ClassVar[bool] = True

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}.")
        if self.out not in OUTPUTS:
            raise ValueError(f"out must be one of {OUTPUTS}, got {self.out!r}.")

    @property
    def layer_units(self) -> list:
        return [self.n_features, *self.hidden, self.n_outputs]

    @property
    def shapes(self) -> list:
        """(fan_in, fan_out) of each layer."""
        u = self.layer_units
        return list(zip(u[:-1], u[1:]))

    @property
    def n_params(self) -> int:
        return sum(i * o + o for i, o in self.shapes)

    @property
    def torch_dtype(self):
        return getattr(torch, self.dtype)

    @property
    def loss_scale(self) -> float:
        """scikit-learn reports (and stops on) the squared error as a mean over the outputs, its gradient being
        that of the sum: 1 / n_outputs for the identity output, 1 for the others (they sum over the outputs)."""
        return 1.0 / self.n_outputs if self.out == "identity" else 1.0

    # The NetworkProblem interface the training loops use.
    def build(self, device="cpu", dtype=None) -> torch.nn.Module:
        """The module, on ``device``, in ``dtype`` (default: the spec's)."""
        spec = self if dtype is None else MLPSpec(**{**self.__dict__, "dtype": str(dtype).replace("torch.", "")})
        return build_module(spec, device)

    def loss(self, z, y, sw):
        """Sum of the (weighted) per-row losses of the module's output ``z``."""
        return loss_sum(self, z, y, sw)

    def penalty_mask(self) -> np.ndarray:
        """Flat entries covered by the L2 penalty."""
        return weight_mask(self)

    def weight_flags(self) -> list:
        """For each tensor of ``module.parameters()``: penalised or not."""
        return [True, False] * len(self.shapes)

    def loss_grad_(self, w, X, y, sw, g, scale=1.0, work=None, rows=None):
        """The loss sum of :meth:`loss` at the flat parameters ``w``, its gradient times ``scale`` written
        into the flat ``g``; no autograd.  With ``rows``, of the batch of those rows of X, y and sw.

        Offered where ``hand_gradient`` is true: the problem is then trained
        on one flat parameter buffer (see :func:`loss_grad_`).
        """
        return loss_grad_(self, w, X, y, sw, g, scale, work, rows)


def _activation_module(name):
    return {
        "identity": torch.nn.Identity,
        "logistic": torch.nn.Sigmoid,
        "tanh": torch.nn.Tanh,
        "relu": torch.nn.ReLU,
    }[name]()


# ------------------------------------------------------------- sparse first layer
def _csr_kernel(X) -> str:
    """How the first layer multiplies the sparse X: ``"numba"`` (CPU) or ``"torch"`` (other devices, no numba)."""
    return "numba" if _fused_mlp.AVAILABLE and X.device.type == "cpu" else "torch"


def csr_rows(X, idx):
    """Rows ``idx`` of the sparse CSR tensor ``X``, in that order, as a new CSR tensor.

    Only the batch's stored entries are gathered (O(rows + their
    non-zeros)); the column order within each row is kept, so a canonical X
    gives a canonical batch.

    Parameters
    ----------
    X : torch.Tensor
        Sparse CSR, shape (n_rows, n_features).
    idx : torch.Tensor
        int64 row numbers on X's device.

    Returns
    -------
    torch.Tensor
        Sparse CSR of shape (len(idx), n_features).

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]]).to_sparse_csr()
    >>> csr_rows(X, torch.tensor([2, 0, 1])).to_dense().tolist()
    [[0.0, 3.0, 0.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0]]
    """
    crow, col, val = X.crow_indices(), X.col_indices(), X.values()
    idx = idx.to(crow.dtype)
    starts = crow[idx]
    counts = crow[idx + 1] - starts
    m = idx.shape[0]
    new_crow = torch.zeros(m + 1, dtype=crow.dtype, device=crow.device)
    torch.cumsum(counts, 0, out=new_crow[1:])
    total = int(new_crow[-1])
    # entry t of the batch is entry t + (starts[r] - new_crow[r]) of X, r its row in the batch
    pos = torch.arange(total, dtype=crow.dtype, device=crow.device)
    pos += torch.repeat_interleave(starts - new_crow[:-1], counts, output_size=total)
    return torch.sparse_csr_tensor(new_crow, col[pos], val[pos], size=(m, X.shape[1]), check_invariants=False)


def sparse_linear(X, W, b, out=None):
    """``X @ W.T + b`` for a sparse CSR ``X``: a first layer's output, without densifying X.

    On CPU one numba pass (:func:`._fused_mlp.csr_linear`), O(nnz x fan_out);
    elsewhere (GPU, or without numba) ``torch.addmm`` on the sparse tensor.

    Parameters
    ----------
    X : torch.Tensor
        Sparse CSR of shape (rows, fan_in), W's dtype.
    W : torch.Tensor of shape (fan_out, fan_in)
    b : torch.Tensor of shape (fan_out,)
    out : torch.Tensor of shape (rows, fan_out), optional
        Contiguous; overwritten and returned.

    Returns
    -------
    torch.Tensor of shape (rows, fan_out)

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=torch.float64)
    >>> W, b = torch.ones(2, 3, dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64)
    >>> sparse_linear(X.to_sparse_csr(), W, b).tolist()
    [[3.0, 4.0], [3.0, 4.0]]
    """
    if out is None:
        out = torch.empty((X.shape[0], W.shape[0]), dtype=W.dtype, device=W.device)
    if X.shape[0] == 0:
        return out
    if _csr_kernel(X) == "numba":
        data, indices, indptr = csr_parts(X)
        _fused_mlp.csr_linear(data, indices, indptr, W.detach().contiguous().numpy(), b.detach().numpy(),
                              out.numpy())
        return out
    return torch.addmm(b.detach(), X, W.detach().t(), out=out)


def sparse_linear_weight_grad(X, dz, g):
    """``g = dz.T @ X`` for a sparse CSR ``X``: the exact gradient of a first layer's weight, written into ``g``.

    On CPU one numba pass (:func:`._fused_mlp.csr_linear_weight_grad`);
    elsewhere torch's dense-times-sparse product, whose memory is its
    output's (a scatter-add of ``dz[row] * value``, faster on CPU, would hold
    non-zeros x fan_out values: 600 MB for a full-batch pass over 750k
    non-zeros and 100 hidden units).

    Parameters
    ----------
    X : torch.Tensor
        Sparse CSR of shape (rows, fan_in).
    dz : torch.Tensor of shape (rows, fan_out)
        The derivative of the loss with respect to the layer's output.
    g : torch.Tensor of shape (fan_out, fan_in)
        Contiguous; every entry is overwritten.

    Returns
    -------
    torch.Tensor
        ``g``.

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=torch.float64)
    >>> dz = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    >>> sparse_linear_weight_grad(X.to_sparse_csr(), dz, torch.empty(1, 3, dtype=torch.float64)).tolist()
    [[1.0, 6.0, 2.0]]
    """
    if X.shape[0] == 0:
        return g.zero_()
    if _csr_kernel(X) == "numba":
        data, indices, indptr = csr_parts(X)
        _fused_mlp.csr_linear_weight_grad(data, indices, indptr, dz.detach().contiguous().numpy(), g.numpy())
        return g
    return g.copy_(torch.mm(dz.detach().t(), X))


class _SparseLinearFunction(torch.autograd.Function):
    """``X @ W.T + b`` for a sparse CSR X, with the exact gradients of W and b (none for X, which is data)."""

    @staticmethod
    def forward(ctx, X, W, b):
        ctx.X, ctx.w_shape = X, W.shape
        return sparse_linear(X, W, b)

    @staticmethod
    def backward(ctx, grad_out):
        gW = gb = None
        if ctx.needs_input_grad[1]:
            gW = sparse_linear_weight_grad(
                ctx.X, grad_out, torch.empty(ctx.w_shape, dtype=grad_out.dtype, device=grad_out.device)
            )
        if ctx.needs_input_grad[2]:
            gb = grad_out.sum(0)
        return None, gW, gb


class SparseInputLinear(torch.nn.Linear):
    """``torch.nn.Linear`` that also takes a sparse CSR input: a sparse-dense product with autograd.

    Dense input goes through ``Linear`` unchanged.  For sparse CSR input the
    output is :func:`sparse_linear` and the gradients of the weight and the
    bias are exact (:func:`sparse_linear_weight_grad`); X gets none.  The
    parameters, their names and their order are ``Linear``'s.

    Examples
    --------
    >>> import torch
    >>> layer = SparseInputLinear(3, 2, dtype=torch.float64)
    >>> X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=torch.float64)
    >>> bool(torch.allclose(layer(X.to_sparse_csr()), layer(X)))
    True
    """

    def forward(self, input):
        if is_sparse(input):
            return _SparseLinearFunction.apply(input, self.weight, self.bias)
        return super().forward(input)


def build_module(spec: MLPSpec, device="cpu") -> torch.nn.Sequential:
    """The network as ``nn.Sequential`` (Linear, activation, ..., Linear); the output link is in the loss.

    The first layer is a :class:`SparseInputLinear`, so the module also takes
    a sparse CSR X.
    """
    layers = []
    for k, (fan_in, fan_out) in enumerate(spec.shapes):
        linear = SparseInputLinear if k == 0 else torch.nn.Linear
        layers.append(linear(fan_in, fan_out, dtype=spec.torch_dtype, device=device))
        if k < len(spec.shapes) - 1:
            layers.append(_activation_module(spec.activation))
    return torch.nn.Sequential(*layers)


def flatten(coefs, intercepts) -> np.ndarray:
    """scikit-learn's ``coefs_`` (fan_in, fan_out) and ``intercepts_`` to the flat float64 vector."""
    sizes = [(np.shape(W), np.size(b)) for W, b in zip(coefs, intercepts)]
    out = np.empty(sum(a * c + m for (a, c), m in sizes))
    pos = 0
    for (W, b), ((fan_in, fan_out), m) in zip(zip(coefs, intercepts), sizes):
        # each weight written transposed straight into its place: one copy, not two (docs/design-measurements.md)
        np.copyto(out[pos : pos + fan_in * fan_out].reshape(fan_out, fan_in), np.asarray(W).T, casting="unsafe")
        pos += fan_in * fan_out
        out[pos : pos + m] = np.asarray(b).ravel()
        pos += m
    return out


def unflatten(spec: MLPSpec, w) -> tuple[list, list]:
    """The flat vector back to scikit-learn's ``coefs_`` and ``intercepts_`` (float64)."""
    w = np.asarray(w, dtype=np.float64)
    coefs, intercepts, pos = [], [], 0
    for fan_in, fan_out in spec.shapes:
        coefs.append(w[pos : pos + fan_in * fan_out].reshape(fan_out, fan_in).T.copy())
        pos += fan_in * fan_out
        intercepts.append(w[pos : pos + fan_out].copy())
        pos += fan_out
    return coefs, intercepts


def weight_mask(spec: MLPSpec) -> np.ndarray:
    """True on the flat entries that the L2 penalty covers (weights, not biases)."""
    mask = np.zeros(spec.n_params, dtype=bool)
    pos = 0
    for fan_in, fan_out in spec.shapes:
        mask[pos : pos + fan_in * fan_out] = True
        pos += fan_in * fan_out + fan_out
    return mask


def glorot_init(spec: MLPSpec, rng: np.random.RandomState) -> np.ndarray:
    """scikit-learn's initialisation (Glorot uniform, the same draws in the same order) as a flat vector."""
    factor = 2.0 if spec.activation == "logistic" else 6.0
    coefs, intercepts = [], []
    for fan_in, fan_out in spec.shapes:
        bound = np.sqrt(factor / (fan_in + fan_out))
        coefs.append(rng.uniform(-bound, bound, (fan_in, fan_out)))
        intercepts.append(rng.uniform(-bound, bound, fan_out))
    return flatten(coefs, intercepts)


_NP_ACT = {
    "identity": lambda a: a,
    "logistic": expit,
    "tanh": np.tanh,
    "relu": lambda a: np.maximum(a, 0),
}


def forward_numpy(spec: MLPSpec, coefs, intercepts, X, *, link=True) -> np.ndarray:
    """The network on NumPy (no torch, no cluster): outputs after the link when ``link``, else raw."""
    a = X
    last = len(coefs) - 1
    for k, (W, b) in enumerate(zip(coefs, intercepts)):
        a = a @ W + b
        if k < last:
            a = _NP_ACT[spec.activation](a)
    if not link or spec.out == "identity":
        return a
    if spec.out == "softmax":
        return softmax(a, axis=1)
    if spec.out == "exp":
        return np.exp(a)
    return expit(a)


# --------------------------------------------------------------- on a worker
def loss_sum(spec: MLPSpec, z, y, sw):
    """Sum of (weighted) per-row losses of raw outputs ``z`` against encoded targets ``y``.

    The log-losses are scikit-learn's: of the probabilities clipped to
    ``[eps, 1 - eps]`` (``eps`` of ``z``'s dtype).  Clipping changes the
    value only; the gradient (autograd's) stays that of the exact loss,
    ``p - y``, as in scikit-learn's backward.
    """
    if spec.out in ("softmax", "logistic"):
        if spec.out == "softmax":
            exact = torch.nn.functional.cross_entropy(z, y, reduction="none")
            p = torch.softmax(z.detach(), 1).gather(1, y.reshape(-1, 1)).squeeze(1)
            clipped = -torch.log(p.clamp(_eps(z), 1 - _eps(z)))
        else:
            exact = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none").sum(1)
            p = torch.sigmoid(z.detach()).clamp(_eps(z), 1 - _eps(z))
            clipped = -(torch.xlogy(y, p) + torch.xlogy(1 - y, 1 - p)).sum(1)
        per = exact + (clipped - exact.detach())
    elif spec.out == "exp":
        per = (torch.exp(z) - y * z + torch.xlogy(y, y) - y).sum(1)
    else:
        per = 0.5 * ((z - y) ** 2).sum(1)
    return per.sum() if sw is None else (per * sw).sum()


def _eps(z) -> float:
    return float(torch.finfo(z.dtype).eps)


def param_views(spec: MLPSpec, flat) -> list:
    """Views of the flat vector ``flat`` in ``module.parameters()`` order: each layer's weight, then its bias."""
    views, pos = [], 0
    for fan_in, fan_out in spec.shapes:
        views.append(flat[pos : pos + fan_in * fan_out].view(fan_out, fan_in))
        pos += fan_in * fan_out
        views.append(flat[pos : pos + fan_out])
        pos += fan_out
    return views


# The hidden activations in place (their derivatives: _torch_api.act_backward, autograd's own kernels where it may)
_ACT_INPLACE = {
    "identity": lambda z: z,
    "logistic": torch.sigmoid_,
    "tanh": torch.tanh_,
    "relu": torch.relu_,
}


def _scratch(work, key, rows, cols, like):
    """A (rows, cols) buffer of ``like``'s dtype and device, kept in ``work`` between calls (a fresh one without).

    Worker processes run with ``MALLOC_TRIM_THRESHOLD_=65536`` (Dask's nanny
    sets it), so a freed 100 kB activation is handed back to the system and
    the next step's page-faults it in again (a small step took longer with
    fresh buffers; docs/design-measurements.md has the measurement).
    The buffer grows to the most rows asked for; a call gets its first ``rows``.
    """
    if work is None:
        return torch.empty((rows, cols), dtype=like.dtype, device=like.device)
    buf = work.get(key)
    if (buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != like.dtype
            or buf.device != like.device):
        buf = work[key] = torch.empty((rows, cols), dtype=like.dtype, device=like.device)
    return buf[:rows]


def loss_grad_(spec: MLPSpec, w, X, y, sw, g, scale=1.0, work=None, rows=None) -> float:
    """Forward and backward of the network by hand: the loss sum, and ``scale`` times its gradient in ``g``.

    The same numbers as autograd on :func:`build_module` and :func:`loss_sum`
    (scikit-learn's ``_backprop``), with none of its graph.  ``w`` and ``g``
    are flat vectors (layout: :func:`param_views`) in ``spec``'s dtype on X's
    device; every entry of ``g`` is overwritten.  ``work``, a dict kept by
    the caller, holds the activations between calls (see :func:`_scratch`).
    Returns the loss sum.  An empty batch (a shard's share of a global batch
    smaller than the number of shards) has loss 0 and gradient 0.

    A float64 or float32 batch on CPU goes through one numba call
    (:mod:`._fused_mlp`), faster on small batches than the torch ops below,
    which serve GPUs, sparse X and installs without numba (benchmarks/results/history/changelog-development.md).

    With ``rows`` (an int64 tensor), X, y and sw are a whole shard's and the
    batch is their rows ``rows`` (:func:`take`'s); the numba call gathers
    them itself, one call fewer per array and step.
    """
    # the same tensors every step (a shard's, or a batch's kept buffers): which kernel, and their NumPy views,
    # worked out once (docs/design-measurements.md)
    kept = None if work is None else work.get("nb_views")
    if kept is None or any(a is not b for a, b in zip(kept[0], (X, y, sw, w, g))):
        numba = loss_grad_kernel(X) == "numba" and X.is_contiguous()
        kept = ((X, y, sw, w, g), (w.numpy(), X.numpy(), y.numpy(), None if sw is None else sw.numpy(),
                                   g.numpy()) if numba else None)
        if work is not None:
            work["nb_views"] = kept
    if kept[1] is not None:
        if (X.shape[0] if rows is None else rows.shape[0]) == 0:
            g.zero_()
            return 0.0
        wn, Xn, yn, swn, gn = kept[1]
        return _fused_mlp.loss_grad(spec, wn, Xn, yn, swn, gn, scale, {} if work is None else work,
                                    None if rows is None else rows.numpy())
    if rows is not None:
        X, y, sw = take_rows(X, y, sw, rows, work)
    if X.shape[0] == 0:
        g.zero_()
        return 0.0
    if is_sparse(X):  # the first layer a sparse-dense product (numba on CPU), the rest torch ops
        return float(_loss_grad_torch(spec, param_views(spec, w), X, y, sw, param_views(spec, g), scale, work))
    if rows is not None and loss_grad_kernel(X) == "numba" and X.is_contiguous():  # a gathered batch
        return _fused_mlp.loss_grad(spec, w.numpy(), X.numpy(), y.numpy(), None if sw is None else sw.numpy(),
                                    g.numpy(), scale, {} if work is None else work)
    return float(_loss_grad_torch(spec, param_views(spec, w), X, y, sw, param_views(spec, g), scale, work))


def loss_grad_kernel(X) -> str:
    """Which way :func:`loss_grad_` computes on batches like ``X``: ``"numba"`` (float64 or float32 on CPU)
    or ``"torch"``.

    For a sparse CSR ``X``: ``"csr-numba"`` (the first layer's two products
    by numba on CPU, the rest torch ops) or ``"csr-torch"`` (all torch ops).
    """
    if is_sparse(X):
        return "csr-" + _csr_kernel(X)
    numba = _fused_mlp.AVAILABLE and X.dtype in (torch.float64, torch.float32) and X.device.type == "cpu"
    return "numba" if numba else "torch"


def first_uses() -> None:
    """Make a process's first uses of the networks' code: :func:`loss_grad_` in both dtypes, and one step of a
    ``torch.optim`` Adam.

    A worker's warm-up calls it (:mod:`dask_estimators.engine.cluster._warm`), so that a fit does not pay them.
    A process's first ``torch.optim`` optimizer imports ``torch._dynamo``, most of a ddp fit's first-use cost on a
    fresh cluster (benchmarks/results/history/first-fit.md has both costs).  The Adam is fused where torch has it,
    as the optimizer layer's.
    """
    for dtype in ("float32", "float64"):
        spec = MLPSpec(2, (2,), 1, activation="relu", out="logistic", dtype=dtype)
        w = torch.zeros(spec.n_params, dtype=spec.torch_dtype)
        g = torch.empty_like(w)
        loss_grad_(spec, w, torch.ones((2, 2), dtype=w.dtype), torch.ones((2, 1), dtype=w.dtype), None, g, 1.0, {})
    w.grad = g
    try:
        opt = torch.optim.Adam([w], fused=True)
    except (RuntimeError, TypeError, ValueError):  # a torch without the fused kernel
        opt = torch.optim.Adam([w])
    opt.step()


def _loss_grad_torch(spec: MLPSpec, params, X, y, sw, grads, scale, work):
    """:func:`loss_grad_` as torch ops on the tensors of ``module.parameters()``; the loss sum as a 0-d tensor."""
    n, n_layers = X.shape[0], len(spec.shapes)
    acts, a = [X], X
    sparse = is_sparse(X)
    for k in range(n_layers):
        W, b = params[2 * k], params[2 * k + 1]
        if k == 0 and sparse:
            a = sparse_linear(X, W, b, out=_scratch(work, ("a", k), n, W.shape[0], X))
        else:
            a = torch.addmm(b, a, W.t(), out=_scratch(work, ("a", k), n, W.shape[0], X))
        if k < n_layers - 1:
            a = _ACT_INPLACE[spec.activation](a)
            acts.append(a)
    z = a
    loss = loss_sum(spec, z, y, sw)
    # d loss / d z for the output link: p - y (softmax, logistic, exp) or z - y (identity)
    if spec.out == "softmax":
        dz = torch.softmax(z, 1)
        dz.scatter_add_(1, y.reshape(-1, 1), torch.full((n, 1), -1.0, dtype=z.dtype, device=z.device))
    else:
        dz = _scratch(work, "dz", n, z.shape[1], X)
        if spec.out == "logistic":
            torch.sigmoid(z, out=dz)
        elif spec.out == "exp":
            torch.exp(z, out=dz)
        else:
            dz.copy_(z)
        dz.sub_(y)
    if sw is None:
        dz.mul_(scale)
    else:
        dz.mul_((sw * scale).reshape(-1, 1))
    backward = _torch_api.act_backward(spec.activation)
    for k in range(n_layers - 1, -1, -1):
        if k == 0 and sparse:
            sparse_linear_weight_grad(X, dz, grads[0])
        else:
            torch.mm(dz.t(), acts[k], out=grads[2 * k])
        torch.sum(dz, 0, out=grads[2 * k + 1])
        if k:
            dz = backward(torch.mm(dz, params[2 * k], out=_scratch(work, ("d", k), n, acts[k].shape[1], X)), acts[k])
    return loss


def prepare(shard, spec: MLPSpec, rank: int, cuts=None, want_labels: bool = False) -> dict:
    """Encode the targets for ``spec.out``, cast X, reset the shard's per-fit state (:func:`init_rows`): every
    row trains until a :class:`BatchOrder` with ``positions`` holds out the shard's part of the validation set
    (scikit-learn's split of the global rows, which the client draws).

    Returns the shard's row counts and weight sums, training and validation.
    With ``cuts`` (its row of :func:`batch_cuts`, or its :class:`BatchOrder`,
    which the client can work out beforehand when no validation rows are held
    out), also :func:`set_batch_cuts` (:func:`set_batch_order`): one round
    instead of two.  With ``want_labels``, the counts hold the class (0 or 1) of each row of a classifier of one
    output, for the client's stratified split of the global rows (``"labels"``, int8).
    """
    dt = spec.torch_dtype
    X = shard.get("X")
    if X.dtype != dt:
        shard.put("X", X.to(dt))
    y = shard.get("y")
    if spec.out == "softmax":
        y = y.to(torch.int64).reshape(-1)
    else:
        y = y.to(dt).reshape(y.shape[0], -1)
    shard.put("y", y)
    sw = shard.get("sample_weight")
    if sw is not None and sw.dtype != dt:
        shard.put("sample_weight", sw.to(dt))
    out = init_rows(shard, rank)
    # scikit-learn stratifies its early-stopping split for a classifier of one output only (its binarised
    # multiclass y has one output per class)
    if want_labels and spec.out == "logistic" and spec.n_outputs == 1:
        out["labels"] = y[:, 0].detach().to("cpu").numpy().astype(np.int8)
    if isinstance(cuts, BatchOrder):
        set_batch_order(shard, cuts)
    elif cuts is not None:
        set_batch_cuts(shard, cuts)
    return out


def init_rows(shard, rank: int) -> dict:
    """Reset this shard's per-fit cache, every row a training row (:func:`set_batch_order` may hold some out).

    Returns the shard's row counts and weight sums, training and validation (none).
    """
    n = shard.n_rows
    shard.cache["mlp"] = {
        "train": None,  # all rows, unless a BatchOrder holds out validation rows
        "val": None,
        "n_train": n,
        "perm": None,
        "order": None,  # a BatchOrder's epochs (set_batch_order), else cuts of the shard's own shuffles
        "module": None,
        "work": {},  # buffers kept between steps (see _scratch)
        "rank": int(rank),
    }
    sw = shard.get("sample_weight")
    return {"n_train": n, "n_val": 0, "sw_train": float(n) if sw is None else float(sw.sum()), "sw_val": 0.0}


def _mix(*ints) -> int:
    """A seed from several integers (stable across processes, unlike ``hash``)."""
    h = 1469598103934665603
    for i in ints:
        h = ((h ^ (int(i) & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h & 0x7FFFFFFFFFFFFFFF


def batch_cuts(n_rows, batch_size: int) -> np.ndarray:
    """Each shard's share of every global batch of ``batch_size`` rows: cumulative counts, (n_shards, n_steps + 1).

    Global batch ``k`` has exactly ``batch_size`` rows (the last one the
    remainder), as scikit-learn's ``gen_batches``, also when it is smaller
    than the number of shards.  The shards' rows are interleaved in
    proportion to their sizes (row ``j`` of a shard of ``n`` rows sits at
    ``(j + 0.5) / n``, ties to the lower rank), so each shard's rows spread
    evenly over the epoch; shard ``r`` gives batch ``k`` its rows
    ``cuts[r, k]:cuts[r, k + 1]`` of its epoch order (see :func:`set_batch_cuts`).
    """
    n_rows = np.asarray(n_rows, dtype=np.int64)
    total = int(n_rows.sum())
    n_steps = max(1, -(-total // int(batch_size)))
    keys = np.concatenate([(np.arange(n) + 0.5) / n for n in n_rows if n > 0] or [np.zeros(0)])
    owner = np.repeat(np.arange(len(n_rows)), n_rows)
    owner = owner[np.lexsort((owner, keys))]
    bounds = np.minimum(np.arange(n_steps + 1, dtype=np.int64) * int(batch_size), total)
    return np.stack([np.searchsorted(np.flatnonzero(owner == r), bounds) for r in range(len(n_rows))])


def set_batch_cuts(shard, cuts) -> None:
    """Give this shard its row of :func:`batch_cuts`: its batch shares replace :func:`batch_slice`'s this fit."""
    shard.cache["mlp"]["cuts"] = np.asarray(cuts, dtype=np.int64)
    shard.cache["mlp"]["order"] = None


def shuffle_state(rng: np.random.RandomState) -> tuple:
    """``rng``'s state (a ``RandomState`` as scikit-learn's MLPs draw from) as a hashable value: the state the
    epochs' shuffles of :class:`BatchOrder` start from."""
    name, keys, pos, has_gauss, cached = rng.get_state()
    return (name, np.asarray(keys, dtype=np.uint32).tobytes(), int(pos), int(has_gauss), float(cached))


def random_state_of(state: tuple) -> np.random.RandomState:
    """A ``RandomState`` in the state :func:`shuffle_state` took."""
    name, keys, pos, has_gauss, cached = state
    rng = np.random.RandomState()
    rng.set_state((name, np.frombuffer(keys, dtype=np.uint32).copy(), pos, has_gauss, cached))
    return rng


def rows_of_ranges(ranges) -> np.ndarray:
    """The rows of ``[start, stop)`` ranges, one after the other."""
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges] or [np.zeros(0, np.int64)])


@dataclass(frozen=True, eq=False)  # compared and hashed as an object: ``positions`` is an array
class BatchOrder:
    """One shard's place in a fit's global batches, the same whatever the layout of the rows into shards.

    ``ranges``: the global rows the shard holds (``[start, stop)`` of the input, in the order of its rows);
    ``n_total`` the rows of all shards, ``batch_size`` the rows of a global batch.  Epoch ``epoch0 + i``
    takes the rows in the order scikit-learn's MLPs take them: with ``shuffle_state`` (a
    :func:`shuffle_state`), the ``i + 1``-th shuffle of the row indices, each drawn
    (``RandomState.shuffle``) over the one before, from that state; without, the rows in input order.
    Global batch ``k`` is the ``k``-th run of ``batch_size`` rows of that order, and each shard takes its rows
    of it, so the batches, and with them the model, depend on the rows and the seed, not on which worker
    holds which rows.

    With validation rows held out (scikit-learn's ``train_test_split`` of the global rows, which the client
    draws), ``positions`` gives each of the shard's rows its place among the training rows (``-1`` for a
    validation row), ``n_total`` counts the training rows, and the shuffles permute those places.
    """

    ranges: tuple
    n_total: int
    batch_size: int
    shuffle_state: tuple | None = None
    epoch0: int = 0
    positions: np.ndarray | None = None

    def global_rows(self) -> np.ndarray:
        """The global row (the place among the training rows) of each of the shard's training rows."""
        if self.positions is not None:
            return self.positions[self.positions >= 0].astype(np.int64)
        return rows_of_ranges(self.ranges)

    def local_rows(self):
        """A function from global rows (rows the shard holds) to the shard's row indices."""
        if self.positions is not None:
            train = np.flatnonzero(self.positions >= 0)
            by = np.argsort(self.positions[train])
            keys, rows_of = self.positions[train][by], train[by]
            return lambda rows: rows_of[np.searchsorted(keys, rows)]
        starts = np.array([a for a, _ in self.ranges], dtype=np.int64)
        firsts = np.concatenate([[0], np.cumsum([b - a for a, b in self.ranges])[:-1]]).astype(np.int64)
        by = np.argsort(starts, kind="stable")

        def local(rows):
            j = by[np.searchsorted(starts[by], rows, side="right") - 1]
            return rows - starts[j] + firsts[j]
        return local


def set_batch_order(shard, order: BatchOrder) -> dict | None:
    """Give this shard its :class:`BatchOrder`: its batches' rows come from it this fit.  With
    ``order.positions``, its validation rows are those at ``-1``; then the counts of :func:`init_rows`."""
    state = shard.cache["mlp"]
    out = None
    if order.positions is not None:
        pos = np.asarray(order.positions)
        if len(pos) != shard.n_rows:
            raise ValueError(f"A batch order over {len(pos)} rows for a shard of {shard.n_rows}.")
        train, val = np.flatnonzero(pos >= 0), np.flatnonzero(pos < 0)
        dev = shard.device
        state["train"] = torch.from_numpy(train).to(dev) if len(val) else None
        state["val"] = torch.from_numpy(val).to(dev) if len(val) else None
        state["n_train"] = len(train)
        sw = shard.get("sample_weight")

        def wsum(idx):
            return float(len(idx)) if sw is None else float(sw[torch.from_numpy(idx).to(sw.device)].sum())
        out = {"n_train": len(train), "n_val": len(val), "sw_train": wsum(train), "sw_val": wsum(val)}
    n = len(order.global_rows())
    if n != state["n_train"]:
        raise ValueError(f"A batch order over {n} rows for a shard training on {state['n_train']}.")
    state["order"] = {"order": order, "mine": None, "shuffles": None, "local": None}
    state["cuts"] = None
    state["perm"] = None
    return out


def epoch_order(state: dict, epoch: int, shuffle: bool) -> tuple[np.ndarray, np.ndarray]:
    """The shard's rows (indices into the shard) in the order of ``epoch``'s global batches, and the cuts:
    global batch ``k`` holds its rows ``cuts[k]:cuts[k + 1]`` of that order (see :class:`BatchOrder`)."""
    held = state["order"]
    order: BatchOrder = held["order"]
    n = order.n_total
    if held["mine"] is None:
        mine = np.zeros(n, dtype=bool)
        mine[order.global_rows()] = True
        held["mine"], held["local"] = mine, order.local_rows()
    if shuffle and order.shuffle_state is not None:
        i = epoch - order.epoch0
        done = held["shuffles"]
        if done is None or done[0] > i:  # from the fit's first epoch (a shard rebuilt after a worker loss)
            done = (-1, random_state_of(order.shuffle_state), np.arange(n))
        k, rng, sample_idx = done
        while k < i:  # scikit-learn's shuffle of the sample indices, once an epoch, each over the one before
            perm = np.arange(n)
            rng.shuffle(perm)
            sample_idx, k = sample_idx[perm], k + 1
        held["shuffles"] = (k, rng, sample_idx)
        at = np.flatnonzero(held["mine"][sample_idx])  # the epoch's positions of this shard's rows
        rows = sample_idx[at]
    else:
        at = rows = np.flatnonzero(held["mine"])
    bounds = np.minimum(np.arange(-(-n // order.batch_size) + 1, dtype=np.int64) * order.batch_size, n)
    return held["local"](rows), np.searchsorted(at, bounds)


def batch_slice(n_rows: int, step: int, n_steps: int) -> tuple[int, int]:
    """This shard's share of step ``step`` of an epoch of ``n_steps``: rows [lo, hi) of its permutation."""
    return step * n_rows // n_steps, (step + 1) * n_rows // n_steps


def _epoch_perm(shard, batch):
    """The training rows of this shard in the (seeded) order of the given epoch."""
    state = shard.cache["mlp"]
    seed, epoch, _, _, shuffle = batch
    rank = state["rank"]
    key = (seed, epoch, shuffle)
    if state["perm"] is None or state["perm"][0] != key:
        n = state["n_train"]
        if state.get("order") is not None:
            rows, cuts = epoch_order(state, epoch, shuffle)
            state["perm"] = (key, torch.from_numpy(rows).to(shard.device), cuts)
            return state["perm"][1]
        if shuffle:
            g = torch.Generator().manual_seed(_mix(seed, rank, epoch))
            order = torch.randperm(n, generator=g).to(shard.device)
        else:
            order = torch.arange(n, device=shard.device)
        rows = order if state["train"] is None else state["train"][order]
        state["perm"] = (key, rows, None)
    return state["perm"][1]


def batch_rows(shard, batch):
    """Row indices of ``batch`` = (seed, epoch, step, n_steps, shuffle), or None for all training rows."""
    state = shard.cache["mlp"]
    if batch is None:
        return state["train"]
    rows = _epoch_perm(shard, batch)
    cuts = state["perm"][2] if state["perm"][2] is not None else state.get("cuts")
    if cuts is not None and len(cuts) == batch[3] + 1:
        lo, hi = int(cuts[batch[2]]), int(cuts[batch[2] + 1])
    else:
        lo, hi = batch_slice(state["n_train"], batch[2], batch[3])
    return rows[lo:hi]


def take(shard, idx, work=None):
    """(X, y, sample_weight) of the rows ``idx`` (all rows when None); X's rows into ``work``'s buffer if given."""
    X, y, sw = shard.get("X"), shard.get("y"), shard.get("sample_weight")
    if idx is None:
        return X, y, sw
    return take_rows(X, y, sw, idx, work)


def take_rows(X, y, sw, idx, work=None):
    """(X, y, sw) of the rows ``idx`` of the arrays (sw may be None); X's rows into ``work``'s buffer if given."""
    if is_sparse(X):  # the batch's rows cut from the shard's CSR arrays, never densified
        return (csr_rows(X, idx), torch.index_select(y, 0, idx),
                None if sw is None else torch.index_select(sw, 0, idx))
    # index_select, not X[idx]: advanced indexing is slower on a batch's rows (docs/design-measurements.md)
    if work is None:
        Xb = torch.index_select(X, 0, idx)
    else:
        Xb = torch.index_select(X, 0, idx, out=_scratch(work, "X", idx.shape[0], X.shape[1], X))
    return (Xb, torch.index_select(y, 0, idx),
            None if sw is None else torch.index_select(sw, 0, idx))


def shard_module(shard, spec: MLPSpec):
    """The shard's cached module for ``spec`` (built once per fit, on the shard's device)."""
    state = shard.cache["mlp"]
    if state["module"] is None or state["module"][0] != spec:
        state["module"] = (spec, spec.build(shard.device))
    return state["module"][1]


def value_grad(shard, w, spec: MLPSpec, batch=None):
    """Raw sums over a batch of this shard: (loss_sum, grad_sum, weight_sum, n_rows).

    ``batch`` is None (all training rows, for full-batch solvers) or
    ``(seed, epoch, step, n_steps, shuffle)``: the shard's share of one step
    of a seeded epoch (the permutation is seeded by the shard's rank too).
    The gradient is the spec's own backward (``loss_grad_``) where it has
    one, else autograd on its module.
    """
    fused = spec.hand_gradient
    work = shard.cache["mlp"]["work"] if fused else None
    X, y, sw = take(shard, batch_rows(shard, batch), work)
    n = int(X.shape[0])
    if n == 0:
        return 0.0, torch.zeros(spec.n_params, dtype=torch.float64), 0.0, 0
    weight = float(n) if sw is None else sw.sum()
    if fused:
        w = w.to(device=X.device, dtype=spec.torch_dtype)
        grad = torch.empty_like(w)
        return spec.loss_grad_(w, X, y, sw, grad, work=work), grad, weight, n
    module = shard_module(shard, spec)
    params = list(module.parameters())
    torch.nn.utils.vector_to_parameters(w.to(spec.torch_dtype), params)
    for p in params:
        p.grad = None
    loss = spec.loss(module(X), y, sw)
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in params])
    return loss.detach(), grad, weight, n


def validation_stats(shard, w, spec: MLPSpec):
    """Sums over this shard's validation rows for the validation score.

    Classifiers: ``[weighted correct, weight]`` (accuracy).  Regressors: per
    output ``[sum s*(y - p)^2, sum s*y, sum s*y^2]`` and the weight (R^2).
    """
    state = shard.cache["mlp"]
    module = shard_module(shard, spec)
    if w is not None:
        torch.nn.utils.vector_to_parameters(w.to(spec.torch_dtype), list(module.parameters()))
    idx = state["val"]
    if idx is None:
        return validation_from_rows(spec, None, None, None)
    X, y, sw = take(shard, idx)
    with torch.no_grad():
        z = module(X)
    return validation_from_rows(spec, z, y, sw)


def validation_from_rows(spec: MLPSpec, z, y, sw):
    """The sums of :func:`validation_stats` for raw outputs ``z`` (None: an empty validation part)."""
    regression = spec.out in ("identity", "exp")
    size = 3 * spec.n_outputs + 1 if regression else 2
    if z is None:
        return torch.zeros(size, dtype=torch.float64)
    s = torch.ones(z.shape[0], dtype=torch.float64, device=z.device) if sw is None else sw.to(torch.float64)
    if spec.out == "softmax":
        correct = (z.argmax(1) == y).to(torch.float64)
    elif spec.out == "logistic":
        correct = ((z > 0) == (y > 0.5)).all(1).to(torch.float64)
    else:
        pred = torch.exp(z) if spec.out == "exp" else z
        y64, r = y.to(torch.float64), (y - pred).to(torch.float64)
        sw2 = s[:, None]
        return torch.cat([(sw2 * r * r).sum(0), (sw2 * y64).sum(0), (sw2 * y64 * y64).sum(0), s.sum().reshape(1)])
    return torch.stack([(s * correct).sum(), s.sum()])


def validation_score(spec: MLPSpec, stats) -> float:
    """Accuracy (classifiers) or R^2 averaged over outputs (regressors) from summed :func:`validation_stats`."""
    stats = np.asarray(stats, dtype=np.float64)
    if spec.out not in ("identity", "exp"):
        return float(stats[0] / stats[1]) if stats[1] > 0 else float("nan")
    k = spec.n_outputs
    sse, sy, syy, sw = stats[:k], stats[k : 2 * k], stats[2 * k : 3 * k], stats[3 * k]
    if sw <= 0:
        return float("nan")
    sst = syy - sy * sy / sw
    r2 = np.where(sst > 0, 1.0 - sse / np.where(sst > 0, sst, 1.0), np.where(sse > 0, 0.0, 1.0))
    return float(np.mean(r2))
