"""Shared fixtures: one real process-based LocalCluster for the whole session.

The cluster's client is the default client, so estimators that are given no
``client=`` use it, as they would a user's active client.
"""

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    """Under pytest-xdist the controller collects nothing, so it would never load tests/upstream/conftest.py,
    whose summary of scikit-learn's own tests it must print: load it here (the workers load it as usual)."""
    if getattr(config, "workerinput", None) is not None or getattr(config.option, "dist", "no") == "no":
        return
    import importlib.util
    import sys
    from pathlib import Path

    upstream = Path(__file__).parent / "upstream"
    loaded = {Path(getattr(plugin, "__file__", "") or "") for plugin in config.pluginmanager.get_plugins()}
    if upstream / "conftest.py" in loaded:  # the arguments named tests/upstream: pytest loaded it already
        return
    sys.path.insert(0, str(upstream))  # its imports: upstream_loader, upstream_skips
    spec = importlib.util.spec_from_file_location("upstream_conftest", upstream / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config.pluginmanager.register(module, "upstream-report")


@pytest.fixture(scope="session")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session", autouse=True)
def client(cluster):
    import dask
    from distributed import Client

    # the tests' small networks train on every worker, as large ones do, so that they test what runs across
    # ranks; by default a fit whose steps are too small for two takes one (tests/engine/test_workers_worth.py)
    with dask.config.set({"dask-estimators.min-step-flops-per-worker": 0}):
        with Client(cluster, set_as_default=True) as client:
            client.wait_for_workers(2, timeout=60)
            yield client


@pytest.fixture(autouse=True)
def _release_kept_placements():
    """Dask input a test's fits placed is kept on the workers for the next fit on it (dask-estimators.keep-placed):
    released after each test, so that no test starts with another's data on the session's workers."""
    yield
    from dask_estimators.session import release_kept

    release_kept()


@pytest.fixture
def spread():
    """Small linear fits spread their data over every worker and run one distributed round per evaluation, as
    large ones do (``dask-estimators.worker-solve-below = 0``): for the tests of those rounds themselves."""
    import dask

    with dask.config.set({"dask-estimators.worker-solve-below": 0}):
        yield


@pytest.fixture
def placements(monkeypatch):
    """The placements made on the cluster while the test runs (each a call of the session's place)."""
    from dask_estimators.session import _session

    made = []
    place = _session._placement.place

    def counted(*args, **kwargs):
        made.append(kwargs.get("workers"))  # None: every worker
        return place(*args, **kwargs)

    monkeypatch.setattr(_session._placement, "place", counted)
    return made


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
