"""Fixtures of the engine tests."""

import numpy as np
import pytest

from dask_estimators.engine import place


@pytest.fixture
def two_ranks(client):
    """A placement of one shard on each of the session cluster's two worker processes: two ranks."""
    with place(client, {"X": np.zeros((4, 1))}) as p:
        assert len(p.shards) == 2
        yield p
