"""A test helper: what the engine left on the workers after a fit (shared by test_faults and the bad-input
battery; tests/ is on ``sys.path`` under pytest)."""

from __future__ import annotations

import time


def _held(dask_worker):
    """What the engine left on a worker: actors (a worker's long-lived ShardHost counts by the shards' actors
    it holds), shard results, and the shards the worker holds for them (dask_estimators.engine.data._held)."""
    from dask_estimators.engine.data._actor import ShardHost
    from dask_estimators.engine.data._held import held_keys

    keys = [str(k) for k in dask_worker.data]
    actors = dask_worker.state.actors
    return {
        "actors": [str(k) for k, a in actors.items() if not isinstance(a, ShardHost)]
        + [t for a in actors.values() if isinstance(a, ShardHost) for t in a.held],
        "shards": [k for k in keys if "build_shard" in k or k.startswith("_pack")]
        + [f"held {k}" for k in held_keys(dask_worker)],
    }


def _nothing_held(client, timeout=30, collect=True):
    """True once the workers hold no shard and no actor of ours, after the placements kept for later fits are
    released (dask-estimators.keep-placed); else what they hold after ``timeout`` seconds.  ``collect=False``
    checks that a release let go of every key without the help of Python's cyclic garbage collector."""
    import gc

    from dask_estimators.session import release_kept

    release_kept()
    if collect:  # objects that refer to released actor proxies may sit in reference cycles (evaluators, views)
        gc.collect()
    deadline = time.monotonic() + timeout
    while True:
        # a worker the scheduler removes while it asks (a killed one, its restart) answers with an error, and
        # holds nothing of ours
        held = {w: v for w, v in client.run(_held, on_error="return").items() if isinstance(v, dict)}
        if not any(v["actors"] or v["shards"] for v in held.values()):
            return True
        if time.monotonic() > deadline:
            return held
        time.sleep(0.1)
