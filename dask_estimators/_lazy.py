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

__all__ = ["lazy_module"]


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
