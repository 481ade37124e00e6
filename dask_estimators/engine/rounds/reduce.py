"""Summing per-worker partial results.

``"tree"`` (the default) adds partial results among the workers, ``fan_in`` at
a time, each add pinned to the worker holding its first operand, so only the
final sum reaches the client.  ``"gather"`` (the client fetches every part and
sums) and ``"single"`` (one task sums all parts) exist for comparison.
"""

from __future__ import annotations


from ... import config as _config
from ..data import _shared, _worker

REDUCTIONS = ("tree", "gather", "single")

__all__ = ["REDUCTIONS", "tree_sum", "reduce_parts"]


def tree_sum(client, parts, workers, fan_in: int = 2):
    """Add ``parts`` (futures, with the worker of each) pairwise on the workers.

    Returns the future of the total.  Every add task is pinned to the worker
    holding its first operand, so one of its inputs is already local.  An add
    whose first operand is a sum made by this tree adds into it
    (:func:`~._worker.add_into`); the parts themselves are never written.

    Between processes of one host, the tree's sums travel through shared
    memory (:mod:`._shared`): an add whose sum goes on to a worker or client
    on its host writes it into reused memory segments that the receiver maps,
    so only a few numbers per array cross the network.  Set the Dask config
    ``dask-estimators.shared-memory`` to False to send them over it.

    Examples
    --------
    >>> futs = [client.submit(np.ones, 3, workers=[w]) for w in ws]  # doctest: +SKIP
    >>> tree_sum(client, futs, ws).result()  # doctest: +SKIP
    array([2., 2., 2.])
    """
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}.")
    adds, where = _plan(len(parts), list(workers), fan_in)
    shares = _shares(client, adds, where, len(parts))
    futs = list(parts)
    for (group, w, owned), share in zip(adds, shares):
        futs.append(client.submit(
            _worker.add_into if owned else _worker.add, *(futs[i] for i in group), share=share, workers=[w],
            allow_other_workers=False, pure=False,
        ))
    return futs[-1]


def _plan(n: int, workers: list, fan_in: int):
    """The tree's adds, bottom up, as (operand indices, worker, first operand made by the tree).

    Index ``i < n`` is part ``i``; index ``n + k`` is the sum of add ``k``.
    ``where`` gives the worker of every index.
    """
    level, where, made, adds = list(range(n)), list(workers), [False] * n, []
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), fan_in):
            group = level[i : i + fan_in]
            if len(group) == 1:
                nxt.append(group[0])
                continue
            adds.append((group, where[group[0]], made[group[0]]))
            where.append(where[group[0]])
            made.append(True)
            nxt.append(n + len(adds) - 1)
        level = nxt
    return adds, where


def _shares(client, adds, where, n):
    """For each add: "map" or "copy" when its sum should go out in shared memory, else None.

    An add's sum is written into by the adds that take it as first operand, so
    where it ends up is where the last of those sends it: to the next add
    (which maps it) or, from the root, to the client (which copies it out).
    """
    if not adds or not _config.get("shared-memory"):
        return [None] * len(adds)
    ids = _shared.identities(client, sorted(set(where)))
    parent = {}
    for k, (group, _, _) in enumerate(adds):
        for i in group:
            parent[i] = k
    out = []
    for k in range(len(adds)):
        node = n + k
        while node in parent and adds[parent[node]][0][0] == node:  # it is summed into: follow it up
            node = n + parent[node]
        if node in parent:
            dest, share = ids[where[adds[parent[node]][0][0]]], "map"
        else:  # the root: its total goes to the client
            dest, share = _shared.identity(), "copy"
        out.append(share if _shared.shares_memory(ids[where[n + k]], dest) else None)
    return out


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
    >>> ws = sorted(client.nthreads())  # doctest: +SKIP
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
