"""The MLPs' forward and backward on CPU in one numba call, the fast path of :func:`.module.loss_grad_`.

:func:`.module.loss_grad_` writes a network's backward as torch ops.  For the
small batches of a ddp step, the dozen small ops around its matrix products
(bias adds, activation, loss, output derivative, sums) cost about as much as
the products, most of it the cost of calling each op (benchmarks/results/history/changelog-development.md).
Here the same arithmetic is one call: the matrix products go to BLAS
(numba's ``np.dot`` into kept buffers) and the elementwise work runs as
plain loops, tanh and the logistic function vectorised (:func:`_tanh_`).
Same formulas as the torch path (scikit-learn's ``_backprop``), so the two
agree to rounding; the tests check every activation, output link and
weighting against autograd.

Float64 and float32 CPU arrays come here (the torch path serves GPUs and sparse X).
The flat parameter layout is :func:`.module.param_views`': each layer's
weight ``(fan_out, fan_in)`` row-major, then its bias.
"""

from __future__ import annotations

import math

import numpy as np

from .._jit import njit  # numba's njit, cached on disk, or not cached where no cache folder is writable
from ._fused import _LN2_HI, _LN2_LO, _LOG2E  # exp's argument reduction, as the binomial block's

try:  # numba is a dependency; without it the torch path serves every shard
    import numba
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None

__all__ = ["AVAILABLE", "ACT_CODES", "OUT_CODES", "loss_grad", "csr_linear", "csr_linear_weight_grad"]

AVAILABLE = numba is not None

ACT_CODES = {"identity": 0, "logistic": 1, "tanh": 2, "relu": 3}
OUT_CODES = {"identity": 0, "logistic": 1, "softmax": 2, "exp": 3}


def _jit(fn):
    # numpy's error model: no zero-divisor check on each float division, which would keep the activation
    # loops from being vectorised (no divisor here can be zero)
    if numba is None:  # pragma: no cover
        return fn
    return njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")(fn)


# ------------------------------------------------------------- tanh and the logistic function, vectorised
# A scalar libm call per value (math.tanh, math.exp) is not vectorised: on a small batch's hidden layer it
# was much of the kernel (docs/design-measurements.md).  Here both are plain arithmetic that LLVM vectorises, one
# value at a time in the loop that adds the layer's bias.  For u = k ln2 + r (|r| <= ln2/2, reduced as the
# binomial block does, ``_fused``; k as the low bits of ``MAGIC + u log2(e)``: adding MAGIC rounds to an
# integer), expm1(u) = 2^k (r q(r)) + (2^k - 1) with q(r) = expm1(r) / r a Taylor polynomial, and 2^k made
# from those bits by :func:`_pow2k`.  tanh(v) = e / (e + 2) with e = expm1(2v) (v clipped where tanh is 1
# to the precision), and the logistic function 1 / (2 + expm1(-v)).  Within 3 (float32) or 4 (float64) units
# of rounding of libm (tested).  The constants come in the layer's dtype (:func:`_act_consts`), so float32
# layers compute in float32 throughout (twice the lanes) and float64 ones in float64, with one code; their
# polynomials are evaluated with fused multiply-adds where the machine has them (``contract``).


def _act_consts(dtype):
    """(floats, ints, expm1(r)/r polynomial) of the activations for ``dtype``.

    floats: MAGIC, log2(e), ln2 split in two, tanh's clip, the logistic function's clip, 1, 2; ints: the
    exponent bias less MAGIC's bits, the mantissa's width.  The polynomial highest power first.
    """
    f32 = np.dtype(dtype) == np.float32
    ft, it = (np.float32, np.int32) if f32 else (np.float64, np.int64)
    mant, bias = (23, 127) if f32 else (52, 1023)
    magic = ft(1.5 * 2.0**mant)
    ln2_hi, ln2_lo = (0.693359375, -2.12194440e-4) if f32 else (_LN2_HI, _LN2_LO)
    floats = np.array([magic, _LOG2E, ln2_hi, ln2_lo, 9.0 if f32 else 20.0, 87.0 if f32 else 708.0, 1.0, 2.0],
                      dtype=ft)
    ints = np.array([bias - int(np.array(magic).view(it)), mant], dtype=it)
    # a tuple, not an array: its length is part of its numba type, so the Horner loop over it is unrolled
    # and the loop over the values vectorised (over an array's run-time length it was not).  1/k! for
    # k = 1..n: r^n / (n+1)! is below the rounding at |r| = ln2/2 for n = 7 (float32) and 14
    pq = tuple(ft(1.0 / math.factorial(k)) for k in range(1, (7 if f32 else 14) + 1))[::-1]
    return floats, ints, pq


_ACT_CONSTS = {np.dtype(np.float64): _act_consts(np.float64), np.dtype(np.float32): _act_consts(np.float32)}

if numba is not None:
    from numba import types as _nbtypes
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _pow2k(typingctx, t, off, mant):  # pragma: no cover - numba
        """The float whose bits are (t's bits + off) << mant, of t's type (off and mant cast to its width):
        2^k for t = MAGIC + k, off = bias - MAGIC's bits.  Integer lanes, so the loops around vectorise."""
        if t not in (_nbtypes.float32, _nbtypes.float64):
            return None

        def codegen(context, builder, sig, args):
            from llvmlite import ir

            ft = context.get_value_type(sig.args[0])
            it = ir.IntType(32 if sig.args[0] == _nbtypes.float32 else 64)

            def as_it(v, ty):
                w = context.get_value_type(ty).width
                return builder.trunc(v, it) if w > it.width else (builder.sext(v, it) if w < it.width else v)

            bits = builder.add(builder.bitcast(args[0], it), as_it(args[1], sig.args[1]))
            return builder.bitcast(builder.shl(bits, as_it(args[2], sig.args[2])), ft)

        return t(t, off, mant), codegen

    _jit_fma = njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", fastmath={"contract"})
else:  # pragma: no cover
    _jit_fma = _jit


@_jit_fma
def _expm1(u, c, ci, pq):  # pragma: no cover - numba
    """expm1(u) for u within +-708 (float64) or +-87 (float32); arguments as :func:`_tanh_`'s."""
    magic, log2e, ln2_hi, ln2_lo, one = c[0], c[1], c[2], c[3], c[6]
    t = u * log2e + magic
    k = t - magic
    r = (u - k * ln2_hi) - k * ln2_lo
    q = pq[0]
    for j in range(1, len(pq)):
        q = q * r + pq[j]
    s = _pow2k(t, ci[0], ci[1])
    return s * (q * r) + (s - one)


@_jit_fma
def _tanh1(v, c, ci, pq):  # pragma: no cover - numba
    """tanh(v); arguments as :func:`_tanh_`'s."""
    two = c[7]
    clip = two * c[4]
    u = two * v
    u = clip if u > clip else (-clip if u < -clip else u)  # NaN stays NaN
    e = _expm1(u, c, ci, pq)
    return e / (e + two)


@_jit_fma
def _sigmoid1(v, c, ci, pq):  # pragma: no cover - numba
    """1 / (1 + exp(-v)); arguments as :func:`_tanh_`'s."""
    clip = c[5]
    u = -v
    u = clip if u > clip else (-clip if u < -clip else u)
    return c[6] / (c[7] + _expm1(u, c, ci, pq))


@_jit
def _tanh_(a, c, ci, pq):  # pragma: no cover - numba
    """``a[:] = tanh(a)`` (flat); ``c, ci, pq`` :func:`_act_consts`' for ``a``'s dtype."""
    for i in range(a.shape[0]):
        a[i] = _tanh1(a[i], c, ci, pq)


@_jit
def _sigmoid_(a, c, ci, pq):  # pragma: no cover - numba
    """``a[:] = 1 / (1 + exp(-a))`` (flat); arguments as :func:`_tanh_`'s."""
    for i in range(a.shape[0]):
        a[i] = _sigmoid1(a[i], c, ci, pq)


@_jit
def _bias_act(A, b, act, c, ci, pq):  # pragma: no cover - numba
    """``A += b`` row by row, then the activation ``act`` (a code of ``ACT_CODES``), in one pass; one loop
    per activation, so that each is vectorised on its own."""
    n, fo = A.shape
    if act == 2:
        for i in range(n):
            for j in range(fo):
                A[i, j] = _tanh1(A[i, j] + b[j], c, ci, pq)
    elif act == 1:
        for i in range(n):
            for j in range(fo):
                A[i, j] = _sigmoid1(A[i, j] + b[j], c, ci, pq)
    elif act == 3:
        for i in range(n):
            for j in range(fo):
                v = A[i, j] + b[j]
                A[i, j] = v if v > 0.0 else 0.0
    else:
        for i in range(n):
            for j in range(fo):
                A[i, j] += b[j]


@_jit
def _kernel(X, yf, yi, sw, has_sw, rows, gather, w, g, units, act, out, scale, buf_a, buf_d, buf_x, c, ci,
            pq, eps):  # pragma: no cover - numba
    # ``eps``: the machine epsilon of X's dtype; the log-losses are of probabilities clipped to [eps, 1 - eps],
    # as scikit-learn's
    # with ``gather``, X, y and sw are the shard's, and the batch is their rows ``rows``: X's are copied into
    # buf_x (the first layer's input), y's and sw's read in place
    if gather:
        n, d = rows.shape[0], X.shape[1]
        Xb = buf_x[: n * d].reshape((n, d))
        for i in range(n):
            r = rows[i]
            for j in range(d):
                Xb[i, j] = X[r, j]
        X = Xb
    n = X.shape[0]
    n_layers = units.shape[0] - 1
    # forward: each layer's output into buf_a, one block after the other
    a_in = X
    po = 0
    ao = 0
    for k in range(n_layers):
        fi, fo = units[k], units[k + 1]
        W = w[po : po + fi * fo].reshape((fo, fi))
        b = w[po + fi * fo : po + fi * fo + fo]
        A = buf_a[ao : ao + n * fo].reshape((n, fo))
        np.dot(a_in, W.T, A)
        _bias_act(A, b, act if k < n_layers - 1 else 0, c, ci, pq)
        a_in = A
        po += fi * fo + fo
        ao += n * fo
    # the output: the loss, and d loss / d z (times the row's weight and scale) into dz
    ko = units[n_layers]
    Z = a_in
    m = buf_d.shape[0] // 2
    dz = buf_d[:n * ko].reshape((n, ko))
    loss = 0.0
    for i in range(n):
        ri = rows[i] if gather else i  # the row's index in y and sw
        wi = sw[ri] if has_sw else 1.0
        li = 0.0
        if out == 2:  # softmax and cross-entropy against the class code
            zmax = Z[i, 0]
            for j in range(1, ko):
                if Z[i, j] > zmax:
                    zmax = Z[i, j]
            s = 0.0
            for j in range(ko):
                e = math.exp(Z[i, j] - zmax)
                dz[i, j] = e
                s += e
            for j in range(ko):
                dz[i, j] = dz[i, j] / s
            # scikit-learn's log-loss: the probability clipped to [eps, 1 - eps] (the value only: the
            # gradient is p - y's, as its backward)
            li = -math.log(min(max(dz[i, yi[ri]], eps), 1.0 - eps))
            dz[i, yi[ri]] -= 1.0
        else:
            for j in range(ko):
                z = Z[i, j]
                t = yf[ri, j]
                if out == 0:  # identity, squared error
                    r = z - t
                    li += 0.5 * r * r
                    dz[i, j] = r
                elif out == 1:  # logistic, binary cross-entropy of the probability clipped as scikit-learn's
                    p = 1.0 / (1.0 + math.exp(-z))
                    pc = min(max(p, eps), 1.0 - eps)
                    li -= (t * math.log(pc) if t != 0.0 else 0.0) + ((1.0 - t) * math.log(1.0 - pc) if t != 1.0
                                                                     else 0.0)
                    dz[i, j] = p - t
                else:  # exp, Poisson deviance / 2
                    ez = math.exp(z)
                    li += ez - t * z + (t * math.log(t) if t > 0.0 else 0.0) - t
                    dz[i, j] = ez - t
        loss += wi * li
        f = wi * scale
        for j in range(ko):
            dz[i, j] *= f
    # backward, last layer first
    cur = 0
    for k in range(n_layers - 1, -1, -1):
        fi, fo = units[k], units[k + 1]
        po -= fi * fo + fo
        ao -= n * fo
        if k > 0:
            a_in = buf_a[ao - n * fi : ao].reshape((n, fi))
        else:
            a_in = X
        np.dot(dz.T, a_in, g[po : po + fi * fo].reshape((fo, fi)))
        gb = g[po + fi * fo : po + fi * fo + fo]
        for j in range(fo):
            gb[j] = 0.0
        for i in range(n):
            for j in range(fo):
                gb[j] += dz[i, j]
        if k > 0:
            W = w[po : po + fi * fo].reshape((fo, fi))
            cur = m - cur if cur == 0 else 0
            da = buf_d[cur : cur + n * fi].reshape((n, fi))
            np.dot(dz, W, da)
            for i in range(n):
                for j in range(fi):
                    a = a_in[i, j]
                    if act == 1:
                        da[i, j] *= a * (1.0 - a)
                    elif act == 2:
                        da[i, j] *= 1.0 - a * a
                    elif act == 3:
                        if a <= 0.0:
                            da[i, j] = 0.0
            dz = da
    return loss


def _kept(work, key, size, dtype=np.float64):
    buf = work.get(key)
    if buf is None or buf.shape[0] < size or buf.dtype != dtype:
        buf = work[key] = np.empty(size, dtype=dtype)
    return buf


def loss_grad(spec, w, X, y, sw, g, scale, work, rows=None):
    """The loss sum over the rows of X, and ``scale`` times its gradient written into ``g``.

    With ``rows`` (an int64 NumPy vector), X, y and sw are a whole shard's
    and the batch is their rows ``rows``, gathered inside the kernel.

    ``w`` and ``g``: flat NumPy vectors in :func:`.module.param_views`'
    layout; X (rows, features) C-contiguous, of their dtype (float64 or
    float32, which the kernel computes in); y the encoded targets
    (class codes for softmax, else (rows, outputs)); ``sw`` per-row weights
    or None.  ``work`` keeps the activations between calls (see
    :func:`.module._scratch`).
    """
    gather = rows is not None
    n = rows.shape[0] if gather else X.shape[0]
    if n == 0:
        g[:] = 0.0
        return 0.0
    # everything but the data is the same from one step to the next: worked out once per spec, rows and dtype
    plan = work.get("nb_plan")
    d = X.shape[1] if gather else 0
    if plan is None or plan[0] is not spec or plan[1] != n or plan[2] != X.dtype or plan[3] != d:
        plan = work["nb_plan"] = _plan(spec, n, X.dtype, d, work)
    _, _, _, _, units, act, out, buf_a, buf_d, buf_x, c, ci, pq, yf0, sw0 = plan
    if out == 2:  # softmax: class codes
        yi, yf = y.reshape(-1), yf0
    else:
        yi, yf = _EMPTY_I, y.reshape(y.shape[0], int(units[-1]))
    has_sw = sw is not None
    return _kernel(X, yf, yi, sw if has_sw else sw0, has_sw, rows if gather else _EMPTY_I, gather, w, g, units,
                   act, out, float(scale), buf_a, buf_d, buf_x, c, ci, pq, float(np.finfo(X.dtype).eps))


def _plan(spec, n, dt, d, work):
    """What :func:`loss_grad` passes the kernel besides the data, for ``n`` rows of dtype ``dt`` (``d``: the
    features of a batch it gathers, else 0)."""
    units = np.asarray(spec.layer_units, dtype=np.int64)
    buf_a = _kept(work, "nb_a", n * int(units[1:].sum()), dt)
    buf_d = _kept(work, "nb_d", 2 * n * int(units[1:].max()), dt)
    buf_x = _kept(work, "nb_x", n * d, dt)  # a gathered batch's X
    c, ci, pq = _ACT_CONSTS[dt]
    # placeholders of X's dtype for what is absent: one compiled kernel per dtype serves all cases
    return (spec, n, dt, d, units, ACT_CODES[spec.activation], OUT_CODES[spec.out], buf_a, buf_d, buf_x, c, ci,
            pq, np.zeros((0, 0), dtype=dt), np.zeros(0, dtype=dt))


# ------------------------------------------------------------- a sparse first layer
# The first layer's weight W is (fan_out, fan_in) row-major (torch's Linear), so for CSR X the entries one row
# of X needs, W[:, cols], lie in fan_out different rows of W.  Both kernels loop over W's rows outermost: each
# row of W (or of its gradient) is visited once and only at the columns X holds, so the product costs
# O(nnz * fan_out) with the touched memory of one row of W at a time, and nothing of size rows x fan_in is made.
@_jit
def _csr_linear(data, indices, indptr, W, b, out):  # pragma: no cover - numba
    n = indptr.shape[0] - 1
    for j in range(W.shape[0]):
        Wj = W[j]
        bj = b[j]
        for i in range(n):
            s = bj
            for k in range(indptr[i], indptr[i + 1]):
                s += data[k] * Wj[indices[k]]
            out[i, j] = s


@_jit
def _csr_linear_weight_grad(data, indices, indptr, dz, g):  # pragma: no cover - numba
    n = indptr.shape[0] - 1
    for j in range(g.shape[0]):
        gj = g[j]
        gj[:] = 0.0
        for i in range(n):
            d = dz[i, j]
            if d != 0.0:
                for k in range(indptr[i], indptr[i + 1]):
                    gj[indices[k]] += d * data[k]


def csr_linear(data, indices, indptr, W, b, out):
    """``out = X @ W.T + b`` for the CSR matrix X given by its three arrays; returns ``out``.

    Parameters
    ----------
    data, indices, indptr : ndarray
        X's values, column indices and row pointers (canonical CSR, ``indptr`` of length rows + 1).
    W : ndarray of shape (fan_out, fan_in)
        The layer's weight (C-contiguous), as torch's ``Linear`` holds it.
    b : ndarray of shape (fan_out,)
    out : ndarray of shape (rows, fan_out)
        Overwritten.
    """
    _csr_linear(data, indices, indptr, W, b, out)
    return out


def csr_linear_weight_grad(data, indices, indptr, dz, g):
    """``g = dz.T @ X`` for the CSR matrix X given by its three arrays: the gradient of a first layer's weight.

    Parameters
    ----------
    data, indices, indptr : ndarray
        X's CSR arrays (rows of X: rows of ``dz``).
    dz : ndarray of shape (rows, fan_out)
        The derivative of the loss with respect to the layer's output.
    g : ndarray of shape (fan_out, fan_in)
        Overwritten, every entry (C-contiguous).
    """
    _csr_linear_weight_grad(data, indices, indptr, dz, g)
    return g


_EMPTY_I = np.zeros(0, dtype=np.int64)
