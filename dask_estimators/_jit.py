"""numba's ``njit`` with an on-disk cache that may be missing, and compiled on first call where asked.

Every kernel of the package is compiled with ``cache=True``: the machine code
is written next to the source (``__pycache__``) or, where that folder is not
writable, to numba's per-user cache folder (``NUMBA_CACHE_DIR`` if set), and
loaded from there by later processes, so that only the first process on a
machine pays for the compilation.  When no cache folder is writable at all,
numba refuses ``cache=True``; :func:`njit` then compiles without a cache
instead of failing.

:func:`lazy_njit` also defers the import of numba to the first call, for the
client-side checks of :mod:`dask_estimators._validation`, so that
``import dask_estimators`` does not import numba.
"""

from __future__ import annotations

import importlib.util
import threading
import types

__all__ = ["AVAILABLE", "njit", "lazy_njit", "lazy_global"]

#: Whether numba is installed (without importing it).
AVAILABLE = importlib.util.find_spec("numba") is not None


def njit(fn=None, **options):
    """``numba.njit(cache=True, **options)``, without the cache when numba has nowhere to write it.

    Parameters
    ----------
    fn : callable, optional
        The function; without it, a decorator is returned.
    **options
        numba.njit's options (``cache`` defaults to True).

    Returns
    -------
    numba dispatcher, or a decorator

    Examples
    --------
    >>> from dask_estimators._jit import njit
    >>> @njit(nogil=True)
    ... def twice(x):
    ...     return 2 * x
    >>> twice(21)
    42
    """
    if fn is None:
        return lambda f: njit(f, **options)
    import numba

    options.setdefault("cache", True)
    try:
        return numba.njit(**options)(fn)
    except RuntimeError as e:  # "cannot cache function ...: no locator available" (no writable cache folder)
        if not options.get("cache") or "cache" not in str(e):
            raise
        return numba.njit(**{**options, "cache": False})(fn)


class _LazyDispatcher:
    """A function compiled by :func:`njit` the first time it is called."""

    def __init__(self, fn, options):
        self.py_func, self.options = fn, options
        self._dispatcher = None
        self._lock = threading.Lock()
        self.__doc__, self.__name__ = fn.__doc__, fn.__name__

    def dispatcher(self):
        """The numba dispatcher, made on first use (``lazy_njit`` helpers this function calls made first)."""
        d = self._dispatcher
        if d is None:
            with self._lock:  # threads of one check call it at once: compile (or load from the cache) once
                if self._dispatcher is None:
                    self._dispatcher = njit(self._with_compiled_helpers(), **self.options)
                d = self._dispatcher
        return d

    def _with_compiled_helpers(self):
        """``py_func``, or a copy of it whose globals name the compiled dispatchers of the ``lazy_njit``
        functions it calls and the objects its :func:`lazy_global` names stand for (numba cannot type a
        stand-in); the module's own names are left as they are."""
        fn = self.py_func
        lazy = {name: fn.__globals__[name] for name in fn.__code__.co_names
                if isinstance(fn.__globals__.get(name), (_LazyDispatcher, _LazyGlobal))}
        if not lazy:
            return fn
        env = dict(fn.__globals__)
        env.update({name: helper.dispatcher() for name, helper in lazy.items()})
        copy = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
        return copy

    def __call__(self, *args):
        return self.dispatcher()(*args)


class _LazyGlobal:
    """A module's attribute, imported when a :func:`lazy_njit` function that names it is compiled."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def dispatcher(self):
        import importlib

        return getattr(importlib.import_module(self.module), self.name)


def lazy_global(module: str, name: str):
    """A stand-in for ``module.name`` (a numba function or intrinsic of a module that imports numba), for
    :func:`lazy_njit` functions to call by a global name: imported when the first of them is compiled.

    Examples
    --------
    >>> from dask_estimators._jit import lazy_global, lazy_njit
    >>> sqrt = lazy_global("math", "sqrt")
    >>> @lazy_njit()
    ... def root(x):
    ...     return sqrt(x)
    >>> root(9.0)
    3.0
    """
    return _LazyGlobal(module, name)


def lazy_njit(**options):
    """A decorator: :func:`njit` with ``options``, applied (and numba imported) on the first call.

    A ``lazy_njit`` function may call other ``lazy_njit`` functions of its
    module by their global names: they are compiled first and the caller is
    compiled against them (``inline="always"`` among ``options`` inlines a
    helper into its callers).

    Examples
    --------
    >>> from dask_estimators._jit import lazy_njit
    >>> @lazy_njit(nogil=True)
    ... def add(a, b):
    ...     return a + b
    >>> add(1, 2)
    3
    """
    return lambda fn: _LazyDispatcher(fn, options)
