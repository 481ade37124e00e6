"""Summing per-worker partial results.

``"tree"`` (the default) adds partial results among the workers, ``fan_in`` at
a time, each add pinned to the worker holding its first operand, so only the
final sum reaches the client.  ``"gather"`` (the client fetches every part and
sums) and ``"single"`` (one task sums all parts) exist for comparison.
"""

from __future__ import annotations

from . import _worker

REDUCTIONS = ("tree", "gather", "single")

__all__ = ["REDUCTIONS", "tree_sum", "reduce_parts"]


def tree_sum(client, parts, workers, fan_in: int = 2):
    """Add ``parts`` (futures, with the worker of each) pairwise on the workers.

    Returns the future of the total.  Every add task is pinned to the worker
    holding its first operand, so one of its inputs is already local.  An add
    whose first operand is a sum made by this tree adds into it
    (:func:`~._worker.add_into`); the parts themselves are never written.

    Examples
    --------
    >>> futs = [client.submit(np.ones, 3, workers=[w]) for w in ws]  # doctest: +SKIP
    >>> tree_sum(client, futs, ws).result()  # doctest: +SKIP
    array([2., 2., 2.])
    """
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}.")
    level = [(f, w, False) for f, w in zip(parts, workers)]  # (future, its worker, made by this tree)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), fan_in):
            group = level[i : i + fan_in]
            if len(group) == 1:
                nxt.append(group[0])
                continue
            w, owned = group[0][1], group[0][2]
            fut = client.submit(
                _worker.add_into if owned else _worker.add, *(f for f, _, _ in group), workers=[w],
                allow_other_workers=False, pure=False,
            )
            nxt.append((fut, w, True))
        level = nxt
    return level[0][0]


def reduce_parts(client, parts, workers, method: str = "tree", fan_in: int = 2, timeout=None):
    """Sum the partial results in ``parts`` with the given strategy and return the total on the client.

    Parameters
    ----------
    client : distributed.Client
    parts : list of distributed.Future
        Partial results: arrays, numbers, or tuples of them.
    workers : list of str
        The worker holding each part.
    method : {"tree", "single", "gather"}, default "tree"
        Pairwise on the workers (:func:`tree_sum`), one task on the first
        worker, or everything gathered and added on the client.
    fan_in : int, default 2
        Parts each node of the tree adds.
    timeout : float, optional
        Seconds to wait for the total.

    Examples
    --------
    >>> from dask_estimators.engine import reduce_parts, resolve_client
    >>> client = resolve_client()  # doctest: +SKIP
    >>> ws = sorted(client.scheduler_info()["workers"])  # doctest: +SKIP
    >>> parts = [client.submit(float, i, workers=[w]) for i, w in enumerate(ws)]  # doctest: +SKIP
    >>> reduce_parts(client, parts, ws, "tree")  # doctest: +SKIP
    1.0
    """
    if method == "tree":
        return tree_sum(client, parts, workers, fan_in).result(timeout=timeout)
    if method == "single":
        if len(parts) == 1:
            return parts[0].result(timeout=timeout)
        return client.submit(_worker.add, *parts, workers=[workers[0]], pure=False).result(timeout=timeout)
    if method == "gather":
        return _worker.add(*client.gather(parts))
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {method!r}.")
