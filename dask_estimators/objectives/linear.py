"""Linear models: per-shard kernels (raw sums) and the client-side objective.

Parameters are one flat float64 vector ``w = [W.ravel(), b]`` with ``W`` of
shape (K, d) (row-major) and ``b`` of shape (K,) (absent without intercept).
The raw prediction is ``z = X @ W.T + b``.

The objective minimised, with sample weights ``s`` and ``S = sum(s)``::

    F(w) = (1/S) * sum_i s_i * loss(y_i, z_i)
           + l2 / 2 * ||W||_2^2 + l1 * ||W||_1

X is a dense tensor or a torch sparse CSR tensor (:mod:`._sparse`), which
the kernels never densify, of float64 or float32 values.  A float32 X is
read as it is (half the bytes a pass streams) and every sum is carried in
float64: the numba kernels widen each value as they read it, so their
sums are those of float64 arithmetic on X's values; the torch kernels (GPU,
several threads) form a dense X's products in float32, with the parameters
split in two float32 halves so that none is rounded, over row blocks of
:data:`FLOAT32_BLOCK_ROWS`, and add the blocks' results in float64, with the
pointwise losses in float64: their sums carry float32 rounding, about 1e-6
of the terms (a sparse X's values are widened to float64 in the products).
The curvature kept for ``hessp`` is float64.

The intercept is never penalised.  Kernels (``value_grad``, ``hessp``,
``hess``, ``weight_sum``) run on a worker's shard and return raw sums; the
division by ``S`` and the penalties are applied once, on the client, by
:class:`LinearObjective`.  The L1 term is not part of ``fun_and_grad``: the
driver handles it (see :mod:`dask_estimators.optim.scipy_driver`).
"""

from __future__ import annotations

import functools
import sys

from dataclasses import dataclass

import numpy as np

from .._lazy import lazy_module

# imported by the kernels on the workers; the client only builds the objective
torch = lazy_module("torch")
_fused = lazy_module("dask_estimators.objectives._fused")
from . import _host as _shard
from . import losses as _losses  # no torch at import: the client reads links and checks
from ._sparse import csr_parts, is_host_csr, is_sparse

__all__ = ["LinearSpec", "LinearObjective", "value_grad", "hessp", "hess", "weight_sum", "check_weight_sum",
           "inference_sums", "x_nbytes"]


def check_weight_sum(total: float) -> None:
    """The error for sample weights (times the class weights) whose sum over the rows is not positive: scikit-learn's
    words where they are all zero."""
    if total == 0:
        raise ValueError("Sample weights must contain at least one non-zero number.")
    if not total > 0:
        raise ValueError("The sum of sample weights must be positive.")


@dataclass(frozen=True)
class LinearSpec:
    """What a kernel needs to know about the model: loss, shapes, intercept."""

    loss: str
    n_features: int
    n_outputs: int = 1
    fit_intercept: bool = True
    epsilon: float = 0.0
    #: ``"auto"``: the one-pass numba kernels (:mod:`._fused`) for shards in
    #: host memory when the kernel runs on one thread, the torch kernels
    #: otherwise (GPU, several BLAS threads); for a sparse CSR X the numba CSR
    #: kernels in host memory whatever the threads,
    #: torch's sparse products otherwise; ``"fused"`` or ``"torch"`` force one
    #: (``"fused"`` raises where it cannot run).
    backend: str = "auto"
    #: Further parameters of the loss as ``(name, value)`` pairs (the Tweedie
    #: ``power`` and ``link``); ``epsilon`` has its own field.
    loss_params: tuple = ()

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}.")

    @property
    def n_params(self) -> int:
        return self.n_outputs * (self.n_features + int(self.fit_intercept))

    def unpack(self, w):
        K, d = self.n_outputs, self.n_features
        W = w[: K * d].reshape(K, d)
        b = w[K * d :] if self.fit_intercept else None
        return W, b

    def pack(self, gW, gb):
        flat = gW.reshape(-1)
        return torch.cat([flat, gb]) if self.fit_intercept else flat

    def get_loss(self):
        """The loss object (:mod:`.losses`); an unknown name raises ``ValueError``."""
        return _losses.get_loss(self.loss, epsilon=self.epsilon, **dict(self.loss_params))

    def kernel(self):
        """``(code, parameter)`` of the loss's one-pass numba kernel (:meth:`.losses.Loss.kernel`); None: none."""
        return _kernel_of(self.loss, self.epsilon, self.loss_params)


@functools.lru_cache(maxsize=256)
def _kernel_of(loss, epsilon, loss_params):
    return _losses.get_loss(loss, epsilon=epsilon, **dict(loss_params)).kernel()


BACKENDS = ("auto", "fused", "torch")


def _use_fused(X, spec: LinearSpec) -> bool:
    """Whether this shard's kernel takes the one-pass numba path (see ``LinearSpec.backend``)."""
    if spec.backend == "torch":
        return False
    if is_sparse(X):
        return _use_fused_csr(X, spec)
    ok = spec.kernel() is not None and _fused.AVAILABLE and _host_float(X) and X.is_contiguous()
    if spec.backend == "fused":
        if not ok:
            raise ValueError(
                "backend='fused' needs numba, a loss with a fused kernel and a C-contiguous float X in host memory."
            )
        return True
    # a single-threaded kernel against BLAS on several threads: let BLAS have them
    return ok and torch.get_num_threads() == 1


def _use_fused_csr(X, spec: LinearSpec) -> bool:
    """The same choice for a sparse CSR ``X``: the numba CSR kernels where they can run.

    ``"auto"`` takes them whatever the number of threads: they were faster
    than torch's sparse products for every loss measured (see
    benchmarks/results/history/sparse.md, "Sparse X: the numba CSR kernels against torch's sparse products").
    """
    ok = spec.kernel() is not None and _fused.AVAILABLE and _host_float(X)
    if spec.backend == "fused" and not ok:
        raise ValueError("backend='fused' needs numba, a loss with a fused kernel and a float X in host memory.")
    return ok


def _host(t):
    return None if t is None else t.numpy()


def _kernel_threads(shard) -> int:
    """The threads a kernel on ``shard`` may use: torch's where it is imported (pinned to the worker's), else the
    shard's worker's (:attr:`~dask_estimators.engine.Shard.threads`)."""
    t = sys.modules.get("torch")
    if t is not None:
        return t.get_num_threads()
    threads = getattr(shard, "threads", None)
    return torch.get_num_threads() if threads is None else threads


def _host_rows(shard, spec: LinearSpec):
    """``(parts, y, s)`` as NumPy for the numba kernels, read where the shard keeps them in host memory (no
    tensor made, torch never imported): ``parts`` X's rows as ``[(first row, rows), ...]``, the blocks X was
    placed from where the shard reads them where they lie (``Shard.row_parts``), else one part; a sparse X one
    part, its CSR arrays (``Shard.host_csr``); ``s`` as (n, 1) or (n, K) or None.  None where the numba kernels
    do not take this shard (a GPU's X, another backend, a dense X on several threads: ``_use_fused``'s rule),
    and the tensor path decides."""
    if spec.backend == "torch" or spec.kernel() is None or not _fused.AVAILABLE:
        return None
    parts = _shard.row_parts(shard, "X")
    if parts is None:
        X = _shard.csr(shard, "X")
        if X is None or X.dtype not in (np.float64, np.float32):
            return None
        parts = [(0, X)]  # the CSR kernels whatever the threads (_use_fused_csr)
    elif any(X.ndim != 2 or X.dtype not in (np.float64, np.float32) or not X.flags.c_contiguous for _, X in parts):
        return None
    elif spec.backend != "fused" and _kernel_threads(shard) != 1:
        return None
    y, s = _shard.host(shard, "y"), _shard.host(shard, "sample_weight")
    if y is None or (s is None and "sample_weight" in getattr(shard, "data", {})):
        return None
    return parts, y, (s[:, None] if s is not None and s.ndim == 1 else s)


def _part_sums(parts, kernel, *rows):
    """``kernel(X_part, *(r[part's rows] for r in rows))`` over X's parts, its outputs summed (the first part's
    arrays are the sums, in place); a row argument may be None."""
    out = None
    for a, X in parts:
        e = a + X.shape[0]
        got = kernel(X, *(None if r is None else r[a:e] for r in rows))
        if out is None:
            out = list(got)
        else:
            for i, v in enumerate(got):
                if isinstance(out[i], np.ndarray):
                    out[i] += v
                else:
                    out[i] = out[i] + v
    return out


def _tensor(a, X):
    """A NumPy argument (a kernel of ``host_args``) as a tensor on X's device; a tensor as it is."""
    return torch.as_tensor(a, device=X.device) if isinstance(a, np.ndarray) else a


def _widened(X, dtype):
    """X with its values in ``dtype`` (float64): a dense copy, or a sparse CSR over the same indices."""
    if is_sparse(X):
        return torch.sparse_csr_tensor(X.crow_indices(), X.col_indices(), X.values().to(dtype), size=X.shape)
    return X.to(dtype)


def _host_float(X) -> bool:
    """Whether the numba kernels can read X: in host memory, of float64 or float32 values."""
    return X.device.type == "cpu" and X.dtype in (torch.float64, torch.float32)


def _split32(A):
    """float64 ``A`` as two float32 halves ``hi + lo`` side by side along the first axis: ``A - hi - lo`` is
    below float32 rounding of ``lo``, so a float32 product with both keeps ``A`` to about 1e-14 relative."""
    hi = A.to(torch.float32)
    return torch.cat([hi, (A - hi.to(A.dtype)).to(torch.float32)])


def _z(X, W, b):
    """``X @ W.T + b`` in float64.  For a dense float32 X the product is one float32 product with W's two
    float32 halves (:func:`_split32`, X read once), widened and added: no parameter is rounded to float32.  A
    sparse float32 X's values are widened (a row holds few of them: the sums are float64's)."""
    if X.dtype != W.dtype and is_sparse(X):
        X = _widened(X, W.dtype)
    if X.dtype != W.dtype:
        K = W.shape[0]
        Z = X @ _split32(W).T
        z = Z[:, :K].to(W.dtype) + Z[:, K:].to(W.dtype)
    else:
        z = X @ W.T
    return z + b if b is not None else z


def _weights(shard):
    """Sample weights as (n, 1), or per sample and output (n, K), or None."""
    s = shard.get("sample_weight")
    return s[:, None] if s is not None and s.ndim == 1 else s


#: On the CPU a kernel walks its shard in row blocks of at most this many
#: bytes of X, which bounds its temporaries.  Small, cache-sized blocks were
#: meant to let ``g_b.T @ X_b`` reread a block from cache after ``X_b @ w``,
#: but measured they were slower than one block (the per-block torch calls cost
#: more than the cache saves; docs/design-measurements.md).  So a block is large.  On a
#: GPU the shard is one block.
BLOCK_BYTES = 1 << 30

#: Rows per block of a dense float32 X on the torch path (CPU or GPU): each block's products are sums in
#: float32 over at most this many rows, and the blocks' results are added in float64.
FLOAT32_BLOCK_ROWS = 1 << 14


def _row_blocks(X):
    n = X.shape[0]
    if is_sparse(X):  # a sparse X is one block: its temporaries are O(n K), its sums scatter-adds in float64
        return [slice(0, n)]
    if X.dtype == torch.float32:
        rows = FLOAT32_BLOCK_ROWS
    elif X.device.type != "cpu":  # a GPU's float64 shard is one block
        return [slice(0, n)]
    else:
        rows = max(256, BLOCK_BYTES // max(1, X.shape[1] * X.element_size()))
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def _weight_block(s, sl):
    return None if s is None else s[sl]


def _rows(X, sl):
    """Rows ``sl`` of ``X``; a sparse X is never sliced (it is one block)."""
    return X if is_sparse(X) else X[sl]


def _csr_rows(X):
    """The row of each stored value of a sparse CSR ``X`` (int64, nnz), kept on X's tensor for the next call."""
    rows = getattr(X, "_dask_estimators_rows", None)
    if rows is None:
        n, nnz = X.shape[0], X.values().shape[0]
        rows = torch.repeat_interleave(torch.arange(n, device=X.device), X.crow_indices().diff(), output_size=nnz)
        X._dask_estimators_rows = rows  # lives and dies with X
    return rows


def _add_xt_times(out, G, X):
    """``out += G.T @ X`` (K, d) for a dense or sparse CSR ``X``: the gradient's transposed product.

    For a sparse X, a scatter-add of ``G[row, k] * value`` into each stored
    value's column: torch's ``X.t() @ G`` (a CSC-dense product) was far
    slower on one thread (benchmarks/results/history/sparse.md; ``benchmarks/bench_sparse_kernels.py``).
    """
    if is_sparse(X):
        rows, cols, vals = _csr_rows(X), X.col_indices(), X.values()
        for k in range(G.shape[1]):
            out[k].index_add_(0, cols, vals * G[:, k][rows])  # float32 values times float64: float64 terms
    elif X.dtype != out.dtype:  # a float32 block: one float32 product with G's two halves, added in float64
        K = G.shape[1]
        P = _split32(G.T) @ X
        out += P[:K].to(out.dtype) + P[K:].to(out.dtype)
    else:
        out.addmm_(G.T, X)


def _sum_dtype(X):
    """The dtype the torch kernels carry their sums in: float64 (also for a float32 X)."""
    return torch.float64 if X.dtype == torch.float32 else X.dtype


def _fused_args(X):
    """The shard's X for the numba kernels: the dense array, or the CSR's arrays and its width (a sparse tensor in
    host memory, or the shard's NumPy CSR)."""
    if is_sparse(X) or is_host_csr(X):
        return (*csr_parts(X), X.shape[1])
    return (X,) if isinstance(X, np.ndarray) else (X.numpy(),)


def _fused_kernel(X, name: str):
    """The numba kernel ``name`` (``"value_grad"``, ``"hessp"``) for X's layout: ``csr_<name>`` for a sparse X."""
    return getattr(_fused, f"csr_{name}" if is_sparse(X) or is_host_csr(X) else name)


def _pack_host(spec: LinearSpec, gW, gb):
    """``spec.pack`` of a numba kernel's NumPy ``(gW, gb)`` as a tensor (:func:`_pack_numpy`'s array)."""
    return torch.from_numpy(_pack_numpy(spec, gW, gb))


def _pack_numpy(spec: LinearSpec, gW, gb):
    """``spec.pack`` of a numba kernel's NumPy ``(gW, gb)``, kept in NumPy (what the worker returns: no tensor to
    make and convert back, a share of a small fit's evaluation: benchmarks/results/history/small-linear-fits.md), and
    without the copy when
    the kernel wrote them as one buffer in that order (the CSR kernels with one output: 8 MB less to copy a round
    at 2^20 features)."""
    base = gW.base
    if (spec.fit_intercept and base is not None and base is gb.base and base.ndim == 1
            and base.size == gW.size + gb.size and gW.ctypes.data == base.ctypes.data
            and gb.ctypes.data == base.ctypes.data + gW.nbytes):
        return base
    return np.concatenate((gW.reshape(-1), gb)) if spec.fit_intercept else gW.reshape(-1)


def value_grad(shard, w, spec: LinearSpec):
    """Kernel: ``(sum_i s_i loss_i, d/dw of that sum)``; keeps the curvature on the worker for ``hessp``/``hess``.

    The numba path returns a float and a NumPy array (what the worker sends back), the torch path tensors.
    """
    rows = _host_rows(shard, spec)
    if rows is not None:
        parts, y, s = rows
        curv = shard.cache.get("linear_curv")  # the last point's buffer: a fresh 4 MB (1M rows) page-faults
        if not isinstance(curv, np.ndarray) or curv.shape != (y.shape[0], spec.n_outputs):
            curv = np.empty((y.shape[0], spec.n_outputs))
        W, b = spec.unpack(np.asarray(w, dtype=np.float64))
        code, param = spec.kernel()
        total, gW, gb = _part_sums(parts, lambda X, yp, sp, cp: _fused_kernel(X, "value_grad")(
            *_fused_args(X), yp, sp, W, b, code, param, cp), y, s, curv)
        shard.cache["linear_curv"] = curv
        return float(total), _pack_numpy(spec, gW, gb)
    X, y, s = shard.get("X"), shard.get("y"), _weights(shard)
    w = _tensor(w, X)
    if _use_fused(X, spec):
        curv = shard.cache.get("linear_curv")
        if curv is None or curv.shape != (X.shape[0], spec.n_outputs) or curv.dtype != torch.float64:
            curv = torch.empty((X.shape[0], spec.n_outputs), dtype=torch.float64)
        W, b = spec.unpack(w.numpy())
        kernel = _fused_kernel(X, "value_grad")
        code, param = spec.kernel()
        total, gW, gb = kernel(*_fused_args(X), y.numpy(), _host(s), W, b, code, param, curv.numpy())
        shard.cache["linear_curv"] = curv
        return float(total), _pack_numpy(spec, gW, gb)
    W, b = spec.unpack(w)
    loss_fn = spec.get_loss()
    K = spec.n_outputs
    acc = _sum_dtype(X)
    gW = torch.zeros(K, X.shape[1], dtype=acc, device=X.device)
    gb = torch.zeros(K, dtype=acc, device=X.device)
    total = torch.zeros((), dtype=acc, device=X.device)
    curv = None
    for sl in _row_blocks(X):
        Xb, sb = _rows(X, sl), _weight_block(s, sl)
        loss, g, c = loss_fn.value_grad(_z(Xb, W, b), y[sl])
        if sb is not None:
            loss = loss * sb
            g = g * sb
        total += loss.sum()
        _add_xt_times(gW, g, Xb)
        gb += g.sum(0)
        if curv is None:
            curv = torch.empty((X.shape[0], c.shape[1]), dtype=c.dtype, device=c.device)
        curv[sl] = c
    shard.cache["linear_curv"] = curv
    return total, spec.pack(gW, gb)


def hessp(shard, p, spec: LinearSpec):
    """Kernel: Hessian of the raw loss sum times ``p``, at the point of the last ``value_grad``."""
    curv = shard.cache["linear_curv"]
    rows = _host_rows(shard, spec)
    if rows is not None and isinstance(curv, np.ndarray):
        parts, _, s = rows
        P, pb = spec.unpack(np.asarray(p, dtype=np.float64))
        code = spec.kernel()[0]
        return _pack_numpy(spec, *_part_sums(
            parts, lambda X, sp, cp: _fused_kernel(X, "hessp")(*_fused_args(X), sp, cp, P, pb, code), s, curv))
    X, s = shard.get("X"), _weights(shard)
    curv = _tensor(curv, X)
    P, pb = spec.unpack(_tensor(p, X))
    if _use_fused(X, spec):
        kernel = _fused_kernel(X, "hessp")
        hW, hb = kernel(*_fused_args(X), _host(s), curv.numpy(), P.numpy(), _host(pb), spec.kernel()[0])
        return _pack_host(spec, hW, hb)
    loss_fn = spec.get_loss()
    acc = _sum_dtype(X)
    hW = torch.zeros(spec.n_outputs, X.shape[1], dtype=acc, device=X.device)
    hb = torch.zeros(spec.n_outputs, dtype=acc, device=X.device)
    for sl in _row_blocks(X):
        Xb, sb = _rows(X, sl), _weight_block(s, sl)
        q = loss_fn.hvp(curv[sl], _z(Xb, P, pb))
        if sb is not None:
            q = q * sb
        _add_xt_times(hW, q, Xb)
        hb += q.sum(0)
    return spec.pack(hW, hb)


def _param_index(spec: LinearSpec, k: int) -> np.ndarray:
    """Positions in ``w`` of output k's coefficients followed by its intercept."""
    d, K = spec.n_features, spec.n_outputs
    idx = list(range(k * d, (k + 1) * d))
    if spec.fit_intercept:
        idx.append(K * d + k)
    return np.asarray(idx)


def _sparse_gram(X, D, intercept: bool, numba_ok: bool = True):
    """``sum_i D_i x~_i x~_i^T`` (dense, d + intercept square) of a sparse CSR ``X``; X stays sparse.

    The numba kernel in host memory (unless ``numba_ok`` is false); elsewhere
    (a GPU, float32, ``backend="torch"``) torch's sparse-sparse product
    ``X^T (D X)``, whose result has at most d^2 entries.
    """
    d = X.shape[1]
    if numba_ok and _host_float(X) and _fused.AVAILABLE:
        return torch.from_numpy(_fused.csr_gram(*csr_parts(X), d, D.numpy(), intercept))
    if X.dtype != D.dtype:  # float32 values: the product's sums in float64, over a float64 copy of the values
        X = _widened(X, D.dtype)
    crow = X.crow_indices()
    XD = torch.sparse_csr_tensor(crow, X.col_indices(), X.values() * D[_csr_rows(X)], size=X.shape)
    G = (X.t() @ XD).to_dense()
    if not intercept:
        return G
    c = torch.zeros(d, 1, dtype=X.dtype, device=X.device)
    _add_xt_times(c.T, D[:, None], X)  # sum_i D_i x_i, (d, 1)
    return torch.cat([torch.cat([G, c], dim=1), torch.cat([c.T, D.sum().reshape(1, 1)], dim=1)], dim=0)


def _gram_fn(X, spec: LinearSpec):
    """``D -> sum_i D_i x~_i x~_i^T`` for the shard's X (dense: with its column of ones made once)."""
    intercept = spec.fit_intercept
    if is_sparse(X):
        return lambda D: _sparse_gram(X, D, intercept, numba_ok=spec.backend != "torch")
    if intercept:
        X = torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype, device=X.device)], dim=1)
    if X.dtype == torch.float32:
        # a block of rows at a time in float64: the product costs d times the block's bytes in arithmetic, so
        # the widened copy of a block is cheap beside it, and the sums are float64's on X's values
        blocks = _row_blocks(X)

        def gram32(D):
            G = torch.zeros(X.shape[1], X.shape[1], dtype=torch.float64, device=X.device)
            for sl in blocks:
                Xb = X[sl].to(torch.float64)
                G.addmm_(Xb.T, Xb * D[sl, None])
            return G

        return gram32
    return lambda D: X.T @ (X * D[:, None])


def hess(shard, spec: LinearSpec):
    """Kernel: the dense Hessian of the raw loss sum, at the point of the last ``value_grad``."""
    curv = shard.cache["linear_curv"]
    rows = _host_rows(shard, spec)
    K = spec.n_outputs
    if rows is not None and isinstance(curv, np.ndarray):  # the host shard value_grad read: NumPy, no torch
        parts, _, s = rows

        def gram(D):
            return _part_sums(parts, lambda X, Dp: (_host_gram(X, Dp, spec.fit_intercept),), D)[0]

        H = np.zeros((spec.n_params, spec.n_params))
        idx = [_param_index(spec, k) for k in range(K)]
    else:
        X, s = shard.get("X"), _weights(shard)
        curv = _tensor(curv, X)
        gram = _gram_fn(X, spec)
        H = torch.zeros(spec.n_params, spec.n_params, dtype=_sum_dtype(X), device=X.device)
        idx = [torch.as_tensor(_param_index(spec, k), device=X.device) for k in range(K)]
    coupled = spec.get_loss().coupled
    for k in range(K):
        for m in range(k, K) if coupled else (k,):
            if coupled:
                D = curv[:, k] * ((1.0 if k == m else 0.0) - curv[:, m])
            else:
                D = curv[:, k]
            if s is not None:
                D = D * s[:, k if s.shape[1] > 1 else 0]
            block = gram(D)
            H[idx[k][:, None], idx[m][None, :]] = block
            if m != k:
                H[idx[m][:, None], idx[k][None, :]] = block.T
    return H


#: Rows per block of :func:`_host_gram` (a float64 copy of a float32 block, and the block times D, at a time).
HOST_GRAM_BLOCK_ROWS = 1 << 14


def _host_gram(X, D, intercept: bool):
    """``sum_i D_i x~_i x~_i^T`` (float64, d + intercept square) of a dense NumPy ``X``, over row blocks of
    :data:`HOST_GRAM_BLOCK_ROWS` (BLAS products; a float32 block widened first); of the shard's NumPy CSR, the
    numba CSR kernel's."""
    d = X.shape[1]
    if is_host_csr(X):
        return _fused.csr_gram(*csr_parts(X), d, np.ascontiguousarray(D, dtype=np.float64), intercept)
    G = np.zeros((d + int(intercept), d + int(intercept)))
    for a in range(0, X.shape[0], HOST_GRAM_BLOCK_ROWS):
        Xb = X[a : a + HOST_GRAM_BLOCK_ROWS].astype(np.float64, copy=False)
        Db = D[a : a + HOST_GRAM_BLOCK_ROWS]
        XD = Xb * Db[:, None]
        G[:d, :d] += Xb.T @ XD
        if intercept:
            c = XD.sum(0)
            G[:d, d] += c
            G[d, :d] += c
            G[d, d] += Db.sum()
    return G


def inference_sums(shard, w, spec: LinearSpec):
    """Kernel: the raw sums inference needs at ``w``, for one output of a separable loss.

    With ``x~`` the row with a trailing 1 when there is an intercept, ``s``
    the sample weights, ``g`` the derivative of the loss in ``z``::

        fisher   = sum_i s_i E[d2 loss_i / dz2] x~_i x~_i^T     (expected information)
        observed = sum_i s_i d2 loss_i / dz2 x~_i x~_i^T        (observed information)
        meat     = sum_i s_i g_i^2 x~_i x~_i^T                  (the sandwich's meat)
        pearson  = sum_i s_i (y_i - mu_i)^2 / V(mu_i)           (Pearson chi-square)

    The weights count as frequencies: a weight of 2 is the row twice.
    """
    X, y, s = shard.get("X"), shard.get("y"), _weights(shard)
    loss_fn = spec.get_loss()
    if spec.n_outputs != 1 or loss_fn.coupled:
        raise ValueError("Inference needs a model with one output (one target, or two classes).")
    if X.dtype == torch.float32:  # once per fit: a float64 copy, so that every sum below is carried in float64
        X = _widened(X, torch.float64)
    W, b = spec.unpack(torch.as_tensor(w, dtype=X.dtype, device=X.device))
    z = _z(X, W, b)
    _, g, _ = loss_fn.value_grad(z, y)
    sv = s[:, 0] if s is not None else torch.ones(X.shape[0], dtype=X.dtype, device=X.device)
    weighted_gram = _gram_fn(X, spec)

    def gram(d):
        return weighted_gram(sv * d[:, 0])

    fisher = gram(loss_fn.expected_curvature(z, y))
    observed = gram(loss_fn.observed_curvature(z, y))
    meat = gram(g * g)
    pearson = (sv * loss_fn.pearson(z, y)[:, 0]).sum()
    return fisher, observed, meat, pearson


def x_nbytes(X) -> int:
    """The bytes a pass over X reads: a dense X's values, or a sparse CSR X's three arrays."""
    if isinstance(X, np.ndarray):
        return int(X.nbytes)
    if is_host_csr(X):
        return sum(int(a.nbytes) for a in csr_parts(X))
    if is_sparse(X):
        return sum(int(a.element_size() * a.nelement()) for a in (X.values(), X.col_indices(), X.crow_indices()))
    return int(X.element_size() * X.nelement())


def weight_sum(shard):
    """Kernel: ``(S, number of rows)``; S sums the sample weights (averaged over outputs when per output)."""
    s = _shard.host(shard, "sample_weight")
    if s is None:
        s = _weights(shard)
    elif s.ndim == 1:
        s = s[:, None]
    n = float(shard.n_rows)
    return (float(s.sum()) / s.shape[1] if s is not None else n), n


#: The kernels that take their float arguments as NumPy and make tensors only on their torch paths (the engine's
#: ``run_kernel`` leaves the arguments as they are): on dense host shards they run without torch.
for _kernel in (value_grad, hessp, hess, weight_sum):
    _kernel.host_args = True


class LinearObjective:
    """The penalised, normalised objective of a linear model, evaluated through ``evaluate``.

    Parameters
    ----------
    evaluate : callable
        ``evaluate(kernel, *args)`` runs ``kernel(shard, *args)`` on every
        shard and returns the sum (a :class:`~dask_estimators.engine.DistributedEvaluator`
        or :class:`~dask_estimators.engine.LocalEvaluator`).
    spec : LinearSpec
    l2, l1 : float
        Penalty strengths in the normalised objective (see module docstring).
    weight_sums : (float, float), optional
        The summed :func:`weight_sum` of the shards (sum of the sample
        weights, number of rows) when the caller has it already; otherwise
        one round computes it.

    Examples
    --------
    >>> obj = LinearObjective(evaluator, LinearSpec("binomial", 3), l2=0.1)  # doctest: +SKIP
    >>> f, g = obj.fun_and_grad(np.zeros(obj.n_params))  # doctest: +SKIP
    """

    def __init__(self, evaluate, spec: LinearSpec, *, l2: float = 0.0, l1: float = 0.0, weight_sums=None):
        self.evaluate = evaluate
        self.spec = spec
        self.l2 = float(l2)
        self.l1 = float(l1)
        self.sw_sum, self.n_samples = evaluate(weight_sum) if weight_sums is None else map(float, weight_sums)
        check_weight_sum(self.sw_sum)
        self.n_params = spec.n_params
        self.penalized = np.zeros(self.n_params, dtype=bool)
        self.penalized[: spec.n_outputs * spec.n_features] = True
        self._state_at = None
        #: A dict shared by the objectives of one set of rows (a search's split), where a quadratic's Hessian,
        #: the same at every point and for every penalty, is kept once computed (None: not kept)
        self.hessian_cache = None
        #: Whether lbfgs and newton-cg solve in centred variables (:mod:`~dask_estimators.objectives.centred`):
        #: an estimator's own fit asks for it; a search's lockstep runs do not
        self.centre_intercepts = False

    def with_evaluator(self, evaluate):
        """A copy of this objective (spec, penalties, weight sums, bounds) that evaluates through ``evaluate``.

        ``None`` gives one to send to a worker, which gives it its own
        :class:`~dask_estimators.engine.LocalEvaluator` there.  The copy
        assumes no state left on the shards by this one's evaluations.
        """
        import copy

        new = copy.copy(self)
        new.evaluate = evaluate
        new._state_at = None
        return new

    @property
    def newton_fixed(self):
        """Entries a Newton step leaves alone: the multinomial loss is unchanged by a shift common to all classes.

        The shift of the intercepts (and, without penalty, of each feature's
        coefficients) is a null direction of the Hessian; fixing the last
        class's entries removes it, as scikit-learn's Newton solver does.
        ``None`` where the Hessian has no known null direction.
        """
        spec = self.spec
        if spec.loss != "multinomial":
            return None
        K, d = spec.n_outputs, spec.n_features
        fixed = np.zeros(self.n_params, dtype=bool)
        if self.l2 == 0.0 and self.l1 == 0.0:
            fixed[(K - 1) * d : K * d] = True
        if spec.fit_intercept:
            fixed[K * d + K - 1] = True
        return fixed if fixed.any() else None

    @property
    def quadratic(self) -> bool:
        """Whether the objective is a quadratic in the parameters (its Newton step is exact)."""
        return self.spec.loss == "squared"

    def fun_and_grad(self, w):
        """Smooth part of ``F`` (loss and L2) and its gradient at ``w``."""
        w = np.asarray(w, dtype=np.float64)
        loss, grad = self.evaluate(value_grad, w, self.spec)
        self._state_at = w.copy()
        return self.finish(w, loss, grad)

    def finish(self, w, loss, grad):
        """``F``'s smooth part and its gradient at ``w`` from the tree-summed raw ``loss`` and ``grad`` there.

        :meth:`fun_and_grad` is ``finish`` of one :func:`value_grad` round; a
        caller that evaluated several models in one round (cross-validation,
        :mod:`dask_estimators.optim.batched`) finishes each with its own objective.
        """
        w = np.asarray(w, dtype=np.float64)
        wp = w[: self.spec.n_outputs * self.spec.n_features]  # the penalised entries (see ``penalized``): a view
        f = loss / self.sw_sum + 0.5 * self.l2 * float(wp @ wp)
        g = np.divide(grad, self.sw_sum)
        if self.l2:
            g[: wp.size] += self.l2 * wp
        return f, g

    def _ensure_state(self, w):
        w = np.asarray(w, dtype=np.float64)
        if self._state_at is None or not np.array_equal(self._state_at, w):
            self.fun_and_grad(w)

    def hessp(self, w, p):
        """Hessian of the smooth part at ``w`` times ``p``; only ``p`` travels when ``w`` was the last point."""
        self._ensure_state(w)
        p = np.asarray(p, dtype=np.float64)
        return self.evaluate(hessp, p, self.spec) / self.sw_sum + self.l2 * (p * self.penalized)

    def hess(self, w):
        """Dense Hessian of the smooth part at ``w`` (tree-summed over the shards).

        A quadratic's (the squared loss) does not depend on ``w`` nor on the penalty: with a
        :attr:`hessian_cache` it is computed once for all the objectives that share the cache.
        """
        cache = self.hessian_cache if self.quadratic else None
        raw = None if cache is None else cache.get("H")
        if raw is None:
            self._ensure_state(w)
            raw = np.asarray(self.evaluate(hess, self.spec), dtype=np.float64)
            if cache is not None:
                cache["H"] = raw
        H = raw / self.sw_sum
        H[np.diag_indices_from(H)] += self.l2 * self.penalized
        return H

    def inference(self, w):
        """Covariances of the parameters at ``w`` from one more distributed round (:func:`inference_sums`).

        The model's log-likelihood is ``-(1 / phi) * sum_i s_i loss_i`` up to
        terms free of ``w``, with ``phi`` the dispersion: 1 for the Poisson
        and binomial families, else Pearson's chi-square over the residual
        degrees of freedom ``S - n_params`` (statsmodels' ``scale``).  The
        penalty is ignored.

        Returns
        -------
        dict
            ``cov``: ``phi * inv(fisher)`` (the inverse Fisher information);
            ``cov_robust``: ``inv(H) meat inv(H)`` with ``H`` the observed
            information (HC0, free of ``phi``); ``dispersion``: ``phi``;
            ``df_resid``.
        """
        fisher, observed, meat, pearson = self.evaluate(inference_sums, np.asarray(w, dtype=np.float64), self.spec)
        fisher, observed, meat = (np.asarray(a, dtype=np.float64) for a in (fisher, observed, meat))
        fisher_inv, rank = _inverse_and_rank(fisher)
        if rank < self.n_params:
            import warnings

            warnings.warn(
                f"The design is rank-deficient: its information matrix has rank {rank} for {self.n_params} "
                "parameters (collinear columns, or a constant column beside the intercept). The covariances use its "
                "pseudo-inverse, and the standard errors of parameters the data do not identify mean nothing: drop "
                "or combine such columns.", UserWarning, stacklevel=4)
        df_resid = self.sw_sum - rank  # as statsmodels: the residual degrees of freedom of the rank
        if self.spec.get_loss().fixed_dispersion:
            dispersion = 1.0
        else:
            dispersion = float(pearson) / df_resid if df_resid > 0 else np.nan
        cov = dispersion * fisher_inv
        h_inv = _inverse_and_rank(observed)[0]
        cov_robust = h_inv @ meat @ h_inv
        return {"cov": cov, "cov_robust": 0.5 * (cov_robust + cov_robust.T), "dispersion": dispersion,
                "df_resid": df_resid}


def _inverse_and_rank(A):
    """Inverse of a symmetric information matrix and its rank; a singular one (collinear columns) gives the
    pseudo-inverse, as statsmodels does.  A Cholesky factor whose smallest pivot is at rounding level against the
    largest counts as singular: the factorisation itself succeeds on a numerically singular matrix."""
    from scipy import linalg

    n = A.shape[0]
    eps = np.finfo(np.float64).eps
    try:
        c = linalg.cho_factor(A, lower=False, check_finite=True)
        pivots = np.abs(np.diag(c[0])) ** 2
        if n == 0 or pivots.min() > n * eps * pivots.max():
            return linalg.cho_solve(c, np.eye(n)), n
    except (linalg.LinAlgError, ValueError):
        pass
    vals, vecs = linalg.eigh(A)
    keep = vals > n * eps * np.abs(vals).max()
    return (vecs[:, keep] / vals[keep]) @ vecs[:, keep].T, int(keep.sum())
