"""Per-shard maths.  Knows nothing of Dask.

Names are imported on first use: the client of a linear fit builds a
:class:`LinearObjective` without importing torch (its kernels run on the workers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._pointwise import LOSSES, get_loss
    from .linear import LinearObjective, LinearSpec

__all__ = ["LOSSES", "LinearObjective", "LinearSpec", "get_loss"]

_LAZY = {"LOSSES": "._pointwise", "get_loss": "._pointwise", "LinearObjective": ".linear", "LinearSpec": ".linear"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
