"""One-pass CPU kernels for the linear models (numba), the fast path of :mod:`.linear`.

A gradient of a linear model needs ``z = X @ W.T`` and then ``G.T @ X``: two
passes over ``X`` when written with BLAS, and on a large shard both are
bound by memory bandwidth.  These kernels walk ``X`` once, a row at a time:
the row's predictions, its pointwise loss, derivative and curvature, and its
contribution to the gradient all happen while the row is in L1 cache.  The
Hessian-vector product is fused the same way.  Measured on the development
machine (500k x 100 float64, one thread): see ``benchmarks/results/history/linear-models.md``.

The pointwise formulas are those of :mod:`.losses` (the torch path,
used on GPUs, for float32 and by workers with several threads); the tests
check that both paths agree to rounding.  Only float64 or float32
C-contiguous arrays come here; a sparse CSR X comes as its three arrays (the
``csr_*`` kernels).  numba compiles each kernel once per dtype of X: a
float32 value is widened as it is read, and every sum (margins, loss,
gradient, Hessian products) is carried in float64, so a float32 X streams
half the bytes and gives the float64 arithmetic's results on its values.
The kernels release the GIL.
"""

from __future__ import annotations

import math

import numpy as np

from ._sparse import index_array
from .losses import LOSSES
from .._jit import njit  # numba's njit, cached on disk, or not cached where no cache folder is writable

try:  # numba is a dependency; without it (an unusual install) the torch path serves every shard
    import numba
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None

__all__ = ["AVAILABLE", "LOSS_CODES", "value_grad", "hessp", "csr_value_grad", "csr_hessp", "csr_gram"]

AVAILABLE = numba is not None

#: Loss name -> code understood by the kernels: each loss class declares its own
#: (``numba_code``); losses without one take the torch path.
LOSS_CODES = {name: cls.numba_code for name, cls in LOSSES.items() if cls.numba_code is not None}
_MULTINOMIAL = LOSSES["multinomial"].numba_code

# reassoc lets LLVM vectorise the row dot products; no nnan/ninf, so a NaN
# parameter still gives a NaN loss (the drivers check for it).
_FLAGS = {"reassoc", "contract"}


def _jit(fn):
    if numba is None:  # pragma: no cover
        return fn
    return njit(fastmath=_FLAGS, cache=True, nogil=True, boundscheck=False)(fn)


def _jit_inline(fn):
    """As :func:`_jit`, inlined into its callers in numba's IR (a row loop helper must cost nothing)."""
    if numba is None:  # pragma: no cover
        return fn
    return njit(fastmath=_FLAGS, cache=True, nogil=True, boundscheck=False, inline="always")(fn)


@_jit
def _pointwise(code, z, y, eps):
    """(loss, dloss/dz, curvature) of one separable loss at one (z, y)."""
    if code == 0:  # squared
        r = z - y
        return 0.5 * r * r, r, 1.0
    if code == 1:  # binomial: log(1 + exp(z)) - y z, stable in both tails
        e = math.exp(-abs(z))
        p = 1.0 / (1.0 + e) if z >= 0.0 else e / (1.0 + e)
        return max(z, 0.0) - y * z + math.log1p(e), p - y, p * (1.0 - p)
    if code == 2:  # squared hinge, generalized Hessian
        m = max(1.0 - y * z, 0.0)
        return m * m, -2.0 * y * m, 2.0 if m > 0.0 else 0.0
    if code == 3:  # squared epsilon-insensitive
        r = z - y
        a = max(abs(r) - eps, 0.0)
        sign = 1.0 if r > 0.0 else (-1.0 if r < 0.0 else 0.0)
        return a * a, 2.0 * sign * a, 2.0 if a > 0.0 else 0.0
    if code == 5:  # half Poisson deviance, log link (canonical): exp(z) - y z
        mu = math.exp(z)
        return mu - y * z, mu - y, mu
    if code == 6:  # half Gamma deviance, log link: z + y exp(-z); observed curvature y exp(-z) > 0 for y > 0
        e = y * math.exp(-z)
        return z + e, 1.0 - e, e
    if code == 7 or code == 8:  # half Tweedie deviance of power eps, log link; 8: the expected curvature
        p = eps
        if p == 0.0:  # the normal family: (mu - y)^2 / 2, not a difference of two large terms
            mu = math.exp(z)
            r = mu - y
            return 0.5 * r * r, mu * r, mu * mu if code == 8 else mu * (2.0 * mu - y)
        a = math.exp((2.0 - p) * z)
        bb = y * math.exp((1.0 - p) * z) if y != 0.0 else 0.0  # y = 0: 0 even where the exponential overflows
        curv = a if code == 8 else (2.0 - p) * a - (1.0 - p) * bb
        return a / (2.0 - p) - bb / (1.0 - p), a - bb, curv
    raise ValueError("unknown loss code in the fused kernel")


# Prefetching.  Each row pair's work waits on its rows' loads from memory.
# The hardware prefetchers keep the two row streams ahead of the loops when
# they run alone, but not beside the targets', weights' and curvature's
# streams: every row pair then asks for the rows some way ahead (about
# ``_PREFETCH_BYTES`` on), where a row is ``_PREFETCH_ROW_BYTES`` long.
# Shorter rows pay more for the asking than they gain, and longer ones
# (several KB) are streamed well by the hardware alone (docs/design-measurements.md
# has the measurement).  The kernels are compiled twice: with ``ahead`` an
# integer, and with it None, where numba prunes the asking away (a branch
# left in, never taken, slowed rows of 80 bytes by up to a quarter).  A
# prefetch is a hint: it reads nothing into the program, and cannot fault.

#: Row lengths (bytes) whose kernels ask for rows ahead, and how far ahead (bytes) they ask.
_PREFETCH_ROW_BYTES = (200, 2048)
_PREFETCH_BYTES = 1600


def _ahead(X) -> int | None:
    """How many row pairs ahead the kernels ask for ``X``'s rows; None: they do not ask."""
    row = X.shape[1] * X.itemsize
    lo, hi = _PREFETCH_ROW_BYTES
    return max(1, round(_PREFETCH_BYTES / row)) if lo <= row <= hi else None


if numba is not None:
    from ._prefetch import prefetch_rows as _prefetch_rows
else:  # pragma: no cover
    def _prefetch_rows(A, i, i2):
        return None


@_jit_inline
def _prefetch_pair(X, i, i2, ahead):
    """:func:`_prefetch_rows` for the row pair ``ahead`` pairs after (``i``, ``i2``)."""
    _prefetch_rows(X, i + ahead, i2 + ahead)


@_jit_inline
def _margins2(X, i, i2, W, b, S, out, at, at2):
    """``out[at + k] = b[k] + X[i] . W[k]`` and ``out[at2 + k]`` the same for row ``i2``: two rows' predictions.

    A row whose weight for output k is zero is not read: its margin is left
    at ``b[k]`` (its terms are multiplied by 0).  Held-out rows are such rows
    for a cross-validation split's model (a fifth of them in 5 folds).
    """
    ws = S.shape[1]
    d = X.shape[1]
    for k in range(W.shape[0]):
        live = ws == 0 or S[i, k if ws > 1 else 0] != 0.0
        live2 = ws == 0 or S[i2, k if ws > 1 else 0] != 0.0
        acc = b[k]
        acc2 = b[k]
        if live and live2:
            for j in range(d):
                acc += X[i, j] * W[k, j]
                acc2 += X[i2, j] * W[k, j]
        elif live:
            for j in range(d):
                acc += X[i, j] * W[k, j]
        elif live2:
            for j in range(d):
                acc2 += X[i2, j] * W[k, j]
        out[at + k] = acc
        out[at2 + k] = acc2


@_jit_inline
def _add_rows2(G, k, c, X, i, c2, i2):
    """``G[k] += c * X[i] + c2 * X[i2]``: two rows' contributions to a gradient or Hessian product, one pass.

    A zero coefficient's row is not read (a zero weight, or a loss flat there:
    a squared hinge past its margin).
    """
    d = X.shape[1]
    if c != 0.0 and c2 != 0.0:
        for j in range(d):
            G[k, j] += c * X[i, j] + c2 * X[i2, j]
    elif c != 0.0:
        for j in range(d):
            G[k, j] += c * X[i, j]
    elif c2 != 0.0:
        for j in range(d):
            G[k, j] += c2 * X[i2, j]


# Two streams.  Every kernel walks the shard as two halves at once: row i
# with row i + h, h = ceil(n / 2); when n is odd the middle row pairs with
# itself, its second copy weighted 0.  Two sequential streams keep more of
# the memory system busy than one, which brings a bare gradient pass near a
# plain sum's streaming floor, also with both workers reading at once
# (benchmarks/results/history/linear-models.md has the measurement).  The two rows also share each
# load of W and of G.  The row terms are written out in the kernels' loops:
# behind an inlined helper the same code ran slower (benchmarks/results/history/linear-models.md).


# ------------------------------------------------------------------ binomial
# The binomial loss needs exp and log1p per row.  Called one row at a time
# they are scalar libm calls, which cost a large share of the time of the
# memory-bound pass itself (docs/design-measurements.md has the measurement).  The
# binomial kernel therefore works in blocks of rows: the block's
# margins, then exp(-|z|) and log1p of a whole block with the polynomial
# kernels below (plain arithmetic, which LLVM vectorises), then the block's
# gradient while its rows are still in L1 cache, which brings it near the
# squared loss's time (docs/design-measurements.md has the measurement); the block
# itself now vectorises (see _jit_exact).

_BLOCK = 128
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that n * _LN2_HI is exact for |n| < 2**20
_LN2_LO = 1.90821492927058770002e-10
#: exp(r) on |r| <= ln(2)/2: Taylor to degree 13 (truncation < 5e-18 relative), highest power first.
_EXP_POLY = np.array([1.0 / math.factorial(k) for k in range(14)][::-1])
#: log1p(e) = 2 atanh(t), t = e / (2 + e) in [0, 1/3]: 2 t sum_k t^2k / (2k + 1) (truncation < 1e-18 relative).
_ATANH_POLY = np.array([2.0 / (2 * k + 1) for k in range(18)][::-1])
_EXP_MIN = -708.0  # exp below this is subnormal or zero: taken as 0 (an absolute error under 3e-308)


def _jit_exact(fn):
    """njit without reassociation: the polynomials must be evaluated in the order written.

    With numpy's error model: under numba's default (Python's), every float
    division checks its divisor for zero to raise ZeroDivisionError, and that
    branch kept the block's second loop (two divisions a row) from being
    vectorised, which made it slower with the same bits out (docs/design-measurements.md has the measurement).
    No divisor here can be zero (``2 + e`` and ``1 + e``, e >= 0).
    """
    if numba is None:  # pragma: no cover
        return fn
    return njit(fastmath={"contract"}, cache=True, nogil=True, boundscheck=False, error_model="numpy")(fn)


@_jit_exact
def _binomial_block(z, y, m, bits, loss, dz, curv):
    """(loss, dloss/dz, curvature) of the binomial loss at ``z[:m]``, ``y[:m]``, written to the outputs.

    ``loss = max(z, 0) - y z + log1p(e)``, ``e = exp(-|z|)``, as the row-wise
    formula; the same values to a few units of rounding, with the relative
    accuracy of log1p for tiny ``e``.  ``bits`` is int64 scratch of length >= m.
    """
    for i in range(m):  # exp(x), x = -|z|: x = n ln2 + r, exp(x) = 2^n exp(r)
        x = max(-abs(z[i]), _EXP_MIN)
        nf = math.floor(x * _LOG2E + 0.5)
        r = (x - nf * _LN2_HI) - nf * _LN2_LO
        q = _EXP_POLY[0]
        for k in range(1, _EXP_POLY.shape[0]):
            q = q * r + _EXP_POLY[k]
        bits[i] = (np.int64(nf) + 1023) << 52  # 2^n as float64 bits (n >= -1022: a normal number)
        dz[i] = q
    scale = bits[:m].view(np.float64)
    for i in range(m):
        zi = z[i]
        e = 0.0 if abs(zi) > -_EXP_MIN else dz[i] * scale[i]  # NaN stays NaN
        t = e / (2.0 + e)
        t2 = t * t
        acc = _ATANH_POLY[0]
        for k in range(1, _ATANH_POLY.shape[0]):
            acc = acc * t2 + _ATANH_POLY[k]
        p = (1.0 if zi >= 0.0 else e) / (1.0 + e)
        loss[i] = max(zi, 0.0) - y[i] * zi + t * acc
        dz[i] = p - y[i]
        curv[i] = p * (1.0 - p)


@_jit
def _value_grad_binomial(X, Y, S, W, b, gW, gb, curv, Lk, ahead):
    n = X.shape[0]
    K = W.shape[0]
    ws = S.shape[1]
    h = (n + 1) // 2
    B = _BLOCK // 2  # pairs per block
    Z = np.empty(2 * B * K)  # the block's first-half rows, then their partners
    Yb = np.empty(2 * B * K)
    L = np.empty(2 * B * K)
    G = np.empty(2 * B * K)
    C = np.empty(2 * B * K)
    bits = np.empty(2 * B * K, dtype=np.int64)
    total = 0.0
    for p0 in range(0, h, B):
        m = min(B, h - p0)
        for t in range(m):
            i = p0 + t
            i2 = i + h if i + h < n else i  # the middle row of an odd n pairs with itself, with weight 0
            if ahead is not None:  # None: compiled without (numba prunes the branch)
                _prefetch_pair(X, i, i2, ahead)
            _margins2(X, i, i2, W, b, S, Z, t * K, (m + t) * K)
            for k in range(K):
                Yb[t * K + k] = Y[i, k]
                Yb[(m + t) * K + k] = Y[i2, k]
        _binomial_block(Z, Yb, 2 * m * K, bits, L, G, C)
        for t in range(m):
            i = p0 + t
            i2 = i + h if i + h < n else i
            for k in range(K):
                a, a2 = t * K + k, (m + t) * K + k
                s = S[i, k if ws > 1 else 0] if ws > 0 else 1.0
                s2 = 0.0 if i2 == i else (S[i2, k if ws > 1 else 0] if ws > 0 else 1.0)
                lk = s * L[a] + s2 * L[a2]
                total += lk
                Lk[k] += lk
                curv[i, k] = C[a]
                curv[i2, k] = C[a2]  # the same value when i2 == i
                g, g2 = s * G[a], s2 * G[a2]
                gb[k] += g + g2
                _add_rows2(gW, k, g, X, i, g2, i2)
    return total


@_jit
def _value_grad(X, Y, codes, S, W, b, code, eps, gW, gb, curv, Lk, ahead):
    """The loss sum; ``Lk`` (K,) gets each output's own sum (a multinomial's all in ``Lk[0]``).

    ``ahead``: how many row pairs ahead the rows are asked for (:func:`_ahead`), or None, where the kernel is
    compiled without asking (numba prunes the ``ahead is not None`` branches for a None argument).
    """
    n = X.shape[0]
    K = W.shape[0]
    ws = S.shape[1]  # 0: no weights, 1: one per sample, K: one per sample and output
    if code == 1:  # binomial: blocks with vectorised exp and log1p
        return _value_grad_binomial(X, Y, S, W, b, gW, gb, curv, Lk, ahead)
    h = (n + 1) // 2
    z = np.empty(2 * K)
    g = np.empty(2 * K)
    total = 0.0
    for i in range(h):
        i2 = i + h if i + h < n else i  # the middle row of an odd n pairs with itself, with weight 0
        if ahead is not None:
            _prefetch_pair(X, i, i2, ahead)
        _margins2(X, i, i2, W, b, S, z, 0, K)
        for r in range(2 if i2 != i else 1):
            row = i if r == 0 else i2
            at = r * K
            if code == _MULTINOMIAL:
                m = z[at]
                for k in range(1, K):
                    m = max(m, z[at + k])
                se = 0.0
                for k in range(K):
                    g[at + k] = math.exp(z[at + k] - m)
                    se += g[at + k]
                c = codes[row]
                s = S[row, 0] if ws > 0 else 1.0
                lk = s * (m + math.log(se) - z[at + c])
                total += lk
                Lk[0] += lk
                for k in range(K):
                    p = g[at + k] / se
                    curv[row, k] = p
                    g[at + k] = s * (p - 1.0 if k == c else p)
            else:
                for k in range(K):
                    loss, gk, ck = _pointwise(code, z[at + k], Y[row, k], eps)
                    s = S[row, k if ws > 1 else 0] if ws > 0 else 1.0
                    total += s * loss
                    Lk[k] += s * loss
                    g[at + k] = s * gk
                    curv[row, k] = ck
        if i2 == i:
            for k in range(K):
                g[K + k] = 0.0
        for k in range(K):
            gb[k] += g[k] + g[K + k]
            _add_rows2(gW, k, g[k], X, i, g[K + k], i2)
    return total


@_jit
def _hessp(X, S, curv, P, pb, coupled, hW, hb, ahead):
    """``ahead`` as :func:`_value_grad`'s."""
    n = X.shape[0]
    K = P.shape[0]
    ws = S.shape[1]
    h = (n + 1) // 2
    v = np.empty(2 * K)
    for i in range(h):
        i2 = i + h if i + h < n else i  # the middle row of an odd n pairs with itself, with weight 0
        if ahead is not None:
            _prefetch_pair(X, i, i2, ahead)
        _margins2(X, i, i2, P, pb, S, v, 0, K)
        for r in range(2 if i2 != i else 1):
            row = i if r == 0 else i2
            at = r * K
            if coupled:  # softmax: q = p * v - p * <p, v>
                pv = 0.0
                for k in range(K):
                    pv += curv[row, k] * v[at + k]
                for k in range(K):
                    v[at + k] = curv[row, k] * (v[at + k] - pv)
            else:
                for k in range(K):
                    v[at + k] = curv[row, k] * v[at + k]
            for k in range(K):
                v[at + k] *= S[row, k if ws > 1 else 0] if ws > 0 else 1.0
        if i2 == i:
            for k in range(K):
                v[K + k] = 0.0
        for k in range(K):
            hb[k] += v[k] + v[K + k]
            _add_rows2(hW, k, v[k], X, i, v[K + k], i2)


_NO_WEIGHTS = np.empty((0, 0))
_NO_CODES = np.empty(0, dtype=np.int64)
_NO_Y = np.empty((0, 0))


def _code(loss) -> int:
    """The kernel code of ``loss`` (a name, or a code as a loss's ``kernel()`` gives it); a loss without one
    raises (it must take the torch path)."""
    if isinstance(loss, (int, np.integer)):
        return int(loss)
    try:
        return LOSS_CODES[loss]
    except KeyError:
        raise ValueError(f"Loss {loss!r} has no fused kernel; it runs on the torch path.") from None


def _weights2d(s, n):
    if s is None:
        return _NO_WEIGHTS
    return np.ascontiguousarray(s.reshape(n, -1))


def value_grad(X, y, s, W, b, loss, eps: float, curv, per_output: bool = False):
    """Raw sums over the rows of ``X``: ``(loss, gW (K, d), gb (K,))``; fills ``curv`` (n, K) in place.

    With ``per_output`` the loss is each output's own sum, (K,) (separable
    losses): K models of one output each, evaluated in one pass over X, as
    the cross-validation's folds are with per-output weights ``s`` (n, K).

    ``loss`` is a loss's name or the kernel code its ``kernel()`` gives, and ``eps`` that kernel's parameter
    (the epsilon of ``squared_epsilon_insensitive``, the power of ``tweedie``).
    ``y`` is float (n, K) for separable losses and int64 codes (n,) for
    ``multinomial``; ``s`` is None, (n,), (n, 1) or (n, K); ``b`` may be None
    (no intercept: ``gb`` is then the unused sum of the derivatives).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0]]); y = np.array([[1.0], [0.0]])
    >>> loss, gW, gb = value_grad(X, y, None, np.zeros((1, 2)), np.zeros(1), "binomial", 0.0, np.empty((2, 1)))
    >>> round(loss, 6), gW.tolist(), gb.tolist()
    (1.386294, [[1.0, 1.0]], [0.0])
    """
    n = X.shape[0]
    K = W.shape[0]
    code = _code(loss)
    gW = np.zeros((K, X.shape[1]))
    gb = np.zeros(K)
    bias = np.zeros(K) if b is None else np.ascontiguousarray(b)
    if code == _MULTINOMIAL:
        Y, codes = _NO_Y, np.ascontiguousarray(y.reshape(-1), dtype=np.int64)
    else:
        Y, codes = np.ascontiguousarray(y.reshape(n, K)), _NO_CODES
    Lk = np.zeros(K)
    total = _value_grad(X, Y, codes, _weights2d(s, n), np.ascontiguousarray(W), bias, code, float(eps), gW, gb, curv,
                        Lk, _ahead(X))
    return (Lk if per_output else total), gW, gb


def hessp(X, s, curv, P, pb, loss):
    """Raw Hessian-vector product at the point whose curvature is ``curv``: ``(hW (K, d), hb (K,))``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.eye(2); curv = np.full((2, 1), 0.25)
    >>> hW, hb = hessp(X, None, curv, np.ones((1, 2)), np.zeros(1), "binomial")
    >>> hW.tolist(), hb.tolist()
    ([[0.25, 0.25]], [0.5])
    """
    n = X.shape[0]
    K = P.shape[0]
    hW = np.zeros((K, X.shape[1]))
    hb = np.zeros(K)
    bias = np.zeros(K) if pb is None else np.ascontiguousarray(pb)
    _hessp(X, _weights2d(s, n), curv, np.ascontiguousarray(P), bias, _code(loss) == _MULTINOMIAL, hW, hb, _ahead(X))
    return hW, hb


# ------------------------------------------------------------------ CSR
# Sparse X (a shard's CSR arrays, see :mod:`._sparse`).  Two passes over the
# rows: every row's predictions from its stored values (a gather from the
# coefficients), the pointwise terms, then every row's gradient scattered
# into the columns it holds.  The coefficients are held transposed, (d, K),
# so that one stored value reads and writes the K outputs of its column in
# one cache line.
#
# Each choice below was measured against one fused pass per row over int64
# indices (``python benchmarks/bench_sparse_kernels.py``; docs/design-measurements.md
# has the figures).  Each step, in that order:
# * Two passes.  A row's scatter waits on its gathers and on
#   exp, and the next row's gathers wait behind its stores, so little of a
#   fused pass overlaps; rows in blocks of 64 to 1024 (each block's passes in
#   turn) were slower still.
# * No ``reassoc``: it lets LLVM vectorise the row dot with AVX-512 gathers,
#   which made the same loops slower on the CPU measured.  Each row's dot is
#   summed in storage order.
# * int32 indices in the shard (engine/data/_worker.index_dtype), read as uint32
#   (:func:`_unsigned`): 4 bytes less a non-zero to stream, and no
#   negative-index wrap-around per access.


def _jit_sparse(fn):
    """As :func:`_jit`, without ``reassoc``: for loops that gather or scatter through ``indices``."""
    if numba is None:  # pragma: no cover
        return fn
    return njit(fastmath={"contract"}, cache=True, nogil=True, boundscheck=False)(fn)


def _jit_sparse_inline(fn):
    if numba is None:  # pragma: no cover
        return fn
    return njit(fastmath={"contract"}, cache=True, nogil=True, boundscheck=False, inline="always")(fn)


@_jit_sparse_inline
def _csr_margins(data, indices, indptr, WT, b, Z):
    """``Z[i, k] = b[k] + x_i . WT[:, k]`` for every row ``i``."""
    K = WT.shape[1]
    for i in range(indptr.shape[0] - 1):
        for k in range(K):
            Z[i, k] = b[k]
        for jj in range(indptr[i], indptr[i + 1]):
            j = indices[jj]
            x = data[jj]
            for k in range(K):
                Z[i, k] += x * WT[j, k]


@_jit_sparse_inline
def _csr_scatter(data, indices, indptr, G, GT, gb):
    """``GT[:, k] += X^T G[:, k]`` and ``gb[k] += sum_i G[i, k]``."""
    K = GT.shape[1]
    for i in range(indptr.shape[0] - 1):
        for k in range(K):
            gb[k] += G[i, k]
        for jj in range(indptr[i], indptr[i + 1]):
            j = indices[jj]
            x = data[jj]
            for k in range(K):
                GT[j, k] += G[i, k] * x


@_jit_sparse_inline
def _csr_margins1(data, indices, indptr, w, b, z):
    """``z[i] = b + x_i . w`` for every row ``i`` (one output)."""
    for i in range(indptr.shape[0] - 1):
        zi = b
        for jj in range(indptr[i], indptr[i + 1]):
            zi += data[jj] * w[indices[jj]]
        z[i] = zi


@_jit_sparse_inline
def _csr_scatter1(data, indices, indptr, r, g):
    """``g += X^T r`` (one output)."""
    for i in range(indptr.shape[0] - 1):
        ri = r[i]
        for jj in range(indptr[i], indptr[i + 1]):
            g[indices[jj]] += ri * data[jj]


# One output (binary and single-target models, the common case): the same passes over 1-D weights and
# gradient.
@_jit_sparse
def _csr_value_grad1(data, indices, indptr, y, S, w, b, code, eps, g, curv):
    n = indptr.shape[0] - 1
    weighted = S.shape[1] > 0
    r = np.empty(n)
    _csr_margins1(data, indices, indptr, w, b, r)
    total = 0.0
    gb = 0.0
    for i in range(n):
        loss, gk, ck = _pointwise(code, r[i], y[i], eps)
        s = S[i, 0] if weighted else 1.0
        total += s * loss
        r[i] = s * gk
        curv[i] = ck
        gb += r[i]
    _csr_scatter1(data, indices, indptr, r, g)
    return total, gb


@_jit_sparse
def _csr_hessp1(data, indices, indptr, S, curv, p, pb, h):
    n = indptr.shape[0] - 1
    weighted = S.shape[1] > 0
    v = np.empty(n)
    _csr_margins1(data, indices, indptr, p, pb, v)
    hb = 0.0
    for i in range(n):
        v[i] *= curv[i]
        if weighted:
            v[i] *= S[i, 0]
        hb += v[i]
    _csr_scatter1(data, indices, indptr, v, h)
    return hb


@_jit_sparse
def _csr_value_grad(data, indices, indptr, Y, codes, S, WT, b, code, eps, gWT, gb, curv):
    n = indptr.shape[0] - 1
    K = WT.shape[1]
    ws = S.shape[1]  # 0: no weights, 1: one per sample, K: one per sample and output
    Z = np.empty((n, K))
    _csr_margins(data, indices, indptr, WT, b, Z)
    total = 0.0
    for i in range(n):
        if code == _MULTINOMIAL:
            m = Z[i, 0]
            for k in range(1, K):
                m = max(m, Z[i, k])
            se = 0.0
            c = codes[i]
            zc = Z[i, c]
            for k in range(K):
                Z[i, k] = math.exp(Z[i, k] - m)
                se += Z[i, k]
            s = S[i, 0] if ws > 0 else 1.0
            total += s * (m + math.log(se) - zc)
            for k in range(K):
                p = Z[i, k] / se
                curv[i, k] = p
                Z[i, k] = s * (p - 1.0 if k == c else p)
        else:
            for k in range(K):
                loss, gk, ck = _pointwise(code, Z[i, k], Y[i, k], eps)
                s = S[i, k if ws > 1 else 0] if ws > 0 else 1.0
                total += s * loss
                Z[i, k] = s * gk
                curv[i, k] = ck
    _csr_scatter(data, indices, indptr, Z, gWT, gb)
    return total


@_jit_sparse
def _csr_hessp(data, indices, indptr, S, curv, PT, pb, coupled, hWT, hb):
    n = indptr.shape[0] - 1
    K = PT.shape[1]
    ws = S.shape[1]
    V = np.empty((n, K))
    _csr_margins(data, indices, indptr, PT, pb, V)
    for i in range(n):
        if coupled:  # softmax: q = p * v - p * <p, v>
            pv = 0.0
            for k in range(K):
                pv += curv[i, k] * V[i, k]
            for k in range(K):
                V[i, k] = curv[i, k] * (V[i, k] - pv)
        else:
            for k in range(K):
                V[i, k] = curv[i, k] * V[i, k]
        for k in range(K):
            V[i, k] *= S[i, k if ws > 1 else 0] if ws > 0 else 1.0
    _csr_scatter(data, indices, indptr, V, hWT, hb)


@_jit_sparse
def _csr_gram(data, indices, indptr, D, intercept, H):
    """``H += sum_i D[i] x~_i x~_i^T`` with ``x~_i`` row i, followed by a 1 when ``intercept``."""
    n = indptr.shape[0] - 1
    d = H.shape[0] - (1 if intercept else 0)
    for i in range(n):
        Di = D[i]
        if Di == 0.0:
            continue
        lo, hi = indptr[i], indptr[i + 1]
        for a in range(lo, hi):
            ja = indices[a]
            va = Di * data[a]
            for c in range(lo, hi):
                H[ja, indices[c]] += va * data[c]
            if intercept:
                H[ja, d] += va
                H[d, ja] += va
        if intercept:
            H[d, d] += Di


def _unsigned(a):
    """An int32 index array viewed as uint32 (no copy; CSR indices are never negative): numba then drops the
    negative-index wrap-around of every gather and scatter, which slowed value_grad (docs/design-measurements.md has
    the measurement).  int64 stays signed: uint64 with int64 arithmetic would become float64 in numba."""
    a = index_array(a)
    return a.view(np.uint32) if a.dtype == np.int32 else a


def _csr_arrays(data, indices, indptr):
    data = np.asarray(data)
    dtype = data.dtype if data.dtype in (np.float32, np.float64) else np.float64
    return np.ascontiguousarray(data, dtype=dtype), _unsigned(indices), _unsigned(indptr)


def csr_value_grad(data, indices, indptr, n_features, y, s, W, b, loss, eps: float, curv):
    """:func:`value_grad` of a CSR ``X`` given by its three arrays (``data``, ``indices``, ``indptr``).

    Examples
    --------
    >>> import numpy as np
    >>> data, indices, indptr = np.array([1.0, 2.0, 4.0]), np.array([0, 1, 1]), np.array([0, 2, 3])
    >>> y = np.array([[1.0], [0.0]])  # X = [[1, 2], [0, 4]]
    >>> loss, gW, gb = csr_value_grad(data, indices, indptr, 2, y, None, np.zeros((1, 2)), np.zeros(1),
    ...                               "binomial", 0.0, np.empty((2, 1)))
    >>> round(loss, 6), gW.tolist(), gb.tolist()
    (1.386294, [[-0.5, 1.0]], [0.0])
    """
    n = indptr.shape[0] - 1
    K = W.shape[0]
    code = _code(loss)
    bias = np.zeros(K) if b is None else np.ascontiguousarray(b, dtype=np.float64)
    if K == 1 and code != _MULTINOMIAL and curv.flags.c_contiguous:
        flat = np.zeros(n_features + 1)  # the gradient then the intercept's: one buffer, as the optimizer takes it
        total, flat[n_features] = _csr_value_grad1(*_csr_arrays(data, indices, indptr),
                                                   np.ascontiguousarray(y.reshape(-1), dtype=np.float64),
                                                   _weights2d(s, n), np.ascontiguousarray(W.reshape(-1), dtype=np.float64),
                                                   float(bias[0]), code, float(eps), flat[:n_features], curv.reshape(-1))
        return total, flat[:n_features].reshape(1, -1), flat[n_features:]
    gWT = np.zeros((n_features, K))
    gb = np.zeros(K)
    if code == _MULTINOMIAL:
        Y, codes = _NO_Y, np.ascontiguousarray(y.reshape(-1), dtype=np.int64)
    else:
        Y, codes = np.ascontiguousarray(y.reshape(n, K), dtype=np.float64), _NO_CODES
    total = _csr_value_grad(*_csr_arrays(data, indices, indptr), Y, codes, _weights2d(s, n),
                            np.ascontiguousarray(W.T), bias, code, float(eps), gWT, gb, curv)
    return total, np.ascontiguousarray(gWT.T), gb


def csr_hessp(data, indices, indptr, n_features, s, curv, P, pb, loss):
    """:func:`hessp` of a CSR ``X`` given by its three arrays.

    Examples
    --------
    >>> import numpy as np
    >>> data, indices, indptr = np.array([1.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])  # X = I
    >>> hW, hb = csr_hessp(data, indices, indptr, 2, None, np.full((2, 1), 0.25), np.ones((1, 2)), np.zeros(1),
    ...                    "binomial")
    >>> hW.tolist(), hb.tolist()
    ([[0.25, 0.25]], [0.5])
    """
    n = indptr.shape[0] - 1
    K = P.shape[0]
    bias = np.zeros(K) if pb is None else np.ascontiguousarray(pb, dtype=np.float64)
    if K == 1 and _code(loss) != _MULTINOMIAL:
        flat = np.zeros(n_features + 1)  # as in csr_value_grad
        flat[n_features] = _csr_hessp1(*_csr_arrays(data, indices, indptr), _weights2d(s, n),
                                       np.ascontiguousarray(curv, dtype=np.float64).reshape(-1),
                                       np.ascontiguousarray(P.reshape(-1), dtype=np.float64), float(bias[0]),
                                       flat[:n_features])
        return flat[:n_features].reshape(1, -1), flat[n_features:]
    hWT = np.zeros((n_features, K))
    hb = np.zeros(K)
    _csr_hessp(*_csr_arrays(data, indices, indptr), _weights2d(s, n), curv, np.ascontiguousarray(P.T), bias,
               _code(loss) == _MULTINOMIAL, hWT, hb)
    return np.ascontiguousarray(hWT.T), hb


def csr_gram(data, indices, indptr, n_features, D, intercept: bool):
    """``sum_i D[i] x~_i x~_i^T`` of a CSR ``X`` (``x~_i`` row i with a trailing 1 when ``intercept``), dense.

    Only the output is dense, (d + intercept) square: X is read through its stored values.

    Examples
    --------
    >>> import numpy as np
    >>> data, indices, indptr = np.array([1.0, 2.0, 3.0]), np.array([0, 1, 1]), np.array([0, 2, 3])
    >>> csr_gram(data, indices, indptr, 2, np.array([1.0, 0.5]), True).tolist()  # X = [[1, 2], [0, 3]]
    [[1.0, 2.0, 1.0], [2.0, 8.5, 3.5], [1.0, 3.5, 1.5]]
    """
    m = n_features + int(bool(intercept))
    H = np.zeros((m, m))
    _csr_gram(*_csr_arrays(data, indices, indptr), np.ascontiguousarray(D, dtype=np.float64), bool(intercept), H)
    return H
