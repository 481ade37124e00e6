"""The threaded finiteness check gives scikit-learn's errors, on every layout it takes."""

import numpy as np
import pytest
from sklearn.utils.validation import _assert_all_finite

from dask_estimators._validation import _MIN_PARALLEL, assert_all_finite


def _sklearn_message(X):
    with pytest.raises(ValueError) as info:
        _assert_all_finite(X, input_name="X", estimator_name="LogisticRegression")
    return str(info.value)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_large_arrays_raise_sklearns_error(order, dtype, bad, where):
    X = np.ones((_MIN_PARALLEL // 16 + 7, 16), dtype=dtype, order=order)  # above the threaded threshold
    assert X.size >= _MIN_PARALLEL
    assert_all_finite(X)  # all finite: no error
    i = {"first": 0, "middle": X.shape[0] // 2, "last": -1}[where]
    X[i, 5] = bad
    with pytest.raises(ValueError) as info:
        assert_all_finite(X, input_name="X", estimator_name="LogisticRegression")
    assert str(info.value) == _sklearn_message(X)


def test_small_and_strided_arrays_take_sklearns_path():
    X = np.ones((50, 4))
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        assert_all_finite(X)
    big = np.ones((_MIN_PARALLEL // 8, 16))[:, ::2]  # not contiguous
    big[7, 1] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        assert_all_finite(big)
