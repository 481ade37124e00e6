"""The torch pointwise losses: kept as a name for :mod:`.losses`, which now owns every loss.

Import from :mod:`dask_estimators.objectives.losses`; this module re-exports
its registry and classes so that existing imports keep working.
"""

from __future__ import annotations

from .losses import (  # noqa: F401
    LOSSES,
    Binomial,
    Gamma,
    Loss,
    Multinomial,
    Poisson,
    Squared,
    SquaredEpsilonInsensitive,
    SquaredHinge,
    Tweedie,
    get_loss,
)

__all__ = ["LOSSES", "Loss", "get_loss"]
