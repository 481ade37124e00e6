"""The workers' preload under its earlier name (``--preload dask_estimators.engine._warm``), kept so that
deployments that name it still start; the name to use is :mod:`dask_estimators.preload`."""

from .cluster._warm import dask_setup

__all__ = ["dask_setup"]
