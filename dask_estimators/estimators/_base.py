"""Shared machinery of the linear estimators: validation, placement, solve, fitted attributes.

An estimator subclass says which loss it uses, how its hyperparameters map
to the penalties of the normalised objective (see
:mod:`dask_estimators.objectives.linear`), and how its targets are encoded.
Everything else (which cluster, placing the data, the solver registry,
warm starts, prediction on NumPy or dask input) lives here once.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import time
import warnings
from numbers import Integral, Real

import distributed
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_is_fitted,
    validate_data,
)

from .. import config as _config
from .._in_order import in_order
from .._validation import assert_all_finite, classes_and_codes
from ._blocks import MessageName, _checked_X, check_block as _check_block
from ..objectives import LinearObjective, LinearSpec
from ..objectives import targets as T
from ..objectives._sparse import keep_columns, stored_columns
from ..optim import SOLVERS
from .._progress import IterationLog, check_progress
from ..session import (
    REDUCTIONS,
    DataSession,
    KeptData,
    adopt_sender,
    check_lengths,
    is_dask_collection,
    prestart,
    sender_address,
)

try:  # scikit-learn >= 1.9: its callback protocol (sklearn.callback, set_callbacks)
    from sklearn.callback import CallbackSupportMixin as _CallbackSupport
except ImportError:  # older scikit-learn has no callbacks to call

    class _CallbackSupport:
        pass

__all__ = ["DistributedEstimator", "DistributedLinearModel", "InferenceMixin"]


def accepts_kept_data(fit):
    """``fit(X, y, sample_weight=None, **params)`` that also takes a :class:`~dask_estimators.KeptData` as X: its
    ``X``, ``y`` and ``sample_weight``, whose placement is then held for it between fits.  Without one, y is
    required (scikit-learn's error for None)."""

    @functools.wraps(fit)
    def wrapper(self, X, y=None, sample_weight=None, **params):
        if isinstance(X, KeptData):
            if y is not None or sample_weight is not None:
                raise ValueError("fit(kept_data) takes y and sample_weight from the KeptData; pass neither here.")
            with X.in_use():
                return fit(self, X.X, X.y, X.sample_weight, **params)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        return fit(self, X, y, sample_weight, **params)

    return wrapper


def _column_names(X):
    """The column names of a dask dataframe ``X`` as ``feature_names_in_`` keeps them (an object array), where
    they are all strings; None where X has no columns, or names of other types.  Strings mixed with other types
    are scikit-learn's ``TypeError``, as for a pandas frame."""
    columns = getattr(X, "columns", None)
    if columns is None or not len(columns):
        return None
    types = sorted({type(c).__qualname__ for c in columns})
    if len(types) > 1 and "str" in types:
        raise TypeError(
            "Feature names are only supported if all input features have string names, but your input has "
            f"{types} as feature name / column name types. Make them all strings (X.columns = "
            "X.columns.astype(str)) to have them kept and checked, or make none of them strings."
        )
    if types == ["str"] and len(set(columns)) != len(columns):
        meta = getattr(X, "_meta", None)
        if meta is not None:  # scikit-learn's own check of a pandas frame raises its error (a DuplicateError)
            from sklearn.utils.validation import _get_feature_names

            _get_feature_names(meta)
        raise ValueError(f"Expected unique column names, got: {list(columns)}.")
    return np.asarray(list(columns), dtype=object) if types == ["str"] else None


def _other_names_message(fitted, names) -> str:
    """scikit-learn's error where X's column names are not those of the fit: the names it lacks, those it adds
    (five of each at most), or, with the same names, their order."""
    def listed(title, found):
        more = ["- ...\n"] if len(found) > 5 else []
        return [f"{title}:\n"] + [f"- {n}\n" for n in found[:5]] + more

    seen, now = set(fitted), set(names)
    added = [n for n in names if n not in seen]
    lacking = [n for n in fitted if n not in now]
    parts = ["The feature names should match those that were passed during fit.\n"]
    if added:
        parts += listed("Feature names unseen at fit time", sorted(added))
    if lacking:
        parts += listed("Feature names seen at fit time, yet now missing", sorted(lacking))
    if not added and not lacking:
        parts.append("Feature names must be in the same order as they were in fit.\n")
    return "".join(parts)


def _sparse_format(accept_sparse):
    """``validate_data``'s ``accept_sparse`` for an estimator's ``_accept_sparse`` flag: CSR, or no sparse input."""
    return "csr" if accept_sparse else False


class DaskScoreMixin:
    """scikit-learn's ``score`` (``ClassifierMixin``'s accuracy, ``RegressorMixin``'s R²) that also takes dask input.

    Listed before scikit-learn's mixin.  With dask X, y or sample weights,
    the predictions, y and the weights are computed together, in one graph,
    and scored on the client (they are vectors): also where the number of
    rows is unknown (a dask array cut by a mask), which scikit-learn's
    metrics cannot take, and without computing the predictions once per
    check as they would.  Other input goes to scikit-learn's ``score``.
    """

    def score(self, X, y, sample_weight=None):
        """The mean accuracy (classifiers) or the coefficient of determination R² (regressors) on ``X``, ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)
        y : array-like or dask collection of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like or dask array of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        if not any(is_dask_collection(a) for a in (X, y, sample_weight)):
            return super().score(X, y, sample_weight=sample_weight)
        import dask
        from sklearn.metrics import accuracy_score, r2_score

        # in order: Dask returns mixed arrays and dataframes grouped by kind (dask_estimators/_in_order.py)
        pred, y, sample_weight = in_order(lambda xs: dask.compute(*xs), [self.predict(X), y, sample_weight])
        metric = accuracy_score if self._is_classifier else r2_score
        return float(metric(y, pred, sample_weight=sample_weight))


class DistributedEstimator(BaseEstimator):
    """Base class of every estimator here: input checks, dask input, clone and pickling without a client."""

    #: dtype(s) validate_data converts X to: float64 only, or ``(np.float64, np.float32)`` for an estimator whose
    #: workers store and read float32 X as it is (half the memory and half the bytes a pass reads)
    _fit_dtype = np.float64
    _is_classifier = False
    _multi_output = False
    #: Whether X may be scipy.sparse (or a dask array of sparse blocks): placed as CSR, never densified.
    _accept_sparse = False
    #: Whether ``sample_weight`` may hold negative values (as scikit-learn's estimator of the same name).
    _negative_weights = True
    #: Where X of NumPy strings is refused (``"fit"``, ``"predict"``: the methods that read X), as scikit-learn's
    #: estimator of the same name validates X there as ``dtype="numeric"``; elsewhere numeric strings convert.
    _strings_refused: tuple = ("predict",)

    def _validate_input(self, X, y, sample_weight, return_classes=False):
        if is_dask_collection(X):
            self._check_dask_features(X, reset=True)
            self._check_dask_rows(X)
            y = _as_dask_like(y, X, "y")
            if not self._multi_output and getattr(y, "ndim", 1) == 2:
                if y.shape[1] != 1:
                    raise ValueError(f"y should be a 1d array, got an array of shape {_shape_text(y)} instead.")
                warn_column_y(stacklevel=5)
            if sample_weight is not None:
                sample_weight = _as_dask_like(sample_weight, X, "sample_weight")
            return (X, y, sample_weight, True) + ((None,) if return_classes else ())
        if getattr(X, "columns", None) is not None and len(X.columns) == 0:
            X = np.empty((len(X), 0))  # check_array fails on a frame without columns before its own message
        if "fit" in self._strings_refused:
            _refuse_strings(X)
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse=_sparse_format(self._accept_sparse),  # any format, converted once to CSR
            dtype=self._fit_dtype,
            y_numeric=not self._is_classifier,
            multi_output=self._multi_output,
            reset=True,
            ensure_all_finite=False,  # checked below, on every core
        )
        if sp.issparse(y) and not self._is_classifier:  # multi_output lets a sparse y through: scikit-learn's error
            raise TypeError("Sparse data was passed for y, but dense data is required. Use '.toarray()' to convert "
                            "to a dense numpy array.")
        if sp.issparse(X):
            X = _checked_X(X)
            assert_all_finite(X.data, input_name="X", estimator_name=type(self).__name__, parallel=True)
        else:
            assert_all_finite(X, input_name="X", estimator_name=type(self).__name__, parallel=True)
        labels = _checked_classes(y) if self._is_classifier else None  # (classes, codes or None)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=not self._negative_weights
            )
        return (X, y, sample_weight, False) + ((labels,) if return_classes else ())

    def _check_dask_rows(self, X):
        """scikit-learn's error for a dask X of no rows, where its length is known without computing it."""
        n = X.shape[0]
        if isinstance(n, (int, np.integer)) and not np.isnan(n) and n == 0:
            raise ValueError(
                f"Found array with 0 sample(s) (shape={_shape_text(X)}) while a minimum of 1 is "
                f"required by {type(self).__name__}."
            )

    def _check_dask_features(self, X, reset):
        """``n_features_in_`` and ``feature_names_in_`` for a dask array or dataframe, as validate_data does, with
        its errors for another number of dimensions or no features."""
        if getattr(X, "ndim", 2) != 2:
            raise ValueError(
                f"Found array with dim {X.ndim}, while dim <= 2 is required by {type(self).__name__}."
                if X.ndim > 2 else
                f"Expected 2D array, got 1D array instead:\na dask collection of shape {_shape_text(X)}.\nReshape your "
                "data either using array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) "
                "if it contains a single sample."
            )
        n_features = int(X.shape[1])
        if n_features == 0:
            raise ValueError(
                f"Found array with 0 feature(s) (shape={_shape_text(X)}) while a minimum of 1 is required by "
                f"{type(self).__name__}."
            )
        names = _column_names(X)
        if reset:
            self.n_features_in_ = n_features
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return
        fitted = getattr(self, "feature_names_in_", None)
        if fitted is not None and names is not None and not np.array_equal(fitted, names):
            raise ValueError(_other_names_message(fitted, names))
        self._warn_names_either_side(fitted, names)
        if n_features != self.n_features_in_:
            raise ValueError(
                f"X has {n_features} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )

    def _warn_names_either_side(self, fitted, names):
        """scikit-learn's warning where only the fit's X or only this X has column names."""
        if fitted is not None and names is None:
            warnings.warn(
                f"X does not have valid feature names, but {type(self).__name__} was fitted with feature names",
                UserWarning,
            )
        elif fitted is None and names is not None:
            warnings.warn(
                f"X has feature names, but {type(self).__name__} was fitted without feature names",
                UserWarning,
            )

    def _storage_dtype(self, X) -> np.dtype:
        """The dtype X is placed in: float32 for float32 input (array, sparse matrix, dask collection, dataframe of
        float32 columns) where :attr:`_fit_dtype` admits it, else float64."""
        return self._stored(input_float_dtype(X))

    def _stored(self, dtype) -> np.dtype:
        """The storage dtype for input of float dtype ``dtype`` (see :meth:`_storage_dtype`)."""
        admitted = self._fit_dtype if isinstance(self._fit_dtype, tuple) else (self._fit_dtype,)
        return np.dtype(dtype) if dtype == np.float32 and np.float32 in admitted else np.dtype(np.float64)

    def _block_check(self, y_loss=None, multi_output=None, dtype=np.float64):
        """The check each block of dask input passes on its worker (:func:`._blocks.check_block`), for this estimator;
        ``dtype``: the storage dtype (:meth:`_storage_dtype`)."""
        return functools.partial(
            _check_block, y_numeric=not self._is_classifier,
            multi_output=self._multi_output if multi_output is None else multi_output, y_loss=y_loss,
            accept_sparse=self._accept_sparse, negative_weights=self._negative_weights, dtype=np.dtype(dtype),
            estimator_name=MessageName(type(self).__name__),
        )

    def _dask_classes(self, data):
        """classes_ of dask input, found on the workers, which then encode their labels as integer codes."""
        classes = self._check_classes(dask_label_set(data.map(T.unique_labels), data.n_samples))
        data.map(T.encode_labels, classes)
        return classes

    def _check_classes(self, classes):
        if len(classes) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data contains only one "
                f"class: {self._one_class_text.format(classes[0])}"
            )
        return classes

    #: How the single-class error names the class: as scikit-learn's estimator of the same name does.
    _one_class_text = "{!r}"

    def _map_rows(self, X, fn, n_cols):
        """Apply ``fn`` (NumPy rows -> NumPy) to NumPy input now, or to dask input lazily, block by block.

        Float outputs come back in :meth:`_float_output_dtype` (float32 for
        float32 input to a model with float32 parameters, as in scikit-learn).
        """
        check_is_fitted(self)
        if is_dask_collection(X):
            self._check_dask_features(X, reset=False)
            out_dtype = self._float_output_dtype(input_float_dtype(X))
            dtype = self._output_dtype(fn)
            dtype = out_dtype if dtype is None else dtype
            if n_cols is None and hasattr(X, "map_partitions") and getattr(X, "ndim", 2) == 2:
                # a dataframe gives a series with its index and divisions, one task per partition
                import pandas as pd

                meta = pd.Series([], dtype=dtype, index=X._meta.index[:0])
                return X.map_partitions(_series_of_rows, fn, out_dtype, type(self).__name__, meta=meta)
            arr = X.to_dask_array() if not hasattr(X, "rechunk") else X
            if arr.shape[0] == 0:  # known to be empty (an unknown length is NaN): scikit-learn's error, not an empty result
                raise ValueError(
                    f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required by "
                    f"{type(self).__name__}."
                )
            if arr.ndim == 2 and arr.numblocks[1] > 1:
                arr = arr.rechunk({1: -1})
            accept = _sparse_format(self._accept_sparse)

            name = type(self).__name__  # scikit-learn's NaN message names the estimator

            def block(b):
                b = check_array(b, dtype=np.float64, ensure_min_samples=0, accept_sparse=accept, input_name="X",
                                estimator=name)
                return _cast_float(fn(b), out_dtype)

            if n_cols is None:  # the output is dense NumPy, whatever the blocks are (sparse ones included)
                return arr.map_blocks(block, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype))
            return arr.map_blocks(block, chunks=(arr.chunks[0], (n_cols,)), dtype=dtype, meta=np.empty((0, 0), dtype))
        if "predict" in self._strings_refused:
            _refuse_strings(X)
        X = validate_data(self, X, reset=False, dtype=(np.float64, np.float32),
                          accept_sparse=_sparse_format(self._accept_sparse))
        return _cast_float(fn(X), self._float_output_dtype(X.dtype))

    def _output_dtype(self, fn):
        """The dtype of ``fn``'s output when it is not a float (labels), else None."""
        return None

    def _param_dtype(self):
        """The dtype of the fitted parameters."""
        return np.dtype(np.float64)

    def _float_output_dtype(self, x_dtype):
        """Float outputs' dtype for input of ``x_dtype``: NumPy's result type of the input and the parameters."""
        x_dtype = np.dtype(x_dtype)
        if x_dtype not in (np.float32, np.float64):
            x_dtype = np.dtype(np.float64)
        return np.result_type(x_dtype, self._param_dtype())

    def __sklearn_clone__(self):
        """Clone as scikit-learn does, passing a ``client=`` object through by reference (it cannot be copied)."""
        client = self.client
        if not isinstance(client, distributed.Client):
            return super().__sklearn_clone__()
        try:
            self.client = None
            new = super().__sklearn_clone__()
        finally:
            self.client = client
        new.client = client
        return new

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = bool(self._accept_sparse)
        return tags

    def __deepcopy__(self, memo):
        """A deep copy as :mod:`copy` makes one, with ``client=`` passed through by reference (a ``Client`` cannot
        be copied, and the copy fits on the same cluster)."""
        state = self.__getstate__()
        state.pop("_dask_estimators_sender", None)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(state, memo))
        if "client" in self.__dict__:
            new.client = self.client
        return new

    def __getstate__(self):
        """Pickle without the cluster: a ``client=`` (object or address) is not part of a model.

        An estimator not fitted yet carries the address of the scheduler its
        fit would use in this process, and this process's id: unpickled in a
        child of this process (the workers of a search with ``n_jobs``), its
        fit uses the same cluster (:func:`~dask_estimators.session.adopt_sender`).
        """
        state = super().__getstate__()
        if state.get("client") is not None:
            state = dict(state, client=None)
        if not _is_fitted(self):  # None too: a child that used a cluster of ours before forgets it
            state = dict(state, _dask_estimators_sender=(sender_address(self.client), os.getpid()))
        return state

    def __setstate__(self, state):
        sender = state.pop("_dask_estimators_sender", None) if isinstance(state, dict) else None
        super().__setstate__(state)
        if sender is not None:
            adopt_sender(*sender)


#: Rows of a float32 X that :meth:`DistributedLinearModel._decision` widens to float64 at a time.
_DECISION_BLOCK_ROWS = 1 << 14


def _is_fitted(estimator) -> bool:
    """scikit-learn's own rule (``check_is_fitted``, so ``__sklearn_is_fitted__`` counts), as a bool."""
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        return False
    return True


class DistributedLinearModel(_CallbackSupport, DistributedEstimator):
    """Base class: a linear model fitted by the distributed optimizer.

    Subclasses set ``_loss`` (or override :meth:`_loss_name`), implement
    :meth:`_penalties` and declare their parameters.  X may be sparse
    (scipy.sparse of any format, or a dask array of sparse blocks): it is
    placed as CSR and never densified nor centred, as in scikit-learn.
    """

    _accept_sparse = True
    #: float32 X stays float32 on the workers; the kernels accumulate in float64 (:mod:`..objectives.linear`)
    _fit_dtype = (np.float64, np.float32)

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "solver": [StrOptions(set(SOLVERS) | {"auto"})],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "progress": ["boolean"],
        "client": [None, str, distributed.Client],
        "reduction": [StrOptions(set(REDUCTIONS))],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "timeout": [Interval(Real, 0, None, closed="neither"), None],
    }

    # ------------------------------------------------------------------ hooks
    def _loss_name(self, n_classes: int | None) -> str:
        return self._loss

    def _n_outputs(self, n_classes: int | None, y_shape) -> int:
        return 1

    def _penalties(self, sw_sum: float) -> tuple[float, float]:
        """(l2, l1) strengths of the normalised objective."""
        raise NotImplementedError

    def _loss_params(self) -> dict:
        """Parameters of the loss besides ``epsilon`` (the Tweedie ``power`` and ``link``)."""
        return {}

    def _y_loss(self):
        """The loss whose y-domain check the targets must pass (None: scikit-learn's checks only)."""
        return None

    #: Whether the first intercept is the link of the weighted mean of y (as scikit-learn's GLMs start).
    _start_at_mean = False

    #: What solver="auto" picks without L1: a dense-Hessian Newton where it is affordable.
    _auto_solver = "newton-cholesky"

    def _resolved_solver(self, n_params: int, l1: float) -> str:
        if self.solver != "auto":
            return self.solver
        if l1 > 0 or getattr(self, "positive", False):  # L-BFGS-B's bounds
            return "lbfgs"
        if self._auto_solver == "newton-cholesky" and n_params > SOLVERS["newton-cholesky"].max_params:
            return "newton-cg"
        return self._auto_solver

    # --------------------------------------------------------------- fitting

    def _class_weight_vector(self, data, n_classes):
        cw = getattr(self, "class_weight", None)
        if cw is None:
            return None
        if isinstance(cw, str):  # "balanced"
            counts = np.sum(data.map(T.class_counts, n_classes), axis=0)
            if np.any(counts == 0):
                raise ValueError("class_weight='balanced' needs every class in classes_ to have positive weight.")
            return counts.sum() / (n_classes * counts)
        # as scikit-learn's compute_class_weight: a class without a weight has 1, a key that is no class of y is
        # left out; only both together (a class the dict misses, which names another) are an error
        vec = np.ones(n_classes)
        unweighted = []
        for i, c in enumerate(self.classes_):
            key = c.item() if isinstance(c, np.generic) else c
            if key in cw:
                vec[i] = cw[key]
            else:
                unweighted.append(key)
        if unweighted and n_classes - len(unweighted) != len(cw):
            raise ValueError(f"The classes, {unweighted}, are not in class_weight")
        return vec

    @accepts_kept_data
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Fit the model on the Dask cluster.

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features), or KeptData
            Training data.  Dask input is validated and placed on the workers
            without passing through the client.  A :class:`~dask_estimators.KeptData` brings its own y and
            weights, and its placement stays on the workers for the next fit on it.
        y : array-like or dask collection of shape (n_samples,), default=None
            Target values, partitioned like X when X is a dask collection (None only with a KeptData).
        sample_weight : array-like or dask collection of shape (n_samples,), default=None
            Weights of the samples.  Negative weights are accepted where scikit-learn's estimator of the same
            name accepts them (all but LinearRegression).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        t0 = time.perf_counter()
        check_progress(self.progress)  # a missing tqdm fails now, before any cluster starts
        prestart(self.client)  # the embedded cluster, when the fit needs it, starts while the data is validated
        dtype = input_float_dtype(X)
        storage = self._stored(dtype)
        X, y, sample_weight, dask_input, labels = self._validate_input(X, y, sample_weight, return_classes=True)
        y_loss = self._y_loss()
        if y_loss is not None and not dask_input:
            if y.dtype.kind in "USV":  # numeric strings: scikit-learn's GLMs read y in X's float dtype
                y = check_array(y, dtype=np.float64, ensure_2d=False, ensure_all_finite=False, input_name="y")
            y_loss.check_y(y)
        check = self._block_check(y_loss, dtype=storage)
        y_placed, classes = y, None
        if labels is not None:
            classes, codes = labels
            classes = self._check_classes(classes)
            y_placed = np.searchsorted(classes, y) if codes is None else codes
        with DataSession(self.client, device=self.device, timeout=self.timeout) as session:
            data = session.data(
                X=X, y=y_placed, sample_weight=sample_weight, check=check,
                workers=self._placement_workers(session, X), outputs=self._worker_outputs(X, y, classes),
            )
            stats = self._fit_placed(data, y, dask_input, classes, dtype, hook_args=(X, y, sample_weight), t0=t0,
                                     sparse_x=sparse_input(X))
        self.fit_stats_ = stats
        return self

    def _placement_workers(self, session, X):
        """The workers to place ``X`` on (None: all of them); a method that gains nothing from more shards picks one."""
        return None

    def _worker_outputs(self, X, y, classes) -> int | None:
        """The model's outputs (the classes of a multi-class model, the targets of a multi-output one), for the
        session to choose whether the solver runs in one task on one worker (a small problem: its evaluations
        take less than a round trip; :meth:`~dask_estimators.session.DataSession.data`).  None when the client
        has something to show or call per iteration (``verbose``, ``progress``, callbacks): the solver then
        runs on the client, one round per evaluation.
        """
        if self.verbose or self.progress or getattr(self, "_skl_callbacks", None):
            return None
        if classes is not None:
            return len(classes) if len(classes) > 2 else 1
        return int(np.prod(np.shape(y)[1:], dtype=np.int64)) if np.ndim(y) > 1 else 1

    def _fit_placed(self, data, y, dask_input, classes, dtype, hook_args=None, t0=None, sparse_x=False):
        """The fit on the placed ``data``: the targets' encoding, the objective, the solver, the fitted attributes.
        ``hook_args`` are the scikit-learn callbacks' ``(X, y, sample_weight)``; ``sparse_x``, whether X is sparse
        (the columns that store nothing are then left out of the solve).

        Where the session chose so (``data.on_worker``: one shard, a small problem) the solver runs in one task
        on the shard's worker (:meth:`~dask_estimators.session.PlacedData.minimize`), not one round per
        evaluation.
        """
        n_classes = None
        class_weight = None
        if self._is_classifier:
            self.classes_ = self._dask_classes(data) if dask_input else classes
            n_classes = len(self.classes_)
            class_weight = self._class_weight_vector(data, n_classes)
        y_shape = None if dask_input else np.shape(y)
        if dask_input and not self._is_classifier:
            y_shape = (None,) + data.map(T.trailing_shape)[0]
        n_outputs = self._n_outputs(n_classes, y_shape)
        loss = self._loss_name(n_classes)
        spec = self._linear_spec(loss, n_outputs)
        inference = bool(getattr(self, "compute_inference", False))
        if inference:
            _check_inference(spec)
        # the targets' encoding and the sum of the weights (and of s * y) in one call (one round trip less)
        sums = data.map(T.prepare_and_weigh, loss, n_outputs, class_weight, self._start_at_mean, True)
        sums = tuple(map(sum, zip(*sums)))  # (S, n, sum of s * y, bytes of X)
        # a sparse X's columns that store no value anywhere (hashed text): their coefficients are zero at the
        # optimum, so the solver leaves them out, and rounds carry the stored columns' parameters only
        columns = self._stored_columns(data, spec) if sparse_x and not inference else None
        solved = spec if columns is None else dataclasses.replace(spec, n_features=len(columns))
        evaluator = data.evaluator(self.reduction)
        objective = LinearObjective(evaluator, solved, weight_sums=sums[:2])
        objective.l2, objective.l1 = self._penalties(objective.sw_sum)
        objective.positive = bool(getattr(self, "positive", False))
        objective.centre_intercepts = True  # lbfgs and newton-cg solve in centred variables (optim.scipy_driver)
        objective = self._primal_objective(objective)
        solver = self._resolved_solver(spec.n_params, objective.l1)
        y_mean = sums[2] / objective.sw_sum if self._start_at_mean else None
        w0 = self._initial_params(spec, y_mean)
        if columns is not None:
            w0 = _params_at(w0, spec, columns)

        def full(w):  # the parameters of all columns
            return w if columns is None else _params_from(w, spec, columns)

        hooks = None
        if hook_args is not None and getattr(self, "_skl_callbacks", None):
            hooks = _IterationHooks(self, solver, hook_args, full(w0),
                                    lambda w: self._fitted_params(full(w), spec, y_shape, dtype))
        log = IterationLog(self.verbose, self.progress, self.max_iter, type(self).__name__, t0)
        each = [c for c in (log if self.verbose or self.progress else None, hooks) if c is not None]
        try:
            if y_mean is not None and not spec.get_loss().mean_inside(y_mean):
                res, on_worker_stats = _zero_model(w0, inference), None
            else:
                res, on_worker_stats = data.minimize(
                    objective, w0, solver=solver, tol=self.tol, max_iter=self.max_iter, verbose=self.verbose,
                    callback=(lambda it: [c(it) for c in each]) if each else None,
                )
        finally:
            log.close()
            if hooks is not None:
                hooks.close()
        self._set_params_from(full(res.x), spec, y_shape)
        if inference:
            found = objective.inference(res.x)
            self.coef_cov_, self.coef_cov_robust_ = found["cov"], found["cov_robust"]
            self.dispersion_ = found["dispersion"]
            self.df_resid_ = float(found["df_resid"])
            self._inference_penalised = bool(objective.l2 > 0 or objective.l1 > 0 or objective.positive)
        else:
            for name in ("coef_cov_", "coef_cov_robust_", "dispersion_", "df_resid_"):
                self.__dict__.pop(name, None)
        self._cast_params(dtype)
        if hooks is not None:
            hooks.end_fit()
        self.n_iter_ = self._format_n_iter(int(res.nit))
        self.solver_ = solver
        stats = data.stats(evaluator)
        if columns is not None:
            stats["solved_columns"] = len(columns)
        stats.update(objective=float(res.fun), weight_sum=float(objective.sw_sum),
                     solved_on_worker=on_worker_stats is not None, x_dtype=self._stored(dtype).name,
                     x_bytes_per_pass=int(sums[3]))
        if on_worker_stats is not None:  # the solver's evaluations, made on the worker
            stats["evaluations_on_worker"] = on_worker_stats["rounds"]
            stats["seconds_on_worker"] = on_worker_stats["seconds"]
        return stats

    def _stored_columns(self, data, spec: LinearSpec):
        """For a sparse X: the columns that store a value in some shard, with those of a warm start's non-zero
        coefficients (sorted), after narrowing the shards' X to them; None where every column does."""
        found = data.map(stored_columns)
        if any(c is None for c in found):
            return None
        columns = np.unique(np.concatenate(found + [np.zeros(0, np.int64)]))
        coef = self._warm_coef(spec)
        if coef is not None:
            columns = np.union1d(columns, np.flatnonzero(np.any(coef != 0, axis=0)))
        if len(columns) == spec.n_features or not len(columns):
            return None
        data.map(keep_columns, columns)
        return columns

    def _linear_spec(self, loss: str, n_outputs: int) -> LinearSpec:
        """What the kernels need to know of this model: its loss (with ``epsilon`` and the loss's parameters),
        its features, its outputs and whether it fits an intercept."""
        return LinearSpec(loss, self.n_features_in_, n_outputs, self.fit_intercept,
                          float(getattr(self, "epsilon", 0.0)), loss_params=tuple(sorted(self._loss_params().items())))

    def _format_n_iter(self, nit):
        return nit

    def _primal_objective(self, objective):
        """The objective the solver sees (a subclass may reparametrise it, as the SVMs' bias feature)."""
        return objective

    def _cast_params(self, dtype):
        if self._keeps_float32 and dtype == np.float32:  # computed in float64, kept in X's dtype as scikit-learn does
            self.coef_ = self.coef_.astype(np.float32)
            if isinstance(self.intercept_, np.ndarray):
                self.intercept_ = self.intercept_.astype(np.float32)
            elif isinstance(self.intercept_, np.generic):  # a Python 0.0 (no intercept) stays one, as scikit-learn's
                self.intercept_ = np.float32(self.intercept_)

    def _fitted_params(self, w, spec, y_shape, dtype):
        """``coef_`` and ``intercept_`` for the parameters ``w``, as a fit that ended at ``w`` would set them."""
        est = copy.copy(self)
        est._set_params_from(np.array(w, dtype=np.float64), spec, y_shape)
        est._cast_params(dtype)
        return {"coef_": est.coef_, "intercept_": est.intercept_}

    def _initial_params(self, spec: LinearSpec, y_mean=None) -> np.ndarray:
        """Zeros, the warm start, or (``y_mean`` given) zeros with the intercept at the link of ``y_mean``."""
        w0 = np.zeros(spec.n_params)
        if y_mean is not None and spec.fit_intercept and not (self.warm_start and hasattr(self, "coef_")):
            with np.errstate(all="ignore"):
                start = spec.get_loss().link(y_mean)
            if np.isfinite(start):
                w0[spec.n_outputs * spec.n_features :] = start
        coef = self._warm_coef(spec)
        if coef is not None:
            K, d = coef.shape
            w0[: K * d] = coef.reshape(-1)
            if spec.fit_intercept:
                w0[K * d :] = np.asarray(self.intercept_, dtype=np.float64).reshape(-1)[:K]
        return w0

    def _warm_coef(self, spec: LinearSpec):
        """The coefficients a warm start begins at, float64 of shape (outputs, features); None without a warm
        start or where the last fit's shape differs."""
        if not (getattr(self, "warm_start", False) and hasattr(self, "coef_")):  # a search has no warm start
            return None
        coef = self.coef_.toarray() if sp.issparse(self.coef_) else self.coef_
        coef = np.asarray(coef, dtype=np.float64)
        if coef.size != spec.n_outputs * spec.n_features:
            return None
        return coef.reshape(spec.n_outputs, spec.n_features)

    #: ``intercept_`` of a fit without an intercept: scikit-learn's regressors and LIBLINEAR estimators give 0.0
    #: (also for several targets or classes); its LogisticRegression gives zeros of shape (n_classes,).
    _intercept_off_is_array = False

    def _set_params_from(self, w, spec: LinearSpec, y_shape):
        K, d = spec.n_outputs, spec.n_features
        coef = w[: K * d].reshape(K, d)
        if not spec.fit_intercept:
            self.coef_ = coef
            self.intercept_ = np.zeros(K) if self._intercept_off_is_array else 0.0
            return
        intercept = w[K * d :]
        if spec.loss == "multinomial":
            # softmax is unchanged by a shift common to all intercepts: report the centred ones
            intercept = intercept - intercept.mean()
        self.coef_ = coef
        self.intercept_ = intercept

    # ------------------------------------------------------------ prediction
    def _decision(self, X):
        """Raw linear predictions ``X @ coef_.T + intercept_`` as (n, K), on NumPy or scipy.sparse X.

        ``coef_`` may be dense or sparse (:meth:`sparsify`); the product is
        scikit-learn's ``safe_sparse_dot``, dense, and sparse X is never densified.
        """
        from sklearn.utils.extmath import safe_sparse_dot

        coef = self.coef_ if sp.issparse(self.coef_) else np.atleast_2d(self.coef_).astype(np.float64, copy=False)
        if sp.issparse(coef):
            coef = coef.astype(np.float64, copy=False)
        intercept = np.reshape(self.intercept_, (1, -1)).astype(np.float64, copy=False)
        dense = not sp.issparse(X)
        if dense:
            X = np.asarray(X)
            if X.dtype == np.float32 and X.shape[0] > _DECISION_BLOCK_ROWS:
                # float32 rows widened a block at a time: float64 products without a float64 copy of X
                z = np.empty((X.shape[0], coef.shape[0]))
                for start in range(0, X.shape[0], _DECISION_BLOCK_ROWS):
                    rows = slice(start, start + _DECISION_BLOCK_ROWS)
                    z[rows] = safe_sparse_dot(X[rows].astype(np.float64), coef.T, dense_output=True)
                return z + intercept
        Xa = np.asarray(X, dtype=np.float64) if dense else X.astype(np.float64, copy=False)
        z = safe_sparse_dot(Xa, coef.T, dense_output=True)
        z = np.asarray(z.toarray() if sp.issparse(z) else z, dtype=np.float64)
        return z + intercept

    def _param_dtype(self):
        return np.dtype(self.coef_.dtype)

    #: Whether float32 X gives float32 ``coef_`` and ``intercept_`` (as in the scikit-learn counterpart).
    _keeps_float32 = False

    def _sklearn_fitted(self, est, names=("coef_", "intercept_", "n_iter_")):
        """Give the scikit-learn estimator ``est`` copies of this model's fitted attributes; returns it."""
        check_is_fitted(self)
        for name in names + ("classes_", "n_features_in_", "feature_names_in_"):
            if hasattr(self, name):
                value = getattr(self, name)
                setattr(est, name, value.copy() if hasattr(value, "copy") else value)
        return est


def _zero_model(w0, inference):
    """The fit where y is all zero and the loss needs a positive mean (the identity link with ``power > 0``): the
    loss is undefined at the start, and its infimum over positive means is at the zero model, which scikit-learn
    also returns, with a ``ConvergenceWarning``."""
    from scipy.optimize import OptimizeResult
    from sklearn.exceptions import ConvergenceWarning

    if inference:
        raise ValueError("compute_inference=True needs a mean inside the loss's domain; y is all zero, and with the "
                         "identity link and power > 0 the mean must be positive. The coefficients' covariance is "
                         "undefined there.")
    warnings.warn("y is all zero, and with the identity link and power > 0 the mean must be positive: the loss has "
                  "no minimum, and the model stays at coef_ = 0 and intercept_ = 0 (its infimum). Use the log "
                  "link, or check y.", ConvergenceWarning, stacklevel=3)
    return OptimizeResult(x=np.zeros_like(w0), fun=0.0, nit=0, nfev=0, success=False, status=2,
                          message="y is all zero: the mean is on the boundary of its domain.")


def _params_at(w, spec: LinearSpec, columns) -> np.ndarray:
    """The parameters ``w`` of all columns narrowed to ``columns``: each output's coefficients there, then the
    intercepts."""
    K, d = spec.n_outputs, spec.n_features
    return np.concatenate([w[: K * d].reshape(K, d)[:, columns].reshape(-1), w[K * d :]])


def _params_from(w, spec: LinearSpec, columns) -> np.ndarray:
    """The parameters of all columns from ``w`` over ``columns`` (:func:`_params_at`'s), zero elsewhere."""
    K, d, m = spec.n_outputs, spec.n_features, len(columns)
    coef = np.zeros((K, d))
    coef[:, columns] = np.asarray(w[: K * m]).reshape(K, m)
    return np.concatenate([coef.reshape(-1), w[K * m :]])


class _IterationHooks:
    """scikit-learn's callback hooks (``set_callbacks``, :mod:`sklearn.callback`) around the solver's iterations.

    The fit is the root task; each solver iteration is a sub-task, begun at
    the parameters it starts from and ended at those it reaches, whose
    ``fitted_estimator`` predicts as a fit stopped there would.  As in
    scikit-learn, one more sub-task is begun after the last iteration and
    ended empty, and a fit with no iteration (``max_iter=0``) still has one.
    Called by the solver after each iteration with its ``OptimizeResult`` (``x``, ``fun``, ``nit``, ...).
    """

    def __init__(self, est, solver, hook_args, w0, params_of):
        X, y, sample_weight = hook_args
        self._est, self._task, self._params_of = est, f"{solver}-iter", params_of
        self._data = {"X": X, "y": y, "metadata": None if sample_weight is None else {"sample_weight": sample_weight}}
        self._root = est._init_callback_context(max_subtasks=max(est.max_iter, 1) + 1)
        self._root.call_on_fit_task_begin(estimator=est, **self._data)
        self._iterations = 0
        self._ctx = self._begin(w0)

    def _attrs(self, w):
        w = np.array(w, dtype=np.float64)  # the solver may reuse its buffer
        return lambda: self._params_of(w)

    def _begin(self, w):
        ctx = self._root.subcontext(task_name=self._task)
        ctx.call_on_fit_task_begin(estimator=self._est, reconstruction_attributes=self._attrs(w), **self._data)
        return ctx

    def __call__(self, iteration):
        w = iteration.x
        self._iterations += 1
        self._ctx.call_on_fit_task_end(estimator=self._est, reconstruction_attributes=self._attrs(w), **self._data)
        self._ctx = self._begin(w)

    def close(self):
        """End the sub-task begun after the last iteration (empty); with no iteration, end the first one first."""
        if self._ctx is None:
            return
        if self._iterations == 0:
            self._ctx.call_on_fit_task_end(estimator=self._est, **self._data)
            self._ctx = self._root.subcontext(task_name=self._task)
            self._ctx.call_on_fit_task_begin(estimator=self._est, **self._data)
        self._ctx.call_on_fit_task_end(estimator=self._est)
        self._ctx = None

    def end_fit(self):
        self._root.call_on_fit_task_end(estimator=self._est, reconstruction_attributes={}, **self._data)


class InferenceMixin:
    """``summary()`` of a linear model fitted with ``compute_inference=True`` (one set of coefficients)."""

    def summary(self, cov_type="nonrobust", alpha=0.05):
        """Coefficients with standard errors, z-values, p-values and confidence intervals.

        Needs a fit with ``compute_inference=True``.  The errors come from the
        inverse Fisher information times the dispersion (``"nonrobust"``,
        ``coef_cov_``) or from the sandwich estimator (``"HC0"``,
        ``coef_cov_robust_``), as statsmodels' ``GLM.fit()`` and
        ``GLM.fit(cov_type="HC0")``; z-values and intervals use the normal
        distribution.  Sample weights count as frequencies.  With a penalty
        the errors ignore it, and a ``UserWarning`` says so.

        Parameters
        ----------
        cov_type : {"nonrobust", "HC0"}, default="nonrobust"
        alpha : float in (0, 1), default=0.05
            The intervals cover ``1 - alpha``.

        Returns
        -------
        pandas.DataFrame
            Indexed by the feature names (``x0``, ``x1``, ... without names)
            and ``"intercept"`` (last, with ``fit_intercept=True``); columns
            ``coef``, ``std_err``, ``z``, ``p_value``, ``ci_lower``, ``ci_upper``.

        Examples
        --------
        >>> from dask_estimators import PoissonRegressor
        >>> model = PoissonRegressor(alpha=0, compute_inference=True).fit(X, y)  # doctest: +SKIP
        >>> model.summary().columns.tolist()  # doctest: +SKIP
        ['coef', 'std_err', 'z', 'p_value', 'ci_lower', 'ci_upper']
        """
        import pandas as pd
        from scipy import stats

        check_is_fitted(self)
        if cov_type not in ("nonrobust", "HC0"):
            raise ValueError(f"cov_type must be 'nonrobust' or 'HC0', got {cov_type!r}.")
        if not (isinstance(alpha, Real) and 0 < alpha < 1):
            raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}.")
        if not hasattr(self, "coef_cov_"):
            raise ValueError(
                f"This {type(self).__name__} was fitted with compute_inference=False; set compute_inference=True "
                "and fit again to get standard errors."
            )
        if getattr(self, "_inference_penalised", False):
            warnings.warn(
                "The model was fitted with a penalty or positive=True; these standard errors, p-values and "
                "intervals ignore it (they are those of an unpenalised, unconstrained fit at these coefficients).",
                UserWarning,
                stacklevel=2,
            )
        coef = np.asarray(self.coef_.toarray() if sp.issparse(self.coef_) else self.coef_, dtype=np.float64)
        coef = coef.reshape(-1)
        names = getattr(self, "feature_names_in_", None)
        names = list(names) if names is not None else [f"x{j}" for j in range(coef.size)]
        if self.fit_intercept:
            coef = np.append(coef, np.asarray(self.intercept_, dtype=np.float64).reshape(-1)[0])
            names.append("intercept")
        cov = self.coef_cov_ if cov_type == "nonrobust" else self.coef_cov_robust_
        se = np.sqrt(np.diag(cov))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = coef / se
        q = stats.norm.ppf(1.0 - alpha / 2.0)
        return pd.DataFrame(
            {"coef": coef, "std_err": se, "z": z, "p_value": 2.0 * stats.norm.sf(np.abs(z)),
             "ci_lower": coef - q * se, "ci_upper": coef + q * se},
            index=pd.Index(names, name="feature"),
        )


def _series_of_rows(df, fn, float_dtype, name=None):
    """One dataframe partition -> ``fn`` of its rows as a series on the partition's index (``name``: the
    estimator's, for scikit-learn's messages)."""
    import pandas as pd

    out = _cast_float(fn(check_array(df, dtype=np.float64, ensure_min_samples=0, input_name="X", estimator=name)),
                      float_dtype)
    return pd.Series(out, index=df.index)


def dask_label_set(found, n_samples):
    """The sorted classes of dask ``y`` from the distinct labels each shard ``found``, checked as scikit-learn's
    ``check_classification_targets`` checks a whole ``y`` of ``n_samples`` rows.

    A float label that is not a whole number makes ``y`` continuous: scikit-learn's
    "Unknown label type" error, before any solver starts (one class per distinct
    float would be a model of thousands of classes).  More classes than half the
    rows gives a warning, as for NumPy ``y``.
    """
    from sklearn.utils.multiclass import type_of_target

    try:
        labels = np.unique(np.concatenate([np.asarray(f).reshape(-1) for f in found]))
    except TypeError:  # labels that do not sort (ints beside strings): type_of_target's "unknown"
        labels, y_type = None, "unknown"
    else:
        # check_classification_targets's own test, less its share-of-classes warning (which would count the
        # distinct labels as the rows; the warning below counts the rows)
        y_type = type_of_target(labels, input_name="y", raise_unknown=True)
    if y_type not in ("binary", "multiclass", "multiclass-multioutput", "multilabel-indicator",
                      "multilabel-sequences"):
        raise ValueError(
            f"Unknown label type: {y_type}. Maybe you are trying to fit a classifier, which expects discrete "
            "classes on a regression target with continuous values."
        )
    check_class_share(labels.size, n_samples)
    if labels.size > 2 and n_samples > 20 and labels.size > round(0.5 * n_samples):
        warnings.warn(
            f"y has {labels.size} classes in {n_samples} samples, more than half as many classes as samples: "
            "y may be a regression target rather than class labels.",
            UserWarning,
            stacklevel=3,
        )
    return labels


def check_class_share(n_classes: int, n_samples: int) -> None:
    """Fail fast where ``y`` has more classes than ``dask-estimators.max-class-share`` of its rows.

    A classifier fits one set of coefficients per class (one problem per
    class for one-vs-rest): integer labels of a regression target make
    thousands of classes and a fit of minutes, not an error.  scikit-learn
    warns above half the rows; here the default share is that half, and the
    fit stops before any solver starts.  A larger share (1 allows any) fits
    such classes.
    """
    share = _config.get("max-class-share")
    if share is None or n_samples <= 20 or n_classes <= 2 or n_classes <= share * n_samples:
        return
    raise ValueError(
        f"y has {n_classes} classes in {n_samples} samples, more than {share:g} of the number of samples: it "
        "looks like a regression target rather than class labels, and a classifier fits one set of coefficients "
        "per class. Fit a regressor, or allow this many classes with "
        "dask.config.set({'dask-estimators.max-class-share': 1.0})."
    )


def _checked_classes(y):
    """scikit-learn's ``check_classification_targets(y)``, the sorted classes of ``y`` and its codes (or None).

    The classes come from one pass for few numeric labels
    (:func:`~dask_estimators._validation.classes_and_codes`, which also gives
    the codes), else from one ``unique``; scikit-learn's check reuses them
    (the ``unique`` that ``attach_unique`` keeps in the dtype's metadata).
    """
    from sklearn.utils.multiclass import check_classification_targets

    fast = classes_and_codes(y)
    if fast is not None:
        classes, codes = fast
        check_classification_targets(y.view(np.dtype(y.dtype, metadata={"unique": classes})))
        check_class_share(len(classes), len(y))
        return classes, codes
    try:
        from sklearn.utils._unique import attach_unique  # the unique values ride along in the dtype's metadata
    except ImportError:  # pragma: no cover - a scikit-learn without it: two passes
        check_classification_targets(y)
        classes = np.unique(y)
    else:
        try:
            y_view = attach_unique(y)
        except TypeError:  # labels that do not sort (ints beside strings): scikit-learn's "Unknown label type"
            check_classification_targets(y)
            raise
        check_classification_targets(y_view)
        meta = y_view.dtype.metadata
        classes = np.asarray(meta["unique"]) if meta and "unique" in meta else np.unique(y)
    check_class_share(len(classes), len(y))
    return classes, None


#: The most parameters ``compute_inference=True`` accepts: the covariance is a dense p x p matrix.
MAX_INFERENCE_PARAMS = 5000


def _check_inference(spec):
    if spec.n_outputs != 1 or spec.get_loss().coupled:
        raise ValueError(
            "compute_inference=True needs a model with one set of coefficients: one target, or two classes "
            f"(this one has {spec.n_outputs})."
        )
    if spec.n_params > MAX_INFERENCE_PARAMS:
        raise ValueError(
            f"compute_inference=True forms the {spec.n_params} x {spec.n_params} covariance of the coefficients; "
            f"at most {MAX_INFERENCE_PARAMS} parameters are supported. Reduce the number of features or set "
            "compute_inference=False."
        )


def _shape_text(a) -> str:
    """A dask collection's shape as scikit-learn's messages print a shape; ``nan`` for a length not known yet."""
    dims = [int(k) if isinstance(k, (int, np.integer)) or (isinstance(k, float) and not np.isnan(k)) else "nan"
            for k in a.shape]
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def _as_dask_like(a, X, name):
    """Make ``a`` (y or sample_weight) a dask collection beside the dask collection X.

    The placement aligns the inputs by row position, so ``a`` need not be
    partitioned like X; an in-memory ``a`` is cut like X where X's chunks are
    known, else into as many near-equal blocks.  X is never computed here: where
    its length is unknown, the placement checks it against ``a``'s.
    """
    if a is None:
        return a
    if name == "sample_weight" and np.ndim(a) == 0 and not is_dask_collection(a):
        return _constant_rows(X, float(a))  # one weight for every row, as scikit-learn takes a scalar
    a = _nullable_as_float(a)
    n_x = X.shape[0]
    known = isinstance(n_x, (int, np.integer)) and not np.isnan(n_x)
    if is_dask_collection(a):
        n_a = a.shape[0]
        if known and isinstance(n_a, (int, np.integer)) and not np.isnan(n_a):
            check_lengths({"X": n_x, name: n_a})
        return a
    import dask.array as da

    a = np.asarray(a)
    if known:
        check_lengths({"X": n_x, name: a.shape[0]})
    chunks = getattr(X, "chunks", None)
    if chunks is None or any(np.isnan(c) for c in chunks[0]) or sum(chunks[0]) != a.shape[0]:
        n_blocks = max(1, min(getattr(X, "npartitions", None) or X.numblocks[0], a.shape[0]))
        chunks = (tuple(np.diff(np.linspace(0, a.shape[0], n_blocks + 1).astype(int)).tolist()),)
    return da.from_array(a, chunks=(chunks[0],) + a.shape[1:])


def _constant_rows(X, value: float):
    """A dask collection of ``value`` for each row of the dask collection X, cut as X (its lengths unknown too)."""
    if hasattr(X, "map_partitions"):  # a dataframe or series
        import pandas as pd

        return X.map_partitions(lambda df: pd.Series(np.full(len(df), value), index=df.index),
                                meta=pd.Series(dtype=np.float64))
    import dask.array as da

    return da.map_blocks(lambda b: np.full(b.shape[0], value), X, drop_axis=list(range(1, X.ndim)),
                         dtype=np.float64, chunks=(X.chunks[0],))


def warn_column_y(stacklevel=4) -> None:
    """scikit-learn's ``DataConversionWarning`` for a y of one column where a 1-d y is expected (its
    ``column_or_1d(y, warn=True)``), for dask y, whose shape scikit-learn's check does not take."""
    warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape "
                  "of y to (n_samples, ), for example using ravel().", DataConversionWarning, stacklevel=stacklevel)


def _refuse_strings(X) -> None:
    """scikit-learn's error for X of NumPy strings or bytes (or a list that makes them): its estimators validate X
    as ``dtype="numeric"``, which refuses them, where our float dtypes would convert numeric strings."""
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if isinstance(X, np.ndarray) and X.dtype.kind in "USV":
        raise ValueError("dtype='numeric' is not compatible with arrays of bytes/strings."
                         "Convert your data to numeric values explicitly instead.")


def _nullable_as_float(a):
    """``a`` (a pandas or dask Series or DataFrame) in float64 where it holds pandas' nullable numbers or booleans
    (``Int64``, ``boolean``, ``Float32``...), as scikit-learn's ``check_array`` converts them (a missing value
    becomes NaN, which the checks then refuse); anything else as it is."""
    import pandas as pd

    dtypes = getattr(a, "dtypes", None)
    if dtypes is None or not hasattr(a, "astype"):
        return a
    dtypes = list(dtypes) if hasattr(dtypes, "__iter__") else [dtypes]
    nullable = [pd.api.types.is_extension_array_dtype(d) and getattr(d, "kind", "O") in "iubf" for d in dtypes]
    return a.astype("float64") if any(nullable) else a


def _cast_float(out, dtype):
    """``out`` in ``dtype`` when it is a float array (labels are left as they are)."""
    out = np.asarray(out)
    return out.astype(dtype, copy=False) if out.dtype.kind == "f" else out


def sparse_input(X) -> bool:
    """Whether ``X`` is a scipy.sparse matrix or a dask collection of sparse blocks (its ``_meta``)."""
    return sp.issparse(getattr(X, "_meta", X))


def input_float_dtype(X):
    """float32 when X (array, dask collection or dataframe) is all float32, else float64: the dtype
    scikit-learn's ``validate_data(..., dtype=[np.float64, np.float32])`` would keep."""
    dtype = getattr(X, "dtype", None)
    if dtype is None and hasattr(X, "dtypes"):
        try:
            kinds = {np.dtype(d) for d in X.dtypes}
        except TypeError:  # extension dtypes
            return np.dtype(np.float64)
        dtype = kinds.pop() if len(kinds) == 1 else None
    return np.dtype(np.float32) if dtype == np.float32 else np.dtype(np.float64)
