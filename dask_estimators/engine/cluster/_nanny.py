"""Worker nannies of the embedded cluster, each in a subprocess of its own.

:class:`SubprocessNanny` is the ``worker_class`` of the embedded
:class:`distributed.LocalCluster`: instead of a :class:`distributed.Nanny` in
the client's process, it starts ``python -m dask_estimators.engine.cluster._nanny_process``,
which runs one Nanny (and the Nanny its worker).  The scheduler stays in the
client's process, as in any LocalCluster.

Why a subprocess: a Nanny in the client's process starts its worker with
``multiprocessing``'s spawn method, which runs the parent's ``__main__``
module again in the child (as ``__mp_main__``).  A user's script without an
``if __name__ == "__main__":`` guard then starts a cluster inside every
worker, and the cluster fails ("Nanny failed to start").  Here the worker's
parent runs :mod:`._nanny_process`, whose main block is guarded, so the user's script is
never imported by a worker.  (``distributed.deploy.subprocess`` starts
workers in subprocesses too, but it is marked experimental, moves the
scheduler out of this process as well, leaves its processes running when the
client is killed, and does not notice a worker process that exits at start.)

The cluster's processes never outlive the client's process, even when it is
killed with SIGKILL:

* the Nanny's process reads its stdin, a pipe from the client, and exits at
  once when it reads end-of-file: the client has gone (every platform);
* on Linux it also asks the kernel for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``), which holds even if the Nanny's interpreter
  is stuck;
* the worker, a child of the Nanny, exits when its Nanny dies: distributed
  gives every worker process a pipe from its parent and ends the worker when
  that pipe closes.

A worker that dies is started again by its Nanny, as in a LocalCluster.  On
Linux the Nanny forks its worker from a process that has imported the
engine (:func:`fork_workers`), instead of spawning a fresh interpreter that
imports everything again, and the nanny's process is itself forked from the
zygote (:mod:`._zygote`), which imported the engine once for all of them;
there the zygote takes the place of the first two points above (each nanny
dies with the zygote, which dies with the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

from distributed.deploy.spec import ProcessInterface

__all__ = ["SubprocessNanny", "child_env"]

#: The module each nanny process runs (``python -m ...``).
_MODULE = "dask_estimators.engine.cluster._nanny_process"
#: Keyword arguments of the cluster's worker spec passed on to the Nanny (the rest are not JSON or not needed).
_NANNY_KWARGS = ("nthreads", "memory_limit", "host", "protocol", "interface", "dashboard", "dashboard_address",
                 "silence_logs", "preload", "name")


def child_env() -> dict[str, str]:
    """The environment of a nanny process: the client's, its import path, and its Dask configuration.

    Returns
    -------
    dict of str to str
        ``os.environ`` with ``PYTHONPATH`` covering the client's import path
        and ``DASK_INTERNAL_INHERIT_CONFIG`` carrying the client's Dask
        configuration (as a LocalCluster's workers inherit it).  The OpenMP
        and BLAS thread limits of ``distributed.nanny.pre-spawn-environ``,
        which a Nanny applies to the worker it spawns, apply to the nanny's
        process too, so that a worker forked from it (:func:`fork_workers`)
        has them; variables already in the environment win.
    """
    import dask.config

    from ._zygote import env_with_import_path

    env = env_with_import_path()
    # the thread limits a Nanny sets before it spawns its worker, set for the nanny's process itself: a forked
    # worker inherits the nanny's BLAS and OpenMP as they were loaded (variables already set win, as in a Nanny)
    for k, v in (dask.config.get("distributed.nanny.pre-spawn-environ", None) or {}).items():
        if v is not None:
            env.setdefault(k, str(v))
    try:
        env["DASK_INTERNAL_INHERIT_CONFIG"] = dask.config.serialize(dask.config.global_config)
    except (TypeError, ValueError):  # a value that is not JSON: the workers read the config files and DASK_ variables
        pass
    return env


class SubprocessNanny(ProcessInterface):
    """One Nanny and its worker in a subprocess, as a LocalCluster's ``worker_class``.

    Parameters
    ----------
    scheduler : str
        The scheduler's address.
    **kwargs
        The worker spec's options; the JSON ones a Nanny takes are passed on.

    Examples
    --------
    >>> import distributed
    >>> from dask_estimators.engine.cluster._nanny import SubprocessNanny
    >>> cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
    ...                                    worker_class=SubprocessNanny, dashboard_address=None)  # doctest: +SKIP
    """

    def __init__(self, scheduler: str, **kwargs):
        self.scheduler = scheduler
        self.name = kwargs.get("name")
        self.opts = {k: kwargs[k] for k in _NANNY_KWARGS if kwargs.get(k) is not None}
        self.process: asyncio.subprocess.Process | None = None
        self.zygote = None  # the zygote that forked this nanny (then ``_pid`` is its process), or None
        self._pid: int | None = None
        super().__init__()

    async def start(self):
        """Start the nanny process; its worker registers with the scheduler when it is ready.

        On Linux the nanny is forked by the zygote (:mod:`._zygote`), which has
        the engine imported; where there is none, or it fails, it is a fresh
        ``python -m dask_estimators.engine.cluster._nanny_process`` process.
        """
        from . import _zygote

        zygote = _zygote.get()  # None off Linux or with DASK_ESTIMATORS__FORK_WORKERS=0
        if zygote is not None:
            loop = asyncio.get_running_loop()
            try:
                self._pid = await loop.run_in_executor(None, zygote.spawn, self.scheduler, self.opts, child_env())
                self.zygote = zygote
            except RuntimeError:
                self._pid = None  # no zygote: a fresh process below
        if self.zygote is None:
            cmd = [sys.executable, "-m", _MODULE, self.scheduler, json.dumps(self.opts), str(os.getpid())]
            self.process = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, env=child_env(), cwd=os.getcwd()
            )
        await super().start()

    @property
    def pid(self) -> int | None:
        """The nanny process's id, or None before it starts."""
        if self.zygote is not None:
            return self._pid
        return None if self.process is None else self.process.pid

    @property
    def returncode(self) -> int | None:
        """The nanny process's exit status, or None while it runs."""
        if self.zygote is not None:
            return self.zygote.returncode(self._pid)
        return None if self.process is None else self.process.returncode

    async def close(self):
        """Ask the nanny to close its worker and exit (SIGTERM); kill both after 10 s."""
        import psutil

        pid = self.pid
        if pid is not None and self.returncode is None:
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not await self._wait(10):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                await self._wait(10)
            for child in children:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
        proc = self.process
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
        await super().close()

    async def _wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the nanny process to exit; whether it did."""
        if self.zygote is not None:  # polled: at exit no executor takes new work (concurrent.futures' own exit hook)
            deadline = asyncio.get_running_loop().time() + seconds
            while self.returncode is None and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            return self.returncode is not None
        try:
            await asyncio.wait_for(self.process.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    def __repr__(self):
        return f"<SubprocessNanny {self.name!r}: pid={self.pid}, status={self.status.name}>"
