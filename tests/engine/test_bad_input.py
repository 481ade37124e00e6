"""Bad dask input caught while it is placed, before any optimizer step; no silent NaN model (issue 8).

Extends tests/estimators/test_integration.py (NaN/inf in X of one chunk,
lengths, negative weights) and tests/engine/test_placement.py (empty
partitions, per-partition length mismatch) with: non-finite values in y and in
sample_weight of one chunk, the proof that no distributed round ran, labels
present only in some partitions, and non-finite objectives during the
optimization.  On the session cluster of tests/conftest.py.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

import dask_estimators as de

pytestmark = pytest.mark.timeout(120)

CHUNKS = (40, 25, 60, 35, 40)  # 5 uneven row blocks
N, D = sum(CHUNKS), 4


def _data(kind, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    if kind == "binary":
        y = (X @ rng.normal(size=D) > 0).astype(np.int64)
    else:
        y = X @ rng.normal(size=D) + 0.1 * rng.normal(size=N)
    return X, y, np.ones(N)


@pytest.fixture
def no_optimizer_step(monkeypatch):
    """Fail if the fit gets as far as building the evaluator (the first distributed round)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("an optimizer round was started before the bad input was detected")

    from dask_estimators.session import PlacedData

    monkeypatch.setattr(PlacedData, "evaluator", forbidden)


@pytest.mark.parametrize(
    "Est,kind,where,value,match",
    [
        (de.LinearRegression, "regression", "X", np.nan, "NaN"),
        (de.LinearRegression, "regression", "X", -np.inf, "infinity"),
        (de.LinearRegression, "regression", "y", np.nan, "NaN"),
        (de.LinearRegression, "regression", "y", np.inf, "infinity"),
        (de.LinearSVR, "regression", "sample_weight", np.nan, "NaN"),
        (de.LogisticRegression, "binary", "X", np.inf, "infinity"),
        (de.LogisticRegression, "binary", "sample_weight", np.inf, "infinity"),
        (de.LinearRegression, "regression", "sample_weight", -1.0, "Negative values"),
    ],
)
def test_bad_value_in_one_dask_chunk_raises_before_any_round(no_optimizer_step, Est, kind, where, value, match):
    X, y, sw = _data(kind)
    arrays = {"X": X, "y": y.astype(np.float64) if where == "y" else y, "sample_weight": sw}
    row = sum(CHUNKS[:3]) + 7  # in the 4th chunk only
    arrays[where][row, ...] = value
    dX = da.from_array(arrays["X"], chunks=(CHUNKS, D))
    dy = da.from_array(arrays["y"], chunks=(CHUNKS,))
    dsw = da.from_array(arrays["sample_weight"], chunks=(CHUNKS,))
    with pytest.raises(ValueError, match=match):
        Est().fit(dX, dy, sample_weight=dsw)


def test_labels_present_only_in_some_partitions():
    """Sorted labels: each partition holds one or two of the four classes, the model is the NumPy one."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, D))
    y = np.argmax(X @ rng.normal(size=(D, 4)) + 0.3 * rng.normal(size=(N, 4)), axis=1)
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    labels = np.array(["ant", "bee", "cat", "dog"])[y]
    dX, dy = da.from_array(X, chunks=(CHUNKS, D)), da.from_array(labels, chunks=(CHUNKS,))
    per_chunk = [set(b) for b in (labels[s:e] for s, e in zip(np.cumsum((0,) + CHUNKS[:-1]), np.cumsum(CHUNKS)))]
    assert all(len(c) < 4 for c in per_chunk)
    kw = dict(tol=1e-10, max_iter=1000)
    est = de.LogisticRegression(**kw).fit(dX, dy)
    ref = de.LogisticRegression(**kw).fit(X, labels)
    np.testing.assert_array_equal(est.classes_, ["ant", "bee", "cat", "dog"])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    svc = de.LinearSVC(**kw).fit(dX, dy)
    np.testing.assert_allclose(svc.coef_, de.LinearSVC(**kw).fit(X, labels).coef_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "Est,solver",
    [
        (de.LinearRegression, "lbfgs"),
        (de.LinearRegression, "newton-cholesky"),
        (de.LogisticRegression, "lbfgs"),
    ],
)
def test_non_finite_objective_is_an_error_or_warning_never_a_nan_model(Est, solver):
    """Values near the float64 limit overflow the loss: a clear error, or a warning with a finite model."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) * 1e160
    y = rng.normal(size=200) * 1e160
    if Est is de.LogisticRegression:
        y = (y > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            est = Est(solver=solver).fit(X, y)
        except (FloatingPointError, ValueError) as e:
            assert "finite" in str(e) or "NaN" in str(e) or "infinity" in str(e), e
            return
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    assert any("Convergence" in w.category.__name__ for w in caught), [str(w.message) for w in caught]
