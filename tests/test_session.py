"""The DataSession, the estimators' one way into the engine: its placed data, the ways a problem runs on it, and
the release of every shard when it closes, also after an error."""

from __future__ import annotations

import numpy as np
import pytest
from leftovers import _nothing_held

from dask_estimators.objectives import LinearObjective, LinearSpec
from dask_estimators.objectives import targets as T
from dask_estimators.session import DataSession, PlacedData


def _least_squares(data, d, **kwargs):
    sums = [sum(v) for v in zip(*data.map(T.prepare_and_weigh, "squared", 1, None, False))]
    objective = LinearObjective(data.evaluator(), LinearSpec("squared", d, 1, True), weight_sums=sums[:2])
    objective.l2, objective.l1 = 0.0, 0.0
    return data.minimize(objective, np.zeros(d + 1), solver="lbfgs", tol=1e-10, max_iter=500, **kwargs)


def _data(rng, n=300, d=4):
    X = rng.normal(size=(n, d))
    y = X @ np.arange(1.0, d + 1) + 0.5 + 0.01 * rng.normal(size=n)
    return X, y


def test_data_is_placed_one_shard_per_worker_and_released_on_close(client, rng):
    X, y = _data(rng)
    with DataSession(client) as session:
        first = session.data(X=X, y=y, sample_weight=None)
        second = session.data(X=X[:10], y=y[:10])
        assert isinstance(first, PlacedData)
        assert first.n_samples == len(X) and sum(first.n_rows) == len(X) and first.n_shards == len(client.ncores())
        assert sorted(first.workers) == sorted(client.ncores())
        assert first.map(lambda shard: shard.get("X").shape[1]) == [X.shape[1]] * first.n_shards
        assert second.n_samples == 10
        assert _nothing_held(client, timeout=0) is not True  # both are held while the session is open
    assert _nothing_held(client) is True


def test_an_error_in_the_block_releases_the_data_and_propagates(client, rng):
    X, y = _data(rng)
    with pytest.raises(ZeroDivisionError):
        with DataSession(client) as session:
            session.data(X=X, y=y)
            1 / 0
    assert _nothing_held(client) is True


def test_a_closed_session_places_nothing(client, rng):
    X, y = _data(rng)
    session = DataSession(client)
    with pytest.raises(RuntimeError, match="not open"):
        session.data(X=X, y=y)
    with session:
        session.data(X=X, y=y)
    with pytest.raises(RuntimeError, match="not open"):
        session.data(X=X, y=y)


def test_a_problem_solved_on_the_one_worker_equals_the_rounds(client, rng):
    """The session chooses how a problem runs: given its outputs, a small one is placed on one worker and its
    solver runs there in one task; without them, or above the size, or with a ``timeout`` (which bounds each
    round), in rounds from the client.  Both reach the least-squares solution."""
    import dask

    X, y = _data(rng)
    with DataSession(client) as session:
        spread = session.data(X=X, y=y)  # no outputs: the caller needs the rounds
        assert not spread.on_worker and spread.n_shards == len(client.ncores())
        res_rounds, on_worker_stats = _least_squares(spread, X.shape[1])
        assert on_worker_stats is None
        with dask.config.set({"dask-estimators.worker-solve-below": X.size}):  # not under the size
            assert not session.data(X=X, y=y, outputs=1).on_worker
        one = session.data(X=X, y=y, outputs=1)
        assert one.on_worker and one.n_shards == 1
        res_one, stats = _least_squares(one, X.shape[1])
        assert stats["rounds"] >= res_one.nit
        # a per-iteration callback needs the client: the same data then runs in rounds
        seen = []
        res_cb, stats_cb = _least_squares(one, X.shape[1], callback=seen.append)
        assert stats_cb is None and seen
        np.testing.assert_allclose(res_cb.x, res_one.x, rtol=1e-8, atol=1e-10)
        with pytest.raises(ValueError, match="one shard"):
            spread.run_on_worker(None, None)
    with DataSession(client, timeout=60) as session:
        assert not session.data(X=X, y=y, outputs=1).on_worker
    want = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
    np.testing.assert_allclose(res_rounds.x, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(res_one.x, want, rtol=1e-6, atol=1e-8)
