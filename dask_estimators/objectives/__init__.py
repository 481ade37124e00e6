"""Per-shard maths.  Knows nothing of Dask."""

from ._pointwise import LOSSES, get_loss
from .linear import LinearObjective, LinearSpec

__all__ = ["LOSSES", "LinearObjective", "LinearSpec", "get_loss"]
