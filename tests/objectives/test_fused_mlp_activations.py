"""The MLP kernel's vectorised tanh and logistic function against libm's, value by value, in both dtypes."""

import math

import numpy as np
import pytest

from dask_estimators.objectives import _fused_mlp

pytestmark = pytest.mark.skipif(not _fused_mlp.AVAILABLE, reason="numba is not installed")

DTYPES = [np.float64, np.float32]
#: the largest error allowed, in units of rounding of the dtype
ULPS = {np.float64: 4, np.float32: 3}


def _values(dtype):
    rng = np.random.default_rng(0)
    scales = (1e-30, 1e-8, 1e-3, 0.1, 0.5, 1.0, 3.0, 10.0, 30.0, 300.0)
    edges = [0.0, -0.0, 0.55, -0.55, 0.549999, 8.9, 9.1, 19.0, 19.1, -19.1, 20.0, 25.0, 86.0, -86.0, 700.0,
             -700.0, 708.0, -708.0]
    return np.concatenate([rng.standard_normal(20_000) * s for s in scales] + [np.array(edges)]).astype(dtype)


def _apply(fn, x):
    a = x.copy()
    fn(a, *_fused_mlp._ACT_CONSTS[a.dtype])
    return a


def _ulps(got, want, dtype):
    """|got - want| in units of rounding of ``dtype`` at ``want`` (computed in float64, then rounded)."""
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(dtype)).astype(np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_within_a_few_units_of_rounding_of_libm(dtype):
    x = _values(dtype)
    want = np.array([math.tanh(v) for v in x.astype(np.float64)])
    got = _apply(_fused_mlp._tanh_, x)
    assert got.dtype == dtype
    assert _ulps(got, want, dtype).max() <= ULPS[dtype]
    np.testing.assert_array_equal(got[x == 0.0], 0.0)
    assert np.all(np.abs(got) <= 1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logistic_within_a_few_units_of_rounding_of_libm(dtype):
    x = _values(dtype)
    x = x[np.abs(x) <= (80.0 if dtype == np.float32 else 700.0)]
    want = np.array([1.0 / (1.0 + math.exp(-v)) for v in x.astype(np.float64)])
    got = _apply(_fused_mlp._sigmoid_, x)
    assert got.dtype == dtype
    assert _ulps(got, want, dtype).max() <= ULPS[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_tails_saturate_and_nan_stays_nan(dtype):
    x = np.array([np.inf, -np.inf, 1e6, -1e6, 800.0, -800.0, np.nan], dtype=dtype)
    t = _apply(_fused_mlp._tanh_, x)
    np.testing.assert_array_equal(t[:6], [1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    s = _apply(_fused_mlp._sigmoid_, x)
    np.testing.assert_array_equal(s[[0, 2, 4]], 1.0)
    tiny = np.finfo(dtype).tiny * 4  # far out on the left the value is exp(-clip), for a smaller number
    assert np.all((s[[1, 3, 5]] >= 0.0) & (s[[1, 3, 5]] < tiny))
    assert math.isnan(t[-1]) and math.isnan(s[-1])
