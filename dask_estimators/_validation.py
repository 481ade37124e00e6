"""Input checks that scale: scikit-learn's finiteness check without a temporary array, the classes of y without
a sort, and the workers' copy that checks as it copies.

``validate_data`` checks ``X`` for NaN and infinity with ``np.isfinite``: a
temporary array of X's size, and a noticeable share of a whole LogisticRegression
fit on large input (docs/design-measurements.md has the measurement).  :func:`assert_all_finite` sums ``X``
instead and gives the same errors as scikit-learn: on a failure it calls
scikit-learn's own check for the message.  What runs on the client is NumPy
only: numba's first use in a process is slow (docs/design-measurements.md has the
measurement); the workers load it anyway, for :func:`copy_if_finite` and the
kernels.
"""

from __future__ import annotations

import math

import numpy as np
from ._jit import AVAILABLE as _NUMBA, lazy_njit
from ._pieces import flat_bytes, map_pieces

__all__ = ["assert_all_finite", "classes_and_codes"]

# Exact comparisons, no fast-math: ``abs(v) < inf`` is False for NaN and +-inf.  An earlier
# ``sum(v * 0.0)`` under fast-math "reassoc" was folded to 0 by numba 0.59's LLVM in the 2-D
# loop, so NaN passed unseen at the floor versions (tests/test_validation.py has the case).
@lazy_njit(nogil=True, boundscheck=False)
def _copy_count_nonfinite(src, dst):
    """Copy the 1-D ``src`` into ``dst``; return how many elements were NaN or infinite, from the same pass."""
    bad = 0
    for i in range(src.shape[0]):
        v = src[i]
        dst[i] = v
        bad += not (abs(v) < math.inf)
    return bad


def copy_if_finite(src, dst) -> bool:
    """Copy the float array ``src`` into ``dst`` (same shape, C-contiguous) and say whether it was all finite.

    A C-contiguous ``src`` is copied and checked in one pass where numba is
    available (the check rides along with the copy).  Another layout (a
    pandas block is column-major) is copied by NumPy and checked by a sum over
    ``src`` as it lies, which says "not finite" also where finite values'
    sum overflows: the caller's own check has the last word then.
    Without numba, a copy and a check.

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
    # NumPy's transposing copy and a sum beat one tiled pass of ours (benchmarks/results/history/streaming.md)
    np.copyto(dst, src)
    return _finite_sum(src)


def _finite_sum(piece) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):  # numpy's error state is the calling thread's
        return bool(np.isfinite(np.add.reduce(piece, axis=None)))


def all_finite(X, parallel: bool = False) -> bool:
    """Whether the float array ``X`` holds no NaN and no infinity, read without a temporary where it is.

    The sum comes first: it is finite only where every element is (NaN and
    infinities carry through it), so a finite sum is the answer; only one
    that is not (a non-finite element, or finite ones whose sum overflows) is
    followed by the element-wise check.  ``parallel``: a contiguous ``X`` is
    summed in pieces by a few threads (:mod:`dask_estimators._pieces`), for
    the client's check of a large X.

    Examples
    --------
    >>> import numpy as np
    >>> all_finite(np.ones((3, 2))), all_finite(np.array([[1.0, np.nan]])), all_finite(np.full(2, 1e308))
    (True, False, True)
    """
    flat = flat_bytes(X) if parallel else None
    finite_sum = _finite_sum(X) if flat is None else all(map_pieces(_finite_sum, flat))
    return finite_sum or bool(np.isfinite(X).all())


def assert_all_finite(X, *, input_name="X", estimator_name=None, parallel: bool = False):
    """Raise scikit-learn's ``ValueError`` if the float array ``X`` holds NaN or infinity.

    A float array is checked by :func:`all_finite` (``parallel`` as there):
    its sum first, read once without a temporary array, faster than
    ``np.isfinite(X).all()`` (docs/design-measurements.md has the measurement).

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
    if X.dtype.kind != "f" or not all_finite(X, parallel):
        _sklearn_check(X, input_name, estimator_name)


def _sklearn_check(X, input_name, estimator_name):
    """scikit-learn's own check, for its error message (imported here: workers running the finiteness checks
    of placement need not import scikit-learn otherwise)."""
    from sklearn.utils.validation import _assert_all_finite

    _assert_all_finite(X, input_name=input_name, estimator_name=estimator_name)


#: Integer labels spanning at most this many values are counted in a table.
_INT_SPAN = 1 << 12
#: Other labels: the distinct values of about this many, evenly spaced, are the candidate classes.
_SAMPLE = 4096


def classes_and_codes(y, max_classes=64):
    """``(np.unique(y), np.searchsorted(np.unique(y), y))`` for a 1-D numeric ``y`` with few classes, without a sort.

    ``np.unique`` sorts every element and ``searchsorted`` bisects for each
    (docs/design-measurements.md has the cost).  Integer labels in a small range are
    counted in a table (their range, ``bincount``, the codes by one lookup);
    other labels take the distinct values of an evenly spaced sample, then
    one ``searchsorted`` against those few, checked to give back every label.
    Returns None when ``y`` is not numeric and 1-D, holds NaN, has more
    classes, or has a label the sample missed (then use ``np.unique``).

    Examples
    --------
    >>> import numpy as np
    >>> classes, codes = classes_and_codes(np.array([3, 1, 3, 2]))
    >>> classes.tolist(), codes.tolist()
    ([1, 2, 3], [2, 0, 2, 1])
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.dtype.kind not in "iuf" or y.size == 0:
        return None
    if y.dtype.kind == "i" or (y.dtype.kind == "u" and y.dtype.itemsize < 8):  # y - lo fits an int64
        lo, hi = int(y.min()), int(y.max())
        if hi - lo < _INT_SPAN:
            offsets = y.astype(np.int64) - lo
            present = np.bincount(offsets, minlength=hi - lo + 1) > 0
            if np.count_nonzero(present) > max_classes:
                return None
            lut = np.cumsum(present, dtype=np.intp) - 1
            return (lo + np.flatnonzero(present)).astype(y.dtype), lut[offsets]
    classes = np.unique(y[:: max(1, y.size // _SAMPLE)])
    if classes.size > max_classes:
        return None
    codes = np.searchsorted(classes, y)
    if not np.array_equal(classes[np.minimum(codes, classes.size - 1)], y):  # a label the sample missed, or NaN
        return None
    return classes, codes
