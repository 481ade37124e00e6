"""A test helper: a process LocalCluster that tests may kill, scale and retire workers of.

Shared by tests/engine/test_faults.py and test_churn.py (tests/ is on
``sys.path`` under pytest, as for ``sparse_guard.py``).  :meth:`ready` brings
it back to exactly ``n_workers`` workers before each test: nannies restart
killed workers and ``scale`` replaces retired ones, but a restart can fail on
a loaded machine (a CI run once waited out 120 s per test for a worker that
never came back), and a retired worker's closed nanny stays in the cluster's
spec where ``scale`` does not replace it.  A cluster that is not back within
a bounded time is therefore started again, so that one failure costs one
rebuild, not every later test.
"""

from __future__ import annotations

import time

import distributed


def _scheduler_workers(dask_scheduler):
    return list(dask_scheduler.workers)


class ProcessCluster:
    """``n_workers`` worker processes of one thread each, on 127.0.0.1, and a client of its own."""

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        self.cluster = self.client = None
        self.rebuilds = 0
        self._start()

    def _start(self):
        self.cluster = distributed.LocalCluster(
            n_workers=self.n_workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        )
        self.client = distributed.Client(self.cluster, set_as_default=False)
        self.client.wait_for_workers(self.n_workers, timeout=120)
        self.client.run(__import__, "dask_estimators.engine.data._worker")  # the imports (torch) out of the tests

    def ready(self, timeout=30):
        """The client, once the scheduler lists exactly the workers the nannies run, ``n_workers`` of them.

        A worker count alone is not enough: once, in a run of the fault tests
        after tests/test_deployment.py, the scheduler still listed a killed
        worker beside its replacement, and every later ``client.run`` waited
        30 s to connect to it.
        """
        if self._back(timeout):
            self.client.run(__import__, "dask_estimators.engine.data._worker")
            return self.client
        print(f"the test cluster did not come back to {self.n_workers} workers: starting a new one")
        self.close()
        self.rebuilds += 1
        self._start()
        return self.client

    def _back(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.cluster.scale(self.n_workers)
                running = {n.worker_address for n in self.cluster.workers.values()} - {None}
                listed = set(self.client.run_on_scheduler(_scheduler_workers))
                if len(running) == self.n_workers and listed == running:
                    return True
            except Exception:  # noqa: BLE001 - a broken cluster: rebuilt by the caller
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def close(self):
        for thing in (self.client, self.cluster):
            try:
                thing.close(timeout=20)
            except Exception:  # noqa: BLE001 - a cluster whose workers were killed may not close cleanly
                pass
