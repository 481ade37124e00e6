"""Sparse X on a shard: how a kernel recognises it and reaches its three CSR arrays.

On a worker a sparse ``X`` is a torch sparse CSR tensor (``layout ==
torch.sparse_csr``) of shape (rows of the shard, features), float64 values
(float32 where the model fits in float32), int64 ``crow_indices`` and
``col_indices``, canonical (column indices sorted within each row, no
duplicates), on the shard's device.  A shard is never densified.

This module imports torch only when a tensor is passed, so that importing
the objectives on the client stays free of torch.
"""

from __future__ import annotations

import sys

__all__ = ["is_sparse", "csr_parts"]


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
        Column of each stored value (int64 under the shard contract).
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
    if not is_sparse(X):
        raise TypeError(f"csr_parts needs a torch sparse CSR tensor, got {type(X).__name__}.")
    if X.device.type != "cpu":
        raise ValueError(f"csr_parts needs a tensor in host memory, got one on {X.device}.")
    return X.values().numpy(), X.col_indices().numpy(), X.crow_indices().numpy()
