"""Cross-validated linear models on placed data: LogisticRegressionCV and LinearRegressionCV.

A search places its data on the workers once.  The splits are roles of the
rows kept on the shards (:mod:`dask_estimators.objectives.cv`): for
``cv=int`` each worker computes them from its rows' global positions, as
scikit-learn's unshuffled ``StratifiedKFold`` (classifiers) or ``KFold``
(regressors) would; for a splitter or an iterable of splits the client sends
each shard its rows' roles once.  Every fold model is a fit on the same
shards with the held-out rows weighted zero; the held-out scores are sums
computed on the workers and tree-summed; the final refit uses the same
shards again.

A small search (under ``dask-estimators.worker-solve-below`` stored values
times outputs, as a small fit) places its data on one worker and runs its
paths and held-out sums there in one task, and its refit in a second one:
hundreds of evaluations without a round trip each
(:mod:`dask_estimators.optim.cv_paths`, which imports no scikit-learn there).
"""

from __future__ import annotations

import dataclasses
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn import get_config
from sklearn.base import _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import check_cv
from sklearn.utils import metadata_routing
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metadata_routing import MetadataRouter, MethodMapping, process_routing

from ..objectives import cv as CV
from ..optim import SOLVERS
from ..optim.cv_paths import FoldProblem, Penalties, paths_and_heldout
from ..session import DataSession, prestart, stored_values
from ._base import _params_from, accepts_kept_data, input_float_dtype, sparse_input
from .linear import LinearRegression, LogisticRegression

__all__ = ["LogisticRegressionCV", "LinearRegressionCV"]

#: ``LinearRegressionCV(solver="auto")`` runs on the Gram matrix up to this many features (dense X).
_GRAM_MAX_FEATURES = 1024

#: A one-worker search's binary or regression paths go in lockstep ("auto") from this many stored values; below
#: it they go one after the other, which was faster (benchmarks/results/history/small-linear-fits.md, "A small
#: cross-validated search").
_LOCKSTEP_ON_WORKER_FROM = 2**18

#: Scorers computed on the workers from sums over the held-out rows: name -> (metric, sign).
_WORKER_SCORERS = {"accuracy": ("accuracy", 1.0), "neg_log_loss": ("log_loss", -1.0)}


class _Search(FoldProblem):
    """What one search keeps while its data is placed: the placed data and its evaluator, the splits' sums, and
    whether its paths run in one task on the worker of its one shard (``on_worker``)."""

    def __init__(self, data, evaluator, spec, sums, n_splits, columns=None):
        self.full_spec, self.columns = spec, columns  # the model's columns; those solved (None: all)
        if columns is not None:
            spec = dataclasses.replace(spec, n_features=len(columns))
        super().__init__(evaluator, spec, sums, n_splits)
        self.data, self.evaluator, self.n_samples = data, evaluator, data.n_samples
        self.on_worker, self.worker_stats = False, []

    def widened(self, w):
        """Parameters over the solved columns (along the last axis of ``w``) as parameters of all the model's
        columns, zero where X stores nothing."""
        if self.columns is None:
            return np.asarray(w)
        w = np.asarray(w, dtype=np.float64)
        rows = [_params_from(v, self.full_spec, self.columns) for v in w.reshape(-1, w.shape[-1])]
        return np.asarray(rows).reshape(w.shape[:-1] + (self.full_spec.n_params,))


class _PlacedSearchMixin:
    """Validation, one placement (in a DataSession, which releases it), the splits on the shards, the fold paths."""

    def _splits_on_client(self, X, y, dask_input, split_params):
        """Splits computed on the client (a splitter, an iterable of splits, metadata routed to the splitter,
        or a scorer run on the client); ``split_params``: the splitter's ``split`` arguments (``groups``)."""
        cv = check_cv(self.cv, None if dask_input else y, classifier=self._is_classifier)
        if dask_input:
            y_host = np.asarray(y.compute()).reshape(-1) if y is not None else None
            X_host = np.empty((len(y_host), 0))
            if self._is_classifier and isinstance(self.cv, (Integral, type(None))):
                cv = check_cv(self.cv, y_host, classifier=True)
            return checked_splits(cv.split(X_host, y_host, **split_params), len(y_host))
        return checked_splits(cv.split(X, y, **split_params), len(y))

    def _routed(self, method, sample_weight, params):
        """``method``'s metadata as scikit-learn's CV estimators route it: {child: its arguments}.

        Without metadata routing, extra arguments are refused with scikit-learn's
        error and the scorer (if any) gets the sample weights; with it,
        :func:`~sklearn.utils.metadata_routing.process_routing` decides, by the
        requests of the splitter (``groups``) and of the scorer (a scorer that
        does not request ``sample_weight`` scores unweighted).
        """
        routing = get_config().get("enable_metadata_routing", False)
        if params and not routing:
            raise ValueError(
                f"Passing extra keyword arguments to {type(self).__name__}.{method} is only supported if "
                "enable_metadata_routing=True, which you can set using `sklearn.set_config`. Extra parameters "
                f"passed are: {set(params)}"
            )
        if method == "score":
            children = {"scorer": "score"}
        else:
            children = {"splitter": "split", "scorer": "score"} if self._has_scorer else {"splitter": "split"}
        if not routing:
            out = {child: {} for child in children}
            if "scorer" in out and sample_weight is not None:
                out["scorer"]["sample_weight"] = sample_weight
            return out
        weights = {} if sample_weight is None else {"sample_weight": sample_weight}
        routed = process_routing(self, method, **weights, **params)
        return {child: dict(routed[child][callee]) for child, callee in children.items()}

    def get_metadata_routing(self):
        """The metadata routing of this estimator: its own ``fit`` arguments, the splitter's (``fit`` routes to
        ``split``) and, with a scorer, the scorer's (``fit`` and ``score`` route to ``score``), as scikit-learn's
        CV estimators have it.  See scikit-learn's metadata routing user guide.

        Returns
        -------
        routing : sklearn.utils.metadata_routing.MetadataRouter
        """
        router = MetadataRouter(owner=self).add_self_request(self).add(
            splitter=check_cv(self.cv), method_mapping=MethodMapping().add(caller="fit", callee="split"))
        if self._has_scorer:
            router.add(scorer=self._get_scorer(),
                       method_mapping=MethodMapping().add(caller="score", callee="score").add(caller="fit",
                                                                                             callee="score"))
        return router

    def _worker_folds(self):
        """Whether the splits are computed on the workers: ``cv`` None or an int."""
        return self.cv is None or isinstance(self.cv, Integral)

    def _place_and_search(self, X, y, sample_weight, params, loss_of, n_outputs_of):
        """The search: validation, one placement in a DataSession, the splits, ``_search``.  ``params``: fit's
        extra arguments (metadata, routed by :meth:`_routed`)."""
        prestart(self.client)
        routed = self._routed("fit", sample_weight, params)
        split_params, score_params = routed["splitter"], routed.get("scorer", {})
        dtype = input_float_dtype(X)
        X, y, sample_weight, dask_input, labels = self._validate_input(X, y, sample_weight, return_classes=True)
        on_workers = self._scores_on_workers(score_params)
        if dask_input and not on_workers:
            raise ValueError(
                f"scoring={self.scoring!r} needs the held-out rows on the client; with dask input use one of "
                f"{sorted(_WORKER_SCORERS)} or None, which are computed on the workers."
            )
        if not dask_input and not self._is_classifier:
            y = np.reshape(y, -1)
        splits = None if self._worker_folds() and on_workers and not split_params else \
            self._splits_on_client(X, y, dask_input, split_params)
        check = self._block_check(multi_output=False, dtype=self._stored(dtype))
        y_placed, classes = y, None
        if labels is not None:
            classes, codes = labels
            classes = self._check_classes(classes)
            y_placed = np.searchsorted(classes, y) if codes is None else codes
        with DataSession(self.client, device=self.device, timeout=self.timeout) as session:
            data = session.data(X=X, y=y_placed, sample_weight=sample_weight, check=check,
                                outputs=self._worker_outputs(classes, on_workers))
            n_classes, class_weight = None, None
            if self._is_classifier:
                self.classes_ = self._dask_classes(data) if dask_input else classes
                n_classes = len(self.classes_)
                if isinstance(self.class_weight, dict) and not set(self.class_weight) <= set(self.classes_.tolist()):
                    # scikit-learn's LogisticRegressionCV refuses a key that is no class (its LogisticRegression
                    # leaves it out): a misspelt label would weigh nothing
                    raise ValueError("The given class_weight dict must have the class labels as keys; "
                                     f"classes={self.classes_} but key={self.class_weight.keys()}")
                class_weight = self._class_weight_vector(data, n_classes)
            n_splits = self._set_splits(data, splits, n_classes)
            loss = loss_of(n_classes)
            n_outputs = n_outputs_of(n_classes)
            sums = prepared_sums(data, loss, n_outputs, class_weight, n_splits)
            spec = self._linear_spec(loss, n_outputs)
            sparse = sparse_input(X)
            # a sparse X's columns that store no value anywhere (hashed text) are left out of every split's solve,
            # as a lone fit leaves them out: their coefficients are zero at every point of every path
            columns = self._stored_columns(data, spec) if sparse else None
            evaluator = data.evaluator(self.reduction)
            search = _Search(data, evaluator, spec, sums, n_splits, columns)
            search.splits, search.scores_on_workers = splits, on_workers
            search.X, search.y = (None, None) if dask_input else (X, y)
            if "sample_weight" in score_params:  # the validated weights
                score_params["sample_weight"] = sample_weight
            search.score_params = score_params
            search.sparse = sparse
            search.on_worker = data.on_worker
            search.values = stored_values(X)
            self._search(search)
            stats = data.stats(evaluator)
            stats.update(weight_sum=float(search.full_sums[0]), n_splits=n_splits, solved_on_worker=search.on_worker,
                         x_dtype=self._stored(dtype).name)
            if columns is not None:
                stats["solved_columns"] = len(columns)
            if search.on_worker:  # the search's evaluations, made on the worker
                stats.update(evaluations_on_worker=sum(s["rounds"] for s in search.worker_stats),
                             seconds_on_worker=sum(s["seconds"] for s in search.worker_stats))
        self._cast_params(dtype)
        self.fit_stats_ = stats
        return self

    def _worker_outputs(self, classes, scores_on_workers) -> int | None:
        """The model's outputs, for the session to choose whether the whole search runs in one task on one
        worker (a small problem, as a small fit's: :meth:`~dask_estimators.session.DataSession.data`); None
        when the held-out rows are scored on the client.

        A small search's evaluations take less than a round trip: one per
        evaluation of every split's path would cost more than the work it
        spreads (a search makes hundreds).
        """
        if not scores_on_workers:
            return None
        return len(classes) if classes is not None and len(classes) > 2 else 1

    #: Whether held-out rows are scored by ``scoring`` (else: the mean squared error, on the workers).
    _has_scorer = False

    def _scores_on_workers(self, score_params):
        """Whether the held-out scores are sums computed on the workers (else: the scorer on the client)."""
        return True

    def _set_splits(self, data, splits, n_classes):
        """The splits' roles on every shard; returns the number of splits."""
        ranges = data.row_ranges
        n = data.n_samples
        if splits is None:
            cv = 5 if self.cv is None else int(self.cv)
            if cv < 2:
                raise ValueError(f"k-fold cross-validation requires at least one train/test split by setting "
                                 f"n_splits=2 or more, got n_splits={cv}.")
            if cv > n:
                raise ValueError(f"Cannot have number of splits n_splits={cv} greater than the number of samples: "
                                 f"n_samples={n}.")
            if self._is_classifier:
                runs = data.map_each(CV.class_runs, [(r, n_classes) for r in ranges])
                bounds, prefixes = CV.stratified_plan(runs, n_classes, cv)
                data.map_each(CV.assign_stratified, [(r, p, bounds) for r, p in zip(ranges, prefixes)])
            else:
                data.map_each(CV.assign_kfold, [(r, n, cv) for r in ranges])
            return cv
        place_roles(data, [train for train, _ in splits], [test for _, test in splits])
        return len(splits)

    def _paths(self, search, paths, metric):
        """Every split's regularisation path for each ``(penalties, grid)`` of ``paths`` (one per ``l1_ratio``),
        warm-started along the grid, and with ``metric`` each fit's held-out sums
        (:func:`~dask_estimators.optim.cv_paths.paths_and_heldout`, whose arrays this returns).

        A small search (``search.on_worker``) runs them in one task on its shard's
        worker (:meth:`~dask_estimators.session.PlacedData.run_on_worker`, which raises its warnings here).
        """
        n_params = search.spec.n_params
        plan = []
        for penalties, grid in paths:
            solvers = [self._resolved_solver(n_params, penalties(p, 1.0)[1]) for p in grid]
            plan.append((penalties, list(grid), solvers, self._batched(solvers, search)))
        kwargs = {"tol": self.tol, "max_iter": self.max_iter}
        if not search.on_worker:
            return paths_and_heldout(search, plan, metric, **kwargs)
        out, stats = search.data.run_on_worker(paths_and_heldout, search, (plan, metric), kwargs, stacklevel=4)
        search.worker_stats.append(stats)
        return out

    def _batched(self, solvers, search):
        """The splits' paths run in lockstep (one pass over X per round for all splits) with L-BFGS.

        "auto" takes them where each split's model has one output (a binary
        or regression model): there every split's model is one output of the
        fused one-pass kernel.  A multinomial model's splits go one after the
        other, each with the fused multinomial kernel.  So do a one-worker
        search's under :data:`_LOCKSTEP_ON_WORKER_FROM` stored values, where
        the lockstep's hand-offs between the splits' solver threads cost more
        than the passes over X it saves.
        """
        method = getattr(self, "path_method", "sequential")
        if method == "auto":
            small = search.on_worker and search.values < _LOCKSTEP_ON_WORKER_FROM
            method = "batched" if search.spec.n_outputs == 1 and not small else "sequential"
        return method == "batched" and all(s == "lbfgs" for s in solvers)

    def _refit(self, search, penalties, point, w0):
        obj = search.objective(None)
        obj.l2, obj.l1 = penalties(point, obj.sw_sum)
        solver = self._resolved_solver(search.spec.n_params, obj.l1)
        res, stats = search.data.minimize(obj, w0, solver=solver, tol=self.tol, max_iter=self.max_iter)
        if stats is not None:
            search.worker_stats.append(stats)
        self.solver_ = solver
        return res


_CV_DOC = """
    cv : int, cross-validation generator or iterable, default=None
        None: 5 splits.  An int: that many unshuffled ``{splitter}`` splits,
        computed on the workers from each row's position{stratified} (the
        rows never move).  A splitter or an iterable of ``(train, test)``
        index arrays: the splits are made on the client (for dask input the
        splitter sees ``y``, computed, and an ``X`` without columns) and each
        shard gets its rows' roles once.
    path_method : {{"auto", "sequential", "batched"}}, default="auto"
        ``"sequential"``: one split after the other, each with the solver and
        its fused one-model kernel (the Newton solvers are always
        sequential).  ``"batched"``: the splits' L-BFGS runs go in lockstep,
        each round evaluating every still-running split's model in one pass
        over X (:mod:`dask_estimators.optim.batched`); each run's iterates
        are those it would take alone.  It takes far fewer rounds, and where
        each model has one output (binary, regression) the splits' models are
        the outputs of one fused kernel that reads each row once for all of
        them, which makes it faster than sequential even on one host (the
        performance page has the measurement).  "auto": batched for models of one
        output, sequential for multinomial models and for a small search on
        one worker (under 2**18 stored values).
"""


class LogisticRegressionCV(_PlacedSearchMixin, LogisticRegression):
    """Logistic regression with ``C`` (and ``l1_ratio``) chosen by cross-validation, on one placement.

    The objective of each fit is :class:`LogisticRegression`'s (scikit-learn's
    scale); the search follows scikit-learn's ``LogisticRegressionCV``: for
    every split and every ``l1_ratio`` a path over ``Cs`` in the given order,
    each fit warm-started from the previous one (with ``Cs`` increasing, the
    largest penalty first); the scores are summed over the splits and the best
    ``(C, l1_ratio)`` is refitted on all rows (``refit=True``), or the
    splits' best coefficients are averaged (``refit=False``).

    The data is placed on the workers once for the whole search (see
    :mod:`dask_estimators.estimators.cv`), and the held-out scores of
    ``scoring`` None, ``"accuracy"`` or ``"neg_log_loss"`` are sums computed
    on the workers.  Other scorers (any scikit-learn scorer name or callable)
    are applied on the client to the held-out rows, so they need NumPy input.

    Parameters
    ----------
    Cs : int or array-like of float, default=10
        The values of C, or their number: ``np.logspace(-4, 4, Cs)``.
    l1_ratios : array-like of float in [0, 1] or None, default=None
        Elastic-net mixing values searched; None is the L2 penalty alone, and
        then the fitted arrays have no ``l1_ratio`` axis (as scikit-learn's
        ``l1_ratios=None``).  Values above 0 need ``solver="lbfgs"``.
    fit_intercept : bool, default=True
    {cv}
    scoring : str, callable or None, default=None
        None is accuracy.  See above for where it is computed.
    solver : {{"lbfgs", "newton-cg", "newton-cholesky"}}, default="lbfgs"
    tol : float, default=1e-4
    max_iter : int, default=100
    class_weight : dict, "balanced" or None, default=None
        As in :class:`LogisticRegression`; "balanced" is computed on all rows.
        Held-out scores use the sample weights without the class weights, as
        scikit-learn's.
    refit : bool, default=True
    use_legacy_attributes : bool, default=True
        True: the fitted attributes as scikit-learn's default of today (dicts
        keyed by class, ``C_`` and ``l1_ratio_`` arrays).  False: scikit-learn's
        layout from its version 1.10: ``C_`` and ``l1_ratio_`` floats,
        ``coefs_paths_`` of shape (n_folds, n_l1_ratios, n_cs, n_classes or 1,
        n_dof), ``scores_`` and ``n_iter_`` of shape (n_folds, n_l1_ratios, n_cs).
    random_state : int, RandomState instance or None, default=None
        Accepted and validated; the solvers are deterministic and the
        ``cv=int`` splits unshuffled, so it changes nothing.
    client, reduction, device, timeout
        As in :class:`LogisticRegression`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    Cs_ : ndarray of shape (n_cs,)
    l1_ratios_ : ndarray of shape (n_l1_ratios,)
        ``[None]`` when ``l1_ratios`` is None.
    coefs_paths_ : dict of ndarray
        Class label -> ``(n_folds, n_cs, n_dof)`` (``(n_folds, n_cs,
        n_l1_ratios, n_dof)`` with ``l1_ratios``), ``n_dof`` the features and
        the intercept; one key (the positive class) for two classes.
        Multinomial intercepts are centred.
    scores_ : dict of ndarray
        Class label -> ``(n_folds, n_cs)`` (or with the ``l1_ratio`` axis), the
        same array for every key.
    C_ : ndarray of shape (1,) or (n_classes,)
    l1_ratio_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : ndarray of shape (1, n_folds, n_cs) or (1, n_folds, n_cs, n_l1_ratios)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
    solver_ : str
        The solver of the refit.
    fit_stats_ : dict
        Distributed rounds, seconds, bytes, shards, rows per shard, splits.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from dask_estimators import LogisticRegressionCV
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = LogisticRegressionCV(Cs=5).fit(StandardScaler().fit_transform(X), y)  # doctest: +SKIP
    >>> clf.C_.shape, clf.scores_[1].shape  # doctest: +SKIP
    ((1,), (5, 5))
    """

    _one_class_text = "{}."  # scikit-learn's LogisticRegressionCV: "... only one class: 0."

    _parameter_constraints = {
        k: v for k, v in LogisticRegression._parameter_constraints.items() if k not in ("C", "l1_ratio", "warm_start")
    }
    _parameter_constraints.update({
        "Cs": [Interval(Integral, 1, None, closed="left"), "array-like"],
        "l1_ratios": ["array-like", None],
        "cv": ["cv_object"],
        "scoring": [str, callable, None],
        "refit": ["boolean"],
        "path_method": [StrOptions({"auto", "batched", "sequential"})],
        "use_legacy_attributes": ["boolean"],
    })

    def __init__(
        self,
        *,
        Cs=10,
        l1_ratios=None,
        fit_intercept=True,
        cv=None,
        scoring=None,
        solver="lbfgs",
        tol=1e-4,
        max_iter=100,
        class_weight=None,
        refit=True,
        random_state=None,
        path_method="auto",
        use_legacy_attributes=True,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.Cs = Cs
        self.l1_ratios = l1_ratios
        self.fit_intercept = fit_intercept
        self.cv = cv
        self.scoring = scoring
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.class_weight = class_weight
        self.refit = refit
        self.random_state = random_state
        self.path_method = path_method
        self.use_legacy_attributes = use_legacy_attributes
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    _has_scorer = True
    #: float32 X is stored and read as float32, but ``coef_`` and ``intercept_`` are float64, as scikit-learn's
    #: LogisticRegressionCV gives them (its predictions too)
    _keeps_float32 = False
    # score's sample_weight goes to the scorer alone, as in scikit-learn's LogisticRegressionCV
    __metadata_request__score = {"sample_weight": metadata_routing.UNUSED}

    def _scores_on_workers(self, score_params):
        # the sums weight by the sample weights; other metadata for the scorer needs the scorer itself
        return (self.scoring is None or (isinstance(self.scoring, str) and self.scoring in _WORKER_SCORERS)) \
            and set(score_params) <= {"sample_weight"}

    @accepts_kept_data
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None, **params):
        """Search ``Cs`` (and ``l1_ratios``) by cross-validation on the cluster, then refit.

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features), or KeptData
            A :class:`~dask_estimators.KeptData` brings its own y and weights, and its placement stays on
            the workers for the next fit on it.
        y : array-like or dask collection of shape (n_samples,), default=None
            None only with a KeptData.
        sample_weight : array-like or dask collection of shape (n_samples,), default=None
        **params : dict
            Metadata for the splitter (``groups``) and the scorer, routed as
            scikit-learn's ``LogisticRegressionCV`` routes them where
            ``enable_metadata_routing=True``; refused otherwise.  Without
            routing the scorer gets ``sample_weight``.

        Returns
        -------
        self : object
        """
        if self.scoring is not None and not callable(self.scoring):
            from sklearn.metrics import get_scorer_names

            if self.scoring not in get_scorer_names():
                raise ValueError(f"scoring must be a scorer name of scikit-learn, a callable or None; "
                                 f"got {self.scoring!r}.")
        Cs = np.logspace(-4, 4, self.Cs) if isinstance(self.Cs, Integral) else np.asarray(self.Cs, dtype=float)
        if Cs.ndim != 1 or Cs.size == 0 or np.any(Cs <= 0):
            raise ValueError(f"Cs must be a positive int or a non-empty list of positive floats, got {self.Cs!r}.")
        l1_ratios = None if self.l1_ratios is None else np.asarray(self.l1_ratios, dtype=float).reshape(-1)
        if l1_ratios is not None and (l1_ratios.size == 0 or np.any((l1_ratios < 0) | (l1_ratios > 1))):
            raise ValueError(f"l1_ratios must be an array-like of numbers between 0 and 1; got "
                             f"(l1_ratios={self.l1_ratios!r})")
        self.Cs_ = Cs
        self._l1 = np.zeros(1) if l1_ratios is None else l1_ratios
        if np.any(self._l1 > 0) and self.solver != "lbfgs":
            raise ValueError(f"Solver {self.solver!r} supports only the L2 penalty (l1_ratios of 0); use "
                             "solver='lbfgs' for L1 or elastic-net penalties.")
        self._place_and_search(
            X, y, sample_weight, params,
            lambda n_classes: "binomial" if n_classes == 2 else "multinomial",
            lambda n_classes: 1 if n_classes == 2 else n_classes,
        )
        self.l1_ratios_ = np.asarray([None], dtype=object) if l1_ratios is None else l1_ratios
        del self._l1
        return self

    def _search(self, search):
        spec, Cs, l1s = search.spec, self.Cs_, self._l1
        n_folds, n_cs, n_l1 = search.n_splits, len(Cs), len(l1s)
        K, d = spec.n_outputs, spec.n_features
        metric, sign = _WORKER_SCORERS[self.scoring or "accuracy"] if search.scores_on_workers else (None, 1.0)
        paths, iters, sums = self._paths(search, [(Penalties("C", l1r), Cs) for l1r in l1s], metric)
        # (n_l1, n_folds, n_cs, ...) -> (n_folds, n_cs, n_l1, ...)
        coefs, n_iter = np.moveaxis(paths, 0, 2), np.moveaxis(iters, 0, 2)
        if sums is not None:
            scores = np.moveaxis(sign * sums[..., 0] / sums[..., 1], 0, 2)
        else:
            scores = np.zeros((n_folds, n_cs, n_l1))
            for k in range(n_folds):
                for m in range(n_l1):
                    scores[k, :, m] = self._scores_on_client(search, k, coefs[k, :, m])
        if self.refit:
            total = scores.sum(axis=0)
            i, m = np.unravel_index(np.argmax(total), total.shape)
            C_, l1_ratio_ = Cs[i], l1s[m]
            w0 = coefs[:, i, m].mean(axis=0)
            res = self._refit(search, Penalties("C", l1_ratio_), C_, w0)
            w = res.x
        else:
            flat = scores.reshape(n_folds, -1).argmax(axis=1)
            best = [np.unravel_index(b, (n_cs, n_l1)) for b in flat]
            w = np.mean([coefs[k, i, m] for k, (i, m) in enumerate(best)], axis=0)
            C_ = float(np.mean([Cs[i] for i, _ in best]))
            l1_ratio_ = float(np.mean([l1s[m] for _, m in best])) if self.l1_ratios is not None else 0.0
            self.solver_ = self.solver
        spec, K, d = search.full_spec, spec.n_outputs, search.full_spec.n_features
        coefs, w = search.widened(coefs), search.widened(w)
        self._set_params_from(w, spec, None)
        n_cls = len(self.classes_)
        reps = 1 if n_cls == 2 else n_cls
        self.C_ = np.repeat(float(C_), reps)
        if self.refit and self.l1_ratios is None:  # scikit-learn's legacy layout: the grid's one ratio, None
            self.l1_ratio_ = np.repeat(np.asarray([None], dtype=object), reps)
        else:
            self.l1_ratio_ = np.repeat(float(l1_ratio_), reps)
        # the paths as scikit-learn lays them out: per class [coef, intercept]
        W = coefs[..., : K * d].reshape(n_folds, n_cs, n_l1, K, d)
        if spec.fit_intercept:
            b = coefs[..., K * d :]
            if K > 1:
                b = b - b.mean(axis=-1, keepdims=True)
            W = np.concatenate([W, b[..., None]], axis=-1)
        if not self.use_legacy_attributes:  # scikit-learn's layout from its version 1.10 on
            self.C_, self.l1_ratio_ = float(C_), float(l1_ratio_)
            self.coefs_paths_ = np.swapaxes(W, 1, 2).copy()  # (n_folds, n_l1_ratios, n_cs, n_classes or 1, n_dof)
            self.scores_ = np.swapaxes(scores, 1, 2).copy()  # (n_folds, n_l1_ratios, n_cs)
            self.n_iter_ = np.swapaxes(n_iter, 1, 2).copy()
            return
        keys = self.classes_[1:] if n_cls == 2 else self.classes_
        drop = self.l1_ratios is None
        self.coefs_paths_ = {c: (W[:, :, 0, j] if drop else W[:, :, :, j]) for j, c in enumerate(keys)}
        self.scores_ = {c: (scores[:, :, 0] if drop else scores).copy() for c in keys}
        self.n_iter_ = (n_iter[:, :, 0] if drop else n_iter)[None, ...]

    def _scores_on_client(self, search, k, path):
        """Held-out scores of split k for each point of its path, by ``scoring`` on the client."""
        from sklearn.linear_model import LogisticRegression as SkLR
        from sklearn.metrics import get_scorer

        scorer = _with_labels(get_scorer(self.scoring), self.classes_)
        train, test = search.splits[k]
        Xt, yt = search.X[test], search.y[test]
        params = _rows_of(search.score_params, len(search.y), test)
        out = []
        for w in path:
            est = SkLR()
            est.classes_ = self.classes_
            W, b = search.full_spec.unpack(search.widened(w))
            est.coef_ = W.copy()
            est.intercept_ = b.copy() if b is not None else np.zeros(search.spec.n_outputs)
            out.append(scorer(est, Xt, yt, **params))
        return np.asarray(out, dtype=float)

    def score(self, X, y, sample_weight=None, **params):
        """The ``scoring`` score (accuracy when None) of the model on ``X``, ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
        **params : dict
            Metadata for the scorer, routed where ``enable_metadata_routing=True``
            (``sample_weight`` then goes to it only if it requests it); refused
            otherwise.

        Returns
        -------
        float
        """
        return self._get_scorer()(self, X, y, **self._routed("score", sample_weight, params)["scorer"])

    def _get_scorer(self):
        """The scorer of ``scoring`` (accuracy when None), as scikit-learn's ``LogisticRegressionCV`` has it."""
        from sklearn.metrics import get_scorer

        return get_scorer(self.scoring or "accuracy")

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.linear_model.LogisticRegression`` at ``C_`` and ``l1_ratio_``.

        Returns
        -------
        sklearn.linear_model.LogisticRegression
        """
        from sklearn.linear_model import LogisticRegression as SkLR

        l1r = float(np.ravel(self.l1_ratio_)[0] or 0.0)  # None: no l1_ratios searched, the L2 penalty alone
        est = SkLR(C=float(np.ravel(self.C_)[0]), l1_ratio=l1r, fit_intercept=self.fit_intercept, tol=self.tol,
                   class_weight=self.class_weight, max_iter=self.max_iter, solver="lbfgs" if l1r == 0 else "saga")
        return self._sklearn_fitted(est, names=("coef_", "intercept_"))


class LinearRegressionCV(_PlacedSearchMixin, LinearRegression):
    """Elastic-net least squares with ``alpha`` (and ``l1_ratio``) chosen by cross-validation, on one placement.

    Each fit minimises :class:`LinearRegression`'s objective, which is
    scikit-learn's ``ElasticNet`` objective on the same scale (``alpha`` here
    is ``ElasticNet``'s ``alpha``), and the search follows scikit-learn's
    ``ElasticNetCV``: for every ``l1_ratio``, a path over the ``alphas`` from
    the largest down, warm-started; the alpha with the smallest mean squared
    error over the held-out rows (mean over the splits) is refitted on all
    rows.  The data is placed once for the whole search and the held-out
    errors are sums computed on the workers.

    Parameters
    ----------
    l1_ratio : float or array-like of float in [0, 1], default=0.5
    eps : float, default=1e-3
        ``alpha_min / alpha_max`` of a generated grid.
    alphas : int or array-like of float, default=100
        The alphas, or their number: a geometric grid from the smallest alpha
        that zeros every coefficient (computed on the workers, from all rows,
        as scikit-learn's) down to ``eps`` times it.  A generated grid needs
        ``l1_ratio > 0``.
    fit_intercept : bool, default=True
    {cv}
    solver : {{"auto", "cd", "lbfgs", "newton-cg", "newton-cholesky"}}, default="auto"
        ``"cd"``: the whole search from one pass over the data.  The workers
        sum each split's Gram matrix of ``[X, y, 1]`` (over its held-out rows,
        and over all rows), and coordinate descent on the client solves every
        split's path and the refit from those sums, ``ElasticNetCV``'s
        precomputed-Gram method (:mod:`dask_estimators.optim.gram_cd`).  Its
        cost is one pass of O(n_features²) per row and (n_splits + 1) Gram
        matrices on the wire, whatever the grid.  The other solvers run each
        split's path on the workers, one round per evaluation.  "auto": "cd"
        for dense X with at most 1024 features; otherwise L-BFGS with L1,
        else Newton-Cholesky (up to 5000 parameters).
    tol : float, default=1e-6
        With "cd", a fit stops when its duality gap is at most ``tol`` times
        the centred, weighted sum of squares of y (``ElasticNet``'s rule).
    max_iter : int, default=1000
        With "cd": sweeps over the features per grid point.
    client, reduction, device, timeout
        As in :class:`LinearRegression`.

    Attributes
    ----------
    alpha_ : float
    l1_ratio_ : float
    alphas_ : ndarray of shape (n_alphas,) or (n_l1_ratio, n_alphas)
    mse_path_ : ndarray of shape (n_alphas, n_folds) or (n_l1_ratio, n_alphas, n_folds)
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_iter_ : int
        Iterations of the refit.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
    solver_ : str
    fit_stats_ : dict

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from dask_estimators import LinearRegressionCV
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = LinearRegressionCV(alphas=10, l1_ratio=[0.5, 1.0]).fit(X, y)  # doctest: +SKIP
    >>> reg.mse_path_.shape  # doctest: +SKIP
    (2, 10, 5)
    """

    _multi_output = False
    _strings_refused = ("predict",)  # ElasticNetCV converts numeric strings at fit
    _parameter_constraints = {
        k: v for k, v in LinearRegression._parameter_constraints.items()
        if k not in ("alpha", "l1_ratio", "warm_start", "positive", "copy_X", "n_jobs")
    }
    _parameter_constraints.update({
        "l1_ratio": [Interval(Real, 0, 1, closed="both"), "array-like"],
        "eps": [Interval(Real, 0, None, closed="neither")],
        "alphas": [Interval(Integral, 1, None, closed="left"), "array-like"],
        "cv": ["cv_object"],
        "path_method": [StrOptions({"auto", "batched", "sequential"})],
        "solver": [StrOptions(set(SOLVERS) | {"auto", "cd"})],
    })

    def __init__(
        self,
        *,
        l1_ratio=0.5,
        eps=1e-3,
        alphas=100,
        fit_intercept=True,
        cv=None,
        solver="auto",
        tol=1e-6,
        max_iter=1000,
        path_method="auto",
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.l1_ratio = l1_ratio
        self.eps = eps
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.cv = cv
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.path_method = path_method
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    @accepts_kept_data
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None, **params):
        """Search ``alphas`` (and ``l1_ratio``) by cross-validation on the cluster, then refit.

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features), or KeptData
            A :class:`~dask_estimators.KeptData` brings its own y and weights, and its placement stays on
            the workers for the next fit on it.
        y : array-like or dask collection of shape (n_samples,), default=None
            None only with a KeptData.
        sample_weight : array-like or dask collection of shape (n_samples,), default=None
        **params : dict
            Metadata for the splitter (``groups``), routed as scikit-learn's
            ``ElasticNetCV`` routes it where ``enable_metadata_routing=True``;
            refused otherwise.

        Returns
        -------
        self : object
        """
        l1s = np.atleast_1d(np.asarray(self.l1_ratio, dtype=float))
        if l1s.ndim != 1 or l1s.size == 0 or np.any((l1s < 0) | (l1s > 1)):
            raise ValueError(f"l1_ratio must be a float or a list of floats in [0, 1], got {self.l1_ratio!r}.")
        if isinstance(self.alphas, Integral) and np.any(l1s == 0):
            raise ValueError(
                "Automatic alpha grid generation is not supported for l1_ratio=0. Please supply a grid by "
                "providing your estimator with the appropriate `alphas=` argument."
            )
        if not isinstance(self.alphas, Integral):
            alphas = np.asarray(self.alphas, dtype=float).reshape(-1)
            if alphas.size == 0 or np.any(alphas < 0) or not np.all(np.isfinite(alphas)):
                raise ValueError(f"alphas must be non-negative finite floats, got {self.alphas!r}.")
        self._l1 = l1s
        self._place_and_search(X, y, sample_weight, params, lambda n: "squared", lambda n: 1)
        del self._l1
        return self

    def _search(self, search):
        l1s = self._l1
        gram = self._uses_gram(search)
        moments = search.evaluator(CV.xy_sums) if gram or isinstance(self.alphas, Integral) else None
        if isinstance(self.alphas, Integral):
            Xsy, Sx, Sy, S = moments
            Xyw = Xsy - (Sy / S) * Sx if self.fit_intercept else Xsy
            grids = []
            for l1r in l1s:
                alpha_max = np.max(np.abs(Xyw)) / (S * l1r)
                if alpha_max <= np.finfo(np.float64).resolution:
                    grids.append(np.full(self.alphas, np.finfo(np.float64).resolution))
                else:
                    grids.append(np.geomspace(alpha_max, alpha_max * self.eps, num=self.alphas))
            alphas = np.asarray(grids)
        else:
            alphas = np.tile(np.sort(np.asarray(self.alphas, dtype=float))[::-1], (len(l1s), 1))
        search_paths = self._gram_paths if gram else self._fold_paths_mse
        mse, refit = search_paths(search, l1s, alphas, moments)
        mean = mse.mean(axis=2)
        best, best_mse = (0, 0), np.inf
        for m in range(len(l1s)):
            i = int(np.argmin(mean[m]))
            if mean[m, i] < best_mse:
                best, best_mse = (m, i), mean[m, i]
        m, i = best
        self.alpha_, self.l1_ratio_ = float(alphas[m, i]), float(l1s[m])
        self.alphas_ = alphas[0] if (len(l1s) == 1 or not isinstance(self.alphas, Integral)) else alphas
        self.mse_path_ = np.squeeze(mse)
        x, n_iter = refit(m, i)
        self._set_params_from(search.widened(x), search.full_spec, (None,))
        self.n_iter_ = int(n_iter)

    def _uses_gram(self, search):
        """Whether the search runs on the Gram matrix (``solver="cd"``, or "auto" on dense X of few columns)."""
        if self.solver == "cd":
            if search.sparse:
                raise ValueError("solver='cd' works on the Gram matrix of dense X; for sparse X use solver='auto' "
                                 "or 'lbfgs'.")
            return True
        return self.solver == "auto" and not search.sparse and self.n_features_in_ <= _GRAM_MAX_FEATURES

    def _fold_paths_mse(self, search, l1s, alphas, moments):
        """The splits' paths by the solvers, one distributed round per evaluation (or all in one task on the
        worker of a small search's one shard); held-out errors on the workers."""
        paths, _, sums = self._paths(search, [(Penalties("alpha", l1r), alphas[m]) for m, l1r in enumerate(l1s)],
                                     "squared_error")
        mse = np.swapaxes(sums[..., 0] / sums[..., 1], 1, 2)  # (n_l1, n_alphas, n_folds)

        def refit(m, i):
            res = self._refit(search, Penalties("alpha", l1s[m]), alphas[m, i], paths[m][:, i].mean(axis=0))
            return res.x, res.nit

        return mse, refit

    def _gram_paths(self, search, l1s, alphas, moments):
        """The whole search from one round of sums: each split's training and held-out Gram matrices.

        The workers return ``sum s z zᵀ`` of ``z = [x, y, 1]``, shifted by the
        data's means, over all rows and over each split's held-out rows
        (:func:`~dask_estimators.objectives.cv.gram_sums`).  Each split's
        path is coordinate descent on its centred training Gram
        (:func:`~dask_estimators.optim.gram_cd.enet_gram`), its held-out
        squared error a quadratic form in its held-out sums, and the refit
        coordinate descent on the whole Gram: no further pass over the data.
        """
        from ..optim.gram_cd import enet_gram

        d, K = self.n_features_in_, search.n_splits
        _, Sx, Sy, S = moments
        shift = np.append(np.asarray(Sx, dtype=np.float64) / S, Sy / S) if self.fit_intercept else np.zeros(d + 1)
        direct = self._splits_leaving_rows_out(search)
        sums = np.asarray(search.evaluator(CV.gram_sums, shift, direct), dtype=np.float64)
        total = sums[0]
        train = [sums[1 + K + direct.index(k)] if k in direct else total - sums[1 + k] for k in range(K)]
        problems = [self._centred(T) for T in train]
        mse = np.zeros((len(l1s), alphas.shape[1], K))
        coefs = np.zeros((len(l1s), K, alphas.shape[1], d))
        unconverged = 0
        for m, l1r in enumerate(l1s):
            for k, (G, c, yy, Sk, mu) in enumerate(problems):
                held_out = sums[1 + k]
                w = np.zeros(d)
                for j, alpha in enumerate(alphas[m]):
                    w, _, ok = enet_gram(G, c, yy, Sk * alpha * l1r, Sk * alpha * (1.0 - l1r), w, tol=self.tol,
                                         max_iter=self.max_iter)
                    unconverged += not ok
                    coefs[m, k, j] = w
                    v = np.concatenate([-w, [1.0, -(mu[d] - mu[:d] @ w)]])  # the residual, as z @ v
                    mse[m, j, k] = (v @ held_out @ v) / held_out[d + 1, d + 1]
        def warn_unconverged(what):
            warnings.warn(f"Coordinate descent did not converge within max_iter={self.max_iter} sweeps {what} "
                          f"(tol={self.tol}). Consider increasing max_iter or tol.", ConvergenceWarning,
                          stacklevel=5)

        if unconverged:
            warn_unconverged(f"for {unconverged} of the splits' path points")

        def refit(m, i):
            G, c, yy, S_all, mu = self._centred(total)
            alpha, l1r = alphas[m, i], l1s[m]
            w, n_iter, ok = enet_gram(G, c, yy, S_all * alpha * l1r, S_all * alpha * (1.0 - l1r),
                                      coefs[m, :, i].mean(axis=0), tol=self.tol, max_iter=self.max_iter)
            if not ok:
                warn_unconverged("on the refit")
            self.solver_ = "cd"
            if not self.fit_intercept:
                return w, n_iter
            return np.append(w, mu[d] - mu[:d] @ w + shift[d] - shift[:d] @ w), n_iter

        return mse, refit

    def _centred(self, T):
        """``(G, c, yy, S, mu)`` of one Gram of ``[x, y, 1]``: centred on its own weighted means with an intercept."""
        d = self.n_features_in_
        S = T[d + 1, d + 1]
        if self.fit_intercept:
            mu = T[: d + 1, d + 1] / S
            C = T[: d + 1, : d + 1] - S * np.outer(mu, mu)
        else:
            mu, C = np.zeros(d + 1), T[: d + 1, : d + 1]
        return np.ascontiguousarray(C[:d, :d]), C[:d, d].copy(), float(C[d, d]), float(S), mu

    @staticmethod
    def _splits_leaving_rows_out(search):
        """Splits given on the client whose training and held-out rows do not cover every row."""
        if search.splits is None:
            return []
        n = search.n_samples
        return [k for k, (train, test) in enumerate(search.splits)
                if np.union1d(np.asarray(train), np.asarray(test)).size < n]

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.linear_model.ElasticNet`` at ``alpha_`` and ``l1_ratio_``.

        Returns
        -------
        sklearn.linear_model.ElasticNet
        """
        from sklearn.linear_model import ElasticNet

        est = ElasticNet(alpha=self.alpha_, l1_ratio=self.l1_ratio_, fit_intercept=self.fit_intercept, tol=self.tol,
                         max_iter=self.max_iter)
        return self._sklearn_fitted(est, names=("coef_", "intercept_"))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False
        return tags


class SplitsNotPlaceable(ValueError):
    """Splits the placed roles cannot hold: a split's training rows repeat a row (a bootstrap) or include one
    of its held-out rows.  Each row has one role in each split on the workers (:func:`place_roles`)."""


def checked_splits(splits, n: int) -> list:
    """``splits`` (pairs of training and held-out rows: positions, or boolean masks of ``n`` rows, as
    scikit-learn's searches take them) as pairs of int64 positions; :class:`SplitsNotPlaceable` where a split's
    training rows repeat a row or meet its held-out rows."""
    out = []
    for k, (train, test) in enumerate(splits):
        train, test = (_positions(rows, n) for rows in (train, test))
        seen = np.bincount(train, minlength=n)  # how often each row trains
        if (seen > 1).any() or seen[test].any():
            raise SplitsNotPlaceable(
                f"The training rows of split {k} repeat a row or include one of its held-out rows; data placed "
                f"on the workers holds one role per row in each split. scikit-learn's GridSearchCV takes such splits.")
        out.append((train, test))
    return out


def _positions(rows, n: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.dtype == bool:
        return np.flatnonzero(rows)
    rows = rows.astype(np.int64, copy=False).reshape(-1)
    return np.where(rows < 0, rows + n, rows)


def place_roles(data, trains, tests=None) -> None:
    """Each shard of ``data`` told its rows' roles in the splits given on the client: split k's training rows
    ``trains[k]`` and, with ``tests``, its held-out rows ``tests[k]`` (global positions)."""
    roles = np.zeros((len(trains), data.n_samples), dtype=np.int8)
    for k, train in enumerate(trains):
        roles[k, np.asarray(train, dtype=np.int64)] = CV.TRAIN
        if tests is not None:
            roles[k, np.asarray(tests[k], dtype=np.int64)] = CV.TEST
    data.map_each(CV.set_roles, [(roles[:, CV._positions(r)],) for r in data.row_ranges])


def prepared_sums(data, loss, n_outputs, class_weight, n_splits) -> np.ndarray:
    """The targets encoded for ``loss`` on every shard (:func:`~dask_estimators.objectives.cv.prepare`) and the
    weight sums, all rows' and each split's training rows'; a split whose training weights sum to zero is an
    error."""
    sums = np.asarray(data.map(CV.prepare, loss, n_outputs, class_weight)).sum(axis=0)
    for k in range(n_splits):
        if not sums[1 + k, 0] > 0:
            raise ValueError(f"The training rows of split {k} have a zero sum of sample weights.")
    return sums


def _rows_of(params, n, idx):
    """Metadata of the rows ``idx``: each argument of ``n`` entries (array, sparse matrix, pandas, list) indexed
    by position, any other as it is."""
    out = {}
    for k, v in params.items():
        if hasattr(v, "shape"):
            rows = v.shape[0] if len(v.shape) else None
        else:
            rows = len(v) if isinstance(v, (list, tuple)) else None
        out[k] = (v[idx] if sp.issparse(v) else np.asarray(v)[idx]) if rows == n else v
    return out


def _with_labels(scorer, classes):
    """``scorer`` told every class (and the positive one for two), when its metric takes ``labels``.

    A held-out fold may lack a class; as scikit-learn's ``LogisticRegressionCV``
    does, metrics such as log-loss or the Brier score then still see them all.
    """
    import inspect

    from sklearn.metrics import make_scorer

    func = getattr(scorer, "_score_func", None)
    if func is None or "labels" not in inspect.signature(func).parameters:
        return scorer
    extra = {"labels": classes}
    if len(classes) <= 2 and "pos_label" in inspect.signature(func).parameters:
        extra["pos_label"] = classes[-1]
    return make_scorer(func, greater_is_better=scorer._sign == 1, response_method=scorer._response_method,
                       **extra, **getattr(scorer, "_kwargs", {}))


for _cls, _splitter, _strat in [
    (LogisticRegressionCV, "StratifiedKFold", " and its class"),
    (LinearRegressionCV, "KFold", ""),
]:
    _cls.__doc__ = _cls.__doc__.format(cv=_CV_DOC.format(splitter=_splitter, stratified=_strat).strip("\n").lstrip())
