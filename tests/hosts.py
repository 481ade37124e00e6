"""Simulated hosts for the tests: Dask workers in their own network and pid namespaces (issue 25).

Each "host" is a network namespace with its own pid namespace (and its own
``/proc``), joined by a veth pair to a bridge that the harness creates in the
root namespace, as two containers on one node network are.  The scheduler
and the client live in the root namespace, bound to the bridge's address;
each host runs one ``dask worker --host <its address> --no-nanny``.  A link
can be rate-limited with ``tc ... tbf`` in both directions.

Only addresses of the private subnet ``10.213.<k>.0/24`` are used, with ``k``
picked so that no address or route of the machine falls in it; the
namespaces have no default route, so nothing outside that subnet is reached.

It needs root, ``ip``, ``tc`` (only for a rate) and ``unshare``; without them
:func:`SimulatedHosts.unavailable` gives the reason to skip.  Everything it
creates is removed by :meth:`SimulatedHosts.close`, also after a failure part
way through :meth:`SimulatedHosts.start`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dask_estimators.engine.cluster._watch import workers_info

WORKER_START_TIMEOUT = 90.0


def _ip(*args, ns=None, check=True):
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why simulated hosts cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return "simulated hosts need Linux network and pid namespaces"
    if os.geteuid() != 0:
        return "simulated hosts need root (ip netns, veth, bridge)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"simulated hosts need the '{tool}' command"
    return None


def _free_subnet() -> int:
    """A ``k`` such that no address or route of this machine lies in 10.213.k.0/24."""
    used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
    for k in range(1, 255):
        if f"10.213.{k}." not in used:
            return k
    raise RuntimeError("no free 10.213.k.0/24 subnet")


class SimulatedHosts:
    """``n`` simulated hosts, a bridge, a scheduler on the bridge and a client.

    Parameters
    ----------
    n : int
        Number of hosts, one single-threaded worker each.
    rate : str or None
        A ``tc`` rate such as ``"1gbit"`` for every link (both directions), or None.
    """

    def __init__(self, n: int = 2, rate: str | None = None):
        self.n, self.rate = n, rate
        self.tag = uuid.uuid4().hex[:5]
        self.bridge = f"deb{self.tag}"
        self.netns: list[str] = []
        self.veths: list[str] = []
        self.procs: dict[int, subprocess.Popen] = {}
        self.cluster = self.client = None
        self.k = None

    # -- addresses ---------------------------------------------------------------------------------
    @property
    def bridge_ip(self) -> str:
        return f"10.213.{self.k}.1"

    def host_ip(self, i: int) -> str:
        return f"10.213.{self.k}.{10 + i}"

    # -- life cycle --------------------------------------------------------------------------------
    def start(self):
        try:
            self._network()
            self._scheduler()
            for i in range(self.n):  # all at once: they import in parallel
                self._worker(i)
            self.wait_workers(self.n)
        except BaseException:
            self.close()
            raise
        return self

    def _network(self):
        self.k = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            ns, veth = f"de-{self.tag}-{i}", f"dev{self.tag}{i}"
            _ip("netns", "add", ns)
            self.netns.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.veths.append(veth)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("addr", "add", f"{self.host_ip(i)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
        if self.rate:
            self.set_rate(self.rate)

    def set_rate(self, rate: str | None):
        """Limit every link, both directions, to ``rate`` (a ``tc`` rate such as ``"1gbit"``); None: no limit.

        The hosts, workers and connections stay as they are, so one cluster can be measured at several rates
        in turn (the same processes, at nearly the same time).
        """
        for i, veth in enumerate(self.veths):
            for dev, ns in ((veth, None), ("eth0", self.netns[i])):
                self._limit(dev, ns, rate)
        self.rate = rate

    def _limit(self, dev, ns, rate):
        if rate:
            tc = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "1mb",
                  "latency", "100ms"]
        else:  # back to the device's default queue; fine when it had no limit
            tc = ["tc", "qdisc", "del", "dev", dev, "root"]
        cmd = ["ip", "netns", "exec", ns, *tc] if ns else tc
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if out.returncode and (rate or "No such file" not in out.stderr and "Cannot delete" not in out.stderr):
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")

    def _scheduler(self):
        import distributed

        self.cluster = distributed.LocalCluster(
            n_workers=0, host=self.bridge_ip, scheduler_port=0, dashboard_address=None, processes=True
        )
        self.client = distributed.Client(self.cluster, set_as_default=False)

    def _worker(self, i):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        cmd = [
            "ip", "netns", "exec", self.netns[i],
            "unshare", "--pid", "--fork", "--mount-proc",
            sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address,
            "--host", self.host_ip(i), "--nthreads", "1", "--no-dashboard", "--no-nanny",
            "--name", f"host-{i}", "--death-timeout", "60",
        ]
        self.procs[i] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)

    def wait_workers(self, n, timeout=WORKER_START_TIMEOUT):
        self.client.wait_for_workers(n, timeout=timeout)

    def workers(self) -> list[str]:
        """The workers' addresses, host 0 first."""
        info = workers_info(self.client)
        return sorted(info, key=lambda a: info[a]["name"])

    def kill_host(self, i: int):
        """SIGKILL everything on host ``i`` (its pid namespace), as a machine that goes away."""
        p = self.procs.pop(i, None)
        if p is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)

    def restart_host(self, i: int):
        """Start host ``i``'s worker again (after :meth:`kill_host`) and wait until all ``n`` are back."""
        self.kill_host(i)
        addr = self.host_ip(i)
        deadline = time.monotonic() + 30
        while any(a.startswith(f"tcp://{addr}:") for a in self.workers()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the scheduler forgets the old worker first
        self._worker(i)
        self.wait_workers(self.n)

    def close(self):
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        for i in list(self.procs):
            self.kill_host(i)
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()
        for ns in self.netns:  # takes its end of the veth pair, and so the pair, with it
            _ip("netns", "delete", ns, check=False)
        for veth in self.veths:
            _ip("link", "delete", veth, check=False)
        _ip("link", "delete", self.bridge, check=False)
        self.netns, self.veths = [], []
        self.client = self.cluster = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
