"""The client's reads of a large array in pieces by threads (dask_estimators._pieces): the content digest that
finds kept shards, and the finiteness check.  The pieces are made small here so that small arrays span many."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from dask_estimators import _pieces
from dask_estimators._validation import all_finite, assert_all_finite


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(_pieces, "PIECE_BYTES", 64)


def test_a_copy_has_the_same_digest_and_any_changed_byte_another(small_pieces):
    X = np.random.default_rng(0).normal(size=(50, 7))
    assert len(_pieces.map_pieces(len, _pieces.flat_bytes(X).view(np.uint8))) > 30
    d = _pieces.digest(X)
    assert _pieces.digest(X.copy()) == d
    for i in (0, 8 * 7 * 25 + 3, X.nbytes - 1):  # the first piece, one in the middle, the last
        changed = X.copy()
        changed.view(np.uint8).reshape(-1)[i] ^= 1
        assert _pieces.digest(changed) != d


def test_the_digest_names_dtype_shape_and_order_too():
    X = np.arange(12.0).reshape(3, 4)
    others = [X.reshape(4, 3), X.reshape(-1), X.view(np.int64), X.astype(np.float32)]
    digests = {_pieces.digest(a) for a in [X] + others}
    assert len(digests) == len(others) + 1
    fortran = np.asfortranarray(X)
    assert _pieces.digest(fortran) == _pieces.digest(fortran.copy(order="F")) != _pieces.digest(X)
    assert _pieces.digest(np.empty((0, 4))) != _pieces.digest(np.empty((4, 0)))


def test_the_digest_does_not_depend_on_the_threads(monkeypatch, small_pieces):
    X = np.random.default_rng(1).normal(size=(300, 5))
    many = _pieces.digest(X)
    monkeypatch.setattr(_pieces, "_threads", lambda: 1)
    assert _pieces.digest(X) == many


def test_what_the_digest_cannot_name():
    X = np.arange(20.0).reshape(4, 5)
    assert _pieces.digest(X[:, ::2]) is None
    assert _pieces.digest(np.array([1, "a"], dtype=object)) is None
    assert _pieces.digest([1.0, 2.0]) is None


@settings(max_examples=200, deadline=None)
@given(X=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=40),
                    elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
       fortran=st.booleans())
def test_the_threads_check_says_what_isfinite_says(X, fortran):
    """Including finite values whose sums overflow (then each element is looked at)."""
    pieces = _pieces.PIECE_BYTES
    _pieces.PIECE_BYTES = 64
    try:
        X = np.asfortranarray(X) if fortran else X
        assert all_finite(X, parallel=True) == bool(np.isfinite(X).all()) == all_finite(X)
    finally:
        _pieces.PIECE_BYTES = pieces


@pytest.mark.parametrize("where", [0, 399, 799])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_threads_check_raises_scikit_learns_error_in_any_piece(small_pieces, where, bad):
    X = np.ones((80, 10))
    X.reshape(-1)[where] = bad
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        assert_all_finite(X, parallel=True)
    X.reshape(-1)[[where, where ^ 1]] = np.finfo(np.float64).max  # one piece's sum overflows: looked at again
    with np.errstate(over="ignore"):
        assert not np.isfinite(X.reshape(-1)[where // 8 * 8 : where // 8 * 8 + 8].sum())
    assert_all_finite(X, parallel=True)
