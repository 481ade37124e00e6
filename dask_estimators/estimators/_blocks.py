"""The check every row block of dask input passes on its worker, importable there without scikit-learn.

A worker unpickles :func:`check_block` (through the estimator's
``functools.partial``) before it places its rows.  The function lived beside
the estimators' base class, whose module imports scikit-learn: a linear fit on
dask input made every worker import it (about 1.1 s of one core, most of the
first fit's set-up on a cluster the user started).  Here the plain blocks (a
NumPy X of the stored float dtype, numeric targets and weights) are checked with
NumPy alone, with the same outcome as scikit-learn's ``check_array``; anything
else (other dtypes, pandas blocks that are not one float block, sparse blocks,
the errors themselves) goes to scikit-learn's own checks, imported then, for
its conversions and its messages.
"""

from __future__ import annotations

import numpy as np

from .._validation import assert_all_finite

__all__ = ["check_block"]


class MessageName:
    """An estimator's name for a block check's error messages (:func:`check_block`'s ``estimator_name``).  Its
    Dask token is the same for every estimator, so that the check's token, part of the key of data kept placed
    between fits, stays the same: one estimator's fit reuses what another's placed."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return MessageName, (self.name,)

    def __dask_tokenize__(self):
        return "estimator-name"


def check_block(arrays, *, y_numeric, multi_output, y_loss=None, accept_sparse=False, negative_weights=True,
                dtype=np.float64, estimator_name=None):
    """Validate one row block of dask input on its worker, as scikit-learn's checks would.

    ``arrays`` maps ``"X"`` and optionally ``"y"`` and ``"sample_weight"`` to
    the block's rows; the checked (and cast) arrays are returned under the
    same names.  ``dtype``: the float dtype X is stored in (float32 for
    float32 input to an estimator that keeps it), the same for every block.

    ``y_loss``: a loss whose domain check (``check_y``) the targets must pass,
    the same check NumPy input gets.  ``accept_sparse``: scipy.sparse blocks
    of X are accepted and made canonical CSR (NaN or infinity in their
    ``.data`` raise scikit-learn's error); otherwise they raise its
    "Sparse data was passed" error.  ``negative_weights``: whether
    ``sample_weight`` may hold negative values, as the scikit-learn estimator
    of the same name takes them.  ``estimator_name``: named in the error for
    NaN in X, as scikit-learn's checks name the estimator.

    Examples
    --------
    >>> import numpy as np
    >>> out = check_block({"X": np.ones((2, 3)), "y": np.array([1, 2])}, y_numeric=True, multi_output=False)
    >>> out["y"].dtype.name
    'float64'
    >>> check_block({"X": np.array([[1.0, np.nan]])}, y_numeric=True, multi_output=False)
    Traceback (most recent call last):
    ...
    ValueError: Input X contains NaN.
    """
    out = dict(arrays)
    out["X"] = _checked_x(arrays["X"], np.dtype(dtype), accept_sparse,
                          None if estimator_name is None else str(estimator_name))
    if "y" in arrays:
        y = np.asarray(arrays["y"])
        if y.ndim == 2 and y.shape[1] == 1 and not multi_output:
            y = y[:, 0]
        if y_numeric:
            y = _numeric(y, "y")
            if y.ndim > 1 and not multi_output:
                raise ValueError(f"y should be a 1d array, got an array of shape {y.shape} instead.")
            if y_loss is not None:
                y_loss.check_y(y)
        else:
            if y.ndim != 1 and not (multi_output and y.ndim == 2):  # 2-D: a label-indicator matrix
                raise ValueError(f"y should be a 1d array, got an array of shape {y.shape} instead.")
            if y.dtype.kind == "f":
                assert_all_finite(y, input_name="y")  # scikit-learn's message
            if y.dtype.kind == "O" and any(v is None or (isinstance(v, float) and v != v) for v in y):
                raise ValueError("Input y contains missing values (None or NaN).")
        out["y"] = y
    if "sample_weight" in arrays:
        sw = _numeric(arrays["sample_weight"], "sample_weight")
        if sw.ndim != 1:
            raise ValueError("Sample weights must be 1D array or scalar")
        if not negative_weights and sw.size and sw.min() < 0:
            from sklearn.utils.validation import check_non_negative

            check_non_negative(sw, "`sample_weight`")  # raises its error
        out["sample_weight"] = sw
    return out


def _checked_x(X, dtype, accept_sparse, estimator_name=None):
    """X as ``check_array(X, dtype=dtype, ensure_min_samples=0)`` returns it; sparse X as canonical CSR."""
    if type(X) is np.ndarray and X.ndim == 2 and X.dtype == dtype and X.shape[1] >= 1:
        assert_all_finite(X, input_name="X", estimator_name=estimator_name)
        return X
    if (accept_sparse and getattr(X, "format", None) == "csr" and X.dtype.kind in "iuf" and len(X.shape) == 2
            and X.shape[1] >= 1):  # a numeric CSR block: its stored values checked and cast here, without scikit-learn
        X = _checked_X(X)
        if X.dtype != dtype:
            X = X.astype(dtype)
        assert_all_finite(X.data, input_name="X", estimator_name=estimator_name)
        return X
    from sklearn.utils.validation import check_array

    return _checked_X(check_array(X, dtype=dtype, ensure_min_samples=0, input_name="X",
                                  accept_sparse="csr" if accept_sparse else False, estimator=estimator_name))


def _checked_X(X):
    """X from ``check_array``: sparse X as canonical CSR (sorted indices, no duplicates); dense X as it is."""
    if hasattr(X, "format"):  # scipy.sparse
        from ..session import canonical_csr  # the session, imported only where a block is sparse

        return canonical_csr(X)
    return X


def _numeric(a, input_name):
    """Targets or weights as ``check_array(a, dtype=np.float64, ensure_2d=False, ensure_min_samples=0)`` returns
    them: NumPy integers or floats of one or two dimensions (none of them empty) cast here, the rest there."""
    if (type(a) is np.ndarray and a.dtype.kind in "iuf" and (a.ndim == 1 or (a.ndim == 2 and a.shape[1] >= 1))):
        a = a.astype(np.float64, copy=False)
        assert_all_finite(a, input_name=input_name)
        return a
    from sklearn.utils.validation import check_array

    return check_array(a, dtype=np.float64, ensure_2d=False, ensure_min_samples=0, input_name=input_name)
