"""Reading a shard's arrays where they lie: NumPy in host memory, without torch, or the shard's tensors.

A shard on a CPU keeps its dense arrays as NumPy (``Shard.host`` reads them)
and a sparse X as its three CSR arrays (``Shard.host_csr``); ``Shard.get``
makes torch views of either, importing torch then.  A GPU shard's arrays are
tensors.  The kernels read what they can as NumPy, so that a linear fit never
imports torch on its worker, and take the tensors otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["host", "csr", "row_parts", "array", "numpy64"]


def host(shard, name):
    """The shard's array ``name`` as NumPy where it keeps it in host memory (``Shard.host``), else None (absent,
    sparse, on a GPU, or a shard-like object without ``host``)."""
    read = getattr(shard, "host", None)
    return None if read is None else read(name)


def csr(shard, name):
    """The shard's sparse array ``name`` as its three CSR arrays in host memory (``Shard.host_csr``: an object
    with ``data``, ``indices``, ``indptr``, ``shape`` and ``dtype``), else None (absent, dense, on a GPU, or a
    shard-like object without ``host_csr``)."""
    read = getattr(shard, "host_csr", None)
    return None if read is None else read(name)


def row_parts(shard, name):
    """The shard's host array ``name`` as ``[(first row, rows), ...]``: the blocks it was placed from where the
    shard reads them where they lie (``Shard.row_parts``), else :func:`host`'s array as one part; None where
    :func:`host` gives None."""
    read = getattr(shard, "row_parts", None)
    if read is not None:
        return read(name)
    a = host(shard, name)
    return None if a is None else [(0, a)]


def array(shard, name):
    """The shard's array ``name``: its host NumPy array where it has one (:func:`host`), its host CSR arrays where
    it keeps them (:func:`csr`), else what ``shard.get`` gives (a tensor, or None where it has none)."""
    a = host(shard, name)
    if a is None:
        a = csr(shard, name)
    return a if a is not None else shard.get(name)


def numpy64(v) -> np.ndarray:
    """``v`` (NumPy, a tensor on any device, or a sequence) as a float64 NumPy array."""
    return np.asarray(v.detach().cpu() if hasattr(v, "detach") else v, dtype=np.float64)
