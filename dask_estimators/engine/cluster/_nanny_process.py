"""The nanny's process of the embedded cluster: what runs in it, however it started.

A nanny's process is either forked by the zygote (:mod:`._zygote`, which
calls :func:`run_nanny`) or started as ``python -m
dask_estimators.engine.cluster._nanny_process`` (:func:`main`) by
:class:`._nanny.SubprocessNanny`, the client's side, which says why the
nannies run in processes of their own and how they die with the client.
This module imports neither of those two, so the zygote can run it without
an import loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading

from ... import _env

__all__ = ["fork_workers", "main", "run_nanny"]


def _die_with_parent(parent_pid: int) -> None:
    """Exit as soon as the client's process is gone (see the module docstring)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the stdin watch below still ends this process
            pass
    if os.getppid() != parent_pid:  # the client died before prctl took effect
        os._exit(1)

    def watch_stdin():
        try:  # the raw descriptor: a buffered reader's lock would stall the interpreter's shutdown
            while os.read(0, 1 << 16):
                pass
        except OSError:
            pass
        os._exit(1)  # end-of-file: the client has gone; the worker follows (its pipe from us closes)

    threading.Thread(target=watch_stdin, name="dask-estimators-parent-watch", daemon=True).start()


async def _serve(scheduler: str, opts: dict) -> None:
    from distributed import Nanny

    async with Nanny(scheduler, **opts) as nanny:
        closing = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):  # not on Windows: there close() kills the process
            loop.add_signal_handler(signal.SIGTERM, closing.set)
        done = asyncio.ensure_future(nanny.finished())
        stop = asyncio.ensure_future(closing.wait())
        await asyncio.wait([done, stop], return_when=asyncio.FIRST_COMPLETED)
        if stop.done():
            await nanny.close(timeout=5)
        for f in (done, stop):
            f.cancel()


def main(argv: list[str]) -> None:
    """Run one Nanny for the scheduler ``argv[0]`` with the JSON options ``argv[1]``, for the client ``argv[2]``."""
    scheduler, opts, parent_pid = argv[0], json.loads(argv[1]), int(argv[2])
    # Ctrl-C in a terminal reaches every process of its group; the client decides when its workers stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    fork = fork_workers()
    if fork:
        from . import _warm

        _warm._import_all()  # once, here: every worker this nanny starts (or restarts) is forked with them
        _warm.warm_kernels()
    run_nanny(scheduler, opts, fork)


def run_nanny(scheduler: str, opts: dict, fork: bool) -> None:
    """Run one Nanny until it finishes or SIGTERM; with ``fork`` it forks its worker (the engine is imported)."""
    # as a LocalCluster silences its nannies' logs below ``silence_logs`` (warnings by default)
    level = opts.get("silence_logs")
    if isinstance(level, int) and level:
        import logging

        logging.getLogger("distributed").setLevel(level)
    if fork:
        import dask.config

        dask.config.set({"distributed.worker.multiprocessing-method": "fork"})
    asyncio.run(_serve(scheduler, opts))


def fork_workers() -> bool:
    """Whether a nanny forks its worker (Linux) rather than spawning a fresh interpreter.

    A spawned worker imports distributed, torch, numba and the kernels again,
    though its nanny could have them already: one core's time per worker at
    the start of the first fit (docs/design-measurements.md has the measurement).
    Forking from a nanny that imported them
    once (before it started any thread but its stdin watch, and without
    running any torch or OpenMP code) gives the worker all of them for
    nothing, and its memory pages are shared until written.  Elsewhere (macOS,
    Windows) fork is unsafe or missing, and workers are spawned as in any
    LocalCluster.  ``DASK_ESTIMATORS__FORK_WORKERS=0`` turns it off.  The
    zygote (:mod:`._zygote`) forks the nannies under the same condition.
    """
    return sys.platform.startswith("linux") and _env.switched_on("fork-workers")


if __name__ == "__main__":
    main(sys.argv[1:])
