"""First contact: a plain script, with no ``if __name__ == "__main__":`` guard, fits on the embedded cluster.

* The three-line script of the README runs with ``python script.py``, prints
  its score, exits 0, and leaves no process of its cluster behind.
* A script killed with SIGKILL in the middle of a long fit leaves no process
  of its cluster behind either, within 10 s.
* ``import dask_estimators`` imports neither torch nor numba, and the client
  of a linear fit imports neither at all (its workers run the kernels).

Each script runs in a fresh interpreter that starts its own embedded cluster
(the session cluster of ``tests/conftest.py`` is not used).  Its processes
are found by a marker in their environment, which every process of its
cluster inherits, so that a process that outlived the script, reparented,
is still found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

pytestmark = pytest.mark.timeout(600)

#: The script of the README, word for word.
THREE_LINES = textwrap.dedent(
    """\
    import numpy as np, dask_estimators as de
    rng = np.random.default_rng(0); X = rng.normal(size=(5000, 20)); y = (X[:, 0] > 0).astype(int)
    print(de.LogisticRegression().fit(X, y).score(X, y))
    """
)

LONG_FIT = textwrap.dedent(
    """\
    import numpy as np, dask_estimators as de
    rng = np.random.default_rng(0); X = rng.normal(size=(2000, 10)); y = (X[:, 0] > 0).astype(int)
    print("FIT STARTED", flush=True)
    de.MLPClassifier(hidden_layer_sizes=(20,), max_iter=100000, tol=0.0, n_iter_no_change=100000).fit(X, y)
    print("FIT ENDED", flush=True)
    """
)

MARKER = "DASK_ESTIMATORS_FIRST_CONTACT_MARKER"
N_WORKERS = 2


def _env(marker):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env["DASK_ESTIMATORS__EMBEDDED_WORKERS"] = str(N_WORKERS)
    env[MARKER] = marker
    return env


def _marked(marker, exclude=()):
    """Live (not zombie) processes whose environment carries ``marker``."""
    out = []
    for p in psutil.process_iter(["pid"]):
        if p.pid in exclude:
            continue
        try:
            if p.environ().get(MARKER) == marker and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def _wait_until_none_left(marker, seconds):
    deadline = time.monotonic() + seconds
    left = _marked(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _marked(marker)
    return left


def _describe(procs):
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            out.append(f"{p.pid}: (gone)")
    return out


def _kill_leftovers(procs):
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def test_unguarded_three_line_script_runs_and_leaves_no_process(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(THREE_LINES)
    marker = uuid.uuid4().hex
    # -X importtime lists the client's imports on stderr (the cluster's processes are started without it)
    # (into files: a pipe nobody reads while we poll would fill up and stall the script)
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "w") as out_f, open(err_path, "w") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", str(script)], cwd=tmp_path, env=_env(marker), stdout=out_f,
            stderr=err_f,
        )
    seen = set()
    deadline = time.monotonic() + 480
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update(p.pid for p in _marked(marker, exclude={proc.pid}))
            # often: the nannies and workers of a warm machine live about 0.2 s (a look every 0.2 s once saw
            # only 3 of the 4); a look takes a few ms
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    out, err = out_path.read_text(), err_path.read_text()
    left = _wait_until_none_left(marker, 10)
    _kill_leftovers(left)
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{out}\nstderr:\n{err[-5000:]}"
    assert "Nanny failed to start" not in err
    score = float(out.strip().splitlines()[-1])
    assert 0.95 <= score <= 1.0, out
    # the fit ran on worker processes of its own (a nanny and a worker per worker)
    assert len(seen) >= 2 * N_WORKERS, f"only {len(seen)} processes of the cluster were seen"
    assert not left, f"processes left behind: {_describe(left)}"
    # the workers did the maths: the client of a linear fit imported neither torch nor numba
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert "numpy" in imported and "distributed" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "numba")}


def test_script_killed_mid_fit_leaves_no_process(tmp_path):
    script = tmp_path / "long_fit.py"
    script.write_text(LONG_FIT)
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(marker), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "FIT STARTED"
        # wait for every nanny and worker, then let the fit run a moment
        deadline = time.monotonic() + 300
        cluster = _marked(marker, exclude={proc.pid})
        while len(cluster) < 2 * N_WORKERS and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            cluster = _marked(marker, exclude={proc.pid})
        assert len(cluster) >= 2 * N_WORKERS, f"the cluster did not start: {_describe(cluster)}"
        time.sleep(3)
        assert proc.poll() is None, "the fit ended before it was killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = _wait_until_none_left(marker, 10)
    _kill_leftovers(left)
    assert not left, f"processes left behind 10 s after SIGKILL: {_describe(left)}"


def test_import_loads_neither_torch_nor_numba():
    code = (
        "import sys, dask_estimators as de\n"
        "print(sorted(m for m in ('torch', 'numba', 'distributed') if m in sys.modules))\n"
        "de.LogisticRegression, de.MLPClassifier  # the classes are there (imported on first use)\n"
    )
    env = _env("import")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    loaded = proc.stdout.strip()
    assert "torch" not in loaded and "numba" not in loaded, loaded


def test_worker_that_cannot_start_is_a_one_line_error(tmp_path):
    """A nanny process that exits at start ends get_embedded_client with one line saying what to do, promptly."""
    code = textwrap.dedent(
        """\
        import time
        from dask_estimators.engine.cluster import _nanny, client as cluster

        init = _nanny.SubprocessNanny.__init__

        def broken(self, scheduler, **kwargs):
            init(self, scheduler, **kwargs)
            self.opts["no_such_option"] = 1  # the Nanny refuses it: its process exits

        _nanny.SubprocessNanny.__init__ = broken
        t0 = time.monotonic()
        try:
            cluster.get_embedded_client(n_workers=1)
        except RuntimeError as e:
            print("ERROR " + str(e), flush=True)
        print(f"SECONDS {time.monotonic() - t0:.1f}")
        print(f"LEFT {len(cluster._embedded)}")
        """
    )
    marker = uuid.uuid4().hex
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(marker), capture_output=True,
                          text=True, timeout=300)
    left = _wait_until_none_left(marker, 10)
    _kill_leftovers(left)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
    assert proc.returncode == 0 and "ERROR" in lines, proc.stdout + proc.stderr[-3000:]
    message = lines["ERROR"]
    assert "\n" not in message
    assert "did not start" in message and "exited with code" in message and "client=" in message
    assert float(lines["SECONDS"]) < 120  # noticed when the process exits, not at the start timeout
    assert lines["LEFT"] == "0"
    assert not left, _describe(left)


WORKER_REPORT = textwrap.dedent(
    """\
    import json, os, sys
    import numpy as np, psutil
    import dask_estimators as de
    from dask_estimators.engine import get_embedded_client

    rng = np.random.default_rng(0); X = rng.normal(size=(500, 5)); y = (X[:, 0] > 0).astype(int)
    score = de.LogisticRegression().fit(X, y).score(X, y)
    client = get_embedded_client()

    def report():
        me = psutil.Process()
        return {"sklearn": "sklearn" in sys.modules, "kernels": "dask_estimators.objectives._fused" in sys.modules,
                "same_command_as_nanny": me.cmdline() == me.parent().cmdline(),
                "spawned": any("multiprocessing" in part for part in me.cmdline())}

    print("REPORT " + json.dumps({"score": score, "workers": list(client.run(report).values())}))
    """
)


@pytest.mark.parametrize("fork", ["", "0"], ids=["fork", "spawn"])
def test_embedded_workers_start_lean(tmp_path, fork):
    """The embedded cluster's workers are forked from their nanny with the engine imported (Linux; spawned with
    ``DASK_ESTIMATORS__FORK_WORKERS=0``), and a linear fit never makes them import scikit-learn."""
    import json

    marker = uuid.uuid4().hex
    env = _env(marker)
    env["DASK_ESTIMATORS__FORK_WORKERS"] = fork
    proc = subprocess.run([sys.executable, "-c", WORKER_REPORT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    left = _wait_until_none_left(marker, 10)
    _kill_leftovers(left)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-5000:]
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    report = json.loads(line.split(" ", 1)[1])
    assert report["score"] > 0.95
    workers = report["workers"]
    assert len(workers) == N_WORKERS
    forked = fork == "" and sys.platform.startswith("linux")
    for w in workers:
        # the kernels imported before the first task (a small fit runs on one of the workers), by the zygote or
        # nanny (fork) or the worker's preload (spawn); torch only for a network, or where the zygote was idle
        assert w["kernels"]
        assert not w["sklearn"], "a linear fit made a worker import scikit-learn"
        assert w["same_command_as_nanny"] is forked and w["spawned"] is not forked, w
    assert not left, _describe(left)


# ----------------------------------------------------------------------------------------- the zygote (Linux)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")

ZYGOTE_FAMILY = textwrap.dedent(
    """\
    import json, os, signal, sys, time
    import dask, numpy as np, psutil
    import dask_estimators as de
    from dask_estimators.engine import get_embedded_client
    from dask_estimators.engine.cluster import _zygote, client as cluster

    cls = de.LogisticRegression  # user code reads a class: the zygote starts importing the engine
    z = _zygote._current["zygote"]
    # what the user changes after that still reaches the workers: configuration, environment, import path
    dask.config.set({"dask-estimators-zygote-test": "set-after-import",  # read by the worker
                     "distributed.nanny.environ": {"DASK_ESTIMATORS_ZYGOTE_NANNY_VAR": "nanny"}})  # by the nanny
    os.environ["DASK_ESTIMATORS_ZYGOTE_TEST_VAR"] = "env-after-import"
    sys.path.insert(0, sys.argv[1])
    rng = np.random.default_rng(0); X = rng.normal(size=(2000, 5)); y = (X[:, 0] > 0).astype(int)
    score = cls().fit(X, y).score(X, y)
    client = get_embedded_client()
    nannies = sorted(w.pid for w in cluster._embedded["cluster"].workers.values())

    def report():
        import dask, os, psutil, zygote_test_module
        return {"config": dask.config.get("dask-estimators-zygote-test", None),
                "env": os.environ.get("DASK_ESTIMATORS_ZYGOTE_TEST_VAR"), "module": zygote_test_module.ANSWER,
                "nanny_env": os.environ.get("DASK_ESTIMATORS_ZYGOTE_NANNY_VAR"),
                "parent": psutil.Process().ppid(), "pid": os.getpid()}

    workers = list(client.run(report).values())
    # a worker killed is restarted by its nanny, forked again, and the next fit runs on the new one
    os.kill(workers[0]["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            pids = set(client.run(os.getpid).values())
        except Exception:  # the broadcast met the dying worker
            continue
        if len(pids) == len(workers) and workers[0]["pid"] not in pids:
            break
    refit = cls().fit(X, y).score(X, y)
    print("OUT " + json.dumps({
        "score": score, "refit": refit, "me": os.getpid(), "zygote": z.proc.pid,
        "zygote_parent": psutil.Process(z.proc.pid).ppid(), "nannies": nannies,
        "nanny_parents": [psutil.Process(p).ppid() for p in nannies], "workers": workers,
        "after_kill": sorted(client.run(os.getpid).values()),
    }), flush=True)
    """
)


def _run_script(tmp_path, code, marker, args=(), env_extra=None, timeout=300):
    env = _env(marker)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)
    left = _wait_until_none_left(marker, 10)
    _kill_leftovers(left)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
    assert proc.returncode == 0 and "OUT" in lines, proc.stdout + proc.stderr[-5000:]
    assert not left, f"processes left behind: {_describe(left)}"
    import json

    return json.loads(lines["OUT"])


@linux_only
def test_zygote_forks_every_nanny_with_the_clients_settings_of_the_moment(tmp_path):
    """The first read of an estimator class starts the zygote; the cluster's nannies are its children and see the
    configuration, environment and import path of the fit, not of the import; a killed worker is restarted."""
    (tmp_path / "zygote_test_module.py").write_text("ANSWER = 42\n")
    out = _run_script(tmp_path, ZYGOTE_FAMILY, uuid.uuid4().hex, args=[str(tmp_path)])
    assert out["score"] > 0.95 and out["refit"] > 0.95
    assert out["zygote_parent"] == out["me"]
    assert out["nanny_parents"] == [out["zygote"]] * N_WORKERS
    for w in out["workers"]:
        assert w["parent"] in out["nannies"]
        assert w["config"] == "set-after-import"
        assert w["env"] == "env-after-import"
        assert w["nanny_env"] == "nanny"
        assert w["module"] == 42
    assert len(out["after_kill"]) == N_WORKERS and out["workers"][0]["pid"] not in out["after_kill"]


ZYGOTE_WHEN_NOT_NEEDED = textwrap.dedent(
    """\
    import json, time
    import distributed, numpy as np, psutil
    import dask_estimators as de
    from dask_estimators.engine.cluster import _zygote

    _zygote.IDLE_SECONDS = 1.0
    rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)
    out = {}
    if MODE == "active":  # a client before the first class read: nothing starts
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None):
            de.LogisticRegression().fit(X, y)
            out["zygote"] = "zygote" in _zygote._current
            out["children"] = len(psutil.Process().children(recursive=True))
    else:
        cls = de.LogisticRegression
        z = _zygote._current["zygote"]
        z._started.wait(60)
        if MODE == "given":  # a fit on another client stops the zygote at once
            with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c:
                cls(client=c).fit(X, y)
            out["code"] = z.proc.wait(timeout=30)
            out["zygote"] = "zygote" in _zygote._current
        else:  # "idle": a zygote nobody asks exits by itself, and a later fit starts another
            out["code"] = z.proc.wait(timeout=120)
            out["score"] = cls().fit(X, y).score(X, y)
            out["new_zygote"] = _zygote._current["zygote"] is not z
    print("OUT " + json.dumps(out), flush=True)
    """
)


@linux_only
@pytest.mark.parametrize("mode", ["active", "given", "idle"])
def test_zygote_is_not_kept_where_it_is_not_needed(tmp_path, mode):
    out = _run_script(tmp_path, f"MODE = {mode!r}\n" + ZYGOTE_WHEN_NOT_NEEDED, uuid.uuid4().hex)
    if mode == "active":
        assert out == {"zygote": False, "children": 0}
    elif mode == "given":
        assert out["code"] == -signal.SIGKILL and out["zygote"] is False
    else:
        assert out["code"] == 0 and out["score"] > 0.95 and out["new_zygote"] is True


ZYGOTE_AFTER_FORK = textwrap.dedent(
    """\
    import json, multiprocessing as mp, time
    import numpy as np
    import dask_estimators as de
    from dask_estimators.engine.cluster import _zygote

    cls = de.LogisticRegression  # this process's zygote starts
    rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)

    def child(q):  # a forked process inherits the handle, not the thread reading the zygote's replies
        t0 = time.monotonic()
        score = cls().fit(X, y).score(X, y)
        q.put({"score": score, "seconds": time.monotonic() - t0, "own": _zygote._current["zygote"].owner})

    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=170)
    p.join(60)
    got.update(child=p.pid, code=p.exitcode, parent_score=cls().fit(X, y).score(X, y))
    print("OUT " + json.dumps(got), flush=True)
    """
)


@linux_only
def test_forked_process_starts_its_own_zygote(tmp_path):
    out = _run_script(tmp_path, ZYGOTE_AFTER_FORK, uuid.uuid4().hex)
    assert out["code"] == 0 and out["own"] == out["child"]
    assert out["score"] > 0.95 and out["parent_score"] > 0.95
    assert out["seconds"] < 90  # not the 180 s wait for a reply that the parent's thread would have read


FIT_THEN_FORK = textwrap.dedent(
    """\
    import json, multiprocessing as mp, time
    import numpy as np
    import dask_estimators as de
    from dask_estimators.engine import get_embedded_client

    rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)
    parent = de.LogisticRegression().fit(X, y)  # the embedded cluster starts, and its client is this process's
    address = get_embedded_client().scheduler.address

    def child(q):  # the parent's client is copied, not the thread of its event loop
        t0 = time.monotonic()
        try:
            coef = de.LogisticRegression().fit(X, y).coef_.tolist()
        except Exception as e:
            coef = repr(e)
        from dask_estimators.engine.cluster import client as ec
        q.put({"coef": coef, "seconds": time.monotonic() - t0, "used": ec._INHERITED[0]})

    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=170)
    p.join(60)
    got.update(code=p.exitcode, parent=parent.coef_.tolist(), address=address,
               refit=de.LogisticRegression().fit(X, y).coef_.tolist())
    print("OUT " + json.dumps(got), flush=True)
    """
)


@linux_only
def test_a_process_forked_after_a_fit_fits_on_the_parents_cluster(tmp_path):
    """A child forked after the parent's fit on the embedded cluster inherits the parent's client without the
    thread of its event loop: each fit there raised ClusterLostError after its probes' 5 s.  It fits on the
    parent's cluster, by its address, and gets the parent's model."""
    out = _run_script(tmp_path, FIT_THEN_FORK, uuid.uuid4().hex)
    assert out["code"] == 0 and out["coef"] == out["parent"] == out["refit"], out
    assert out["used"] == out["address"]
    assert out["seconds"] < 60


USER_CLIENT_THEN_FORK = textwrap.dedent(
    """\
    import json, multiprocessing as mp, time
    import numpy as np
    import dask_estimators as de
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)

    def child(q, client):  # the parent's client is copied, not the thread of its event loop
        out = {}
        for how, given in (("active", None), ("given", client)):
            t0 = time.monotonic()
            try:
                est = de.LogisticRegression(client=given).fit(X, y)
                out[how] = est.coef_.tolist()
            except Exception as e:
                out[how] = repr(e)
            out[how + " seconds"] = time.monotonic() - t0
        from dask_estimators.engine.cluster import client as ec
        out["embedded"] = "cluster" in ec._embedded
        q.put(out)

    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            parent = de.LogisticRegression().fit(X, y)
            q = mp.get_context("fork").Queue()
            p = mp.get_context("fork").Process(target=child, args=(q, client))
            p.start()
            got = q.get(timeout=170)
            p.join(60)
            got.update(code=p.exitcode, parent=parent.coef_.tolist(),
                       refit=de.LogisticRegression().fit(X, y).coef_.tolist())
        print("OUT " + json.dumps(got), flush=True)
    """
)


@linux_only
def test_a_process_forked_from_one_with_its_own_client_fits_on_that_clients_scheduler(tmp_path):
    """A child forked from a process whose fits use the user's client (active, or given as client=) fits on that
    client's scheduler through a client of its own: on the copied one, without its event loop, each fit raised
    ClusterLostError ("did not answer within 5 s") though the scheduler was fine."""
    out = _run_script(tmp_path, USER_CLIENT_THEN_FORK, uuid.uuid4().hex)
    assert out["code"] == 0 and out["active"] == out["given"] == out["parent"] == out["refit"], out
    assert not out["embedded"]
    assert out["active seconds"] < 60 and out["given seconds"] < 60


ADDRESS_THEN_EXIT = textwrap.dedent(
    """\
    import json
    import numpy as np
    import dask_estimators as de
    from distributed import LocalCluster

    if __name__ == "__main__":
        rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            score = de.LogisticRegression(client=cluster.scheduler_address).fit(X, y).score(X, y)
        print("OUT " + json.dumps({"score": score}), flush=True)
    """
)


def test_a_client_opened_from_an_address_closes_quietly_at_exit(tmp_path):
    """The client a fit opened from an address stays open for the next fit; when the user closed that cluster
    before the script ends, its close at exit waited out its reconnection and logged it as an error, with a
    traceback, though the user holds no such client."""
    script = tmp_path / "address_then_exit.py"
    script.write_text(ADDRESS_THEN_EXIT)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(uuid.uuid4().hex),
                          capture_output=True, text=True, timeout=300)
    import json

    out = json.loads(proc.stdout.split("OUT ", 1)[1])
    assert proc.returncode == 0 and out["score"] > 0.95
    after = proc.stderr  # everything the script wrote ends before its exit; a log at exit is the last of it
    assert "ERROR" not in after and "Traceback" not in after, after[-3000:]


ZYGOTE_NETWORKS = textwrap.dedent(
    """\
    import json, sys, time
    import numpy as np
    import dask_estimators as de
    from dask_estimators.engine import get_embedded_client
    from dask_estimators.engine.cluster import _zygote

    getattr(de, sys.argv[1])  # the first class read starts the zygote
    rng = np.random.default_rng(0); X = rng.normal(size=(500, 3)); y = (X[:, 0] > 0).astype(int)
    score = de.LogisticRegression().fit(X, y).score(X, y)
    networks = _zygote._current["zygote"].networks
    m = de.MLPClassifier(hidden_layer_sizes=(8,), max_iter=2).fit(X, y)

    def warm():
        return "torch._dynamo" in sys.modules  # torch.optim's first use imports it

    client = get_embedded_client()
    deadline = time.monotonic() + 120
    while not all(client.run(warm).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    print("OUT " + json.dumps({"score": score, "networks": networks, "n_shards": m.fit_stats_["n_shards"],
                               "workers": len(client.run(warm)), "warm": list(client.run(warm).values())}))
    """
)


@linux_only
@pytest.mark.parametrize("first", ["LogisticRegression", "MLPClassifier"])
def test_the_first_class_read_decides_the_zygotes_network_warm_up(tmp_path, first):
    """A linear model read first starts a zygote that makes the networks' first uses only while nobody waits for
    a nanny; a network's fit then has the workers it does not use make them (warm_ahead), so every worker ends
    warm either way."""
    out = _run_script(tmp_path, ZYGOTE_NETWORKS, uuid.uuid4().hex, args=[first])
    assert out["score"] > 0.95
    assert out["networks"] is (first == "MLPClassifier")
    assert out["workers"] >= 2 and out["n_shards"] < out["workers"]  # the small network fits on one worker
    assert all(out["warm"])
