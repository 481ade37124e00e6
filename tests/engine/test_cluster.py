"""Which cluster a fit uses: client=, an address, the active client, a Dask task, the embedded cluster."""

import contextlib
import importlib
import json
import operator
import os
import subprocess
import sys
import textwrap
import time

import dask
import dask.array as da
import distributed
import numpy as np
import psutil
import pytest
from distributed import Client

from dask_estimators.engine import DistributedEvaluator, client_context, place, resolve_client


@pytest.fixture(scope="module", autouse=True)
def _warm_workers(client):
    """Import the engine on every worker at once (it pulls in torch and scikit-learn)."""
    client.run(importlib.import_module, "dask_estimators.engine.data._worker")


# ----------------------------------------------------------------- worker functions
def _xty(shard):
    return shard.get("X").T @ shard.get("y"), shard.n_rows


def _fit_in_task(X, y, transport):
    """A whole 'fit' run inside a Dask task: resolve the client, place, evaluate, release."""
    with client_context() as c:
        worker_client = c is distributed.get_client()
        with place(c, {"X": X, "y": y}, transport=transport) as p:
            out = DistributedEvaluator(p)(_xty)
            n_shards = len(p.shards)
    return out, n_shards, worker_client, c.scheduler.address


# ------------------------------------------------------------------ resolve_client
def test_given_client_is_returned(client):
    assert resolve_client(client) is client


def test_active_default_client_is_used(client):
    assert resolve_client() is client
    assert resolve_client(None) is client
    with client_context() as c:
        assert c is client


def test_client_context_with_given_client_outside_a_task(client):
    with client_context(client) as c:
        assert c is client
        assert c.submit(operator.add, 1, 2, pure=False).result(timeout=60) == 3


def test_client_sends_promptly_during_fits_and_restores_after(client):
    """A fit's messages to the scheduler leave within dask-estimators.send-interval; the client's own batching
    interval comes back when the last of the fits running on it at once ends."""
    import threading

    from dask_estimators.engine.cluster import client as ec

    comm = client.scheduler_comm
    own = comm.interval
    assert own > 0.001  # distributed's 10 ms
    inside = []
    first_in, second_out = threading.Event(), threading.Event()

    def first():
        with client_context(client) as c:
            inside.append(c.scheduler_comm.interval)
            assert c.submit(operator.add, 1, 2, pure=False).result(timeout=60) == 3
            first_in.set()
            assert second_out.wait(60)
            inside.append(c.scheduler_comm.interval)  # the other fit ended: still this one's

    t = threading.Thread(target=first)
    t.start()
    assert first_in.wait(60)
    with client_context(client):
        inside.append(comm.interval)
    second_out.set()
    t.join(60)
    assert inside == [0.001, 0.001, 0.001]
    assert comm.interval == own and not ec._PROMPT


def test_send_interval_setting(client):
    own = client.scheduler_comm.interval
    with dask.config.set({"dask-estimators.send-interval": "3ms"}), client_context(client) as c:
        assert c.scheduler_comm.interval == pytest.approx(0.003)
    with dask.config.set({"dask-estimators.send-interval": None}), client_context(client) as c:
        assert c.scheduler_comm.interval == own  # off: the client's own
    with dask.config.set({"dask-estimators.send-interval": "1s"}), client_context(client) as c:
        assert c.scheduler_comm.interval == own  # never longer than the client's own
    assert client.scheduler_comm.interval == own


def test_warm_ahead_asks_each_worker_once(cluster):
    """Each worker is asked once per client; a worker that is not there and a closed client are left to their
    first task, without an error."""
    from dask_estimators.engine.cluster import client as ec

    with Client(cluster.scheduler_address, set_as_default=False) as c:
        ws = sorted(c.nthreads())
        ec.warm_ahead(c, ws[:1], using=ws[1:])
        assert ec._WARMED[c.id, False] == set(ws)
        ec.warm_ahead(c, ws)  # known: nothing sent
        ec.warm_ahead(c, ["tcp://127.0.0.1:9"])  # no such worker
    ec.warm_ahead(c, ["tcp://127.0.0.1:10"])  # a closed client
    assert ec._WARMED.pop((c.id, False)) == {*ws, "tcp://127.0.0.1:9", "tcp://127.0.0.1:10"}


def test_warm_ahead_looks_the_workers_up_off_the_callers_path(cluster):
    """``workers=None``: the scheduler's workers are looked up on the client's event loop (the caller returns
    at once), and every one but ``using`` is asked; asked again, none is."""
    from dask_estimators.engine.cluster import client as ec

    with Client(cluster.scheduler_address, set_as_default=False) as c:
        ws = sorted(c.nthreads())
        sent = []
        real_run = c.run
        c.run = lambda *a, **kw: sent.append(kw["workers"]) or real_run(*a, **kw)
        ec.warm_ahead(c, using=ws[:1], networks=True)
        deadline = time.monotonic() + 10
        while ec._WARMED.get((c.id, True)) != set(ws) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ec._WARMED[c.id, True] == set(ws)
        ec.warm_ahead(c, networks=True)
        time.sleep(0.2)
        assert sent == [ws[1:]]
    ec._WARMED.pop((c.id, True))


def test_an_estimator_fit_sends_promptly(client, monkeypatch):
    from dask_estimators import LogisticRegression
    from dask_estimators.engine.data import placement as P

    seen = []
    init = P.Placement.__init__

    def spy(self, c, *args, **kwargs):
        seen.append(c.scheduler_comm.interval)
        init(self, c, *args, **kwargs)

    monkeypatch.setattr(P.Placement, "__init__", spy)
    own = client.scheduler_comm.interval
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3))
    y = (X[:, 0] + rng.standard_normal(60) > 0).astype(int)
    LogisticRegression(client=client).fit(X, y)
    assert seen == [0.001]
    assert client.scheduler_comm.interval == own


def test_scheduler_address_gives_a_working_client(client, cluster):
    addr = cluster.scheduler_address
    c = resolve_client(addr)
    try:
        assert isinstance(c, Client) and c is not client
        assert c.status == "running"
        assert c.scheduler.address == addr
        assert set(c.nthreads()) == set(client.nthreads())
        assert c.submit(operator.mul, 6, 7, pure=False).result(timeout=60) == 42
        assert resolve_client(addr) is c  # one client per address, reused
        # opening it changed neither the default client nor what resolve_client() returns
        assert distributed.get_client() is client
        assert resolve_client() is client
        X, y = np.arange(12.0).reshape(6, 2), np.ones(6)
        with place(c, {"X": X, "y": y}) as p:
            assert p.client is c
            xty, n = DistributedEvaluator(p)(_xty)
        np.testing.assert_allclose(xty, X.T @ y)
        assert n == 6
    finally:
        c.close()
    c2 = resolve_client(addr)  # a closed address client is replaced by a new one
    try:
        assert c2 is not c and c2.status == "running"
    finally:
        c2.close()


def test_closed_client_raises_clear_error(cluster):
    c = Client(cluster.scheduler_address, set_as_default=False)
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        resolve_client(c)


@pytest.mark.parametrize("bad", [42, 3.5, ["tcp://127.0.0.1:8786"], "cluster"])
def test_wrong_type_raises_type_error(cluster, bad):
    bad = cluster if bad == "cluster" else bad
    with pytest.raises(TypeError, match="client must be"):
        resolve_client(bad)


# ------------------------------------------------------------- a fit inside a task
def _context_inside_task():
    """In a task: which client client_context gives, and has the thread left the worker's pool?"""
    import distributed.threadpoolexecutor as tpe

    from dask_estimators.engine.cluster.client import _in_task

    with client_context() as c:
        worker_client = c is distributed.get_client()
        seceded = getattr(tpe.thread_state, "proceed", True) is False
    return {
        "worker_client": worker_client,
        "resolve": resolve_client() is distributed.get_client(),
        "address": c.scheduler.address,
        "in_task": _in_task(),
        "seceded": seceded,
        "rejoined": getattr(tpe.thread_state, "proceed", True) is True,
    }


def test_resolve_client_inside_a_task_is_the_worker_client(client):
    out = client.submit(_context_inside_task, pure=False).result(timeout=120)
    assert out["worker_client"] and out["resolve"]
    assert out["address"] == client.scheduler.address
    assert out["rejoined"]


def _require_secession(client):
    """Fail fast (instead of deadlocking the session's workers) when client_context does not secede."""
    out = client.submit(_context_inside_task, pure=False).result(timeout=120)
    if not (out["in_task"] and out["seceded"]):
        pytest.fail(f"client_context() did not secede inside a task: {out}")


def test_client_context_secedes_inside_a_task(client):
    out = client.submit(_context_inside_task, pure=False).result(timeout=120)
    assert out["in_task"]
    assert out["seceded"]
    assert out["rejoined"]


@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_fit_inside_tasks_on_every_worker_does_not_deadlock(client, transport):
    """Both 1-thread workers run a fit task at once; each fit needs both workers, so it must secede."""
    _require_secession(client)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((80, 3)), rng.standard_normal(80)
    ws = sorted(client.nthreads())
    assert set(client.nthreads().values()) == {1}
    futs = [
        client.submit(_fit_in_task, X, y, transport, workers=[w], allow_other_workers=False, pure=False)
        for w in ws
    ]
    for f in futs:
        (xty, n), n_shards, worker_client, address = f.result(timeout=300)
        np.testing.assert_allclose(xty, X.T @ y, rtol=1e-12)
        assert n == 80 and n_shards == 2
        assert worker_client  # inside a task the worker's client is the active one
        assert address == client.scheduler.address


def _dask_fit_in_task(transport):
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((90, 3)), rng.standard_normal(90)
    dX, dy = da.from_array(X, chunks=(13, 3)), da.from_array(y, chunks=13)
    (xty, n), n_shards, _, _ = _fit_in_task(dX, dy, transport)
    return bool(np.allclose(xty, X.T @ y)), n, n_shards


def test_fit_inside_a_task_with_dask_input(client):
    _require_secession(client)
    ok, n, n_shards = client.submit(_dask_fit_in_task, "tasks", pure=False).result(timeout=300)
    assert ok and n == 90 and 1 <= n_shards <= 2


# --------------------------------------------------------- the embedded cluster
EMBEDDED_SCRIPT = textwrap.dedent(
    """
    import atexit, json, os
    state = {}

    def _report_at_exit():
        # registered before dask_estimators is imported, so it runs after its close handler
        report = {k: str(v.status) for k, v in state.items()}
        report["embedded_left"] = len(cm._embedded)
        print("EXIT " + json.dumps(report), flush=True)

    atexit.register(_report_at_exit)

    import urllib.error, urllib.parse, urllib.request
    import distributed, numpy as np, psutil
    from dask_estimators.engine import DistributedEvaluator, client_context, get_embedded_client, place, resolve_client
    from dask_estimators.engine.cluster import client as cm

    out = {}
    try:
        distributed.get_client()
        out["had_active_client"] = True
    except ValueError:
        out["had_active_client"] = False

    c1 = get_embedded_client()
    cl = cm._embedded["cluster"]
    state["first"] = cl
    out["same_client"] = get_embedded_client() is c1
    out["same_cluster"] = cm._embedded["cluster"] is cl
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_embedded_client()  # as it runs: no warning
        out["unlike_same"] = get_embedded_client(n_workers=len(cl.workers) + 1, dashboard=True) is c1
    out["unlike_warnings"] = [str(w.message) for w in caught]
    out["resolve"] = resolve_client() is c1
    with client_context() as c:
        out["context"] = c is c1
    info = c1.scheduler_info()
    out["n_workers"] = len(info["workers"])
    out["worker_hosts"] = sorted({urllib.parse.urlparse(a).hostname for a in info["workers"]})
    out["scheduler_host"] = urllib.parse.urlparse(c1.scheduler.address).hostname
    out["nthreads"] = sorted(c1.nthreads().values())
    out["worker_types"] = sorted(type(w).__name__ for w in cl.workers.values())
    out["have_nanny"] = [bool(w.get("nanny")) for w in info["workers"].values()]
    out["nanny_pids"] = sorted(w.pid for w in cl.workers.values())
    out["my_pid"] = os.getpid()
    out["worker_pids"] = sorted(c1.run(os.getpid).values())

    def warmed():  # the workers' preload imports the kernels in the background, before any task needs them
        import sys
        return all(m in sys.modules for m in ("torch", "numba", "dask_estimators.objectives._fused"))

    import time
    deadline = time.monotonic() + 120
    while not all((w := c1.run(warmed)).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    out["warmed"] = list(w.values())
    # the nanny limits its worker's BLAS threads (distributed.nanny.pre-spawn-environ); the client did not set them
    out["worker_blas_env"] = sorted(
        set(c1.run(lambda: (os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS"))).values())
    )
    me = psutil.Process()
    out["listen_ips"] = sorted({
        conn.laddr.ip
        for proc in [me] + me.children(recursive=True)
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    })
    out["dashboard_link"] = cl.dashboard_link
    out["dashboard_status"] = None
    if cl.dashboard_link:
        try:
            out["dashboard_status"] = urllib.request.urlopen(cl.dashboard_link, timeout=30).status
        except urllib.error.HTTPError as e:
            out["dashboard_status"] = e.code

    X, y = np.arange(20.0).reshape(10, 2), np.linspace(0, 1, 10)

    def fit(c, transport):
        try:
            with place(c, {"X": X, "y": y}, transport=transport) as p:
                got = DistributedEvaluator(p)(lambda s: s.get("X").T @ s.get("y"))
                return bool(np.allclose(got, X.T @ y)) and len(p.shards) == int(os.environ["DASK_ESTIMATORS__EMBEDDED_WORKERS"])
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    for transport in ["actors", "tasks"]:
        with client_context() as c:  # as the estimators do
            out[f"fit_{transport}"] = fit(c, transport)
        # the embedded client passed straight to place(), outside client_context
        out[f"bare_fit_{transport}"] = fit(get_embedded_client(), transport)
    out["still_same"] = get_embedded_client() is c1

    # the user closes the embedded client: the next fit must still work, without a second live cluster
    c1.close()
    c3 = get_embedded_client(n_workers=1)
    state["current"] = cm._embedded["cluster"]
    out["after_close_running"] = c3.status == "running"
    out["after_close_fit"] = c3.submit(sum, [1, 2, 3], pure=False).result(timeout=60) == 6
    out["after_close_reused_cluster"] = cm._embedded["cluster"] is cl
    out["after_close_first_cluster_status"] = str(cl.status)
    print("OUT " + json.dumps(out), flush=True)
    """
)


# the embedded cluster's size from DASK_ESTIMATORS__EMBEDDED_WORKERS: one more than the cores, never the default
N_EMBEDDED = min(os.cpu_count() or 1, 8) + 1


@pytest.fixture(scope="module")
def embedded_run():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    # not the default (the number of cores, 2 on the CI machine): the test sees the variable at work
    env["DASK_ESTIMATORS__EMBEDDED_WORKERS"] = str(N_EMBEDDED)
    env["OMP_NUM_THREADS"] = "1"
    env.pop("OPENBLAS_NUM_THREADS", None), env.pop("MKL_NUM_THREADS", None)
    proc = subprocess.run(
        [sys.executable, "-c", EMBEDDED_SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd="/"
    )
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
    assert "OUT" in lines, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    return proc, json.loads(lines["OUT"]), json.loads(lines.get("EXIT", "null"))


def test_embedded_cluster_started_once_and_reused(embedded_run):
    proc, out, _ = embedded_run
    assert not out["had_active_client"]
    assert out["same_client"] and out["same_cluster"] and out["still_same"]
    assert out["resolve"], "resolve_client() with no active client must return the embedded client"
    assert out["context"]
    assert out["fit_actors"] is True, out["fit_actors"]
    assert out["fit_tasks"] is True, out["fit_tasks"]
    assert out["bare_fit_tasks"] is True, out["bare_fit_tasks"]


def test_embedded_client_passed_to_place_with_actors(embedded_run):
    _, out, _ = embedded_run
    assert out["bare_fit_actors"] is True, out["bare_fit_actors"]


def test_embedded_cluster_is_local_processes_one_thread(embedded_run):
    _, out, _ = embedded_run
    assert out["n_workers"] == N_EMBEDDED
    # each worker runs under a nanny, in a subprocess of its own (it never imports the user's __main__)
    assert out["worker_types"] == ["SubprocessNanny"] * N_EMBEDDED
    assert out["have_nanny"] == [True] * N_EMBEDDED
    assert len(set(out["nanny_pids"])) == N_EMBEDDED
    assert not set(out["nanny_pids"]) & set(out["worker_pids"] + [out["my_pid"]])
    assert out["nthreads"] == [1] * N_EMBEDDED
    assert len(set(out["worker_pids"])) == N_EMBEDDED and out["my_pid"] not in out["worker_pids"]
    assert out["worker_hosts"] == ["127.0.0.1"] and out["scheduler_host"] == "127.0.0.1"
    assert out["listen_ips"] == ["127.0.0.1"], "every listening socket must be bound to 127.0.0.1"


def test_embedded_cluster_workers_have_one_blas_thread(embedded_run):
    _, out, _ = embedded_run
    assert out["worker_blas_env"] == [["1", "1"]]


def test_embedded_cluster_workers_import_the_kernels_at_start(embedded_run):
    _, out, _ = embedded_run
    assert out["warmed"] == [True] * N_EMBEDDED


def test_embedded_cluster_asked_for_other_settings_once_it_runs_says_so(embedded_run):
    """get_embedded_client(n_workers=..., dashboard=True) on the running cluster returned it as it was, silently:
    its dashboard link gave 404."""
    _, out, _ = embedded_run
    assert out["unlike_same"]
    [message] = out["unlike_warnings"]
    assert f"{N_EMBEDDED} worker(s), not {N_EMBEDDED + 1} and no dashboard" in message
    assert "close_embedded_cluster()" in message


def test_embedded_cluster_has_no_dashboard(embedded_run):
    _, out, _ = embedded_run
    # the scheduler keeps a small HTTP server (health, metrics); the dashboard page is not served
    assert out["dashboard_status"] in (None, 404), out


def test_embedded_cluster_closed_at_exit(embedded_run):
    proc, out, at_exit = embedded_run
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert at_exit is not None, proc.stdout
    assert at_exit["current"] == "Status.closed"
    assert at_exit["embedded_left"] == 0

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 30
    pids = out["worker_pids"] + out["nanny_pids"]
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_embedded_client_closed_by_user_is_replaced(embedded_run):
    _, out, _ = embedded_run
    assert out["after_close_running"] and out["after_close_fit"]


def test_embedded_cluster_not_duplicated_after_client_close(embedded_run):
    _, out, at_exit = embedded_run
    assert out["after_close_reused_cluster"] or out["after_close_first_cluster_status"] == "Status.closed"
    assert at_exit["first"] == "Status.closed"


def test_client_blas_runs_one_thread_during_a_fit_and_is_restored(client):
    """Idle BLAS threads of the client spin on the workers' cores: one BLAS thread while a fit runs."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    from threadpoolctl import threadpool_limits

    assert blas_threads(), "numpy's BLAS is loaded"
    # the suite runs with one BLAS thread already (conftest, a 2-core machine): start from two, so that
    # "one thread inside" is something the context did, and "restored" means back to two
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert before == [2] * len(before), f"BLAS would not take 2 threads here: {before}"
        for _ in range(2):  # the second fit's limit comes from the controller the first one made
            with client_context(client):
                inside = blas_threads()
            assert inside == [1] * len(before)
            assert blas_threads() == before


def _in_task_without_thread_state():
    import distributed.utils

    from dask_estimators.engine.cluster.client import _in_task

    saved = distributed.utils.thread_state
    del distributed.utils.thread_state  # the private name gone, as a future distributed may do
    try:
        return _in_task()
    finally:
        distributed.utils.thread_state = saved


def test_in_task_falls_back_without_distributed_thread_state(client):
    """docs/private-apis.md: without distributed.utils.thread_state a task is still seen as one."""
    assert client.submit(_in_task_without_thread_state, pure=False).result(timeout=120) is True
    from dask_estimators.engine.cluster.client import _in_task

    assert _in_task() is False  # on the client, no worker: the private name is never reached


def test_n_threads_is_the_workers_public_nthreads(client):
    from dask_estimators.engine.data._worker import n_threads

    assert set(client.run(n_threads).values()) == set(client.nthreads().values()) == {1}
    assert n_threads() == int(os.environ.get("DASK_ESTIMATORS__WORKER_THREADS", "1"))  # outside a worker


# ------------------------------------------------------- what a worker cannot unpickle
from concurrent.futures import CancelledError  # noqa: E402 - distributed's FutureCancelledError is one


class _OnlyOnTheClient:
    """Unpickles by importing a module that no worker has (as a class of a package missing on the workers)."""

    def __reduce__(self):
        return (importlib.import_module, ("dask_estimators_no_such_module",))


def _sum_x(shard, *_):
    return shard.get("X").sum()


@pytest.mark.timeout(120)  # the hang guard: distributed itself left this call unanswered
@pytest.mark.parametrize("reduction", ["tree", "gather"])
@pytest.mark.parametrize("transport", ["actors", "tasks"])
def test_argument_a_worker_cannot_unpickle_is_an_error_not_a_hang(client, transport, reduction):
    """With actors the worker's ``ModuleNotFoundError`` reaches the caller (the actor unpickles the call's
    payload itself).  Tasks are unpickled by the scheduler first (here it lacks the module too): distributed
    fails or cancels them, and the caller gets its error ("Error during deserialization of the task graph")."""
    X = np.ones((60, 3))
    expected = (ModuleNotFoundError,) if transport == "actors" else (ModuleNotFoundError, CancelledError, RuntimeError)
    with place(client, {"X": X}, transport=transport) as p:
        ev = DistributedEvaluator(p, reduction=reduction)
        with pytest.raises(expected) as err:
            ev(_sum_x, _OnlyOnTheClient())
        if transport == "actors":
            assert "dask_estimators_no_such_module" in str(err.value)
        with pytest.raises(expected):
            p.map(_sum_x, _OnlyOnTheClient())
        assert float(ev(_sum_x)) == X.sum()  # the same shards serve the next round


def test_fits_at_once_leave_the_clients_blas_threads_as_they_found_them():
    """Each fit holds the client's BLAS at one thread while it runs.  Fits in threads overlap: the one that began
    second ended last and restored the limit of the first, and the process's BLAS stayed at one thread."""
    import scipy.linalg  # noqa: F401 - scipy's BLAS loaded, as in a fit
    from threadpoolctl import threadpool_info, threadpool_limits

    from dask_estimators.engine.cluster.client import _one_blas_thread

    def blas():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    with threadpool_limits(2, user_api="blas"):
        before = blas()
        assert set(before.values()) == {2}
        first, second = _one_blas_thread(), _one_blas_thread()
        first.__enter__()
        second.__enter__()
        assert set(blas().values()) == {1}
        first.__exit__(None, None, None)  # the first ends while the second still runs: still one thread
        assert set(blas().values()) == {1}
        second.__exit__(None, None, None)
        assert blas() == before


def test_a_small_problem_solved_on_the_client_sets_no_thread_limit_there(client):
    """A kernel the client runs itself (a problem too small to send) pinned the process's BLAS and OpenMP
    to the workers' thread count, and left them so after the fit."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from dask_estimators.engine.data._worker import Shard, run_kernel

    def limits():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info()}

    with threadpool_limits(2):
        before = limits()
        assert run_kernel(lambda shard: shard.get("X").sum(), Shard({"X": np.ones((4, 2))}, device="cpu")) == 8
        assert limits() == before


def test_an_active_client_that_lost_its_scheduler_is_waited_for_not_replaced(monkeypatch):
    """The user's active client reconnecting to its scheduler: the fit waits for it, then says so.  It fell
    through to the embedded cluster and fitted there, silently."""
    from dask_estimators.engine.cluster import client as C
    from dask_estimators.engine.cluster._watch import ClusterLostError

    monkeypatch.setattr(C, "CONNECT_TIMEOUT", 1.0)
    started = []
    monkeypatch.setattr(C, "get_embedded_client", lambda *a, **k: started.append(1))
    cluster = distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    mine = distributed.Client(cluster)
    try:
        cluster.sync(cluster.scheduler.close)
        deadline = time.monotonic() + 30
        while mine.status == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mine.status == "connecting"
        with mine.as_current(), pytest.raises(ClusterLostError, match="did not reconnect"):
            resolve_client()
        assert not started
    finally:  # each waits out its timeout on the scheduler that is gone
        for closing in (mine, cluster):
            with contextlib.suppress(TimeoutError, OSError):
                closing.close(timeout=2)
