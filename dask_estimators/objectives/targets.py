"""Per-shard target preparation: label discovery, encoding, class weights.

These run on the workers through ``Placement.map`` and work on a shard in
place, so labels never travel back to the client; only the small results
(unique labels, class counts) do.
"""

from __future__ import annotations

import numpy as np

from .._lazy import lazy_module

torch = lazy_module("torch")  # the encodings run on the workers

from .._validation import classes_and_codes
from . import _host as _shard
from .losses import get_loss

__all__ = ["unique_labels", "encode_labels", "float_targets", "class_counts", "prepare_targets", "prepare_and_weigh", "trailing_shape"]


def _host(a):
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _host_y(shard, name="y"):
    """The shard's ``name`` as NumPy (None where it has none): read in place where the shard keeps it in host
    memory (no torch), else copied from its tensor."""
    a = _shard.array(shard, name)
    return a if a is None or isinstance(a, np.ndarray) else _host(a)


def unique_labels(shard):
    """The distinct labels of the shard's ``y`` (their own dtype, strings included).

    Few numeric labels are found in one pass that also gives each row's code
    among them (:func:`~dask_estimators._validation.classes_and_codes`); the
    codes stay in the shard's cache for :func:`encode_labels`.
    """
    y = _host_y(shard)
    fast = classes_and_codes(y)
    if fast is None:
        try:
            return np.unique(y).astype(shard.dtypes.get("y", y.dtype), copy=False)
        except TypeError:  # labels that do not sort (ints beside strings): the client's check names them unknown
            return np.asarray(list(dict.fromkeys(y.reshape(-1).tolist())), dtype=object)
    shard.cache["label_codes"] = fast
    return fast[0].astype(shard.dtypes.get("y", y.dtype), copy=False)


def encode_labels(shard, classes):
    """Replace ``y`` by its integer codes in ``classes`` (sorted)."""
    local = shard.cache.pop("label_codes", None)
    if local is not None:  # the shard's own classes and codes: map its few classes, not every row
        local_classes, local_codes = local
        where = np.clip(np.searchsorted(classes, local_classes), 0, len(classes) - 1)
        if not np.all(classes[where] == local_classes):
            raise ValueError("y contains labels that are not in classes_.")
        shard.put("y", where.astype(np.int64)[local_codes])
        return
    y = _host_y(shard)
    codes = np.searchsorted(classes, y)
    codes = np.clip(codes, 0, len(classes) - 1)
    if not np.all(classes[codes] == y):
        raise ValueError("y contains labels that are not in classes_.")
    shard.put("y", codes.astype(np.int64))


def float_targets(shard):
    """Replace ``y`` (a label-indicator matrix of 0 and 1) by its float64 copy: multilabel targets."""
    shard.put("y", _host_y(shard).astype(np.float64))


def class_counts(shard, n_classes: int):
    """Weighted count of each class code in the shard (weights: sample_weight, else 1)."""
    y = _host_y(shard)
    s = _host_y(shard, "sample_weight")
    w = np.ones(y.shape[0]) if s is None else s.astype(np.float64, copy=False)
    return np.bincount(y, weights=w, minlength=n_classes)


def prepare_targets(shard, loss: str, n_outputs: int, class_weight=None):
    """Turn class codes (or regression targets) into the encoding of ``loss``; apply class weights.

    The loss's class does it (:meth:`~dask_estimators.objectives.losses.Loss.prepare_targets`):
    ``binomial``: y in {0, 1}, shape (n, 1).  ``multinomial``: codes (n,).
    ``squared_hinge``: y in {-1, 1}, (n, 1) for two classes, one-vs-rest (n, K)
    otherwise.  Regression losses: float (n, K).  An unknown loss raises ``ValueError``.
    """
    get_loss(loss).prepare_targets(shard, n_outputs, class_weight)


def prepare_and_weigh(shard, loss: str, n_outputs: int, class_weight=None, y_sum: bool = False,
                      x_bytes: bool = False):
    """Kernel: :func:`prepare_targets`, then the shard's ``(sum of weights, rows)`` in the same task.

    With ``y_sum`` the sum of ``s * y`` (one output) comes third: the weighted
    mean of y the GLMs start from.  With ``x_bytes`` the bytes of the shard's
    X (what one pass over the rows reads) come fourth, after the sum of
    ``s * y`` or 0.  It lives here, beside the encodings, so that a worker
    unpickling it imports neither scikit-learn nor the estimators.
    """
    from .linear import weight_sum, x_nbytes

    prepare_targets(shard, loss, n_outputs, class_weight)
    sums = weight_sum(shard)
    if not (y_sum or x_bytes):
        return sums
    ys = 0.0
    if y_sum:
        y = _host_y(shard).reshape(-1)
        s = _host_y(shard, "sample_weight")
        ys = float((y * s.reshape(-1)).sum() if s is not None else y.sum())
    if not x_bytes:
        return sums + (ys,)
    parts = _shard.row_parts(shard, "X")  # X's bytes without joining rows read where they lie
    if parts is None:
        parts = [(0, _shard.array(shard, "X"))]  # a sparse X's arrays (a tensor only on a GPU)
    return sums + (ys, float(sum(x_nbytes(p) for _, p in parts)))


def trailing_shape(shard):
    """Kernel: ``y.shape[1:]`` of a shard: () for one target, (n_targets,) for several."""
    return tuple(int(k) for k in _host_y(shard).shape[1:])
