"""Per-shard maths.  Knows nothing of Dask.

Names are imported on first use: the client of a linear fit builds a
:class:`LinearObjective` without importing torch (its kernels run on the workers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from .losses import LOSSES, get_loss
    from .linear import LinearObjective, LinearSpec

__all__ = ["LOSSES", "LinearObjective", "LinearSpec", "get_loss"]

_LAZY = {"LOSSES": ".losses", "get_loss": ".losses", "LinearObjective": ".linear", "LinearSpec": ".linear"}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
