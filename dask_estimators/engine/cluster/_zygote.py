"""One process that imports the engine once and forks every nanny of the embedded cluster (Linux).

A new user's first fit waits for the embedded cluster: each nanny process
imported distributed, torch, numba and the kernels, and the client imported
scikit-learn before that started (seconds of one core; docs/design-measurements.md).
On 2 cores, two nannies and the client competed for the cores, and the
imports were paid once per worker.

The zygote pays them once, and early:

* :func:`prewarm`, called when user code first reads an estimator class
  from the package (before scikit-learn is imported), starts ``python -m dask_estimators.engine.cluster._zygote``.  It
  imports distributed, sets the thread limits of
  ``distributed.nanny.pre-spawn-environ`` (before any BLAS or OpenMP loads),
  imports the engine and initialises numba's compiler and the dense kernels,
  and then waits, single-threaded, for requests on its stdin.
* When the embedded cluster starts, each :class:`._nanny.SubprocessNanny`
  asks it for a nanny (:meth:`Zygote.spawn`): it forks one, which takes the
  client's environment, working folder, import path and Dask configuration
  of that moment, and runs the Nanny (which forks its worker in turn).
* The zygote reports each child's exit, so a nanny that fails at start is
  noticed at once, as a subprocess's exit is.

Lifetime: the zygote exits when its stdin closes (the client has gone, or
closed it), and the kernel kills it when the client's process dies
(``PR_SET_PDEATHSIG``); its nannies die with it the same way, and their
workers with them.  A fit that resolves another client discards a zygote
that never forked (:func:`discard_unused`), and a zygote with no nanny
alive exits after :data:`IDLE_SECONDS` without a request.  Nothing is started inside a
Dask worker, in a process that already has a client, off Linux, or with
``DASK_ESTIMATORS__PRESTART=0`` (or ``DASK_ESTIMATORS__FORK_WORKERS=0``, which
spawns every worker as a plain LocalCluster does).

This module imports no Dask on the client's side: it runs before the client
has imported distributed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import sysconfig
import threading

from ... import _env
from . import _nanny_process

__all__ = ["Zygote", "prewarm", "get", "discard_unused", "close", "enabled", "env_with_import_path"]

#: The module the zygote's process runs (``python -m ...``).
_MODULE = "dask_estimators.engine.cluster._zygote"

#: Seconds the zygote waits with no nanny alive and no request before it exits (it is started again when needed).
IDLE_SECONDS = 60.0

_lock = threading.Lock()
_current: dict = {}


def enabled() -> bool:
    """Whether the embedded cluster forks here: the zygote its nannies, each nanny its worker.

    On Linux, unless ``DASK_ESTIMATORS__FORK_WORKERS=0``
    (:func:`._nanny_process.fork_workers` says why).
    """
    return _nanny_process.fork_workers()


def in_dask_worker() -> bool:
    """Whether this process is a Dask worker (known without importing distributed): it holds a worker that is not
    closed.  A closed worker of an in-process cluster the user has shut down stays among ``Worker._instances``
    until the garbage collector frees it; the process is no worker for that."""
    worker = sys.modules.get("distributed.worker")
    if worker is None:
        return False
    return any(getattr(getattr(w, "status", None), "name", None) not in _GONE
               for w in list(getattr(worker.Worker, "_instances", ())))


#: The states of a worker that has stopped (``distributed.core.Status`` names).
_GONE = frozenset({"stopping", "stopped", "closing", "closing_gracefully", "closed", "failed"})


def _has_dask_role() -> bool:
    """Whether this process already has a Dask client, or is a Dask worker (then no embedded cluster is wanted)."""
    if "distributed" not in sys.modules:
        return False
    if in_dask_worker():
        return True
    client = sys.modules.get("distributed.client")
    if client is not None:
        with contextlib.suppress(Exception):
            return client.default_client() is not None
    return False


def prewarm(networks: bool = True) -> None:
    """Start the zygote in the background, where the embedded cluster may be needed soon.

    Called the first time user code reads an estimator class from the package
    (``de.LogisticRegression``, ``from dask_estimators import ...``), not when
    a pickle imports one.  It returns at once, and acts once per process; it
    does nothing off Linux, when switched off, inside a Dask worker, when this
    process has a client, or when a zygote already runs.  A zygote that is
    never used exits after :data:`IDLE_SECONDS`.

    ``networks``: whether the zygote makes the networks' first uses before
    it forks (:func:`._warm.warm_kernels`; mostly torch.optim importing
    torch._dynamo) also when a nanny is asked for meanwhile.  The
    package passes False when the first class read is a linear model: then
    the zygote makes them only if no nanny is asked for by the time its other
    imports are done.  The three-line script's first fit waited for that
    warm-up (benchmarks/results/history/first-fit.md has its cost); a script that takes longer to reach its
    first fit gets its networks warm as well.

    Examples
    --------
    >>> from dask_estimators.engine.cluster import _zygote
    >>> _zygote.prewarm()  # doctest: +SKIP
    """
    with _lock:
        if _current.get("prewarmed"):  # once per process: not again after a fit on another client discarded it
            return
        _current["prewarmed"] = True
    if not _env.switched_on("prestart") or not enabled() or _has_dask_role():
        return
    with contextlib.suppress(Exception):  # a zygote that cannot start: the cluster spawns its nannies itself
        get(networks)


def get(networks: bool = True) -> Zygote | None:
    """The running zygote, started now if there is none (``networks`` as :func:`prewarm`'s); None where zygotes
    are off or it could not start."""
    if not enabled():
        return None
    with _lock:
        z = _current.get("zygote")
        # a process forked from ours (multiprocessing's fork) inherits the handle but not the thread that
        # reads the zygote's replies: it starts its own
        if z is None or z.dead or z.owner != os.getpid():
            z = _current["zygote"] = Zygote(networks)
        return z


def discard_unused() -> None:
    """Stop the zygote if it never forked a nanny (a fit resolved another client)."""
    with _lock:
        z = _current.get("zygote")
        if z is not None and not z.used and z.owner == os.getpid():
            _current.pop("zygote")
            z.close()


def close() -> None:
    """Stop the zygote (its nannies, and their workers, die with it)."""
    with _lock:
        z = _current.pop("zygote", None)
    if z is not None and z.owner == os.getpid():
        z.close()


def _import_path() -> list[str]:
    """The client's ``sys.path`` entries a fresh interpreter would not have (the script's folder, PYTHONPATH...).

    Workers unpickle functions by module name, so they need to import what
    the client imports; a spawned LocalCluster worker got the client's
    ``sys.path`` the same way.  (Here, not in :mod:`._nanny`: this module
    imports no Dask.)
    """
    standard = {os.path.realpath(p) for p in sysconfig.get_paths().values() if p}
    try:
        import site

        standard.update(os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()])
    except Exception:  # noqa: BLE001 - a virtualenv's site module may lack these; nothing standard to skip then
        pass
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.realpath(p) in standard or p in out or not os.path.isdir(p):
            continue
        out.append(p)
    return out


def env_with_import_path() -> dict[str, str]:
    """``os.environ`` with ``PYTHONPATH`` covering the client's import path (:func:`_import_path` first)."""
    env = dict(os.environ)
    path = _import_path()
    if env.get("PYTHONPATH"):
        path += [p for p in env["PYTHONPATH"].split(os.pathsep) if p and p not in path]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


class Zygote:
    """The client's handle on the zygote process: it starts it, asks it for nannies, and hears their exits.

    The process is started from a thread of its own that then reads its
    replies for as long as it runs: the kernel kills the zygote when the
    thread that started it ends (``PR_SET_PDEATHSIG`` is per thread), and
    this thread lives as long as the process.

    Examples
    --------
    >>> from dask_estimators.engine.cluster._zygote import Zygote
    >>> z = Zygote()  # doctest: +SKIP
    >>> pid = z.spawn("tcp://127.0.0.1:8786", {"nthreads": 1})  # doctest: +SKIP
    >>> z.close()  # doctest: +SKIP
    """

    def __init__(self, networks: bool = True):
        self.networks = networks  # whether it makes the networks' first uses before it forks (prewarm)
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._pids: dict[int, int] = {}  # request id -> pid
        self._errors: dict[int, str] = {}  # request id -> why the fork failed
        self._exits: dict[int, int] = {}  # pid -> exit code
        self._started = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.owner = os.getpid()  # the process whose thread reads the replies
        self.dead = False
        self.used = False
        threading.Thread(target=self._run, name="dask-estimators-zygote", daemon=True).start()

    # ------------------------------------------------------------ client side
    def _run(self):
        try:
            read_fd, write_fd = os.pipe()
            env = env_with_import_path()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", _MODULE, str(os.getpid()), str(write_fd), repr(float(IDLE_SECONDS)),
                 "1" if self.networks else "0"],
                stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env, cwd=os.getcwd(),
            )
            os.close(write_fd)
        except Exception:  # noqa: BLE001 - no zygote: the nannies are spawned as plain processes
            with self._cond:
                self.dead = True
                self._cond.notify_all()
            return
        finally:
            self._started.set()
        with os.fdopen(read_fd, "rb") as replies:
            for line in replies:
                with contextlib.suppress(ValueError):
                    msg = json.loads(line)
                    with self._cond:
                        if "exit" in msg:
                            self._exits[msg["exit"]] = msg["code"]
                        elif "pid" in msg:
                            self._pids[msg["id"]] = msg["pid"]
                        elif "error" in msg:
                            self._errors[msg["id"]] = msg["error"]
                        self._cond.notify_all()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=30)
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def spawn(self, scheduler: str, opts: dict, env: dict, timeout: float = 180.0) -> int:
        """Fork a nanny for ``scheduler`` with the Nanny options ``opts``; return its pid.

        It carries this moment's environment ``env`` (:func:`._nanny.child_env`:
        its ``PYTHONPATH`` is the client's import path) and working folder.
        Raises RuntimeError when the zygote has gone or does not answer.
        """
        request = {"scheduler": scheduler, "opts": opts, "env": env, "cwd": os.getcwd()}
        self._started.wait(timeout)
        with self._cond:
            if self.dead or self.proc is None:
                raise RuntimeError("The zygote process is not running.")
            self.used = True
            request["id"] = i = next(self._ids)
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except (OSError, ValueError) as e:
                raise RuntimeError(f"The zygote process is not running: {e}") from None
            if not self._cond.wait_for(lambda: i in self._pids or i in self._errors or self.dead, timeout):
                raise RuntimeError(f"The zygote process did not fork a nanny within {timeout:g} s.")
            if i in self._pids:
                return self._pids[i]
            raise RuntimeError(f"The zygote process could not fork a nanny: {self._errors.get(i, 'it exited')}.")

    def returncode(self, pid: int) -> int | None:
        """The exit code of the nanny ``pid``, None while it runs (killed with the zygote: -9)."""
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            return -signal.SIGKILL if self.dead else None

    def close(self) -> None:
        """Close the zygote's stdin and kill it (its nannies die with it, and their workers with them)."""
        self._started.wait(30)
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(Exception):
            proc.stdin.close()
        with contextlib.suppress(Exception):
            proc.kill()


# --------------------------------------------------------------------- the zygote's process
def _pdeathsig() -> None:
    """Ask the kernel for SIGKILL when this process's parent (thread) ends."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _prepare(networks: bool = True) -> None:
    """Import distributed, set the nanny's thread limits, then import the engine and warm numba (no threads);
    with ``networks`` the networks' first uses too.  The nannies and workers it forks inherit what was made
    (:data:`._warm.NETWORKS`): their preload finds it made, or leaves the networks' to their first task."""
    import dask.config
    import distributed  # noqa: F401 - its configuration defaults, and the Nanny

    # what a Nanny sets before it spawns a worker, set before torch, numba and BLAS load (variables set win)
    for k, v in (dask.config.get("distributed.nanny.pre-spawn-environ", None) or {}).items():
        if v is not None:
            os.environ.setdefault(k, str(v))
    from . import _warm

    _warm.NETWORKS[0] = networks
    _warm._import_all(networks)
    _warm.warm_kernels(networks)


def _request_waiting() -> bool:
    """Whether the client has written to our stdin (a request for a nanny, or its end) and we have not read it."""
    import select

    return bool(select.select([0], [], [], 0)[0])


def _serve_forever(reply_fd: int, idle_seconds: float) -> None:
    """Read requests on stdin; fork a nanny for each; report forks and exits on ``reply_fd``.

    It returns at end-of-file on stdin, or after ``idle_seconds`` with no
    nanny alive and no request.
    """
    import select
    import time

    def reply(msg):
        data = (json.dumps(msg) + "\n").encode()
        while data:
            data = data[os.write(reply_fd, data):]

    # a child's exit wakes the loop at once (SIGCHLD through the wakeup descriptor), so its nanny's close and
    # a failed start are heard without delay
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buf = b""
    children: set[int] = set()
    idle_since = time.monotonic()
    while children or time.monotonic() - idle_since < idle_seconds:
        ready, _, _ = select.select([0, wake_r], [], [], 1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 1 << 12)
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break  # the client closed our stdin, or has gone
            buf += chunk
            idle_since = time.monotonic()
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                try:
                    pid = os.fork()
                except OSError as e:
                    reply({"id": request["id"], "error": str(e)})
                    continue
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    _nanny_child(request, reply_fd)  # never returns
                children.add(pid)
                reply({"id": request["id"], "pid": pid})
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            idle_since = time.monotonic()
            reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _nanny_child(request: dict, reply_fd: int) -> None:
    """A forked nanny: take the client's environment of the request, run the Nanny, exit."""
    code = 1
    try:
        zygote = os.getppid()
        os.close(reply_fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the zygote's stdin is its request channel, not ours
        os.close(devnull)
        _pdeathsig()  # die with the zygote, which dies with the client
        if os.getppid() != zygote:
            os._exit(1)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        path = request["env"].get("PYTHONPATH", "").split(os.pathsep)  # the client's import path (child_env)
        sys.path[:0] = [p for p in path if p and p not in sys.path]
        import dask.config

        dask.config.refresh()  # the client's configuration of this moment (DASK_INTERNAL_INHERIT_CONFIG)
        _nanny_process.run_nanny(request["scheduler"], request["opts"], fork=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported, then the exit code says it
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> None:
    """The zygote: ``argv`` is the client's pid, the descriptor to reply on, the idle seconds before it exits and
    whether it makes the networks' first uses ("1", the default, or "0")."""
    parent, reply_fd, idle_seconds = int(argv[0]), int(argv[1]), float(argv[2])
    networks = argv[3:4] != ["0"]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the client decides
    _pdeathsig()
    if os.getppid() != parent:
        os._exit(1)
    _prepare(networks)
    if not networks and not _request_waiting():  # nobody waits for a nanny yet: the networks' first uses too
        from . import _warm

        _warm.warm_networks()
        _warm.NETWORKS[0] = True
    try:
        _serve_forever(reply_fd, idle_seconds)
    finally:
        os._exit(0)  # our nannies die with us (their PR_SET_PDEATHSIG), and their workers with them


if __name__ == "__main__":
    main(sys.argv[1:])
