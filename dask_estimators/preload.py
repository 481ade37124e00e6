"""The workers' preload: it imports the engine and loads the kernels while each worker starts, so that the first fit
it runs does not.

On a cluster you start yourself::

    dask worker tcp://scheduler:8786 --nthreads 1 --preload dask_estimators.preload

or ``LocalCluster(..., preload=["dask_estimators.preload"])``.  The embedded cluster's workers start warm
without it.
"""

from .engine.cluster._warm import dask_setup

__all__ = ["dask_setup"]
