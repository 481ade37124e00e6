"""Input checks that scale: scikit-learn's finiteness check, threaded and without a temporary array.

``validate_data`` checks ``X`` for NaN and infinity with ``np.isfinite`` on
one core; on a 1M x 100 float64 array that took 120 ms, a tenth of a whole
LogisticRegression fit.  :func:`assert_all_finite` reads the array once per
core (one numba pass each over a slice, without the GIL) and gives the same
errors as scikit-learn: on a failure it calls scikit-learn's own check for
the message.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.utils.validation import _assert_all_finite

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency
    numba = None

__all__ = ["assert_all_finite"]

#: Below this many elements one thread and NumPy are as fast.
_MIN_PARALLEL = 1 << 20


def _finite_sum(a):
    """``sum(a * 0)``: 0 when every element is finite, NaN otherwise (inf * 0 is NaN)."""
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * 0.0
    return s


if numba is not None:
    # reassoc vectorises the sum; no nnan/ninf, so NaN and inf are kept
    _finite_sum = numba.njit(fastmath={"reassoc", "contract"}, cache=True, nogil=True, boundscheck=False)(_finite_sum)


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
    if numba is None or X.dtype.kind != "f" or not contiguous or X.size < _MIN_PARALLEL:
        _assert_all_finite(X, input_name=input_name, estimator_name=estimator_name)
        return
    flat = X.reshape(-1, order="A")
    n_threads = min(_n_threads(), 8)
    parts = np.array_split(flat, 4 * n_threads)  # a few parts per thread evens out uneven cores
    with ThreadPoolExecutor(n_threads) as pool:
        sums = list(pool.map(_finite_sum, parts))
    if not all(math.isfinite(s) for s in sums):
        _assert_all_finite(X, input_name=input_name, estimator_name=estimator_name)
