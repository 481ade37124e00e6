"""Cross-validation on placed shards: folds as per-row roles, fold views of a shard, held-out sums.

A search places its data once.  Each shard then keeps, in its cache, the
role of each of its rows in each split (``TRAIN``, ``TEST`` or neither) as an
int8 array of shape (n_splits, n_rows):

* for ``cv=int`` the roles are computed on the worker from each row's global
  position (:attr:`~dask_estimators.engine.Placement.row_ranges`), as
  scikit-learn's unshuffled ``KFold`` and ``StratifiedKFold`` assign them
  (:func:`assign_kfold`, :func:`assign_stratified`): no row moves;
* for a splitter or an iterable of splits the client sends each shard the
  roles of its rows once (:func:`set_roles`).

:class:`FoldView` shows a shard to the linear kernels of
:mod:`dask_estimators.objectives.linear` with the training weights of one
split (the shard's weights times its training mask), and with a cache of its
own, so those kernels run unchanged on a fold.  :func:`fold_value_grad_many`
evaluates several splits' models in one pass over X (``X @ W`` with the
splits' columns side by side).  A split may see X through a per-feature
affine map of its own (:func:`set_affine`: a scaler fitted on its training
rows, such as a pipeline's ``StandardScaler``): its models are evaluated on
the stored X in the map's coordinates, without a scaled copy of X.
:func:`heldout_sums` returns raw sums over
the held-out rows (tree-summed like every kernel's result); the estimator
turns them into scores.

Nothing here knows Dask: these are per-shard functions, run through
``Placement.map`` / ``map_each`` or an evaluator.
"""

from __future__ import annotations

import numpy as np

from .._lazy import lazy_module
from . import _host as _shard
from . import linear as _linear
from ._sparse import csr_parts, is_host_csr, is_sparse, take_rows

torch = lazy_module("torch")

__all__ = [
    "TRAIN", "TEST", "FoldView", "on_fold", "assign_kfold", "class_runs", "stratified_plan", "assign_stratified",
    "set_roles", "prepare", "fold_weight_sums", "fold_value_grad_many", "heldout_sums", "drop_fold_state",
    "gram_sums", "set_affine", "partial_fit_on_folds", "role_group_stats", "combine_group_stats",
    "quadratic_hessians", "xy_sums", "fold_row_sums",
]

#: A row's role in a split.
TRAIN, TEST = 1, 2


def _host_x(shard):
    """The shard's X where it keeps it in host memory: a dense X as NumPy (``Shard.host``), a sparse X as a
    ``scipy.sparse.csr_array`` over its three arrays (``Shard.host_csr``, no copy; made once per X); else None:
    then the shard is read as tensors (a GPU's X), and so are its weights and targets."""
    X = _shard.host(shard, "X")
    if X is not None:
        return X
    csr = _shard.csr(shard, "X")
    if csr is None:
        return None
    made = shard.cache.get("cv_scipy_x")
    if made is None or made[0] is not csr:
        import scipy.sparse as sp

        made = shard.cache["cv_scipy_x"] = (csr, sp.csr_array((csr.data, csr.indices, csr.indptr), shape=csr.shape,
                                                              copy=False))
    return made[1]


def _array(shard, name):
    """The shard's ``name`` in the shard's kind: NumPy for a shard with a host X (no tensor made, no torch), else
    the tensor ``shard.get`` gives; None where it has none."""
    if _host_x(shard) is not None:
        return shard.host(name)
    return shard.get(name)


def _positions(ranges) -> np.ndarray:
    """Global positions of a shard's rows, from its ``[start, stop)`` ranges (in row order)."""
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def kfold_test_fold(positions, n_samples: int, n_splits: int) -> np.ndarray:
    """The split in which each global row position is held out by an unshuffled ``KFold(n_splits)``.

    The first ``n_samples % n_splits`` folds have one row more, as in scikit-learn.

    Examples
    --------
    >>> kfold_test_fold(np.arange(7), 7, 3).tolist()
    [0, 0, 0, 1, 1, 2, 2]
    """
    sizes = np.full(n_splits, n_samples // n_splits, dtype=np.int64)
    sizes[: n_samples % n_splits] += 1
    return np.searchsorted(np.cumsum(sizes), positions, side="right")


def _set_test_fold(shard, fold, n_splits):
    roles = np.where(np.asarray(fold)[None, :] == np.arange(n_splits)[:, None], TEST, TRAIN).astype(np.int8)
    set_roles(shard, roles)


def set_roles(shard, roles) -> None:
    """Store the shard's roles, an int8 array (n_splits, n_rows) of ``TRAIN``, ``TEST`` or 0 (neither)."""
    roles = np.ascontiguousarray(roles, dtype=np.int8)
    if roles.ndim != 2 or roles.shape[1] != shard.n_rows:
        raise ValueError(f"roles must have shape (n_splits, {shard.n_rows}), got {roles.shape}.")
    drop_fold_state(shard)
    shard.cache["cv_roles"] = roles


def assign_kfold(shard, ranges, n_samples: int, n_splits: int) -> None:
    """Roles of an unshuffled ``KFold(n_splits)``, from the rows' global positions ``ranges``."""
    _set_test_fold(shard, kfold_test_fold(_positions(ranges), n_samples, n_splits), n_splits)


def _codes(shard) -> np.ndarray:
    y = _array(shard, "y")
    return (y.cpu().numpy() if hasattr(y, "cpu") else np.asarray(y)).astype(np.int64, copy=False).reshape(-1)


def class_runs(shard, ranges, n_classes: int) -> list:
    """For each of the shard's row ranges: ``(start, count of each class code, first local row of each or -1)``.

    The shard's ``y`` must hold class codes (``0..n_classes-1``).
    """
    codes = _codes(shard)
    out, i = [], 0
    for a, b in ranges:
        c = codes[i : i + (b - a)]
        i += b - a
        first = np.full(n_classes, -1, dtype=np.int64)
        first[c[::-1]] = np.arange(len(c), dtype=np.int64)[::-1]  # the last write of each class is its first row
        out.append((int(a), np.bincount(c, minlength=n_classes).astype(np.int64), first))
    return out


def _n_congruent(stop, i, k):
    """How many integers in [0, stop) are congruent to i modulo k (vectorised over ``stop``)."""
    return np.maximum(0, (np.asarray(stop) - i + k - 1) // k)


def stratified_plan(runs_per_shard: list, n_classes: int, n_splits: int):
    """The client's part of an unshuffled ``StratifiedKFold``: from every shard's :func:`class_runs`.

    Returns ``(bounds, prefixes)``: ``bounds[c]`` are the cumulative sizes,
    over the splits, of class code c's share of each test fold (so the r-th
    row of class c, in global order, is held out in split
    ``searchsorted(bounds[c], r, side="right")``); ``prefixes[s][j]`` counts
    the rows of each class before range j of shard s.  As scikit-learn,
    classes are ordered by first appearance to share the rows out, and
    ``n_splits`` greater than every class's count raises ``ValueError``
    (greater than the smallest warns).
    """
    import warnings

    flat = [(a, counts, first, s, j) for s, runs in enumerate(runs_per_shard) for j, (a, counts, first) in
            enumerate(runs)]
    flat.sort(key=lambda t: t[0])
    counts = np.zeros(n_classes, dtype=np.int64)
    first_pos = np.full(n_classes, np.iinfo(np.int64).max)
    prefixes = [[None] * len(runs) for runs in runs_per_shard]
    for a, c, first, s, j in flat:
        prefixes[s][j] = counts.copy()
        counts += c
        seen = first >= 0
        first_pos[seen] = np.minimum(first_pos[seen], a + first[seen])
    present = counts > 0
    y_counts = counts[present]
    if np.all(n_splits > y_counts):
        raise ValueError(f"n_splits={n_splits} cannot be greater than the number of members in each class.")
    if n_splits > y_counts.min():
        warnings.warn(
            f"The least populated class in y has only {y_counts.min()} members, which is less than "
            f"n_splits={n_splits}.", UserWarning,
        )
    # scikit-learn's order of the classes: by first appearance
    order = np.argsort(np.where(present, first_pos, np.iinfo(np.int64).max), kind="stable")
    start = np.zeros(n_classes, dtype=np.int64)
    start[order] = np.concatenate([[0], np.cumsum(counts[order])[:-1]])
    stop = start + counts
    alloc = np.stack([_n_congruent(stop, i, n_splits) - _n_congruent(start, i, n_splits) for i in range(n_splits)])
    bounds = np.cumsum(alloc, axis=0).T  # (n_classes, n_splits)
    return bounds, prefixes


def assign_stratified(shard, ranges, prefixes, bounds) -> None:
    """Roles of an unshuffled ``StratifiedKFold`` (see :func:`stratified_plan`) for the shard's rows."""
    codes = _codes(shard)
    n_splits = bounds.shape[1]
    fold = np.empty(len(codes), dtype=np.int64)
    i = 0
    for (a, b), pre in zip(ranges, prefixes):
        c = codes[i : i + (b - a)]
        order = np.argsort(c, kind="stable")
        cs = c[order]
        first = np.searchsorted(cs, np.arange(len(pre)))  # where each class starts in the sorted codes
        rank = np.empty(len(c), dtype=np.int64)
        rank[order] = np.arange(len(c)) - first[cs] + np.asarray(pre)[cs]
        fold[i : i + (b - a)] = _fold_of(bounds, c, rank)
        i += b - a
    _set_test_fold(shard, np.minimum(fold, n_splits - 1), n_splits)


def _fold_of(bounds, codes, rank):
    out = np.empty(len(codes), dtype=np.int64)
    for k in np.unique(codes):
        m = codes == k
        out[m] = np.searchsorted(bounds[k], rank[m], side="right")
    return out


def prepare(shard, loss: str, n_outputs: int, class_weight=None):
    """Keep the shard's own sample weights (held-out scores use them, without class weights), then
    encode the targets for ``loss`` and apply the class weights
    (:func:`~dask_estimators.objectives.targets.prepare_targets`).

    Returns ``(S, n)`` of the whole shard and of each split's training rows, shape (n_splits + 1, 2).
    """
    from . import targets as T

    if "cv_raw_weight" not in shard.cache:  # replayed after a recovery: the first call's weights
        s = _array(shard, "sample_weight")
        shard.cache["cv_raw_weight"] = None if s is None else (s.copy() if isinstance(s, np.ndarray) else s.clone())
        T.prepare_targets(shard, loss, n_outputs, class_weight)
    return np.vstack([np.asarray(_linear.weight_sum(shard))[None, :], fold_weight_sums(shard)])


def _base_weight(shard):
    s = _array(shard, "sample_weight")
    if s is None:
        if _host_x(shard) is not None:
            return np.ones(shard.n_rows)
        X = shard.get("X")
        return torch.ones(X.shape[0], dtype=torch.float64, device=X.device)
    return s


def _train_weight(shard, k: int):
    """Training weights of split k: the shard's weights (class weights included) on its training rows, else 0."""
    key = ("cv_train_weight", k)
    w = shard.cache.get(key)
    if w is None:
        base = _base_weight(shard)
        mask = shard.cache["cv_roles"][k] == TRAIN
        if not isinstance(base, np.ndarray):
            mask = torch.from_numpy(mask).to(base.device)
        mask = mask.reshape(-1, 1) if base.ndim == 2 else mask
        w = base * (mask.astype(base.dtype) if isinstance(base, np.ndarray) else mask.to(base.dtype))
        shard.cache[key] = w
    return w


def fold_weight_sums(shard) -> np.ndarray:
    """``(S, n)`` of each split's training rows, shape (n_splits, 2) (see :func:`~.linear.weight_sum`)."""
    roles = shard.cache["cv_roles"]
    out = np.empty((roles.shape[0], 2))
    for k in range(roles.shape[0]):
        s = _train_weight(shard, k)
        out[k] = float(s.sum()) / (s.shape[1] if s.ndim == 2 else 1), float((roles[k] == TRAIN).sum())
    return out


class FoldView:
    """A shard as split ``k``'s training set: its ``sample_weight`` is zero off the training rows.

    The linear kernels read ``X``, ``y``, ``sample_weight``, ``n_rows`` and
    ``cache``; a view gives them the shard's arrays, the split's training
    weights, and a cache of its own (the curvature of the split's last point).
    """

    def __init__(self, shard, k: int):
        self._shard = shard
        self.k = int(k)
        self.n_rows = shard.n_rows
        self.device = shard.device
        self.cache = shard.cache.setdefault(("cv_cache", self.k), {})

    def get(self, name, default=None):
        if name == "sample_weight":
            return _linear._tensor(_train_weight(self._shard, self.k), self._shard.get("X"))
        return self._shard.get(name, default)

    def host(self, name, default=None):
        """As ``Shard.host``: the split's training weights for ``"sample_weight"`` (NumPy where the shard's X is
        in host memory, else None), the shard's own arrays otherwise."""
        if name == "sample_weight":
            w = _train_weight(self._shard, self.k)
            return w if isinstance(w, np.ndarray) else None
        host = getattr(self._shard, "host", None)
        return None if host is None else host(name, default)

    def host_csr(self, name):
        """As ``Shard.host_csr``: the shard's sparse X kept as NumPy, else None."""
        return _shard.csr(self._shard, name)

    def row_parts(self, name):
        """As ``Shard.row_parts`` (the training weights are :meth:`host`'s, in one part)."""
        if name == "sample_weight":
            w = self.host(name)
            return None if w is None else [(0, w)]
        return _shard.row_parts(self._shard, name)

    @property
    def threads(self):
        return getattr(self._shard, "threads", None)


def on_fold(shard, k, kernel, *args):
    """Kernel: ``kernel`` on split ``k``'s training rows (``k`` None: on all rows).

    A split seen through an affine map (:func:`set_affine`) takes the one-model kernels of the solvers
    (:func:`~.linear.value_grad`, :func:`~.linear.hessp`, :func:`~.linear.hess`) in the map's coordinates: the
    stored X's kernels at the mapped parameters, their gradient and Hessian brought back by the chain rule
    (the map of the parameters is linear).  Any other kernel is refused there.
    """
    if not getattr(kernel, "host_args", False) and any(isinstance(a, np.ndarray) and a.dtype.kind == "f"
                                                       for a in args):  # tensors, as the engine would give them
        device = shard.get("X").device
        args = tuple(torch.as_tensor(a, device=device) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                     for a in args)
    if k is None:
        return kernel(shard, *args)
    view = FoldView(shard, k)
    mp = _affine(shard, k)
    if mp is None:
        return kernel(view, *args)
    # the map's arithmetic on the parameters (a few numbers) in NumPy; the kernels read the shard as they do
    if kernel is _linear.value_grad:
        w, spec = args
        loss, g = kernel(view, _to_raw(_as_rows(w), spec, mp)[0], _raw_spec(spec))
        return loss, _from_raw(_as_rows(g), spec, mp)[0]
    if kernel is _linear.hessp:
        p, spec = args
        hp = kernel(view, _to_raw(_as_rows(p), spec, mp)[0], _raw_spec(spec))
        return _from_raw(_as_rows(hp), spec, mp)[0]
    if kernel is _linear.hess:
        (spec,) = args
        H = _as_rows(kernel(view, _raw_spec(spec))).reshape(-1, _raw_spec(spec).n_params)
        J = _to_raw(np.eye(spec.n_params), spec, mp).T  # raw = J @ w
        return J.T @ H @ J
    raise ValueError(f"Split {k} sees X through an affine map: {kernel.__name__} cannot evaluate it.")


def _as_rows(v):
    """A vector (NumPy or a tensor) as a float64 NumPy row (1, n)."""
    return _shard.numpy64(v).reshape(1, -1)


def _raw_spec(spec):
    """The spec of a mapped split's models as evaluated on the stored X: with an intercept (the map's offset
    becomes one even where the model has none)."""
    import dataclasses

    return dataclasses.replace(spec, fit_intercept=True)


def _to_raw(ws, spec, mp):
    """Parameters ``ws`` (m, n_params, NumPy) of models on ``a + s * x`` as those of the same models on the stored
    x, with an intercept: ``(W * s, b + W @ a)`` (linear in ``ws``)."""
    A, Sc = mp
    K, d = spec.n_outputs, spec.n_features
    m = ws.shape[0]
    W = ws[:, : K * d].reshape(m, K, d)
    b = ws[:, K * d :] if spec.fit_intercept else np.zeros((m, K))
    return np.concatenate([(W * Sc).reshape(m, K * d), b + (W * A).sum(2)], axis=1)


def _from_raw(g, spec, mp):
    """Gradients ``g`` (m, n_raw) with respect to :func:`_to_raw`'s parameters, as gradients with respect to
    the mapped model's: the transposed map."""
    A, Sc = mp
    K, d = spec.n_outputs, spec.n_features
    m = g.shape[0]
    gW, gb = g[:, : K * d].reshape(m, K, d), g[:, K * d :]
    gW = (gW * Sc + gb[:, :, None] * A).reshape(m, K * d)
    return np.concatenate([gW, gb], axis=1) if spec.fit_intercept else gW


def drop_fold_state(shard) -> None:
    """Forget the splits' training weights and cached curvatures (the roles stay)."""
    for key in [k for k in shard.cache if isinstance(k, tuple) and k and str(k[0]).startswith("cv_")]:
        del shard.cache[key]


def set_affine(shard, maps) -> None:
    """Each split's per-feature affine map of X, ``maps[k]``: None (X as stored) or ``(a, s)``, the split's
    models seeing ``a + s * x`` for a stored row ``x`` (arrays of n_features)."""
    shard.cache["cv_affine"] = [None if m is None else tuple(np.asarray(v, dtype=np.float64) for v in m)
                                for m in maps]


def _affine(shard, k):
    maps = shard.cache.get("cv_affine")
    return None if maps is None or k is None or k >= len(maps) else maps[k]


def partial_fit_on_folds(shard, pairs):
    """Kernel: for each ``(transformer, k)`` of ``pairs``, ``transformer.partial_fit`` on split k's training
    rows of the shard (as NumPy or scipy.sparse, in row order); returns the transformers, to go on to the next
    shard.  Chained over the shards in row order, each is fitted on its split's training rows.

    Dense training rows in a few runs (an unshuffled k-fold's: the rows before and after the held-out
    block) are handed over as views of the stored X, one ``partial_fit`` per run, without a copy.
    """
    X = _host_x(shard)
    X = shard.get("X") if X is None else X
    out = []
    for transformer, k in pairs:
        train = shard.cache["cv_roles"][k] == TRAIN
        for rows in _training_blocks(X, train):
            transformer.partial_fit(rows)
        out.append(transformer)
    return out


def role_group_stats(shard, kind: str) -> list:
    """Kernel: per-feature statistics of the shard's dense rows, grouped by the set of splits they train
    (rows of one group train the same splits: an unshuffled k-fold's shard has at most k + 1 groups), in one
    pass over X.

    Returns ``[(trains, n, stats)]``, one entry per group that trains some split: ``trains`` a boolean array
    of n_splits, ``n`` its rows and ``stats``, by ``kind``, a tuple of float64 arrays of n_features:
    ``"moments"`` (mean, sum of squared deviations from it), ``"range"`` (min, max) or ``"maxabs"`` (max |x|).
    :func:`combine_group_stats` adds the groups of a split's training rows up.
    None for sparse X (its transformers go round the shards, :func:`partial_fit_on_folds`).
    """
    X = _host_x(shard)
    if X is None:
        X = shard.get("X")
    if is_sparse(X) or is_host_csr(X):
        return None
    groups, inverse = _role_groups(shard)
    out = []
    for g, trains in enumerate(groups):
        if not trains.any():
            continue
        blocks = _training_blocks(X, inverse == g)
        parts = [(b.shape[0], _block_stats(b, kind)) for b in blocks]
        n, stats = parts[0]
        for m, more in parts[1:]:
            n, stats = _merge_stats(kind, n, stats, m, more)
        out.append((trains, n, stats))
    return out


def _role_groups(shard):
    """The shard's row groups by the set of splits they train: ``(groups, inverse)``, ``groups[g]`` a boolean
    array of n_splits (the splits group g trains) and ``inverse`` each row's group."""
    train = shard.cache["cv_roles"] == TRAIN
    n_splits = train.shape[0]
    if n_splits <= 62:
        codes = (train.astype(np.int64) << np.arange(n_splits, dtype=np.int64)[:, None]).sum(axis=0)
        keys, inverse = np.unique(codes, return_inverse=True)
        groups = [((key >> np.arange(n_splits)) & 1).astype(bool) for key in keys]
    else:  # pragma: no cover - a search of more than 62 splits
        groups_, inverse = np.unique(train.T, axis=0, return_inverse=True)
        groups = list(groups_)
    return groups, inverse.reshape(-1)


def fold_row_sums(shard):
    """Kernel: the weighted sums of the rows and of their squares, and the weights' sum, of all the shard's rows
    and of each split's training rows (the weights with the class weights), as their models see the rows (a split
    with an affine map, :func:`set_affine`: ``a + s * x``): shape (n_splits + 1, K, 2 * n_features + 1), the
    weights' sum last, K the weights' columns (1: one weight per row).  From them, each split's mean row and its
    columns' spreads (:mod:`.centred`); one pass over X for all the splits.
    """
    n_splits = shard.cache["cv_roles"].shape[0]
    weights = [_base_weight(shard)] + [_train_weight(shard, k) for k in range(n_splits)]
    X = _host_x(shard)
    if X is not None:
        G = np.concatenate([np.asarray(w, dtype=np.float64).reshape(X.shape[0], -1) for w in weights], axis=1)
        S = G.sum(axis=0)
    else:
        X = shard.get("X")
        G = torch.cat([_linear._tensor(w, X).to(torch.float64).reshape(X.shape[0], -1) for w in weights], dim=1)
        S = _shard.numpy64(G.sum(0))
    GX, GX2 = _moments(G, X)
    d = X.shape[1]
    GX, GX2 = GX.reshape(n_splits + 1, -1, d), GX2.reshape(n_splits + 1, -1, d)
    S = np.asarray(S, dtype=np.float64).reshape(n_splits + 1, -1, 1)
    for k in range(n_splits):
        mp = _affine(shard, k)
        if mp is not None:  # sums of a + s x and of its square
            a, scale = mp
            GX2[k + 1] = a * a * S[k + 1] + 2 * a * scale * GX[k + 1] + scale * scale * GX2[k + 1]
            GX[k + 1] = a * S[k + 1] + scale * GX[k + 1]
    return np.concatenate([GX, GX2, S], axis=2)


def _moments(G, X):
    """``G.T @ X`` and ``G.T @ (X * X)`` as float64 NumPy, for a NumPy, dense tensor or sparse CSR X (weights
    ``G`` (n, m) of X's kind): a float64 copy of :data:`_GRAM_BLOCK` rows at a time, or the CSR's squared
    values."""
    if is_host_csr(X):  # in host memory: scipy's products, no torch
        squares = X.copy()
        squares.data = np.square(X.data, dtype=np.float64)
        return (X.T @ G).T.astype(np.float64, copy=False), (squares.T @ G).T
    if is_sparse(X):
        squares = torch.sparse_csr_tensor(X.crow_indices(), X.col_indices(), X.values() * X.values(), size=X.shape,
                                          check_invariants=False)
        return _shard.numpy64(_xt_times(G, X)), _shard.numpy64(_xt_times(G, squares))
    host = isinstance(X, np.ndarray)
    out = [np.zeros((G.shape[1], X.shape[1])), np.zeros((G.shape[1], X.shape[1]))]
    for a in range(0, X.shape[0], _GRAM_BLOCK):
        Xb = X[a : a + _GRAM_BLOCK]
        Xb = Xb.astype(np.float64) if host else Xb.to(torch.float64)
        Gb = G[a : a + _GRAM_BLOCK].T
        out[0] += Gb @ Xb if host else _shard.numpy64(Gb @ Xb)
        out[1] += Gb @ (Xb * Xb) if host else _shard.numpy64(Gb @ (Xb * Xb))
    return out


def quadratic_hessians(shard, spec):
    """Kernel: every split's Hessian of the squared loss's raw sum over its training rows, each as
    ``on_fold(shard, k, hess, spec)`` gives it (in its affine map's coordinates, :func:`set_affine`), shape
    (n_splits, n_params, n_params).

    The squared loss's Hessian is ``sum s x~ x~ᵀ`` (``x~`` a row with its 1), the same at every point.  For
    dense X each group of rows that train the same splits (an unshuffled k-fold's shard has at most k + 1)
    adds its sum to those splits': X is read once for all of them, where each split's own Hessian reads it
    once.  Sparse X: each split's sum in turn.  The shard's weights must be one per row.
    """
    from . import linear as lin

    X = _host_x(shard)
    host = X is not None
    if host:
        base = _base_weight(shard).astype(np.float64, copy=False).reshape(X.shape[0], -1)
    else:
        X = shard.get("X")
        base = _linear._tensor(_base_weight(shard), X).to(torch.float64).reshape(X.shape[0], -1)
    if base.shape[1] != 1:
        raise ValueError("quadratic_hessians needs one weight per row.")
    roles = shard.cache["cv_roles"]
    n_splits, d = roles.shape[0], X.shape[1]
    G = np.zeros((n_splits, d + 1, d + 1))
    if is_host_csr(X):  # each split's sum in turn, by the numba CSR kernel
        for k in range(n_splits):
            G[k] = lin._host_gram(X, base[:, 0] * (roles[k] == TRAIN), True)
    elif is_sparse(X):
        for k in range(n_splits):
            mask = torch.from_numpy(roles[k] == TRAIN).to(base.device)
            G[k] = lin._sparse_gram(X, base[:, 0] * mask, True).cpu().numpy()
    else:
        groups, inverse = _role_groups(shard)
        for g, trains in enumerate(groups):
            if not trains.any():
                continue
            total = sum(_gram_blocks(X, np.flatnonzero(inverse == g), base))
            G[np.flatnonzero(trains)] += total if host else total.cpu().numpy()
    out = np.zeros((n_splits, spec.n_params, spec.n_params))
    for k in range(n_splits):
        mp = _affine(shard, k)
        layout = spec if mp is None else _raw_spec(spec)
        block = G[k] if layout.fit_intercept else G[k, :d, :d]
        H = np.zeros((layout.n_params, layout.n_params))
        for o in range(spec.n_outputs):
            idx = lin._param_index(layout, o)
            H[idx[:, None], idx[None, :]] = block
        if mp is not None:  # as on_fold brings a mapped split's Hessian back
            J = _to_raw(np.eye(spec.n_params), spec, mp).T
            H = J.T @ H @ J
        out[k] = H
    return out


def _block_stats(B, kind):
    if kind == "moments":
        mean = B.mean(axis=0, dtype=np.float64)
        d = B - mean
        return mean, np.einsum("ij,ij->j", d, d)
    if kind == "range":
        return B.min(axis=0).astype(np.float64), B.max(axis=0).astype(np.float64)
    if kind == "maxabs":
        return (np.maximum(np.abs(B.min(axis=0)), np.abs(B.max(axis=0))).astype(np.float64),)
    raise ValueError(f"Unknown statistics kind {kind!r}.")


def _merge_stats(kind, n, a, m, b):
    """The statistics of two row groups' union, ``n`` and ``m`` rows (Chan's pairwise update for the moments)."""
    if kind == "moments":
        total = n + m
        delta = b[0] - a[0]
        return total, (a[0] + delta * (m / total), a[1] + b[1] + delta * delta * (n * m / total))
    if kind == "range":
        return n + m, (np.minimum(a[0], b[0]), np.maximum(a[1], b[1]))
    return n + m, (np.maximum(a[0], b[0]),)


def combine_group_stats(kind: str, groups, k: int):
    """``(n, stats)`` over split k's training rows, from the shards' :func:`role_group_stats` (``groups``: all
    their entries); ``(0, None)`` when no group trains split k."""
    n, stats = 0, None
    for trains, m, more in groups:
        if not trains[k]:
            continue
        n, stats = (m, more) if stats is None else _merge_stats(kind, n, stats, m, more)
    return n, stats


#: Training rows in at most this many runs are handed to ``partial_fit`` run by run, as views.
_MAX_VIEW_RUNS = 4


def _training_blocks(X, train):
    """The rows of ``X`` where ``train`` (a boolean mask) holds, as NumPy or scipy.sparse blocks in row order:
    views of X's runs of training rows where there are few, else one copy."""
    if not train.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], train.astype(np.int8), [0]])))
    runs = list(zip(edges[::2], edges[1::2]))
    if isinstance(X, np.ndarray):
        return [X[a:b] for a, b in runs] if len(runs) <= _MAX_VIEW_RUNS else [X[train]]
    if is_host_csr(X):
        import scipy.sparse as sp

        return [sp.csr_matrix(X[np.flatnonzero(train)])]
    if not is_sparse(X) and len(runs) <= _MAX_VIEW_RUNS:
        host = X.cpu().numpy()
        return [host[a:b] for a, b in runs]
    if is_sparse(X):
        return [_as_scipy(take_rows(X, torch.from_numpy(np.flatnonzero(train)).to(X.device)).cpu())]
    return [X[torch.from_numpy(train).to(X.device)].cpu().numpy()]


def _as_scipy(X):
    """A CPU sparse CSR tensor as a scipy.sparse CSR matrix over the same arrays."""
    import scipy.sparse as sp

    return sp.csr_matrix(csr_parts(X), shape=tuple(X.shape))


def fold_value_grad_many(shard, folds, ws, spec):
    """Kernel: :func:`~.linear.value_grad` of several splits' models in one pass over X.

    A split with an affine map (:func:`set_affine`) has its models, ``(W, b)``
    on ``a + s * x``, evaluated as ``(W * s, b + W @ a)`` on the stored ``x``
    (with an intercept, even where the model has none), and their gradients
    brought back by the chain rule: the same values, one pass over the stored X.
    """
    maps = [_affine(shard, k) for k in folds]
    if all(m is None for m in maps):
        return _value_grad_many(shard, folds, _shard.numpy64(ws), spec)
    d = spec.n_features
    ws = _shard.numpy64(ws)
    identity = (np.zeros(d), np.ones(d))
    raw = np.concatenate([_to_raw(ws[j : j + 1], spec, mp or identity) for j, mp in enumerate(maps)])
    losses, g = _value_grad_many(shard, folds, raw, _raw_spec(spec))
    g = _as_rows(g).reshape(len(folds), -1)
    grads = np.concatenate([_from_raw(g[j : j + 1], spec, mp or identity) for j, mp in enumerate(maps)])
    return losses, grads


def _value_grad_many(shard, folds, ws, spec):
    """:func:`fold_value_grad_many` on X as stored.

    ``folds`` lists split indices (None for all rows) and ``ws`` the
    matching parameter vectors, shape (len(folds), n_params).  ``X @ W`` is
    computed for all of them at once (X is read once for the predictions and
    once for the gradients, whatever the number of splits).  Returns
    ``(losses (m,), grads (m, n_params))`` of raw sums.  The torch pointwise
    losses are used (not the fused numba kernels), so no Hessian state is kept.
    """
    m, K, d = len(folds), spec.n_outputs, spec.n_features
    loss_fn = spec.get_loss()
    weights = [_base_weight(shard) if k is None else _train_weight(shard, k) for k in folds]
    one_output = K == 1 and not loss_fn.coupled and all(s.ndim == 1 for s in weights)
    host = _host_x(shard)
    if host is not None and _linear._host_rows(shard, spec) is not None:  # NumPy and numba, no tensor
        if is_host_csr(host):
            return _csr_many(shard, host, weights, ws, spec)
        if one_output:
            return _fused_many(shard, folds, weights, ws, spec)
    X, y = shard.get("X"), shard.get("y")
    sparse = is_sparse(X)
    ws = _linear._tensor(ws, X)
    weights = [_linear._tensor(w, X) for w in weights]
    if one_output and not sparse and _linear._use_fused(X, spec):
        return _fused_many(shard, folds, weights, ws, spec)
    Ws = ws[:, : K * d].reshape(m * K, d)
    if X.dtype != Ws.dtype:  # float32 X: the linear kernels' float32 products with the parameters' two halves
        Zt = torch.cat([_linear._z(X[sl] if not sparse else X, Ws, None).T for sl in _linear._row_blocks(X)], dim=1)
    else:
        # (W @ X.T): BLAS streams X once; X @ W.T with a few columns took a much slower path (dense X)
        Zt = (X @ Ws.T).T if sparse else Ws @ X.T  # (m*K, n)
    if spec.fit_intercept:
        Zt = Zt + ws[:, K * d :].reshape(m * K, 1)
    if one_output:
        # one output per model: the pointwise loss of every split's row at once (y broadcasts over them)
        St = _stacked_weights(shard, folds, weights)  # (m, n)
        loss, Gt, _ = loss_fn.value_grad(Zt, y.reshape(1, -1))
        Gt = Gt * St
        losses = (loss * St).sum(1)
        gW, gb = _xt_times(Gt.T, X), Gt.sum(1)  # X read once more
    else:
        Z = Zt.T
        G = torch.empty((X.shape[0], m * K), dtype=Zt.dtype, device=X.device)
        losses = torch.empty(m, dtype=Zt.dtype, device=X.device)
        for j, s in enumerate(weights):
            s = s[:, None] if s.ndim == 1 else s
            loss, g, _ = loss_fn.value_grad(Z[:, j * K : (j + 1) * K], y)
            losses[j] = (loss * s).sum()
            G[:, j * K : (j + 1) * K] = g * s
        gW, gb = _xt_times(G, X), G.sum(0)  # X read once more
    gW = gW.reshape(m, K * d)
    grads = torch.cat([gW, gb.reshape(m, K)], dim=1) if spec.fit_intercept else gW
    return losses, grads


def _stacked_weights(shard, folds, weights, layout="rows"):
    """The splits' training weights side by side: (m, n) ``"rows"`` (torch) or (n, m) ``"columns"`` (C order).

    Kept while the same splits run (along a path, until one of them converges).
    """
    key = ("cv_weight_" + layout, tuple(folds))
    out = shard.cache.get(key)
    if out is None:
        prefix = "cv_weight_" + layout
        for old in [c for c in shard.cache if isinstance(c, tuple) and c and c[0] == prefix]:
            del shard.cache[old]
        if isinstance(weights[0], np.ndarray):
            St = np.stack(weights)
            out = shard.cache[key] = St if layout == "rows" else np.ascontiguousarray(St.T)
        else:
            St = torch.stack(weights)
            out = shard.cache[key] = St if layout == "rows" else St.T.contiguous()
    return out


def _csr_many(shard, X, weights, ws, spec):
    """:func:`fold_value_grad_many` on a sparse X in host memory: the numba CSR kernel once per model, each with
    its split's training weights (a CSR row is cheap to read again; no Hessian state is kept)."""
    from . import _fused

    K, d = spec.n_outputs, spec.n_features
    y = _shard.host(shard, "y")
    code, param = spec.kernel()
    curv = np.empty((X.shape[0], K))
    ws = _shard.numpy64(ws)
    losses, grads = np.empty(len(weights)), np.empty((len(weights), spec.n_params))
    for j, s in enumerate(weights):
        W = np.ascontiguousarray(ws[j, : K * d].reshape(K, d))
        b = ws[j, K * d :] if spec.fit_intercept else None
        total, gW, gb = _fused.csr_value_grad(*csr_parts(X), d, y, s, W, b, code, param, curv)
        losses[j] = total
        grads[j] = _linear._pack_numpy(spec, gW, gb)
    return losses, grads


def _fused_many(shard, folds, weights, ws, spec):
    """:func:`fold_value_grad_many` with the one-pass numba kernel: every split's model is one output of it.

    The splits' models are the K rows of the kernel's W, each with its own
    weight column (its training weights); each row of X is read once for
    all of them, while it is in cache.
    """
    from . import _fused

    X = _host_x(shard)
    X = shard.get("X").numpy() if X is None else X
    n, m, d = X.shape[0], len(folds), spec.n_features
    S = _stacked_weights(shard, folds, weights, layout="columns")  # (n, m)
    Y = shard.cache.get("cv_y_columns")
    if Y is None or Y.shape[1] != m:  # y repeated in each split's column
        y = np.asarray(_array(shard, "y"))
        Y = shard.cache["cv_y_columns"] = np.ascontiguousarray(np.broadcast_to(y.reshape(n, 1), (n, m)))
    curv = shard.cache.get("cv_curv_columns")
    if curv is None or curv.shape[1] != m:  # scratch: the fused kernel writes each row's curvature
        curv = shard.cache["cv_curv_columns"] = np.empty((n, m))
    ws = _shard.numpy64(ws)
    W = ws[:, :d]
    b = ws[:, d] if spec.fit_intercept else None
    code, param = spec.kernel()
    S = S if isinstance(S, np.ndarray) else S.numpy()
    losses, gW, gb = _fused.value_grad(X, Y, S, np.ascontiguousarray(W), b, code, param, curv, per_output=True)
    grads = np.concatenate([gW, gb[:, None]], axis=1) if spec.fit_intercept else gW
    return losses, grads


def xy_sums(shard):
    """Kernel: ``X.T @ (s * y)``, ``sum s * x``, ``sum s * y``, ``sum s`` (the alpha grid's statistics of
    ``LinearRegressionCV``; here, not beside the estimator, so that a worker unpickling it imports neither
    scikit-learn nor the estimators)."""
    X = _host_x(shard)
    if X is not None:  # in host memory: NumPy, no tensor
        y, s = shard.host("y")[:, 0], shard.host("sample_weight")
        sy = y if s is None else s * y
        Xsy, Sx = host_xt_times(np.stack([sy, np.ones_like(y) if s is None else s], axis=1), X)
        return Xsy, Sx, sy.sum(), float(X.shape[0]) if s is None else s.sum()
    X, y = shard.get("X"), shard.get("y")[:, 0]
    s = shard.get("sample_weight")
    sy = y if s is None else s * y
    S = float(X.shape[0]) if s is None else s.sum()
    if is_sparse(X) or X.dtype != y.dtype:
        # both products in one pass over X (a CSR's values, kept sparse; a float32 X's blocks, summed in float64)
        Xsy, Sx = _xt_times(torch.stack([sy, torch.ones_like(y) if s is None else s], dim=1), X)
        return Xsy, Sx, sy.sum(), S
    Sx = X.sum(0) if s is None else s @ X
    return X.T @ sy, Sx, sy.sum(), S


def host_xt_times(G, X):
    """``G.T @ X`` (float64) for a NumPy ``X``: a float32 X's row blocks widened one at a time (no float64 copy of
    all of it), the blocks' products added."""
    if X.dtype == np.float64:
        return G.T @ X
    out = np.zeros((G.shape[1], X.shape[1]))
    for a in range(0, X.shape[0], _GRAM_BLOCK):
        out += G[a : a + _GRAM_BLOCK].T @ X[a : a + _GRAM_BLOCK].astype(np.float64)
    return out


def _xt_times(G, X):
    """``G.T @ X`` for a dense or sparse CSR X (the linear kernels' transposed product), in G's dtype (float64
    also for a float32 X: its row blocks' products are added in float64)."""
    if not is_sparse(X) and X.dtype == G.dtype:
        return G.T @ X
    out = torch.zeros(G.shape[1], X.shape[1], dtype=G.dtype, device=G.device)
    for sl in _linear._row_blocks(X):
        _linear._add_xt_times(out, G[sl], _linear._rows(X, sl))
    return out


def _as_slice(idx):
    """``slice(a, b)`` when the sorted row indices ``idx`` are the range a..b-1, else None."""
    n = int(idx.shape[0])
    if n == 0:
        return slice(0, 0)
    a, b = int(idx[0]), int(idx[-1]) + 1
    return slice(a, b) if b - a == n else None


#: Bytes of the buffer that :func:`_rows_product` gathers scattered rows into, a block at a time.
_GATHER_BYTES = 1 << 21


def _rows_product(X, idx, Wt):
    """``X[idx] @ Wt`` without a copy of all the rows ``idx``.

    An unshuffled k-fold's held-out rows are one range of the shard, read in
    place.  Scattered rows (stratified or shuffled folds) are gathered a block
    at a time into one small buffer: a gather of all of them at once allocated
    and wrote a fresh array of a fifth of the shard, many times the cost of
    the product (docs/design-measurements.md).
    """
    if is_sparse(X):
        return _linear._z(take_rows(X, idx), Wt.T, None)
    rows = _as_slice(idx)
    if rows is not None:
        return _linear._z(X[rows], Wt.T, None)
    n, d = len(idx), X.shape[1]
    out = torch.empty((n, Wt.shape[1]), dtype=Wt.dtype, device=X.device)
    block = max(1, min(n, _GATHER_BYTES // max(1, d * X.element_size())))
    buf = torch.empty((block, d), dtype=X.dtype, device=X.device)
    for a in range(0, n, block):
        j = idx[a : a + block]
        rows_buf = buf[: len(j)]
        torch.index_select(X, 0, j, out=rows_buf)
        if X.dtype == Wt.dtype:
            torch.matmul(rows_buf, Wt, out=out[a : a + len(j)])
        else:  # float32 rows: the float32 product with the parameters' halves, in float64
            out[a : a + len(j)] = _linear._z(rows_buf, Wt.T, None)
    return out


def heldout_sums(shard, k, ws, spec, metric: str, weighted: bool = True, shift: float = 0.0):
    """Kernel: raw sums of ``metric`` over split ``k``'s held-out rows, for each parameter vector in ``ws``
    (of the split's models on ``a + s * x`` where it has an affine map, :func:`set_affine`).

    Weights are the shard's own sample weights (without class weights), as
    scikit-learn's scorers get them (``weighted`` False: none, as a scorer
    that is not given them).  Returns an array (len(ws), m):

    * ``"accuracy"``: weight of the correct predictions, total weight;
    * ``"log_loss"``: weighted log-loss sum, total weight;
    * ``"squared_error"``: weighted sum of squared errors, total weight;
    * ``"r2"``: squared errors, sum of w*(y - shift), sum of w*(y - shift)**2, total weight (``shift`` near
      y's mean, so that the total sum of squares is not the difference of two large sums).
    """
    roles = shard.cache["cv_roles"][k]
    mp = _affine(shard, k)
    if mp is not None:  # the same predictions from the stored rows
        ws = _to_raw(_shard.numpy64(ws).reshape(-1, spec.n_params), spec, mp)
        spec = _raw_spec(spec)
    if _host_x(shard) is not None:
        return _heldout_host(shard, k, roles, ws, spec, metric, weighted, shift)
    key = ("cv_test_rows", k)
    idx = shard.cache.get(key)
    X = shard.get("X")
    if idx is None:
        idx = torch.from_numpy(np.flatnonzero(roles == TEST)).to(X.device)
        shard.cache[key] = idx
    yt = shard.get("y")[idx]
    raw = shard.cache.get("cv_raw_weight")
    f64 = torch.float64
    st = (torch.ones(len(idx), dtype=f64, device=X.device) if raw is None or not weighted
          else _linear._tensor(raw, X)[idx].to(f64))
    ws = torch.as_tensor(ws, dtype=f64, device=X.device).reshape(-1, spec.n_params)
    K, d = spec.n_outputs, spec.n_features
    # every parameter vector's predictions in one product (X read once for all of them)
    Z_all = _rows_product(X, idx, ws[:, : K * d].reshape(-1, d).T.contiguous())
    if spec.fit_intercept:
        Z_all = Z_all + ws[:, K * d :].reshape(1, -1)
    out = []
    for i in range(ws.shape[0]):
        z = Z_all[:, i * K : (i + 1) * K]
        if metric == "accuracy":
            if spec.loss == "binomial":
                right = (z[:, 0] > 0).to(f64) == yt[:, 0]
            else:
                right = z.argmax(1) == yt
            out.append(torch.stack([(st * right.to(f64)).sum(), st.sum()]))
        elif metric == "log_loss":
            if spec.loss == "binomial":
                ll = torch.nn.functional.softplus(z[:, 0]) - yt[:, 0] * z[:, 0]
            else:
                ll = -torch.log_softmax(z, 1).gather(1, yt.reshape(-1, 1))[:, 0]
            out.append(torch.stack([(st * ll).sum(), st.sum()]))
        elif metric in ("squared_error", "r2"):
            out.append(torch.stack(_squared_sums(yt, z, st, metric, shift)))
        else:
            raise ValueError(f"Unknown held-out metric {metric!r}.")
    return torch.stack(out)


def _squared_sums(yt, z, st, metric, shift):
    """A regression's held-out sums (NumPy or tensors alike): squared errors, for ``"r2"`` the sums of
    ``y - shift`` and of its square, then the total weight."""
    parts = [(st * ((yt - z) ** 2).sum(1)).sum()]
    if metric == "r2":
        yy = yt[:, 0] - shift
        parts += [(st * yy).sum(), (st * yy * yy).sum()]
    return parts + [st.sum()]


def _heldout_host(shard, k, roles, ws, spec, metric, weighted, shift):
    """:func:`heldout_sums` of a shard whose X is in host memory, with NumPy (the same sums as the tensors')."""
    X = _host_x(shard)
    key = ("cv_test_rows_host", k)
    idx = shard.cache.get(key)
    if idx is None:
        idx = shard.cache[key] = np.flatnonzero(roles == TEST)
    yt = shard.host("y")[idx]
    raw = shard.cache.get("cv_raw_weight")
    st = np.ones(len(idx)) if raw is None or not weighted else raw[idx].astype(np.float64)
    ws = np.asarray(ws, dtype=np.float64).reshape(-1, spec.n_params)
    K, d = spec.n_outputs, spec.n_features
    Z_all = _rows_product_host(X, idx, np.ascontiguousarray(ws[:, : K * d].reshape(-1, d).T))
    if spec.fit_intercept:
        Z_all += ws[:, K * d :].reshape(1, -1)
    out = []
    for i in range(ws.shape[0]):
        z = Z_all[:, i * K : (i + 1) * K]
        if metric == "accuracy":
            right = (z[:, 0] > 0) == (yt[:, 0] > 0.5) if spec.loss == "binomial" else z.argmax(1) == yt
            out.append([(st * right).sum(), st.sum()])
        elif metric == "log_loss":
            if spec.loss == "binomial":
                ll = np.logaddexp(0.0, z[:, 0]) - yt[:, 0] * z[:, 0]
            else:
                top = z.max(1)
                ll = top + np.log(np.exp(z - top[:, None]).sum(1)) - z[np.arange(len(idx)), yt]
            out.append([(st * ll).sum(), st.sum()])
        elif metric in ("squared_error", "r2"):
            out.append(_squared_sums(yt, z, st, metric, shift))
        else:
            raise ValueError(f"Unknown held-out metric {metric!r}.")
    return np.array(out, dtype=np.float64)


def _rows_product_host(X, idx, Wt):
    """:func:`_rows_product` for a NumPy X: ``X[idx] @ Wt`` in float64, scattered rows gathered a block at a time
    (a scipy sparse X's rows taken at once: they are few values)."""
    rows = _as_slice(idx)
    if is_host_csr(X):
        return np.asarray(X[rows if rows is not None else idx] @ Wt, dtype=np.float64)
    if rows is not None:
        return X[rows] @ Wt
    out = np.empty((len(idx), Wt.shape[1]))
    block = max(1, min(len(idx), _GATHER_BYTES // max(1, X.shape[1] * X.itemsize)))
    buf = np.empty((block, X.shape[1]), dtype=X.dtype)
    for a in range(0, len(idx), block):
        j = idx[a : a + block]
        np.take(X, j, axis=0, out=buf[: len(j)])
        out[a : a + len(j)] = buf[: len(j)] @ Wt
    return out


#: Rows per block of :func:`gram_sums` (a float64 copy of a block of ``[X, y, 1]`` at a time).
_GRAM_BLOCK = 16384


def _gram_blocks(X, rows, s, y=None, shift=None):
    """``sum s z zᵀ`` over the rows ``rows`` (sorted positions) of ``z = [x, y, 1]`` (without y where None),
    its first columns less ``shift`` where given, in float64: one term per block of :data:`_GRAM_BLOCK` rows
    (a float64 copy of the block at a time; a block of consecutive rows is read as a slice of X).  ``s``:
    weights (n,) or (n, 1), or None."""
    d = X.shape[1]
    width = d + (1 if y is None else 2)
    host = isinstance(X, np.ndarray)
    for start in range(0, len(rows), _GRAM_BLOCK):
        part = rows[start : start + _GRAM_BLOCK]
        idx = (slice(int(part[0]), int(part[-1]) + 1) if part[-1] - part[0] + 1 == len(part)
               else part if host else torch.from_numpy(part).to(X.device))
        if host:
            Z = np.empty((len(part), width))
        else:
            Z = torch.empty((len(part), width), dtype=torch.float64, device=X.device)
        Z[:, :d] = X[idx]
        if y is not None:
            Z[:, d] = y[idx, 0]
        if shift is not None:
            Z[:, : width - 1] -= shift
        Z[:, width - 1] = 1.0
        if s is None:
            yield Z.T @ Z
        else:
            sb = s[idx].reshape(-1, 1)
            yield Z.T @ (Z * (sb.astype(np.float64, copy=False) if host else sb.to(torch.float64)))


def gram_sums(shard, shift, direct=()):
    """Kernel: weighted second moments of the rows ``z = [x - shift[:d], y - shift[d], 1]``, per split.

    For the squared loss these sums are all a split's fits and held-out errors
    need (:mod:`dask_estimators.optim.gram_cd`).  The shift (the data's
    weighted means, or zeros) keeps them accurate where features have large
    means.  Returns an array (1 + n_splits + len(direct), d + 2, d + 2) of
    ``sum s * z zᵀ``, float64:

    * ``[0]`` over all the shard's rows;
    * ``[1 + k]`` over split k's held-out rows;
    * ``[1 + n_splits + i]`` over the training rows of split ``direct[i]``
      (splits that leave rows out of both sides; the others' training sums
      are ``[0] - [1 + k]``).

    ``s`` is the shard's sample weight: a regressor's held-out and training
    weights are the same.  Where the held-out sets are disjoint, X is read
    once (each row's block goes to its split's sum and to ``[0]``); where
    they overlap, once more for ``[0]``.  Dense X only.
    """
    X = _host_x(shard)
    roles = shard.cache["cv_roles"]
    n_splits = roles.shape[0]
    if X is not None:  # NumPy: no tensor, no torch
        y, s = shard.host("y"), shard.host("sample_weight")
        shift = np.asarray(shift, dtype=np.float64)
        out = np.zeros((1 + n_splits + len(direct), X.shape[1] + 2, X.shape[1] + 2))
    else:
        X, y, s = shard.get("X"), shard.get("y"), shard.get("sample_weight")
        shift = torch.as_tensor(np.asarray(shift, dtype=np.float64), device=X.device)
        out = torch.zeros((1 + n_splits + len(direct), X.shape[1] + 2, X.shape[1] + 2), dtype=torch.float64,
                          device=X.device)

    def add(target, rows):
        for block in _gram_blocks(X, rows, s, y, shift):
            for t in target:
                out[t] += block

    held_out = roles == TEST
    disjoint = bool((held_out.sum(axis=0) <= 1).all())
    for k in range(n_splits):
        add((1 + k, 0) if disjoint else (1 + k,), np.flatnonzero(held_out[k]))
    if disjoint:
        add((0,), np.flatnonzero(~held_out.any(axis=0)))
    else:
        add((0,), np.arange(X.shape[0]))
    for i, k in enumerate(direct):
        add((1 + n_splits + i,), np.flatnonzero(roles[k] == TRAIN))
    return out


#: The kernels here that take their float arguments as NumPy (the engine's ``run_kernel`` passes them as they are):
#: on a shard with its X in host memory they run without torch, where no affine map is set.
for _kernel in (on_fold, fold_value_grad_many, heldout_sums, gram_sums):
    _kernel.host_args = True
