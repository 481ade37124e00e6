"""Many independent fits of one linear model on one placement: the candidates of a search on its splits.

A grid search fits each candidate on each split's training rows, from zero,
as if alone.  :class:`PlacedRuns` places the data once, gives each shard its
rows' roles in the splits (as the cross-validated estimators do,
:mod:`dask_estimators.objectives.cv`), and runs every (candidate, split) fit
in lockstep: each round evaluates every still-running fit in one pass over X
(:func:`~dask_estimators.optim.cv_paths.independent_fits`), each fit with
its own penalty, solver, tolerance, line search and stopping test.  What
comes back is one fitted estimator per candidate and split, as the
candidate's own ``fit`` on the split's training rows would have left it.

A split may see X through a per-feature affine map (a pipeline's scaler,
fitted on the split's training rows where they are placed:
:meth:`PlacedRuns.fit_transformers`, :func:`affine_map`): its fits then
run on the stored X in the scaler's coordinates, with no scaled copy.

Models share one placement when they share everything that shapes the
problem: the class, the loss, ``fit_intercept``, ``class_weight``; they may
differ in ``C``/``alpha``, ``l1_ratio``, ``solver``, ``tol`` and
``max_iter`` (:data:`PER_FIT`).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
from sklearn.base import clone
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler

from .. import config as _config
from ..objectives import cv as CV
from ..optim.cv_paths import FoldProblem, independent_fits
from ..session import DataSession, prestart, stored_values
from ._base import _params_from, input_float_dtype, sparse_input
from .cv import place_roles, prepared_sums
from .linear import LinearRegression, LogisticRegression

__all__ = ["PER_FIT", "PlacedRuns", "RejectedInput", "SplitLacksClass", "affine_map", "affine_transformer",
           "fit_candidates", "grid_ready"]

#: Parameters that may differ between the fits of one placement: each run of the lockstep has its own.
PER_FIT = frozenset({"C", "alpha", "l1_ratio", "solver", "tol", "max_iter"})

#: One-worker lockstep from this many stored values; below it the fits go one after the other (as the
#: cross-validated estimators' paths: estimators/cv.py, _LOCKSTEP_ON_WORKER_FROM).
_LOCKSTEP_ON_WORKER_FROM = 2**18

#: Transformers whose fitted transform is ``a + s * x`` per feature, and which fit by ``partial_fit`` (row
#: blocks in turn), so that a split's one is fitted where its rows are placed.
_AFFINE_TRANSFORMERS = (StandardScaler, MinMaxScaler, MaxAbsScaler)

#: An affine map is used only while its offset ``|a|`` is at most this (a mean this many standard deviations
#: from zero): beyond it, evaluating on the stored X would cancel too many digits.
_MAX_AFFINE_OFFSET = 1e4


#: The row-group statistics (:func:`~dask_estimators.objectives.cv.role_group_stats`) each scaler is made from.
_STATS_KIND = {StandardScaler: "moments", MinMaxScaler: "range", MaxAbsScaler: "maxabs"}


def _scaler_helpers():
    """scikit-learn's ``_is_constant_feature`` and ``_handle_zeros_in_scale`` (private: docs/private-apis.md),
    with which ``StandardScaler`` turns its variances into scales; None where they are gone."""
    try:
        from sklearn.preprocessing._data import _handle_zeros_in_scale, _is_constant_feature
    except ImportError:  # pragma: no cover - a scikit-learn without them: the scalers' own partial_fit
        return None
    return _is_constant_feature, _handle_zeros_in_scale


def _scaler_from_stats(transformer, n, stats, n_features, dtype):
    """``transformer`` (an :func:`affine_transformer`, not fitted) as if fitted on ``n`` rows of statistics
    ``stats`` (:func:`~dask_estimators.objectives.cv.combine_group_stats`), X of ``dtype``.

    The scaler's own ``partial_fit`` on one or two rows made from the statistics (each feature's minimum and
    maximum; its largest absolute value; its mean plus and minus its standard deviation) sets every
    attribute and its type; the row count, and a ``StandardScaler``'s mean, variance and scale, are then set
    from the statistics (its scale as scikit-learn's own makes it from the variance).
    """
    out = clone(transformer)
    if n == 0:
        raise ValueError("Found array with 0 sample(s) (shape=(0, %d)) while a minimum of 1 is required by %s."
                         % (n_features, type(out).__name__))
    if isinstance(out, MinMaxScaler):
        out.partial_fit(np.stack(stats).astype(dtype))
    elif isinstance(out, MaxAbsScaler):
        out.partial_fit(stats[0][None, :].astype(dtype))
    else:
        mean, m2 = stats
        var = m2 / n
        sd = np.sqrt(var)
        out.partial_fit(np.stack([mean - sd, mean + sd]).astype(dtype))
    out.n_samples_seen_ = type(out.n_samples_seen_)(n)
    if isinstance(out, StandardScaler):
        if out.mean_ is not None:
            out.mean_ = mean.astype(out.mean_.dtype)
        if out.var_ is not None:
            out.var_ = var.astype(out.var_.dtype)
            is_constant, zeros_to_one = _scaler_helpers()
            constant = is_constant(out.var_, out.mean_, out.n_samples_seen_)
            out.scale_ = zeros_to_one(np.sqrt(out.var_), copy=False, constant_mask=constant)
    return out


class RejectedInput(ValueError):
    """The input failed the models' validation (its cause is the model's own error, in scikit-learn's words)."""


class SplitLacksClass(ValueError):
    """A split's training rows lack a class of y: its fits see fewer classes than the placement's."""


def grid_ready(est) -> bool:
    """Whether ``est`` (not fitted) can be one of :class:`PlacedRuns`' models.

    Our ``LogisticRegression`` and ``LinearRegression`` (not their subclasses), fitted from zero by the
    scipy solvers, with nothing shown or called per iteration and no per-split statistic in their objective:
    ``class_weight="balanced"`` (a split's own class counts), ``positive``, ``warm_start``,
    ``compute_inference``, ``verbose``, ``progress`` and scikit-learn callbacks keep the fit on its own.
    """
    if type(est) not in (LogisticRegression, LinearRegression):
        return False
    if getattr(est, "class_weight", None) == "balanced" or getattr(est, "positive", False):
        return False
    if est.warm_start or est.compute_inference or est.verbose or est.progress:
        return False
    return not getattr(est, "_skl_callbacks", None)


def affine_transformer(step) -> bool:
    """Whether ``step`` (not fitted) is a transformer :class:`PlacedRuns` fits on the workers and applies as an
    affine map: scikit-learn's ``StandardScaler``, ``MaxAbsScaler`` or ``MinMaxScaler`` (without ``clip``)."""
    return type(step) in _AFFINE_TRANSFORMERS and not getattr(step, "clip", False)


def affine_map(transformer, n_features):
    """``(a, s)`` of a fitted :func:`affine_transformer`, whose transform is ``a + s * x``, read from its own
    ``transform`` of a row of zeros and a row of ones; None where ``a`` is too far from zero
    (:data:`_MAX_AFFINE_OFFSET`)."""
    transformer = copy.copy(transformer)
    transformer.__dict__.pop("feature_names_in_", None)  # the probe rows have no column names
    a = np.asarray(transformer.transform(np.zeros((1, n_features))), dtype=np.float64)[0]
    s = np.asarray(transformer.transform(np.ones((1, n_features))), dtype=np.float64)[0] - a
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(s))) or np.max(np.abs(a), initial=0.0) > _MAX_AFFINE_OFFSET:
        return None
    return a, s


class PlacedRuns:
    """One placement of ``X``, ``y`` and ``sample_weight`` with the roles of its rows in ``splits`` (each
    split's training rows), on which :meth:`fit` runs many fits of ``model``'s kind in lockstep.

    A context manager: the placement is released on exit; input that fails the validation raises
    :class:`RejectedInput` on entry, before anything is placed.  ``model`` gives the validation, the loss and the
    shape of the problem (:func:`grid_ready`); ``splits`` None is one split of every row.  ``held_out``: each
    split's held-out rows, for :meth:`heldout` (the scores of dask input, on the workers).  ``X`` may be a
    dask collection (with ``y`` and the weights partitioned alike): its classes are found on the workers, and
    the caller checks that each split's training rows hold every class.  ``fits``: about
    how many fits will run in one lockstep, for the session to choose whether they all run in one task on one
    worker (a problem whose stored values times outputs times fits is small: each round's work is then less
    than a round trip).
    """

    def __init__(self, model, X, y, sample_weight=None, splits=None, *, held_out=None, fits=1):
        self.model = clone(model)
        self.fits = max(int(fits), 1)
        self.held_out = held_out
        self._input = (X, y, sample_weight)
        self.splits = splits
        self._session = None

    def __enter__(self):
        base = self.model
        prestart(base.client)
        X, y, sample_weight = self._input
        self._input = None
        try:
            self.dtype = input_float_dtype(X)
            X, y, sample_weight, dask_input, labels = base._validate_input(X, y, sample_weight, return_classes=True)
            if labels is not None:
                base._check_classes(labels[0])
        except (ValueError, TypeError) as e:
            raise RejectedInput(str(e)) from e
        y_placed, classes, n_outputs = y, None, None
        if labels is not None:
            classes, codes = labels
            y_placed = np.searchsorted(classes, y) if codes is None else codes
            for k, train in enumerate(self.splits or []):  # a split that lacks a class: a model of fewer classes
                if np.unique(np.asarray(y_placed)[train]).size != len(classes):
                    raise SplitLacksClass(f"The training rows of split {k} lack a class of y.")
        if dask_input:  # each split's classes are its caller's to check (it has y's values)
            self.y_shape = (None,) + tuple(y.shape[1:])
        else:
            self.y_shape = np.shape(y)
            n_outputs = base._n_outputs(len(classes) if classes is not None else None, self.y_shape) * self.fits
        self._session = DataSession(base.client, device=base.device, timeout=base.timeout).__enter__()
        try:
            data = self.data = self._session.data(
                X=X, y=y_placed, sample_weight=sample_weight, outputs=n_outputs,
                check=base._block_check(base._y_loss(), dtype=base._stored(self.dtype)))
            self.splits = splits = [np.arange(data.n_samples)] if self.splits is None else self.splits
            place_roles(data, splits, self.held_out)
            n_classes, class_weight = None, None
            if base._is_classifier:
                base.classes_ = base._dask_classes(data) if dask_input else classes
                n_classes = len(base.classes_)
                class_weight = base._class_weight_vector(data, n_classes)
            n_outputs = base._n_outputs(n_classes, self.y_shape)
            loss = base._loss_name(n_classes)
            self.spec = base._linear_spec(loss, n_outputs)
            sums = prepared_sums(data, loss, n_outputs, class_weight, len(splits))
            self.problem = FoldProblem(data.evaluator(base.reduction), self.spec, sums, len(splits))
            # a sparse X's columns that store no value anywhere (hashed text) are left out of every fit's solve,
            # as a lone fit leaves them out (their coefficients are zero in every fit): at the first fit, after
            # the scalers (fitted on X's whole rows)
            self._sums, self._narrow_at_fit, self.columns = sums, sparse_input(X), None
            self._values = stored_values(X) or 0
            self._maps = [None] * len(splits)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        session, self._session = self._session, None
        if session is not None:
            session.__exit__(*exc)

    def fit_transformers(self, pairs) -> list:
        """Each ``(transformer, k)`` of ``pairs`` fitted on split k's training rows where they are placed.

        Dense X and scikit-learn's three affine scalers (:func:`affine_transformer`, one kind in ``pairs``):
        one round gives every shard's statistics of its row groups
        (:func:`~dask_estimators.objectives.cv.role_group_stats`, one pass over X for all the splits), and
        each split's scaler is made from their sums (:func:`_scaler_from_stats`).  Otherwise its
        ``partial_fit`` on each shard's rows in turn (:func:`~dask_estimators.objectives.cv.partial_fit_on_folds`):
        one round per shard, in each every shard working on a different share of the transformers (each goes
        round the shards from its own first one), so that all the workers fit at once.  Returns the fitted
        transformers.
        """
        fitted = self._fit_from_stats(pairs)
        if fitted is None:
            fitted = self._fit_in_turn(pairs)
        names = getattr(self.model, "feature_names_in_", None)
        for t in fitted:  # as fitted on the input's frame: its column names
            if names is not None:
                t.feature_names_in_ = names
        return fitted

    def _fit_from_stats(self, pairs):
        """:meth:`fit_transformers` from the shards' row-group statistics; None where that does not apply."""
        kinds = {_STATS_KIND.get(type(t)) for t, _ in pairs}
        if len(kinds) != 1 or None in kinds or not all(affine_transformer(t) for t, _ in pairs):
            return None
        if _scaler_helpers() is None:  # scikit-learn's scale helpers gone: each scaler's own partial_fit
            return None
        kind = kinds.pop()
        per_shard = self.data.map(CV.role_group_stats, kind)
        if any(got is None for got in per_shard):  # sparse X
            return None
        groups = [g for got in per_shard for g in got]
        n_features = self.model.n_features_in_
        dtype = self.model._stored(self.dtype)
        return [_scaler_from_stats(t, *CV.combine_group_stats(kind, groups, k), n_features, dtype)
                for t, k in pairs]

    def _fit_in_turn(self, pairs) -> list:
        fitted = [clone(t) for t, _ in pairs]
        order = list(np.argsort([min((r[0] for r in ranges), default=0) for ranges in self.data.row_ranges]))
        n = len(order)
        for r in range(n):
            share = [[p for p in range(len(pairs)) if order[(p + r) % n] == i] for i in range(n)]
            out = self.data.map_each(CV.partial_fit_on_folds,
                                     [([(fitted[p], pairs[p][1]) for p in mine],) for mine in share])
            for mine, got in zip(share, out):
                for p, t in zip(mine, got):
                    fitted[p] = t
        return fitted

    def set_maps(self, maps) -> None:
        """Each split's affine map (:func:`affine_map`; None: X as stored): its fits see ``a + s * x``.  Where
        the columns that store nothing are left out of the solve, their maps are too (a scaler of sparse X does
        not shift them: they stay zero)."""
        self._maps = list(maps)
        self.data.map(CV.set_affine, self._solved_maps())
        self.problem.forget_hessians()

    def _solved_maps(self) -> list:
        """The splits' maps over the solved columns (a scaler of sparse X does not shift the columns left out:
        they stay zero)."""
        if self.columns is None:
            return self._maps
        dropped = np.setdiff1d(np.arange(self.spec.n_features), self.columns)
        if any(m is not None and np.any(np.asarray(m[0])[dropped] != 0) for m in self._maps):
            raise RejectedInput("A split's scaler shifts columns that store no value in X.")
        return [None if m is None else (np.asarray(m[0])[self.columns], np.asarray(m[1])[self.columns])
                for m in self._maps]

    def _narrow(self) -> None:
        """Leave the columns that store no value out of the solve (a sparse X; once, at the first fit): the
        shards' X narrowed to the stored columns, the problem and the maps with them."""
        self._narrow_at_fit = False
        self.columns = self.model._stored_columns(self.data, self.spec)
        if self.columns is None:
            return
        solved = dataclasses.replace(self.spec, n_features=len(self.columns))
        self.problem = FoldProblem(self.problem.evaluate, solved, self._sums, len(self.splits))
        if any(m is not None for m in self._maps):
            self.data.map(CV.set_affine, self._solved_maps())

    def fit(self, models, folds, *, feature_names=True, on_done=None) -> list:
        """Fit every model of ``models`` on every split of ``folds`` (indices into ``splits``), in lockstep.

        ``models``: not fitted, :func:`grid_ready`, of one class and equal in every parameter but
        :data:`PER_FIT`'s.  Returns ``fitted``, ``fitted[i][j]`` a copy of ``models[i]`` fitted on split
        ``folds[j]``, with the attributes its own ``fit`` on those rows sets.  ``feature_names`` False: the fitted
        models get no ``feature_names_in_`` (they stand after a scaler, whose output has none).  ``on_done(n)``,
        if given, is called as fits end (``n`` of them; all at once where they ran in one task on a worker).
        """
        for model in models:
            model._validate_params()
        if self._narrow_at_fit:
            self._narrow()
        spec, problem = self.spec, self.problem
        runs = []
        for model in models:
            for k in folds:
                l2, l1 = model._penalties(problem.objective(k).sw_sum)
                solver = model._resolved_solver(problem.spec.n_params, l1)
                runs.append((k, l2, l1, solver, model.tol, model.max_iter))
        width = self._lockstep_width()
        if not self.data.on_worker and any(run[3] == "newton-cholesky" for run in runs):
            problem.share_quadratic_hessians()  # a squared loss's: every split's in one pass
        if self.data.on_worker:
            batched = self._values >= _LOCKSTEP_ON_WORKER_FROM
            out, _ = self.data.run_on_worker(independent_fits, problem, (runs,),
                                             {"batched": batched, "max_runs": width}, stacklevel=3)
            if on_done is not None:
                on_done(len(runs))
        else:
            out = independent_fits(problem, runs, on_done=None if on_done is None else (lambda: on_done(1)),
                                   max_runs=width)
        # as fitted, model by model, over the solved columns (the held-out sums read the shards' narrowed X)
        self.solutions = [np.asarray(x, dtype=np.float64) for x, _, _ in out]
        base, fitted, j = self.model, [], 0
        for model in models:
            row = []
            for _ in folds:
                _, n_iter, solver = out[j]
                x = self.solutions[j] if self.columns is None else _params_from(self.solutions[j], spec, self.columns)
                j += 1
                est = clone(model)
                for name in ("n_features_in_", "feature_names_in_", "classes_"):
                    if hasattr(base, name) and (feature_names or name != "feature_names_in_"):
                        setattr(est, name, getattr(base, name))
                est._set_params_from(x, spec, self.y_shape)
                est._cast_params(self.dtype)
                est.n_iter_ = est._format_n_iter(n_iter)
                est.solver_ = solver
                est.fit_stats_ = {"fitted_in_search": True, "fits_in_lockstep": len(runs),
                                  "x_dtype": self.model._stored(self.dtype).name}
                if self.columns is not None:
                    est.fit_stats_["solved_columns"] = len(self.columns)
                row.append(est)
            fitted.append(row)
        return fitted

    def _lockstep_width(self) -> int:
        """How many fits one lockstep takes: each holds three float64 values a row on every shard (targets,
        weights, curvature), within ``dask-estimators.search-lockstep-memory`` times the largest shard's X
        bytes (at least one fit)."""
        rows = max(self.data.n_rows, default=0)
        total = sum(self.data.n_rows)
        if rows == 0 or total == 0:
            return 1
        x_bytes = self._values * np.dtype(self.model._stored(self.dtype)).itemsize * rows / total
        share = float(_config.get("search-lockstep-memory"))
        return max(1, int(share * x_bytes // (3 * 8 * rows)))

    def heldout(self, k, xs, metric, weighted=True, shift=0.0) -> np.ndarray:
        """The raw held-out sums of ``metric`` over split k's held-out rows (``held_out``), for each solution
        of ``xs`` (:attr:`solutions`' vectors), in one round (``weighted`` False: without the sample weights;
        ``shift``, near y's mean, subtracted from y in r2's sums): see
        :func:`~dask_estimators.objectives.cv.heldout_sums`."""
        return self.problem.heldout(k, np.stack(xs), metric, weighted, shift)


def fit_candidates(models, X, y, sample_weight=None, splits=None):
    """Every model of ``models`` fitted on every split of ``splits`` on one :class:`PlacedRuns` placement:
    ``fitted[i][k]`` on split k."""
    with PlacedRuns(models[0], X, y, sample_weight, splits, fits=len(models) * len(splits or [None])) as runs:
        return runs.fit(models, list(range(len(runs.splits))))
