"""Input checks that scale: scikit-learn's finiteness check, threaded and without a temporary array.

``validate_data`` checks ``X`` for NaN and infinity with ``np.isfinite`` on
one core: a tenth of a whole LogisticRegression fit on large input
(docs/performance.md).  :func:`assert_all_finite` reads the array once per
core (one numba pass each over a slice, without the GIL) and gives the same
errors as scikit-learn: on a failure it calls scikit-learn's own check for
the message.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ._jit import AVAILABLE as _NUMBA, lazy_njit

__all__ = ["assert_all_finite", "classes_and_codes"]

#: Below this many elements one thread and NumPy are as fast.
_MIN_PARALLEL = 1 << 20


# Exact comparisons, no fast-math: ``abs(v) < inf`` is False for NaN and +-inf.  An earlier
# ``sum(v * 0.0)`` under fast-math "reassoc" was folded to 0 by numba 0.59's LLVM in the 2-D
# loop, so NaN passed unseen at the floor versions (tests/test_validation.py has the case).
@lazy_njit(nogil=True, boundscheck=False)
def _count_nonfinite(a):
    """How many elements of the 1-D ``a`` are NaN or infinite."""
    bad = 0
    for i in range(a.shape[0]):
        bad += not (abs(a[i]) < math.inf)
    return bad


@lazy_njit(nogil=True, boundscheck=False)
def _copy_count_nonfinite(src, dst):
    """Copy the 1-D ``src`` into ``dst``; return how many elements were NaN or infinite, from the same pass."""
    bad = 0
    for i in range(src.shape[0]):
        v = src[i]
        dst[i] = v
        bad += not (abs(v) < math.inf)
    return bad


@lazy_njit(nogil=True, boundscheck=False)
def _copy_count_nonfinite_2d(src, dst):
    """:func:`_copy_count_nonfinite` for a 2-D ``src`` of any strides (a pandas block is column-major), by tiles."""
    n, d = src.shape
    bad = 0
    for i0 in range(0, n, 64):
        i1 = min(i0 + 64, n)
        for j0 in range(0, d, 64):
            j1 = min(j0 + 64, d)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    v = src[i, j]
                    dst[i, j] = v
                    bad += not (abs(v) < math.inf)
    return bad


def copy_if_finite(src, dst) -> bool:
    """Copy the float array ``src`` into ``dst`` (same shape, C-contiguous) and say whether it was all finite.

    One pass over ``src`` where numba is available (the check rides along
    with the copy); otherwise a copy and a check.

    Examples
    --------
    >>> import numpy as np
    >>> dst = np.empty((2, 2))
    >>> copy_if_finite(np.ones((2, 2)), dst), dst.sum()
    (True, np.float64(4.0))
    >>> copy_if_finite(np.array([[1.0, np.inf], [0.0, 1.0]]), dst)
    False
    """
    if not _NUMBA or not dst.flags.c_contiguous or src.dtype != dst.dtype or src.ndim > 2:
        np.copyto(dst, src)
        return bool(np.isfinite(dst).all())
    if src.flags.c_contiguous:
        return _copy_count_nonfinite(src.reshape(-1), dst.reshape(-1)) == 0
    return _copy_count_nonfinite_2d(src.reshape(src.shape[0], -1), dst.reshape(src.shape[0], -1)) == 0


def _n_threads():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def assert_all_finite(X, *, input_name="X", estimator_name=None):
    """Raise scikit-learn's ``ValueError`` if the float array ``X`` holds NaN or infinity.

    Examples
    --------
    >>> import numpy as np
    >>> assert_all_finite(np.ones((3, 2)))
    >>> assert_all_finite(np.array([[1.0, np.nan]]))
    Traceback (most recent call last):
    ...
    ValueError: Input X contains NaN.
    """
    X = np.asarray(X)
    contiguous = X.flags.c_contiguous or X.flags.f_contiguous
    if not _NUMBA or X.dtype.kind != "f" or not contiguous or X.size < _MIN_PARALLEL:
        if X.dtype.kind != "f" or not np.isfinite(X).all():
            _sklearn_check(X, input_name, estimator_name)
        return
    flat = X.reshape(-1, order="A")
    n_threads = min(_n_threads(), 8)
    parts = np.array_split(flat, 4 * n_threads)  # a few parts per thread evens out uneven cores
    with ThreadPoolExecutor(n_threads) as pool:
        bad = sum(pool.map(_count_nonfinite, parts))
    if bad:
        _sklearn_check(X, input_name, estimator_name)


def _sklearn_check(X, input_name, estimator_name):
    """scikit-learn's own check, for its error message (imported here: workers running the finiteness checks
    of placement need not import scikit-learn otherwise)."""
    from sklearn.utils.validation import _assert_all_finite

    _assert_all_finite(X, input_name=input_name, estimator_name=estimator_name)


@lazy_njit(nogil=True)
def _int_range(y):
    lo = y[0]
    hi = y[0]
    for i in range(y.shape[0]):
        lo = min(lo, y[i])
        hi = max(hi, y[i])
    return lo, hi


@lazy_njit(nogil=True, boundscheck=False)
def _int_codes(y, lo, present, lut, out):
    """Integer labels in a small range: which values occur (``present``), then ``out[i] = lut[y[i] - lo]``."""
    for i in range(y.shape[0]):
        present[np.int64(y[i]) - lo] = 1
    c = 0
    for v in range(present.shape[0]):
        lut[v] = c
        c += present[v]
    for i in range(y.shape[0]):
        out[i] = lut[np.int64(y[i]) - lo]


@lazy_njit(nogil=True)
def _few_distinct(y, cap):
    """The distinct values of ``y`` in order of appearance, or an empty array when there are more than ``cap``."""
    vals = np.empty(cap, dtype=y.dtype)
    k = 0
    for i in range(y.shape[0]):
        v = y[i]
        if k > 0 and v == vals[k - 1]:  # runs of one label cost one comparison
            continue
        seen = False
        for t in range(k):
            if vals[t] == v:
                seen = True
                break
        if not seen:
            if k == cap or v != v:  # too many, or NaN: the caller falls back to np.unique
                return vals[:0]
            vals[k] = v
            k += 1
    return vals[:k]


@lazy_njit(nogil=True, boundscheck=False)
def _codes(y, classes, out):
    """``out[i] = the index of y[i] in the sorted, few ``classes``` (every y[i] is one of them): the number below it."""
    k = classes.shape[0]
    for i in range(y.shape[0]):
        v = y[i]
        c = 0
        for t in range(k):
            c += classes[t] < v
        out[i] = c


#: Integer labels spanning at most this many values are counted in a table.
_INT_SPAN = 1 << 12


def classes_and_codes(y, max_classes=64):
    """``(np.unique(y), np.searchsorted(np.unique(y), y))`` for a 1-D numeric ``y`` with few classes, in two passes.

    ``np.unique`` hashes every element and ``searchsorted`` bisects for each
    (docs/performance.md has the cost).  Integer labels in a small range take three
    vectorisable passes (their range, a table of the values present, the
    codes from it); other labels a pass that compares each with the few seen
    so far, then one that counts the classes below each.  Returns None when ``y`` is not numeric and 1-D,
    holds NaN, or has more classes (then use ``np.unique``).

    Examples
    --------
    >>> import numpy as np
    >>> classes, codes = classes_and_codes(np.array([3, 1, 3, 2]))
    >>> classes.tolist(), codes.tolist()
    ([1, 2, 3], [2, 0, 2, 1])
    """
    y = np.asarray(y)
    if not _NUMBA or y.ndim != 1 or y.dtype.kind not in "iuf" or y.size == 0:
        return None
    y = np.ascontiguousarray(y)
    codes = np.empty(y.shape[0], dtype=np.intp)
    if y.dtype.kind == "i" or (y.dtype.kind == "u" and y.dtype.itemsize < 8):  # y - lo fits an int64
        lo, hi = _int_range(y)
        if int(hi) - int(lo) < _INT_SPAN:
            present = np.zeros(int(hi) - int(lo) + 1, dtype=np.intp)
            _int_codes(y, np.int64(lo), present, np.empty_like(present), codes)
            if present.sum() > max_classes:
                return None
            return (lo + np.flatnonzero(present)).astype(y.dtype), codes
    distinct = _few_distinct(y, max_classes)
    if distinct.size == 0:
        return None
    classes = np.sort(distinct)
    _codes(y, classes, codes)
    return classes, codes
