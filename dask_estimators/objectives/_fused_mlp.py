"""The MLPs' forward and backward on CPU in one numba call, the fast path of :func:`.module.loss_grad_`.

:func:`.module.loss_grad_` writes a network's backward as torch ops.  For the
small batches of a ddp step, the dozen small ops around its matrix products
(bias adds, activation, loss, output derivative, sums) cost about as much as
the products, most of it the cost of calling each op (docs/performance.md).
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
# was a third of the kernel (docs/performance.md).  Here both are plain arithmetic over a whole layer, in
# three loops LLVM vectorises: exp(u) = 2^k exp(r) reduced as the binomial block does (``_fused``), k held as
# the low bits of ``MAGIC + k`` (adding MAGIC rounds to an integer), then those bits made into 2^k, then the
# function.  tanh(v) = e / (e + 2) with e = expm1(2v): a Taylor polynomial where |2v| is small, exp(2v) - 1
# elsewhere; v is clipped where tanh is 1 to the precision.  A few units of rounding from libm.  The
# constants come in the layer's dtype (:func:`_act_consts`), so float32 layers compute in float32
# throughout (twice the lanes) and float64 ones in float64, with one code.


def _act_consts(dtype):
    """(floats, ints, exp(r) polynomial, expm1(u)/u polynomial) of the activations for ``dtype``.

    floats: MAGIC, log2(e), ln2 split in two, tanh's clip, exp's clip, 1, 2, expm1's range; ints: the bits of
    MAGIC, the exponent bias and the mantissa's width.  Polynomials highest power first.
    """
    f32 = np.dtype(dtype) == np.float32
    ft, it = (np.float32, np.int32) if f32 else (np.float64, np.int64)
    mant, bias = (23, 127) if f32 else (52, 1023)
    magic = ft(1.5 * 2.0**mant)
    ln2_hi, ln2_lo = (0.693359375, -2.12194440e-4) if f32 else (_LN2_HI, _LN2_LO)
    # exp(r) on |r| <= ln2/2 to degree 7 (float32) or 13; expm1(u)/u on |u| < 1.1 to u^11 (float32), on
    # |u| < 0.6 to u^14 (a longer polynomial was not unrolled, and then not vectorised)
    n_exp, n_em1, lim = (8, 12, 1.1) if f32 else (14, 15, 0.6)
    floats = np.array([magic, _LOG2E, ln2_hi, ln2_lo, 9.0 if f32 else 20.0, 87.0 if f32 else 708.0, 1.0, 2.0,
                       lim], dtype=ft)
    ints = np.array([int(np.array(magic).view(it)), bias, mant], dtype=it)
    # tuples, not arrays: their length is part of their numba type, so the Horner loops over them are
    # unrolled and the loops over the values vectorised (over an array's run-time length they were not)
    pe = tuple(ft(1.0 / math.factorial(k)) for k in range(n_exp))[::-1]
    pm = tuple(ft(1.0 / math.factorial(k)) for k in range(1, n_em1 + 1))[::-1]
    return floats, ints, pe, pm


_ACT_CONSTS = {np.dtype(np.float64): _act_consts(np.float64), np.dtype(np.float32): _act_consts(np.float32)}


@_jit
def _exp_parts(a, f, clip, er, tk, c, pe):  # pragma: no cover - numba
    """For u = f a[i] clipped to +-clip, u = k ln2 + r: exp(r) into ``er[i]``, MAGIC + k into ``tk[i]``."""
    magic, log2e, ln2_hi, ln2_lo = c[0], c[1], c[2], c[3]
    for i in range(a.shape[0]):
        u = f * a[i]
        u = clip if u > clip else (-clip if u < -clip else u)  # NaN stays NaN
        t = u * log2e + magic
        k = t - magic
        r = (u - k * ln2_hi) - k * ln2_lo
        q = pe[0]
        for j in range(1, len(pe)):
            q = q * r + pe[j]
        er[i] = q
        tk[i] = t


@_jit
def _pow2(tk_bits, ci):  # pragma: no cover - numba
    """The bits of MAGIC + k, in place, into those of the float 2^k."""
    magic_bits, bias, mant = ci[0], ci[1], ci[2]
    for i in range(tk_bits.shape[0]):
        tk_bits[i] = (tk_bits[i] - magic_bits + bias) << mant


@_jit
def _tanh_(a, er, tk, tk_bits, c, ci, pe, pm):  # pragma: no cover - numba
    """``a[:] = tanh(a)`` (flat); ``er``, ``tk`` scratch of ``a``'s length and dtype, ``tk_bits`` ``tk``'s
    integer view, the rest :func:`_act_consts`' for that dtype."""
    two, lim = c[7], c[8]
    clip = two * c[4]
    _exp_parts(a, two, clip, er, tk, c, pe)
    _pow2(tk_bits, ci)
    for i in range(a.shape[0]):
        u = two * a[i]
        u = clip if u > clip else (-clip if u < -clip else u)
        q = pm[0]
        for j in range(1, len(pm)):
            q = q * u + pm[j]
        # both sides worked out, then one chosen: with the load of er and tk on one side only, LLVM did not
        # vectorise this loop on AVX2 (no cheap masked loads; docs/performance.md)
        big = er[i] * tk[i] - c[6]
        e = q * u if abs(u) < lim else big
        a[i] = e / (e + two)


@_jit
def _sigmoid_(a, er, tk, tk_bits, c, ci, pe, pm):  # pragma: no cover - numba
    """``a[:] = 1 / (1 + exp(-a))`` (flat); arguments as :func:`_tanh_`'s."""
    one = c[6]
    _exp_parts(a, -one, c[5], er, tk, c, pe)
    _pow2(tk_bits, ci)
    for i in range(a.shape[0]):
        a[i] = one / (one + er[i] * tk[i])


@_jit
def _kernel(X, yf, yi, sw, has_sw, rows, gather, w, g, units, act, out, scale, buf_a, buf_d, buf_e, buf_e_bits,
            buf_x, c, ci, pe, pm):  # pragma: no cover - numba
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
        hidden = k < n_layers - 1
        for i in range(n):
            for j in range(fo):
                v = A[i, j] + b[j]
                if hidden and act == 3:
                    v = v if v > 0.0 else 0.0
                A[i, j] = v
        if hidden and (act == 1 or act == 2):  # a whole layer at once (see _tanh_)
            m = n * fo
            flat = buf_a[ao : ao + m]
            if act == 1:
                _sigmoid_(flat, buf_e[:m], buf_e[m : 2 * m], buf_e_bits[m : 2 * m], c, ci, pe, pm)
            else:
                _tanh_(flat, buf_e[:m], buf_e[m : 2 * m], buf_e_bits[m : 2 * m], c, ci, pe, pm)
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
            li = zmax + math.log(s) - Z[i, yi[ri]]
            for j in range(ko):
                dz[i, j] = dz[i, j] / s
            dz[i, yi[ri]] -= 1.0
        else:
            for j in range(ko):
                z = Z[i, j]
                t = yf[ri, j]
                if out == 0:  # identity, squared error
                    r = z - t
                    li += 0.5 * r * r
                    dz[i, j] = r
                elif out == 1:  # logistic, binary cross-entropy on the logit
                    li += max(z, 0.0) - z * t + math.log1p(math.exp(-abs(z)))
                    dz[i, j] = 1.0 / (1.0 + math.exp(-z)) - t
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
    _, _, _, _, units, act, out, buf_a, buf_d, buf_e, buf_e_bits, buf_x, c, ci, pe, pm, yf0, sw0 = plan
    if out == 2:  # softmax: class codes
        yi, yf = y.reshape(-1), yf0
    else:
        yi, yf = _EMPTY_I, y.reshape(y.shape[0], int(units[-1]))
    has_sw = sw is not None
    return _kernel(X, yf, yi, sw if has_sw else sw0, has_sw, rows if gather else _EMPTY_I, gather, w, g, units,
                   act, out, float(scale), buf_a, buf_d, buf_e, buf_e_bits, buf_x, c, ci, pe, pm)


def _plan(spec, n, dt, d, work):
    """What :func:`loss_grad` passes the kernel besides the data, for ``n`` rows of dtype ``dt`` (``d``: the
    features of a batch it gathers, else 0)."""
    units = np.asarray(spec.layer_units, dtype=np.int64)
    buf_a = _kept(work, "nb_a", n * int(units[1:].sum()), dt)
    buf_d = _kept(work, "nb_d", 2 * n * int(units[1:].max()), dt)
    buf_e = _kept(work, "nb_e", 2 * n * int(units[1:-1].max(initial=0)), dt)
    buf_x = _kept(work, "nb_x", n * d, dt)  # a gathered batch's X
    c, ci, pe, pm = _ACT_CONSTS[dt]
    # placeholders of X's dtype for what is absent: one compiled kernel per dtype serves all cases
    return (spec, n, dt, d, units, ACT_CODES[spec.activation], OUT_CODES[spec.out], buf_a, buf_d, buf_e,
            buf_e.view(ci.dtype), buf_x, c, ci, pe, pm, np.zeros((0, 0), dtype=dt), np.zeros(0, dtype=dt))


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
