"""numba kernels: cached on disk, uncached where no cache folder is writable, compiled lazily on the client."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import dask_estimators
from dask_estimators import _jit

PACKAGE = pathlib.Path(dask_estimators.__file__).parent


def test_every_kernel_goes_through_the_cached_njit():
    """No module calls numba.njit itself (only _jit, which sets cache=True), and none turns the cache off."""
    direct, uncached = [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if path.name != "_jit.py" and re.search(r"numba\.(n?jit|vectorize|guvectorize)\b|^\s*@(n?jit)\b", text, re.M):
            direct.append(str(path))
        if re.search(r"cache\s*=\s*False", text) and path.name != "_jit.py":
            uncached.append(str(path))
    assert not direct and not uncached, (direct, uncached)


def _triple(x):
    return 3 * x


def test_njit_caches_on_disk_by_default():
    f = _jit.njit(_triple, nogil=True)
    assert f._cache.__class__.__name__ != "NullCache"
    assert f(np.int64(4)) == 12


def test_njit_without_a_writable_cache_folder_compiles_uncached(monkeypatch):
    """numba raises 'no locator available' for cache=True when no folder is writable: we compile without a cache."""
    numba_caching = pytest.importorskip("numba.core.caching")
    monkeypatch.setattr(numba_caching.CacheImpl, "_locator_classes", [])
    import numba

    with pytest.raises(RuntimeError, match="cache"):  # what numba itself does there
        numba.njit(cache=True)(_triple)
    f = _jit.njit(_triple)
    assert f(np.int64(5)) == 15
    assert f._cache.__class__.__name__ == "NullCache"


def test_lazy_njit_imports_numba_on_first_call():
    code = (
        "import sys\n"
        "from dask_estimators import _validation\n"
        "import numpy as np\n"
        "assert 'numba' not in sys.modules, 'imported at import time'\n"
        "dst = np.empty((2, 2))\n"
        "ok = _validation.copy_if_finite(np.ones((2, 2)), dst)\n"  # the workers' copy-and-check, a lazy_njit kernel
        "assert 'numba' in sys.modules\n"
        "print(ok, float(dst.sum()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "True 4.0"


def _lazy_helpers():
    """A lazy_njit function calling two lazy_njit helpers of its module, one inlined (built in a fresh
    namespace so the test owns its globals)."""
    src = (
        "from dask_estimators._jit import lazy_njit\n"
        "@lazy_njit(inline='always')\n"
        "def square(x):\n"
        "    return x * x\n"
        "@lazy_njit()\n"
        "def plus_one(x):\n"
        "    return x + 1.0\n"
        "@lazy_njit()\n"
        "def caller(a):\n"
        "    s = 0.0\n"
        "    for v in a:\n"
        "        s += plus_one(square(v))\n"
        "    return s\n"
    )
    env: dict = {}
    exec(compile(src, "<lazy helpers>", "exec"), env)
    return env


def test_lazy_njit_calls_lazy_helpers_and_leaves_the_module_names_alone():
    pytest.importorskip("numba")
    env = _lazy_helpers()
    caller, square = env["caller"], env["square"]
    assert caller(np.array([1.0, 2.0, 3.0])) == 17.0  # (1 + 1) + (4 + 1) + (9 + 1)
    assert type(env["square"]).__name__ == "_LazyDispatcher" and env["square"] is square  # not replaced
    assert square(3.0) == 9.0  # still callable from Python, compiled on its own first call
    assert caller.dispatcher().py_func.__globals__["square"] is square.dispatcher()  # the caller's copy
