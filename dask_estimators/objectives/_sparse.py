"""Sparse X on a shard: how a kernel recognises it and reaches its three CSR arrays.

On a worker a sparse ``X`` has shape (rows of the shard, features), float64
values (float32 where the model fits in float32), row pointers and column
indices of one integer type (int32 where the stored values and the columns
fit, int64 otherwise: :func:`~dask_estimators.engine.data._worker.index_dtype`),
canonical (column indices sorted within each row, no duplicates).  In host
memory the shard keeps the three NumPy arrays (``Shard.host_csr``: an object
with ``data``, ``indices``, ``indptr``, ``shape``), which the numba kernels
read without torch; ``Shard.get`` gives a torch sparse CSR tensor
(``layout == torch.sparse_csr``) over the same memory, and on a GPU the
shard holds that tensor.  A shard is never densified.

This module imports torch only when a tensor is passed, so that importing
the objectives on the client, and a linear fit on a worker, stay free of
torch.
"""

from __future__ import annotations

import sys

import numpy as np

from . import _host

__all__ = ["is_sparse", "is_host_csr", "csr_parts", "take_rows", "index_array", "stored_columns", "keep_columns"]


def is_sparse(X) -> bool:
    """Whether ``X`` is a torch sparse CSR tensor.

    Parameters
    ----------
    X : object
        A shard's ``X`` (a dense tensor, a sparse CSR tensor, or anything else).

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np, torch
    >>> from dask_estimators.objectives._sparse import is_sparse
    >>> dense = torch.eye(3, dtype=torch.float64)
    >>> is_sparse(dense), is_sparse(dense.to_sparse_csr()), is_sparse(np.eye(3))
    (False, True, False)
    """
    torch = sys.modules.get("torch")
    if torch is None:  # nothing made a torch tensor in this process: X cannot be one
        return False
    return isinstance(X, torch.Tensor) and X.layout == torch.sparse_csr


def is_host_csr(X) -> bool:
    """Whether ``X`` is a shard's sparse X kept in host memory as NumPy (``Shard.host_csr``'s object), not a
    tensor nor a dense array.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from dask_estimators.objectives._sparse import is_host_csr
    >>> is_host_csr(sp.csr_array(np.eye(2))), is_host_csr(np.eye(2))
    (True, False)
    """
    return (all(hasattr(X, k) for k in ("data", "indices", "indptr", "shape")) and not is_sparse(X)
            and isinstance(X.indptr, np.ndarray))


def csr_parts(X):
    """The three arrays of a CPU sparse CSR tensor as NumPy views: ``(data, indices, indptr)``.

    No copy is made: writing to ``data`` writes to ``X``.

    Parameters
    ----------
    X : torch.Tensor
        Sparse CSR, in host memory.

    Returns
    -------
    data : ndarray of shape (nnz,)
    indices : ndarray of shape (nnz,)
        Column of each stored value (int32 or int64 under the shard contract).
    indptr : ndarray of shape (n_rows + 1,)
        Row ``i`` holds ``data[indptr[i]:indptr[i + 1]]``.

    Raises
    ------
    TypeError
        When ``X`` is not a sparse CSR tensor.
    ValueError
        When ``X`` is not in host memory.

    Examples
    --------
    >>> import torch
    >>> from dask_estimators.objectives._sparse import csr_parts
    >>> X = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64).to_sparse_csr()
    >>> data, indices, indptr = csr_parts(X)
    >>> data.tolist(), indices.tolist(), indptr.tolist()
    ([2.0, 3.0], [1, 0], [0, 1, 2])
    """
    if is_host_csr(X):
        return X.data, X.indices, X.indptr
    if not is_sparse(X):
        raise TypeError(f"csr_parts needs a torch sparse CSR tensor, got {type(X).__name__}.")
    if X.device.type != "cpu":
        raise ValueError(f"csr_parts needs a tensor in host memory, got one on {X.device}.")
    return X.values().numpy(), X.col_indices().numpy(), X.crow_indices().numpy()


def index_array(a):
    """A CSR index array as the numba kernels take it: C-contiguous, int32 or int64 kept as it is, others int64.

    Parameters
    ----------
    a : array-like of int

    Returns
    -------
    ndarray
        ``a`` itself where it already is so (no copy).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.objectives._sparse import index_array
    >>> a = np.arange(3, dtype=np.int32)
    >>> index_array(a) is a, index_array(np.arange(3, dtype=np.uint16)).dtype
    (True, dtype('int64'))
    """
    a = np.asarray(a)
    return np.ascontiguousarray(a, dtype=a.dtype if a.dtype in (np.int32, np.int64) else np.int64)


def take_rows(X, idx):
    """Rows ``idx`` of a sparse CSR tensor, as a new sparse CSR tensor on the same device.

    torch has no row selection for sparse CSR tensors; this gathers the
    selected rows' stored values with index arithmetic (no loop over rows, no
    dense step), in the order of ``idx``.

    Parameters
    ----------
    X : torch.Tensor
        Sparse CSR.
    idx : torch.Tensor
        int64 row numbers, on X's device.

    Returns
    -------
    torch.Tensor
        Sparse CSR of shape (len(idx), X.shape[1]).

    Examples
    --------
    >>> import torch
    >>> from dask_estimators.objectives._sparse import take_rows
    >>> X = torch.tensor([[0.0, 1.0], [2.0, 3.0], [0.0, 4.0]], dtype=torch.float64).to_sparse_csr()
    >>> take_rows(X, torch.tensor([2, 0])).to_dense().tolist()
    [[0.0, 4.0], [0.0, 1.0]]
    """
    import torch

    crow = X.crow_indices()
    idx = idx.to(device=crow.device, dtype=torch.int64)
    counts = (crow[1:] - crow[:-1])[idx].to(torch.int64)
    new_crow = torch.zeros(idx.shape[0] + 1, dtype=torch.int64, device=crow.device)
    torch.cumsum(counts, 0, out=new_crow[1:])
    total = int(new_crow[-1])
    # position of each kept value: its row's start in X plus its offset within the row
    offset = torch.arange(total, device=crow.device) - torch.repeat_interleave(new_crow[:-1], counts, output_size=total)
    pos = torch.repeat_interleave(crow[idx].to(torch.int64), counts, output_size=total) + offset
    col = X.col_indices()
    return torch.sparse_csr_tensor(new_crow.to(col.dtype), col[pos], X.values()[pos], size=(idx.shape[0], X.shape[1]),
                                   check_invariants=False)


def stored_columns(shard):
    """Kernel: the columns in which a shard's sparse X stores values (sorted int64 NumPy), or None for dense X."""
    X = _host.csr(shard, "X")
    if X is not None:
        return np.unique(X.indices).astype(np.int64)
    X = shard.get("X")
    if not is_sparse(X):
        return None
    return np.unique(X.col_indices().to("cpu").numpy()).astype(np.int64)


def keep_columns(shard, columns) -> None:
    """Kernel: a shard's sparse X narrowed to ``columns`` (sorted; every column it stores values in), numbered
    ``0 .. len(columns) - 1`` in that order; its values are not copied.  A fit on data kept between fits
    narrows X with ``put``: the kept shard's :meth:`restore` gives the full X back."""
    X = _host.csr(shard, "X")
    if X is not None:  # the NumPy arrays kept in host memory: torch is not imported
        narrowed = np.searchsorted(np.asarray(columns, dtype=np.int64), X.indices).astype(X.indices.dtype)
        shard.put("X", type(X)(X.data, narrowed, X.indptr, (X.shape[0], len(columns))))
        return
    import torch

    X = shard.get("X")
    col = X.col_indices()
    kept = torch.as_tensor(columns, dtype=torch.int64, device=col.device)
    narrowed = torch.searchsorted(kept, col.to(torch.int64)).to(col.dtype)
    shard.put("X", torch.sparse_csr_tensor(X.crow_indices(), narrowed, X.values(), size=(X.shape[0], len(columns)),
                                           check_invariants=False))
