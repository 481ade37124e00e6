"""The workers' preload (engine/cluster/_warm.py) and what a ddp rank imports."""

import subprocess
import sys


def _modules_after(code):
    probe = (f"import sys; {code}; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn' or m in "
             "('torch._dynamo', 'dask_estimators.engine.ddp.train', 'dask_estimators.objectives._fused_mlp')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return eval(out.stdout.strip().splitlines()[-1])


def test_a_ddp_rank_does_not_import_scikit_learn():
    """The rank loop's imports (engine.ddp.train, optim) leave scikit-learn out: 0.8 s of a first fit's worker time.
    The MLP kernel (and numba) comes with the preload (below) or the first step, not with the network's spec,
    which the client builds too."""
    assert _modules_after("import dask_estimators.engine.ddp.train") == ["dask_estimators.engine.ddp.train"]


def test_the_preload_imports_what_a_first_fit_needs():
    """dask_setup imports the rank loop and the MLP kernel, and makes a torch.optim optimizer once (that imports
    torch._dynamo), all before the worker registers; scikit-learn stays out."""
    mods = _modules_after("from dask_estimators import preload; preload.dask_setup(None)")
    assert mods == ["dask_estimators.engine.ddp.train", "dask_estimators.objectives._fused_mlp", "torch._dynamo"]


def test_the_preloads_earlier_name_still_works():
    """``--preload dask_estimators.engine._warm`` (the name the docs gave before the engine's folders) still
    runs the same set-up."""
    from dask_estimators.engine import _warm
    from dask_estimators.engine.cluster import _warm as warm

    assert _warm.dask_setup is warm.dask_setup
    assert _modules_after("from dask_estimators.engine import _warm; _warm.dask_setup(None)") == [
        "dask_estimators.engine.ddp.train", "dask_estimators.objectives._fused_mlp", "torch._dynamo"]


def _solver_imported():
    return "dask_estimators.optim.scipy_driver" in sys.modules, "scipy.optimize" in sys.modules


def _kernels_imported():
    return "dask_estimators.objectives.linear" in sys.modules


def test_a_serving_worker_imports_the_small_fits_solver_only_once_it_has_nothing_to_run():
    """On a cluster started without the preload, the warm-up sent to a serving worker imports the linear kernels
    at once, but scipy.optimize (the solver of a small fit that runs on a worker, 0.3 s) only when the worker
    runs no task and holds no actor: a large fit that came meanwhile, whose solver runs on the client, does not
    wait for it."""
    import time

    from distributed import Client, Event, LocalCluster

    from dask_estimators.engine.cluster._warm import warm_running

    def busy(event_name):
        Event(event_name).wait(120)

    import dask

    # the client asks for no warm-up as it connects (below: the warm-up that client makes)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            dask.config.set({"dask-estimators.warm-clients": False}), Client(cluster, set_as_default=False) as c:
        assert list(c.run(_solver_imported).values()) == [(False, False)]
        release = Event("release-the-worker", client=c)
        task = c.submit(busy, "release-the-worker", pure=False)
        deadline = time.monotonic() + 60
        while not any(c.run(lambda dask_worker: bool(dask_worker.state.executing)).values()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        c.run(warm_running, False, wait=False)
        while not all(c.run(_kernels_imported).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(c.run(_kernels_imported).values())
        time.sleep(1.0)  # ten of the warm-up's looks at the worker: it runs a task
        assert list(c.run(_solver_imported).values()) == [(False, False)]
        release.set()
        task.result(timeout=60)
        while list(c.run(_solver_imported).values()) != [(True, True)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(c.run(_solver_imported).values()) == [(True, True)]


def test_a_closed_in_process_worker_left_to_the_garbage_collector_does_not_make_this_process_a_worker():
    """A client made after an in-process cluster was shut down gets its workers warmed at the class read: the
    closed worker, which Dask keeps among its instances until the garbage collector frees it, is not a role."""
    import gc

    from distributed import Client, LocalCluster
    from distributed.worker import Worker

    from dask_estimators.engine.cluster._zygote import in_dask_worker

    gc.disable()
    try:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
                Client(cluster, set_as_default=False):
            assert in_dask_worker()  # a worker of this process serves
        assert [w for w in Worker._instances if w.status.name == "closed"]  # kept until collected
        assert not in_dask_worker()
    finally:
        gc.enable()


#: A script that makes a client of its own where ``{import_at}`` says, reads no estimator class, and prints what
#: its worker has imported once the kernels are there (or after 60 s), and Dask's client preload list.
_NEW_CLIENT = """
import sys, time
from distributed import Client, LocalCluster
{before}
def modules():
    return sorted(m for m in ("dask_estimators.objectives._fused", "torch") if m in sys.modules)

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        {after}
        deadline = time.monotonic() + {wait}
        while time.monotonic() < deadline and not all(client.run(modules).values()):
            time.sleep(0.1)
        import dask
        print(list(client.run(modules).values()), dask.config.get("distributed.client.preload"))
"""


def _new_client(before="", after="pass", wait=60, env=None):
    import os

    code = _NEW_CLIENT.format(before=before, after=after, wait=wait)
    env = {**os.environ, **(env or {})}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_a_client_made_after_the_import_has_its_workers_warm_up_as_it_connects():
    """The usual script imports the package with its other imports, makes its client, loads its data and reads
    the estimator class at the fit: the client's preload has the workers load the linear kernels while the data
    loads (no torch: no network class was read)."""
    assert _new_client(before="import dask_estimators") == "[['dask_estimators.objectives._fused']] " \
        "['dask_estimators.preload']"


def test_a_client_made_before_the_import_has_its_workers_warm_up_at_the_import():
    assert _new_client(after="import dask_estimators") == "[['dask_estimators.objectives._fused']] " \
        "['dask_estimators.preload']"


def test_no_warm_up_as_a_client_connects_where_switched_off_or_the_user_lists_preloads():
    """``dask-estimators.warm-clients`` false: the client's workers are left alone until a class read or fit.  A
    client preload list of the user's own stays as it is (then nothing of ours runs as a client connects)."""
    off = _new_client(before="import dask_estimators", wait=3, env={"DASK_DASK_ESTIMATORS__WARM_CLIENTS": "False"})
    assert off == "[[]] ['dask_estimators.preload']"
    theirs = _new_client(before="import dask_estimators", wait=3,
                         env={"DASK_DISTRIBUTED__CLIENT__PRELOAD": '["json"]'})
    assert theirs == "[[]] ['json']"


def test_the_embedded_cluster_and_a_client_by_address_start_without_waiting_on_each_other():
    """A client that the package makes itself (the embedded cluster's, one for a scheduler address) runs the
    preload while the thread that makes it holds the package's lock: the preload must not wait for that lock
    (it did, and the client never started)."""
    code = (
        "import distributed, dask_estimators\n"
        "from dask_estimators.engine.cluster.client import get_embedded_client, resolve_client\n"
        "c = get_embedded_client(n_workers=1)\n"
        "other = resolve_client(c.scheduler.address)\n"
        "print(other is not c, other.status)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "True running"
