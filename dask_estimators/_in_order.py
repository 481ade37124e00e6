"""Dask calls over several collections whose results come back in the order given.

Dask (2026.8) gives the results of one ``dask.compute`` or ``Client.persist``
of arrays (graphs) mixed with dataframes and series (expressions) grouped by
kind, each kind's at the place of its first collection:
``compute(array0, series1, array2)`` returns ``(array0, array2, series1)``.
A fit given X, y and weights of both kinds took one for another (wrong
coefficients, no error), and ``score`` scored the weights as the targets.
Collections of each kind that stand together come back in order, so the
call here hands Dask the arrays (and anything else) first, then the
dataframes and series, in one call (a graph they share is still computed
once), and puts the results back in the caller's order.
"""

from __future__ import annotations

import warnings

__all__ = ["in_order"]


def _is_frame(obj) -> bool:
    return hasattr(obj, "divisions") and hasattr(obj, "npartitions")


def in_order(call, items: list) -> list:
    """``call(items)`` (``client.persist``, or ``lambda xs: dask.compute(*xs)``), its results in ``items``' order.

    Dask's warning that it computes mixed collections together is not shown: computing them together is what
    the one call is for.

    Examples
    --------
    >>> import dask, dask.array as da, dask.dataframe as dd, numpy as np, pandas as pd
    >>> a = da.zeros(4, chunks=2); s = dd.from_pandas(pd.Series(np.ones(4)), npartitions=2)
    >>> [float(r[0]) for r in in_order(lambda xs: dask.compute(*xs), [a, s, a + 2])]
    [0.0, 1.0, 2.0]
    """
    order = sorted(range(len(items)), key=lambda i: _is_frame(items[i]))  # stable: arrays, then frames
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Computing mixed collections", category=UserWarning)
        results = list(call([items[i] for i in order]))
    out = [None] * len(items)
    for i, result in zip(order, results):
        out[i] = result
    return out
