"""The MLP kernel's vectorised tanh and logistic function against libm's, value by value."""

import math

import numpy as np
import pytest

from dask_estimators.objectives import _fused_mlp

pytestmark = pytest.mark.skipif(not _fused_mlp.AVAILABLE, reason="numba is not installed")


def _values():
    rng = np.random.default_rng(0)
    scales = (1e-300, 1e-8, 1e-3, 0.1, 0.5, 1.0, 3.0, 10.0, 30.0, 300.0)
    edges = [0.0, -0.0, 0.55, -0.55, 0.549999, 19.0, 19.1, -19.1, 20.0, 25.0, 700.0, -700.0, 708.0, -708.0]
    return np.concatenate([rng.standard_normal(20_000) * s for s in scales] + [np.array(edges)])


def _apply(fn, x):
    a = x.copy()
    er, tk = np.empty_like(a), np.empty_like(a)
    fn(a, er, tk, tk.view(np.int64))
    return a


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want))


def test_tanh_within_a_few_units_of_rounding_of_libm():
    x = _values()
    want = np.array([math.tanh(v) for v in x])
    got = _apply(_fused_mlp._tanh_, x)
    assert _ulps(got, want).max() <= 8
    np.testing.assert_array_equal(got[x == 0.0], 0.0)
    assert np.all(np.abs(got) <= 1.0)


def test_logistic_within_a_few_units_of_rounding_of_libm():
    x = _values()
    x = x[np.abs(x) <= 700.0]
    want = np.array([1.0 / (1.0 + math.exp(-v)) for v in x])
    got = _apply(_fused_mlp._sigmoid_, x)
    assert _ulps(got, want).max() <= 8


def test_the_tails_saturate_and_nan_stays_nan():
    x = np.array([np.inf, -np.inf, 1e6, -1e6, 800.0, -800.0, np.nan])
    t = _apply(_fused_mlp._tanh_, x)
    np.testing.assert_array_equal(t[:6], [1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    s = _apply(_fused_mlp._sigmoid_, x)
    np.testing.assert_array_equal(s[[0, 2, 4]], 1.0)
    assert np.all((s[[1, 3, 5]] >= 0.0) & (s[[1, 3, 5]] < 1e-307))  # below -708: 3.3e-308 for 0
    assert math.isnan(t[-1]) and math.isnan(s[-1])
