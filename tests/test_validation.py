"""The finiteness check gives scikit-learn's errors, on every layout it takes; the fast classes of y are numpy's."""

import numpy as np
import pytest
from sklearn.utils.validation import _assert_all_finite

from dask_estimators._validation import _INT_SPAN, _SAMPLE, assert_all_finite, classes_and_codes, copy_if_finite

_LARGE = 1 << 20


def _sklearn_message(X):
    with pytest.raises(ValueError) as info:
        _assert_all_finite(X, input_name="X", estimator_name="LogisticRegression")
    return str(info.value)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_large_arrays_raise_sklearns_error(order, dtype, bad, where):
    X = np.ones((_LARGE // 16 + 7, 16), dtype=dtype, order=order)
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
    big = np.ones((_LARGE // 8, 16))[:, ::2]  # not contiguous
    big[7, 1] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        assert_all_finite(big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_finite_values_whose_sum_overflows_pass_and_a_non_finite_one_among_them_does_not(dtype):
    """The check sums X first; a sum that overflows on finite values is no error (the element-wise check then
    decides), and a NaN among huge values is still one."""
    X = np.full((1000, 3), np.finfo(dtype).max / 2, dtype=dtype)
    with np.errstate(over="ignore"):
        assert not np.isfinite(X.sum())
    assert_all_finite(X)
    X[500, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        assert_all_finite(X)


def test_the_first_check_loads_no_numba():
    """The client's checks are NumPy: a fresh process that checks X and encodes y has not imported numba."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from dask_estimators._validation import assert_all_finite, classes_and_codes; "
            "assert_all_finite(np.ones((2000, 600))); classes_and_codes(np.arange(100000) % 7); "
            "classes_and_codes(np.arange(100000) % 7 + 0.5); print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


_rng = np.random.default_rng(0)
_LABELS = {
    "binary int64": _rng.integers(0, 2, 1000),
    "negative and wide int8": _rng.choice(np.array([-128, -3, 0, 127], dtype=np.int8), 1000),
    "uint8": _rng.choice(np.array([0, 7, 255], dtype=np.uint8), 1000),
    "uint64 (no table)": _rng.choice(np.array([1, 2**63 + 5, 2**64 - 1], dtype=np.uint64), 1000),
    "int span above the table": _rng.choice(np.array([-5, _INT_SPAN * 10]), 1000),
    "float with -0.0": _rng.choice(np.array([-0.0, 0.0, 1.5, -2.0]), 1000),
    "float32": _rng.choice(np.array([3.0, 1.0, 2.0], dtype=np.float32), 1000),
    "one class": np.full(10, 4),
    "one element": np.array([9]),
    "64 classes": np.arange(640) % 64,
    "float, many rows": _rng.choice(np.array([0.25, -1.5, 7.0]), 3 * _SAMPLE),
    "int64 wider than the table, many rows": _rng.choice(np.array([-(2**40), 3, 2**50]), 3 * _SAMPLE),
}


@pytest.mark.parametrize("name", list(_LABELS))
def test_classes_and_codes_equal_unique_and_searchsorted(name):
    y = _LABELS[name]
    classes, codes = classes_and_codes(y)
    expected = np.unique(y)
    assert classes.dtype == y.dtype
    np.testing.assert_array_equal(classes, expected)
    np.testing.assert_array_equal(codes, np.searchsorted(expected, y))
    np.testing.assert_array_equal(classes[codes], y)


@pytest.mark.parametrize("y", [
    np.arange(65),  # more classes than the fast path keeps
    np.arange(65.0),
    np.array([0.0, np.nan, 1.0]),  # NaN: numpy's unique decides
    np.array(["a", "b"]),
    np.array([True, False]),
    np.zeros((4, 2)),
    np.array([], dtype=np.int64),
], ids=["65 ints", "65 floats", "NaN", "strings", "bool", "2-D", "empty"])
def test_classes_and_codes_leaves_the_rest_to_unique(y):
    assert classes_and_codes(y) is None


def test_a_label_the_sample_misses_is_left_to_unique():
    """Labels that are not small integers are looked for in a sample first: one the sample misses is not lost,
    the call leaves y to ``np.unique``."""
    y = np.full(10 * _SAMPLE, 2.5)
    y[3] = 7.25  # between the sampled rows
    assert classes_and_codes(y) is None
    y[3] = y[10] = 7.25  # now also where the sample looks
    classes, codes = classes_and_codes(y)
    np.testing.assert_array_equal(classes, [2.5, 7.25])
    np.testing.assert_array_equal(codes, np.searchsorted(classes, y))


@pytest.mark.parametrize("layout", ["C", "F", "pandas", "strided"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_copy_if_finite_copies_and_sees_every_nonfinite_value(layout, dtype, bad):
    # the copy-and-check of dask blocks on the workers; a pandas frame's block is column-major (the 2-D kernel):
    # at numba 0.59 that kernel once summed v * 0.0 under fast-math, which LLVM folded, and NaN passed unseen
    import pandas as pd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 70)).astype(dtype)
    if bad is not None:
        X[123, 64] = bad  # an even column: the strided view holds it too
    src = {"C": X, "F": np.asfortranarray(X), "pandas": pd.DataFrame(X).to_numpy(), "strided": X[:, ::2]}[layout]
    dst = np.empty(src.shape, dtype=dtype)
    assert copy_if_finite(src, dst) is (bad is None)
    np.testing.assert_array_equal(dst, src)


def test_copy_if_finite_of_a_column_major_sum_that_overflows_copies_and_says_not_finite():
    # the caller then asks its own check (the dask block path: tests/engine/test_dask_input.py)
    src = np.asfortranarray(np.full((50, 4), 1e308))
    dst = np.empty(src.shape)
    assert copy_if_finite(src, dst) is False
    np.testing.assert_array_equal(dst, src)
