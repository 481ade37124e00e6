"""Modules imported on first use.

``torch = lazy_module("torch")`` at the top of a module gives a stand-in that
imports torch the first time one of its attributes is read.  The kernels of
:mod:`dask_estimators.objectives` use it, so that the client of a linear fit,
which only builds the objective while the workers run the kernels, never
imports torch or numba.
"""

from __future__ import annotations

import importlib
import types

__all__ = ["lazy_attributes", "lazy_module"]


class _LazyModule(types.ModuleType):
    """A stand-in for the module ``name``; the first attribute read imports it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_module"] = None

    def __getattr__(self, attr):
        module = self.__dict__["_lazy_module"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_lazy_module"] = module
        return getattr(module, attr)

    def __repr__(self):
        state = "imported" if self.__dict__["_lazy_module"] is not None else "not imported yet"
        return f"<lazy module {self.__name__!r} ({state})>"


def lazy_module(name: str) -> types.ModuleType:
    """Return a stand-in for the module ``name`` that imports it on first attribute access.

    Parameters
    ----------
    name : str
        Absolute module name, e.g. ``"torch"``.

    Returns
    -------
    module
        The module itself when it is already imported, else the stand-in.

    Examples
    --------
    >>> from dask_estimators._lazy import lazy_module
    >>> json = lazy_module("json")
    >>> json.dumps([1])
    '[1]'
    """
    import sys

    return sys.modules.get(name) or _LazyModule(name)


def lazy_attributes(package: str, names: dict):
    """``(__getattr__, __dir__)`` for a package whose public ``names`` are imported from its modules on first use.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : dict of str to str
        Public name -> the module (relative to ``package``) that defines it.

    Returns
    -------
    tuple of callable
        The module-level ``__getattr__`` and ``__dir__`` of the package (PEP 562).

    Examples
    --------
    >>> import sys, types
    >>> pkg = sys.modules["lazy_example"] = types.ModuleType("lazy_example")
    >>> pkg.__getattr__, pkg.__dir__ = lazy_attributes("lazy_example", {"dumps": "json"})
    >>> pkg.dumps([1]), "dumps" in vars(pkg)   # imported on first use, then kept
    ('[1]', True)
    """
    import sys

    def __getattr__(name):
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
