"""Reduction: tree-sum, gather and single equal np.sum; the evaluator sums exactly on 1-4 workers.

Runs on the session's 2-worker cluster and on a module-scoped 4-worker
process cluster (used through an explicit ``client=``), with placements on
1, 2, 3 and 4 workers.
"""

import importlib

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream

from dask_estimators.engine import REDUCTIONS, DistributedEvaluator, place
from dask_estimators.engine.data import _worker
from dask_estimators.engine.rounds.reduce import reduce_parts, tree_sum

PART_COUNTS = [1, 2, 3, 5, 8]
FAN_INS = [2, 3, 4]
TRANSPORTS = ["actors", "tasks"]


@pytest.fixture(scope="module", autouse=True)
def _warm_workers(client):
    """Import the engine on every worker at once (it pulls in torch and scikit-learn)."""
    client.run(importlib.import_module, "dask_estimators.engine.data._worker")


# ----------------------------------------------------------------- worker functions
def _loss_grad(shard, w):
    """Raw sums of a weighted squared error: (loss, gradient, weight, rows)."""
    X, y, s = shard.get("X"), shard.get("y"), shard.get("sample_weight")
    r = X @ w - y
    return 0.5 * (s * r * r).sum(), X.T @ (s * r), s.sum(), shard.n_rows


def _float32_colsum(shard):
    return shard.get("X").float().sum(0)


def _remember(shard, w):
    shard.cache["w"] = w * 1.0
    return 0.0


def _recall(shard):
    return shard.cache["w"] * shard.n_rows


def _fail_on_small_shards(shard):
    if shard.n_rows < 10**9:
        raise ZeroDivisionError("kernel failed on purpose")
    return 0.0


def _count_rows(shard):
    return shard.n_rows


# ------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def client4():
    """A second cluster: 4 worker processes, 1 thread each; not the default client."""
    with LocalCluster(
        n_workers=4, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            c.wait_for_workers(4, timeout=120)
            c.run(importlib.import_module, "dask_estimators.engine.data._worker")  # warm all four at once
            yield c


def _workers(c):
    return sorted(c.ncores())  # asked now: the cached scheduler_info can predate a worker restart


@pytest.fixture(params=["2-workers", "4-workers"])
def any_client(request, client):
    return client if request.param == "2-workers" else request.getfixturevalue("client4")


def _parts(c, values):
    """Scatter each value to a worker, round robin; return (futures, their workers)."""
    ws = _workers(c)
    workers = [ws[i % len(ws)] for i in range(len(values))]
    futs = [c.scatter([v], workers=[w], hash=False)[0] for v, w in zip(values, workers)]
    return futs, workers


def _values(rng, n, payload):
    if payload == "array":
        return [rng.standard_normal(7) for _ in range(n)]
    return [(float(rng.standard_normal()), rng.standard_normal(5)) for _ in range(n)]


def _assert_sum(got, values, payload):
    if payload == "array":
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, np.sum(values, axis=0), rtol=1e-12, atol=1e-12)
    else:
        assert isinstance(got, tuple) and len(got) == 2
        assert got[0] == pytest.approx(np.sum([v[0] for v in values]), rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(got[1], np.sum([v[1] for v in values], axis=0), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------ tree_sum
@pytest.mark.parametrize("payload", ["array", "tuple"])
@pytest.mark.parametrize("fan_in", FAN_INS)
@pytest.mark.parametrize("n_parts", PART_COUNTS)
def test_tree_sum_equals_np_sum(client, rng, n_parts, fan_in, payload):
    values = _values(rng, n_parts, payload)
    futs, workers = _parts(client, values)
    with get_task_stream(client=client) as ts:
        total = tree_sum(client, futs, workers, fan_in=fan_in)
        got = total.result()
    _assert_sum(got, values, payload)
    _assert_parts_unchanged(client, futs, values, payload)
    # a tree whose every add takes 2..fan_in operands: between ceil((n-1)/(f-1)) and n-1 adds
    adds = [t for t in ts.data if str(t["key"]).startswith("add")]
    assert -(-(n_parts - 1) // (fan_in - 1)) <= len(adds) <= n_parts - 1
    # the adds whose first operand is a sum of the tree's own add into it; the others make a new sum
    assert sum(str(t["key"]).startswith("add_into") for t in adds) == _adds_into(n_parts, fan_in)
    assert {t["worker"] for t in adds} <= set(workers)
    if n_parts > 1:  # the total stays on a worker that held an operand; only the client's result() fetches it
        assert set(client.who_has([total])[total.key]) <= set(workers)


@pytest.mark.parametrize("fan_in", FAN_INS)
@pytest.mark.parametrize("n_parts", PART_COUNTS)
def test_tree_sum_on_four_workers(client4, rng, n_parts, fan_in):
    values = _values(rng, n_parts, "array")
    futs, workers = _parts(client4, values)
    _assert_sum(tree_sum(client4, futs, workers, fan_in=fan_in).result(), values, "array")
    _assert_parts_unchanged(client4, futs, values, "array")


def _adds_into(n, fan_in):
    """How many of a tree's adds have as first operand a sum the tree made (the leftover of a level moves up)."""
    level, count = [False] * n, 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), fan_in):
            group = level[i : i + fan_in]
            count += len(group) > 1 and group[0]
            nxt.append(group[0] if len(group) == 1 else True)
        level = nxt
    return count


def _assert_parts_unchanged(client, futs, values, payload):
    """The parts on the workers are the values they were made from: no add wrote into them."""
    for got, v in zip(client.gather(futs), values):
        if payload == "array":
            np.testing.assert_array_equal(got, v)
        else:
            assert got[0] == v[0]
            np.testing.assert_array_equal(got[1], v[1])


def test_add_leaves_its_parts_and_add_into_writes_into_the_first():
    a, b, c = np.arange(3.0), np.full(3, 10.0), np.full(3, 100.0)
    total = _worker.add(a, b, c)
    np.testing.assert_array_equal(total, [110.0, 111.0, 112.0])
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])  # no operand written
    assert total is not a and total is not b and total is not c
    first = a.copy()
    out = _worker.add_into((1.0, first), (2.0, b), (3.0, c))
    assert out[0] == 6.0 and out[1] is first  # the array in place, the float added
    np.testing.assert_array_equal(first, [110.0, 111.0, 112.0])
    np.testing.assert_array_equal(b, [10.0, 10.0, 10.0])
    # a first operand that cannot hold the sum (int + float, a read-only array) gets a new array instead
    ints = np.arange(3)
    out = _worker.add_into(ints, np.full(3, 0.5))
    np.testing.assert_array_equal(ints, [0, 1, 2])
    np.testing.assert_array_equal(out, [0.5, 1.5, 2.5])
    ro = np.zeros(3)
    ro.flags.writeable = False
    np.testing.assert_array_equal(_worker.add_into(ro, b), b)
    np.testing.assert_array_equal(ro, 0.0)


@pytest.mark.parametrize("method", REDUCTIONS)
@pytest.mark.parametrize("n_parts", PART_COUNTS)
def test_reduce_parts_strategies_equal_np_sum(any_client, rng, method, n_parts):
    for payload in ["array", "tuple"]:
        values = _values(rng, n_parts, payload)
        futs, workers = _parts(any_client, values)
        got = reduce_parts(any_client, futs, workers, method=method, fan_in=3)
        _assert_sum(got, values, payload)


def test_reduce_rejects_bad_arguments(client, rng):
    futs, workers = _parts(client, _values(rng, 3, "array"))
    with pytest.raises(ValueError, match="fan_in"):
        tree_sum(client, futs, workers, fan_in=1)
    with pytest.raises(ValueError, match="reduction must be one of"):
        reduce_parts(client, futs, workers, method="allreduce")
    assert set(REDUCTIONS) == {"tree", "gather", "single"}


# ------------------------------------------------------------------- the evaluator
N, P = 97, 3
SETUPS = {  # name -> (cluster, number of workers to place on or None for all, expected shards)
    "2w": ("client", None, 2),
    "4w": ("client4", None, 4),
    "4w-on-1": ("client4", 1, 1),
    "4w-on-3": ("client4", 3, 3),
}


def _data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, P)), rng.standard_normal(N), rng.uniform(0.5, 2.0, N)


def _expected_loss_grad(X, y, sw, w):
    r = X @ w - y
    return 0.5 * float((sw * r * r).sum()), X.T @ (sw * r), float(sw.sum()), len(y)


def _assert_loss_grad(got, want):
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    assert got[2] == pytest.approx(want[2], rel=1e-12)
    assert got[3] == want[3]


@pytest.fixture(scope="module", params=[(s, t) for s in SETUPS for t in TRANSPORTS], ids=lambda p: f"{p[0]}-{p[1]}")
def placed(request):
    setup, transport = request.param
    cname, n_workers, n_shards = SETUPS[setup]
    c = request.getfixturevalue(cname)
    X, y, sw = _data()
    workers = None if n_workers is None else _workers(c)[:n_workers]
    p = place(c, {"X": X, "y": y, "sample_weight": sw}, workers=workers, transport=transport)
    assert p.client is c
    assert len(p.shards) == n_shards and len(set(p.workers)) == n_shards
    assert set(p.workers) <= set(_workers(c))
    yield p, (X, y, sw)
    p.release()


@pytest.mark.parametrize("fan_in", [2, 3])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_evaluator_sum_equals_whole_data(placed, reduction, fan_in):
    p, (X, y, sw) = placed
    ev = DistributedEvaluator(p, reduction=reduction, fan_in=fan_in)
    w1, w2 = np.array([0.5, -1.0, 2.0]), np.array([-0.25, 0.0, 1.0])
    # two rounds with different parameters: per-round tasks must not be deduplicated
    _assert_loss_grad(ev(_loss_grad, w1), _expected_loss_grad(X, y, sw, w1))
    _assert_loss_grad(ev(_loss_grad, w2), _expected_loss_grad(X, y, sw, w2))
    assert ev(_count_rows) == N
    assert ev.stats.rounds == 3
    assert ev.stats.by_kernel == {"_loss_grad": 2, "_count_rows": 1}
    assert ev.stats.bytes_sent == 2 * w1.nbytes


def test_evaluator_results_are_float64(placed):
    p, (X, _, _) = placed
    got = DistributedEvaluator(p)(_float32_colsum)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, X.sum(0), rtol=1e-5)


def test_evaluator_state_stays_on_the_workers(placed):
    """The hessp contract: state left in shard.cache by one round is there for the next."""
    p, _ = placed
    ev = DistributedEvaluator(p)
    w = np.array([1.0, 2.0, 3.0])
    assert ev(_remember, w) == 0.0
    np.testing.assert_allclose(ev(_recall), N * w)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_evaluator_scatters_large_arguments(client, transport):
    X, y, sw = _data()
    with place(client, {"X": X, "y": y, "sample_weight": sw}, transport=transport) as p:
        ev = DistributedEvaluator(p, inline_bytes=0)
        w = np.array([1.0, -2.0, 0.5])
        _assert_loss_grad(ev(_loss_grad, w), _expected_loss_grad(X, y, sw, w))
        _assert_loss_grad(ev(_loss_grad, 2 * w), _expected_loss_grad(X, y, sw, 2 * w))
        assert ev.stats.scattered_rounds == (2 if transport == "tasks" else 0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_evaluator_kernel_error_propagates_and_evaluator_recovers(client, transport, reduction):
    X, y, sw = _data()
    with place(client, {"X": X, "y": y, "sample_weight": sw}, transport=transport) as p:
        ev = DistributedEvaluator(p, reduction=reduction)
        with pytest.raises(ZeroDivisionError, match="on purpose"):
            ev(_fail_on_small_shards)
        assert ev(_count_rows) == N


def test_evaluator_rejects_unknown_reduction(client):
    X, y, sw = _data()
    with place(client, {"X": X, "y": y}, transport="tasks") as p:
        with pytest.raises(ValueError, match="reduction must be one of"):
            DistributedEvaluator(p, reduction="allreduce")


@pytest.mark.parametrize(
    "transport",
    ["actors", "tasks"],
)
@pytest.mark.parametrize("fan_in", [0, 1])
def test_evaluator_rejects_fan_in_below_two(client, transport, fan_in):
    X, y, sw = _data()
    with place(client, {"X": X, "y": y, "sample_weight": sw}, transport=transport) as p:
        assert len(p.shards) == 2
        with pytest.raises(ValueError, match="fan_in"):
            ev = DistributedEvaluator(p, fan_in=fan_in)
            ev(_count_rows)


def test_actor_proxies_use_the_placement_client(client, client4):
    X, y, sw = _data()
    with place(client4, {"X": X, "y": y, "sample_weight": sw}, transport="actors") as p:
        assert DistributedEvaluator(p)(_count_rows) == N
        assert all(a._client is client4 for a in p.actors)
