"""Linear estimators: LinearRegression, LogisticRegression, LinearSVC, LinearSVR."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_softmax, softmax
from sklearn import get_config
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..objectives import targets as T
from ..objectives.linear import check_weight_sum
from ..session import stored_values
from ._base import DaskScoreMixin, DistributedLinearModel, InferenceMixin

__all__ = ["LinearRegression", "LogisticRegression", "LinearSVC", "LinearSVR"]

_COMMON_DOC = """
    solver : {{"lbfgs", "newton-cg", "newton-cholesky"{auto}}}, default={default!r}
        ``"lbfgs"``: L-BFGS-B, one distributed round per evaluation (L1 and
        elastic-net through the split-variable form ``w = u - v``).
        ``"newton-cg"``: trust-region Newton-CG, distributed Hessian-vector
        products.  ``"newton-cholesky"``: Newton with line search on the dense
        Hessian, tree-summed on the workers (up to 5000 parameters).{auto_doc}
    tol : float, default={tol}
        Stop when the largest entry of the (projected) gradient of the
        normalised objective is below ``tol``.
    max_iter : int, default={max_iter}
        Maximum solver iterations; a ``ConvergenceWarning`` is raised on reaching it.
        0 returns the starting point (zeros, or the warm start) with ``n_iter_`` 0.
    warm_start : bool, default=False
        Start from the previous ``coef_`` and ``intercept_`` when their shapes fit.{random_state}
    verbose : int, default=0
        1 prints one line per solver iteration (its number, the objective,
        the largest entry of the projected gradient, seconds since the fit
        started) and the solver's result; 2 also prints every evaluation of
        the objective (one distributed round each, line searches included).
    progress : bool, default=False
        Show a tqdm progress bar of the solver's iterations (up to
        ``max_iter``) on stderr.  Needs tqdm (``pip install tqdm``).
    client : distributed.Client, str or None, default=None
        The cluster to fit on: a client, a scheduler address, or None for the
        active client, else the embedded LocalCluster.  Never stored in the
        fitted model.
    reduction : {{"tree", "gather", "single"}}, default="tree"
        How the workers' partial sums are combined ("gather" and "single" are
        kept for comparison).
    device : {{"auto", "cpu", "cuda"}}, default="auto"
        Where each worker keeps its shard; "auto" uses its GPU when it has one.
    timeout : float or None, default=None
        Seconds one distributed round (or per-shard step) may take before a
        ``TimeoutError``.  None sets no limit; the loss of the scheduler or
        of the client still ends the fit with a clear error within seconds,
        and a lost worker's shards are re-placed on the others.
"""

_FITTED_DOC = """
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the features, when X has string column names.
    n_iter_ : {n_iter}
        Solver iterations.
    solver_ : str
        The solver used (resolves ``"auto"``).
    fit_stats_ : dict
        Distributed rounds, seconds, bytes moved, shards and rows per shard,
        the final objective and the sum of the sample weights;
        ``solved_on_worker``: whether the solver ran in one task on the
        worker of the one shard (a small problem, under the dask config
        ``dask-estimators.worker-solve-below``), with its
        ``evaluations_on_worker`` then.
"""


class _LinearClassifierMixin(DaskScoreMixin, ClassifierMixin):
    _is_classifier = True

    def decision_function(self, X):
        """Signed distance to the decision boundary, shape (n_samples,) for two classes else (n_samples, n_classes).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)
        if len(self.classes_) == 2:
            return self._map_rows(X, lambda A: self._decision(A)[:, 0], None)
        return self._map_rows(X, self._decision, len(self.classes_))

    def predict(self, X):
        """Predicted class labels (lazy dask array for dask input).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
        """
        check_is_fitted(self)
        classes = self.classes_

        def labels(A):
            z = self._decision(A)
            idx = (z[:, 0] > 0).astype(int) if z.shape[1] == 1 else z.argmax(1)
            return classes[idx]

        return self._map_rows(X, labels, None)

    def _output_dtype(self, fn):
        return self.classes_.dtype if fn.__name__ == "labels" else None

    def sparsify(self):
        """Store ``coef_`` as a scipy.sparse CSR matrix, which saves memory when most weights are zero.

        :meth:`predict`, :meth:`decision_function` (and ``predict_proba``)
        keep working; a warm start densifies it.  The sparse type follows
        scikit-learn's ``sparse_interface`` setting, as its ``sparsify`` does.

        Returns
        -------
        self : object
            The estimator, with a sparse ``coef_``.

        Examples
        --------
        >>> from dask_estimators import LogisticRegression
        >>> clf = LogisticRegression(l1_ratio=1.0, C=0.1).fit(X, y).sparsify()  # doctest: +SKIP
        >>> clf.coef_.format  # doctest: +SKIP
        'csr'
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before sparsifying.")
        kind = "array" if get_config().get("sparse_interface", "spmatrix") == "sparray" else "matrix"
        self.coef_ = getattr(sp, f"csr_{kind}")(self.coef_)
        return self

    def densify(self):
        """Store ``coef_`` as a dense NumPy array again (the default; a no-op when it is dense).

        Returns
        -------
        self : object
            The estimator, with a dense ``coef_``.

        Examples
        --------
        >>> clf.sparsify().densify().coef_.shape  # doctest: +SKIP
        (1, 30)
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before densifying.")
        if sp.issparse(self.coef_):
            self.coef_ = self.coef_.toarray()
        return self


class LogisticRegression(InferenceMixin, _LinearClassifierMixin, DistributedLinearModel):
    """Logistic regression (binary and multinomial) fitted on a Dask cluster.

    Minimises scikit-learn's objective (``LogisticRegression``, version 1.8 and later)::

        C * sum_i s_i * loss_i + (1 - l1_ratio) / 2 * ||W||_2^2 + l1_ratio * ||W||_1

    with the binomial log-loss for two classes and the multinomial log-loss
    (softmax over all K classes) otherwise.  ``s`` is ``sample_weight`` times
    the class weights.  Internally the objective is divided by ``C * sum(s)``,
    which changes nothing but the scale of ``tol``, as in scikit-learn.  The
    intercept is never penalised.

    Parameters
    ----------
    C : float, default=1.0
        Inverse of the regularisation strength; ``np.inf`` for none (an unpenalised fit).
    l1_ratio : float in [0, 1], default=0.0
        0 is the L2 penalty, 1 the L1 (lasso) penalty, in between elastic-net.
        Needs ``solver="lbfgs"`` when positive.
    fit_intercept : bool, default=True
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplied into the sample weights.  "balanced"
        uses ``n_samples / (n_classes * bincount(y))`` (weighted counts).
    compute_inference : bool, default=False
        Two classes only: after the fit, one more distributed round computes
        ``coef_cov_`` (inverse Fisher information) and ``coef_cov_robust_``
        (sandwich, HC0) for :meth:`summary` (at most 5000 parameters).
    {common}
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    {fitted}
    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import StandardScaler
    >>> from dask_estimators import LogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> clf = LogisticRegression(C=1.0).fit(X, y)  # doctest: +SKIP
    >>> clf.score(X, y) > 0.95  # doctest: +SKIP
    True
    """

    _keeps_float32 = True
    _intercept_off_is_array = True
    _parameter_constraints = {
        **DistributedLinearModel._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="right")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "random_state": ["random_state"],
        "compute_inference": ["boolean"],
    }

    def __init__(
        self,
        C=1.0,
        *,
        l1_ratio=0.0,
        fit_intercept=True,
        class_weight=None,
        solver="lbfgs",
        tol=1e-4,
        max_iter=100,
        warm_start=False,
        verbose=0,
        progress=False,
        random_state=None,
        compute_inference=False,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.C = C
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.verbose = verbose
        self.progress = progress
        self.random_state = random_state
        self.compute_inference = compute_inference
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    def _loss_name(self, n_classes):
        return "binomial" if n_classes == 2 else "multinomial"

    def _n_outputs(self, n_classes, y_shape):
        return 1 if n_classes == 2 else n_classes

    def _penalties(self, sw_sum):
        if np.isinf(self.C):
            return 0.0, 0.0
        scale = 1.0 / (self.C * sw_sum)
        return (1.0 - self.l1_ratio) * scale, self.l1_ratio * scale

    def _format_n_iter(self, nit):
        return np.array([nit], dtype=np.int32)

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.linear_model.LogisticRegression``.

        It has this model's parameters and fitted attributes, so its
        predictions are these; it needs neither a cluster nor this package
        (pickle it and load it where only scikit-learn is installed).
        ``l1_ratio > 0`` maps to ``solver="saga"``, the scikit-learn solver
        for that penalty (used only if the copy is fitted again).

        Returns
        -------
        sklearn.linear_model.LogisticRegression

        Examples
        --------
        >>> sk = LogisticRegression().fit(X, y).to_sklearn()  # doctest: +SKIP
        >>> type(sk).__module__  # doctest: +SKIP
        'sklearn.linear_model._logistic'
        """
        from sklearn.linear_model import LogisticRegression as SkLogisticRegression

        check_is_fitted(self)
        est = SkLogisticRegression(
            C=self.C, l1_ratio=self.l1_ratio, fit_intercept=self.fit_intercept, class_weight=self.class_weight,
            tol=self.tol, max_iter=self.max_iter, warm_start=self.warm_start, random_state=self.random_state,
            solver=self.solver_ if self.l1_ratio == 0 else "saga",
        )
        return self._sklearn_fitted(est)

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes), columns in ``classes_`` order.

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)

        def proba(A):
            z = self._decision(A)
            if z.shape[1] == 1:
                p = expit(z[:, 0])
                return np.column_stack([1.0 - p, p])
            return softmax(z, axis=1)

        return self._map_rows(X, proba, len(self.classes_))

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed stably.

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)

        def log_proba(A):
            z = self._decision(A)
            if z.shape[1] == 1:
                z = np.column_stack([np.zeros(len(z)), z[:, 0]])
            return log_softmax(z, axis=1)

        return self._map_rows(X, log_proba, len(self.classes_))


#: (loss, penalty) -> the formulations LIBLINEAR offers for it (True: dual, False: primal), as scikit-learn.
_SVM_FORMULATIONS = {
    ("hinge", "l2"): {True},
    ("squared_hinge", "l1"): {False},
    ("squared_hinge", "l2"): {False, True},
    ("epsilon_insensitive", "l2"): {True},
    ("squared_epsilon_insensitive", "l2"): {False, True},
}

#: The encoding of the targets (objectives.targets) for each loss of the dual method.
_TARGET_ENCODING = {
    "hinge": "squared_hinge", "squared_hinge": "squared_hinge",
    "epsilon_insensitive": "squared_epsilon_insensitive",
    "squared_epsilon_insensitive": "squared_epsilon_insensitive",
}


class _LinearSVMMixin:
    """What LinearSVC and LinearSVR share: ``loss``/``dual``, LIBLINEAR's bias feature, the dual method."""

    _penalty = "l2"  # LinearSVR has no penalty parameter

    def _penalty_name(self):
        return getattr(self, "penalty", self._penalty)

    def _check_formulation(self, dual):
        """Raise scikit-learn's error for a (penalty, loss, dual) combination that LIBLINEAR does not offer."""
        penalty, loss = self._penalty_name(), self.loss
        offered = _SVM_FORMULATIONS.get((loss, penalty))
        if offered is None:
            detail = f"The combination of penalty='{penalty}' and loss='{loss}' is not supported"
        elif dual not in offered:
            detail = f"The combination of penalty='{penalty}' and loss='{loss}' are not supported when dual={dual}"
        else:
            return
        raise ValueError(
            f"Unsupported set of arguments: {detail}, Parameters: penalty={penalty!r}, loss={loss!r}, dual={dual!r}"
        )

    def _resolved_dual(self, n_samples, n_features):
        """``dual`` with ``"auto"`` resolved, checked against the loss, the penalty and the other parameters."""
        offered = _SVM_FORMULATIONS.get((self.loss, self._penalty_name()), set())
        if self.dual == "auto":
            # an explicit primal solver, a warm start or C=inf ask for the primal problem where it exists
            if False in offered and (self.solver != "auto" or self.warm_start or np.isinf(self.C)):
                dual = False
            elif n_samples < n_features:  # scikit-learn's rule: the dual when it is offered
                dual = True in offered
            else:  # the primal when it is offered
                dual = False not in offered
        else:
            dual = bool(self.dual)
        self._check_formulation(dual)
        if dual:
            if self.solver != "auto":
                raise ValueError(
                    f"solver={self.solver!r} solves the primal problem; with dual=True (or loss={self.loss!r}, "
                    "which only has a dual form) leave solver='auto'."
                )
            if np.isinf(self.C):
                raise ValueError("C=np.inf (no penalty) has no dual problem; use dual=False with a squared loss.")
            if self.warm_start:
                raise ValueError("warm_start=True needs the primal problem (dual=False): the dual method starts "
                                 "from alpha = 0.")
        return dual

    # ----------------------------------------------------- LIBLINEAR's bias feature
    def _bias_feature(self):
        return self.fit_intercept and not np.isinf(self.C)

    def _primal_objective(self, objective):
        if not self._bias_feature():
            return objective
        from ..objectives.bias import BiasFeatureObjective

        return BiasFeatureObjective(objective, float(self.intercept_scaling))

    def _initial_params(self, spec, y_mean=None):
        w0 = super()._initial_params(spec, y_mean)
        if self._bias_feature():
            w0[spec.n_outputs * spec.n_features :] /= float(self.intercept_scaling)
        return w0

    def _set_params_from(self, w, spec, y_shape):
        w = np.array(w, dtype=np.float64)
        if self._bias_feature():
            w[spec.n_outputs * spec.n_features :] *= float(self.intercept_scaling)
        super()._set_params_from(w, spec, y_shape)

    # ------------------------------------------------------------ the dual method
    def _placement_workers(self, session, X):
        """One worker for the dual method on small data: its rounds are bound by round trips, and one
        shard runs LIBLINEAR's own iterations, many per round (see :func:`one_shard_below`)."""
        from ..optim.dual_driver import one_shard_below

        size = stored_values(X)
        if size is None:  # dask input of unknown length: chosen by the placement once it has counted the rows
            d = int(X.shape[1])
            return lambda n: (session.workers()[:1] if self._resolved_dual(n, d) and n * d < one_shard_below()
                              else None)
        if not self._resolved_dual(*map(int, X.shape)):
            return None
        return session.workers()[:1] if size < one_shard_below() else None

    def _worker_outputs(self, X, y, classes):
        """The primal's rule; never the dual method's, whose own (:meth:`_placement_workers`) puts small data on
        one worker, where a round runs many of LIBLINEAR's iterations."""
        if stored_values(X) is not None and self._resolved_dual(*map(int, X.shape)):
            return None
        return super()._worker_outputs(X, y, classes)

    def _fit_placed(self, data, y, dask_input, classes, dtype, hook_args=None, t0=None, sparse_x=False):
        if not self._resolved_dual(data.n_samples, self.n_features_in_):
            return super()._fit_placed(data, y, dask_input, classes, dtype, hook_args=hook_args, t0=t0,
                                       sparse_x=sparse_x)
        return dict(self._fit_dual(data, classes, dask_input), solved_on_worker=False,
                    x_dtype=self._stored(dtype).name)

    def _drive_dual(self, driver, data, spec):
        """Run a dual driver (``dual_coordinate_ascent`` or ``crammer_singer_ascent``) on the placed data: one
        shard takes up to ONE_SHARD_PASSES of LIBLINEAR's iterations a round, spread data one pass; the passes
        on a bar (``progress=True``, updated once a round), the rounds printed with ``verbose``; LIBLINEAR's
        warning when ``max_iter`` ends it.  Returns the driver's result and the evaluator."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.utils import check_random_state

        from ..optim.dual_driver import LIBLINEAR_WARNING, ONE_SHARD_PASSES
        from .._progress import IterationLog

        seed = check_random_state(self.random_state).randint(np.iinfo("i").max)
        evaluator = data.evaluator(self.reduction)
        log = IterationLog(0, self.progress, self.max_iter, type(self).__name__)
        try:
            res = driver(
                evaluator, spec, max_iter=self.max_iter, seed=seed, verbose=self.verbose,
                callback=log if self.progress else None,
                passes_per_round=ONE_SHARD_PASSES if data.n_shards == 1 else 1,
            )
        finally:
            log.close()
        if not res.success:
            warnings.warn(LIBLINEAR_WARNING, ConvergenceWarning, stacklevel=5)
        return res, evaluator

    def _fit_dual(self, data, classes, dask_input):
        from ..objectives import LinearSpec
        from ..objectives.dual import DualSpec, set_shard_index
        from ..optim.dual_driver import dual_coordinate_ascent

        n_classes, class_weight = None, None
        if self._is_classifier:
            self.classes_ = self._dask_classes(data) if dask_input else classes
            n_classes = len(self.classes_)
            class_weight = self._class_weight_vector(data, n_classes)
        n_outputs = 1 if not self._is_classifier or n_classes == 2 else n_classes
        encoding = _TARGET_ENCODING[self.loss]
        sums = data.map(T.prepare_and_weigh, encoding, n_outputs, class_weight, False, True)
        sw_sum = float(sum(s[0] for s in sums))
        check_weight_sum(sw_sum)
        n_shards = data.n_shards
        data.map_each(set_shard_index, [(i,) for i in range(n_shards)])
        d = self.n_features_in_
        spec = DualSpec(
            self.loss, d, n_outputs, C=float(self.C), bias=float(self.intercept_scaling) if self.fit_intercept else 0.0,
            epsilon=float(getattr(self, "epsilon", 0.0)), n_shards=n_shards, tol=float(self.tol),
        )
        res, evaluator = self._drive_dual(dual_coordinate_ascent, data, spec)
        W = res.x
        flat = np.concatenate([W[:, :d].ravel(), W[:, d]]) if self.fit_intercept else W[:, :d].ravel()
        y_shape = (data.n_samples,)
        self._set_params_from(flat, LinearSpec(encoding, d, n_outputs, self.fit_intercept), y_shape)
        self.n_iter_ = int(res.nit)
        self.solver_ = "dual-cd"
        stats = data.stats(evaluator)
        stats.update(
            n_shards=n_shards, rows_per_shard=data.n_rows, dual_rounds=res.rounds, objective=res.fun,
            dual_objective=res.dual,
            duality_gap=res.gap, weight_sum=sw_sum, x_bytes_per_pass=int(sum(s[3] for s in sums)),
        )
        return stats


class LinearSVC(_LinearSVMMixin, _LinearClassifierMixin, DistributedLinearModel):
    """Linear support vector classifier (hinge or squared hinge loss) fitted on a Dask cluster.

    Solves LIBLINEAR's problem (scikit-learn's ``LinearSVC``), for each class k
    against the rest (one problem for two classes)::

        penalty(w~_k) + C * sum_i s_ik * loss(t_ik * (x_i . W_k + b_k))

    with ``t_ik = +1`` when sample i is of class k and -1 otherwise,
    ``loss(m) = max(0, 1 - m)`` (``"hinge"``) or its square
    (``"squared_hinge"``), and ``penalty = 1/2 ||.||_2^2`` (``penalty="l2"``)
    or ``||.||_1`` (``"l1"``).  As in LIBLINEAR the intercept is the weight of
    a constant feature of value ``intercept_scaling``, penalised with the
    coefficients: ``w~_k = [W_k, b_k / intercept_scaling]``; a larger
    ``intercept_scaling`` penalises the intercept less.  Class weights follow
    LIBLINEAR: for two classes each sample's weight is multiplied by its
    class's weight; one-vs-rest multiplies only the "k" side of problem k.  All
    one-vs-rest problems are solved together, so one distributed round serves
    every class.

    Two methods, as in scikit-learn (``dual``):

    - the **primal** (``dual=False``, squared hinge only): the scipy solvers
      (``solver``) on the smooth objective, one distributed round per
      evaluation;
    - the **dual** (``dual=True``, both losses, L2 penalty): distributed dual
      coordinate ascent (CoCoA+).  Each worker keeps the dual variables of its
      rows and runs one pass of LIBLINEAR's dual coordinate method over them
      per round; one reduction sums the workers' parts of the weights, scaled
      by an exact line search on the dual objective.  It stops on LIBLINEAR's rule (projected gradient
      spread at most ``tol``); ``n_iter_`` counts passes over the data, as
      LIBLINEAR's iterations, and ``fit_stats_`` reports the rounds and the
      duality gap.

    Parameters
    ----------
    penalty : {{"l2", "l1"}}, default="l2"
    loss : {{"squared_hinge", "hinge"}}, default="squared_hinge"
        ``"hinge"`` needs the dual (``dual=True`` or "auto").
    dual : "auto" or bool, default="auto"
        Solve the dual (True) or the primal (False) problem.  ``"auto"`` picks
        as scikit-learn does: the dual when ``n_samples < n_features`` and the
        combination of ``loss`` and ``penalty`` offers it, else the primal when
        offered.  An explicit primal ``solver``, ``warm_start=True`` or
        ``C=np.inf`` make ``"auto"`` pick the primal when the loss has one.
        Unsupported combinations raise scikit-learn's ``ValueError``
        ("Unsupported set of arguments: ...").
    C : float, default=1.0
        Weight of the data term; ``np.inf`` for no penalty (an unpenalised
        fit of the primal, which scikit-learn's ``LinearSVC`` does not accept;
        the intercept is then unpenalised too).
    multi_class : {{"ovr", "crammer_singer"}}, default="ovr"
        ``"ovr"``: one problem per class against the rest (above).
        ``"crammer_singer"``: Crammer and Singer's joint problem (LIBLINEAR's,
        as in scikit-learn), one weight vector per class and the loss
        ``max_m (1[m != y_i] + w_m . x_i) - w_{{y_i}} . x_i``, solved by the
        same distributed dual coordinate ascent (a closed-form step per row
        over its K dual variables); ``loss``, ``penalty`` and ``dual`` are
        ignored.  For two classes ``coef_`` is the second row minus the
        first, as scikit-learn's.
    fit_intercept : bool, default=True
    intercept_scaling : float, default=1.0
        Value of LIBLINEAR's constant feature whose weight times this value is
        the intercept (see above).  Used only with ``fit_intercept=True``.
    class_weight : dict, "balanced" or None, default=None
    {common}
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,); 0.0 where ``fit_intercept=False``, as scikit-learn's
    {fitted}
    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dask_estimators import LinearSVC
    >>> X, y = load_iris(return_X_y=True)
    >>> LinearSVC(C=0.5).fit(X, y).score(X, y) > 0.9  # doctest: +SKIP
    True
    >>> LinearSVC(loss="hinge", dual=True).fit(X, y).solver_  # doctest: +SKIP
    'dual-cd'
    """

    _loss = "squared_hinge"  # the primal's loss (the only one with a primal form)
    _auto_solver = "newton-cg"  # trust-region Newton-CG: LIBLINEAR's TRON for this loss
    _parameter_constraints = {
        **DistributedLinearModel._parameter_constraints,
        "penalty": [StrOptions({"l1", "l2"})],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "dual": ["boolean", StrOptions({"auto"})],
        "C": [Interval(Real, 0, None, closed="right")],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "random_state": ["random_state"],
        "multi_class": [StrOptions({"ovr", "crammer_singer"})],
    }

    def __init__(
        self,
        penalty="l2",
        loss="squared_hinge",
        *,
        dual="auto",
        C=1.0,
        multi_class="ovr",
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        solver="auto",
        tol=1e-4,
        max_iter=1000,
        warm_start=False,
        verbose=0,
        progress=False,
        random_state=None,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.C = C
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.verbose = verbose
        self.progress = progress
        self.random_state = random_state
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    def _n_outputs(self, n_classes, y_shape):
        return 1 if n_classes == 2 else n_classes

    def _penalties(self, sw_sum):
        scale = 0.0 if np.isinf(self.C) else 1.0 / (self.C * sw_sum)
        return (scale, 0.0) if self.penalty == "l2" else (0.0, scale)

    # ------------------------------------------------- Crammer and Singer's joint problem
    def _resolved_dual(self, n_samples, n_features):
        if self.multi_class != "crammer_singer":
            return super()._resolved_dual(n_samples, n_features)
        # loss, penalty and dual are ignored, as in scikit-learn; the problem has only the dual method
        if np.isinf(self.C):
            raise ValueError("C=np.inf (no penalty) has no Crammer-Singer problem; use multi_class='ovr'.")
        if self.warm_start:
            raise ValueError("warm_start=True needs the primal problem; multi_class='crammer_singer' is solved "
                             "in the dual, from alpha = 0.")
        if self.solver != "auto":
            raise ValueError(f"solver={self.solver!r} solves the primal problem; multi_class='crammer_singer' "
                             "is solved in the dual: leave solver='auto'.")
        return True

    def _fit_dual(self, data, classes, dask_input):
        if self.multi_class != "crammer_singer":
            return super()._fit_dual(data, classes, dask_input)
        from ..objectives import LinearSpec
        from ..objectives.crammer_singer import CSSpec
        from ..objectives.dual import set_shard_index
        from ..optim.dual_driver import crammer_singer_ascent

        self.classes_ = self._dask_classes(data) if dask_input else classes
        K = len(self.classes_)
        class_weight = self._class_weight_vector(data, K)
        # codes, with the class weights folded into the sample weights
        sums = data.map(T.prepare_and_weigh, "multinomial", K, class_weight, False, True)
        sw_sum = float(sum(s[0] for s in sums))
        check_weight_sum(sw_sum)
        n_shards = data.n_shards
        data.map_each(set_shard_index, [(i,) for i in range(n_shards)])
        d = self.n_features_in_
        spec = CSSpec(d, K, C=float(self.C), bias=float(self.intercept_scaling) if self.fit_intercept else 0.0,
                      n_shards=n_shards, tol=float(self.tol))
        res, evaluator = self._drive_dual(crammer_singer_ascent, data, spec)
        W = res.x
        if K == 2:  # scikit-learn keeps one row for two classes: the second class's scores minus the first's
            W = W[1:] - W[:1]
        flat = np.concatenate([W[:, :d].ravel(), W[:, d]]) if self.fit_intercept else W[:, :d].ravel()
        self._set_params_from(flat, LinearSpec("squared_hinge", d, W.shape[0], self.fit_intercept),
                              (data.n_samples,))
        self.n_iter_ = int(res.nit)
        self.solver_ = "crammer-singer-cd"
        stats = data.stats(evaluator)
        stats.update(n_shards=n_shards, rows_per_shard=data.n_rows, dual_rounds=res.rounds,
                     objective=res.fun, dual_objective=res.dual, duality_gap=res.gap, weight_sum=sw_sum,
                     x_bytes_per_pass=int(sum(s[3] for s in sums)))
        return stats

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.svm.LinearSVC``.

        It has this model's parameters and fitted attributes, so its
        predictions are these; it needs neither a cluster nor this package.
        Fitted again it solves the same problem with LIBLINEAR; with
        ``C=np.inf`` its ``fit`` refuses the parameter (scikit-learn's
        constraint), its predictions do not.

        Returns
        -------
        sklearn.svm.LinearSVC

        Examples
        --------
        >>> sk = LinearSVC().fit(X, y).to_sklearn()  # doctest: +SKIP
        >>> (sk.predict(X) == LinearSVC().fit(X, y).predict(X)).all()  # doctest: +SKIP
        True
        """
        from sklearn.svm import LinearSVC as SkLinearSVC

        check_is_fitted(self)
        est = SkLinearSVC(
            penalty=self.penalty, loss=self.loss, dual=self.dual, C=self.C, multi_class=self.multi_class,
            fit_intercept=self.fit_intercept,
            intercept_scaling=self.intercept_scaling, class_weight=self.class_weight, verbose=self.verbose,
            random_state=self.random_state, tol=self.tol, max_iter=self.max_iter,
        )
        return self._sklearn_fitted(est)


class LinearRegression(InferenceMixin, DaskScoreMixin, RegressorMixin, DistributedLinearModel):
    """Least squares with optional ridge, lasso or elastic-net penalty, fitted on a Dask cluster.

    Minimises scikit-learn's ``ElasticNet`` objective::

        1 / (2 * S) * sum_i s_i * (y_i - x_i . w - b)^2
            + alpha * l1_ratio * ||w||_1 + alpha * (1 - l1_ratio) / 2 * ||w||_2^2

    with ``S = sum(s)`` (``n_samples`` without weights).  So ``alpha=0`` is
    ordinary least squares; ``l1_ratio=1`` is ``Lasso(alpha)``; ``l1_ratio=0``
    is ``Ridge(alpha=alpha * S)``, because ``Ridge`` does not divide its data
    term by ``S``.  A 2-D ``y`` fits one model per column.

    Parameters
    ----------
    alpha : float, default=0.0
        Penalty strength.
    l1_ratio : float in [0, 1], default=0.0
        Share of the L1 term.  Needs ``solver="lbfgs"`` (or "auto") when positive.
    fit_intercept : bool, default=True
    positive : bool, default=False
        Keep the coefficients non-negative (not the intercept), as
        scikit-learn's ``positive=True``: L-BFGS-B with bounds (``solver``
        "lbfgs" or "auto"), with or without a penalty, for dense and sparse X.
    copy_X : bool, default=True
        Accepted for scikit-learn's signature; X is never changed (its
        shards are copies on the workers).
    n_jobs : int, default=None
        Accepted for scikit-learn's signature; the cluster's workers set the
        parallelism.
    compute_inference : bool, default=False
        One target only: after the fit, one more distributed round computes
        ``coef_cov_`` (``dispersion_`` times the inverse of ``X^T X``, with
        the intercept's column), ``coef_cov_robust_`` (HC0) and
        ``dispersion_`` (residual sum of squares over ``S - n_params``) for
        :meth:`summary` (at most 5000 parameters).
    {common}
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray of shape (n_targets,); 0.0 where ``fit_intercept=False``, as scikit-learn's
    {fitted}
    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from dask_estimators import LinearRegression
    >>> X, y = load_diabetes(return_X_y=True)
    >>> LinearRegression().fit(X, y).score(X, y) > 0.5  # doctest: +SKIP
    True
    """

    _multi_output = True
    _negative_weights = False  # as scikit-learn's LinearRegression (its Ridge fails on them, on a square root)
    _strings_refused = ("fit", "predict")  # scikit-learn's LinearRegression validates X as numeric
    _loss = "squared"
    _keeps_float32 = True
    _parameter_constraints = {
        **DistributedLinearModel._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "positive": ["boolean"],
        "copy_X": ["boolean"],
        "n_jobs": [None, Integral],
        "compute_inference": ["boolean"],
    }

    def __init__(
        self,
        alpha=0.0,
        *,
        l1_ratio=0.0,
        fit_intercept=True,
        positive=False,
        copy_X=True,
        n_jobs=None,
        solver="auto",
        tol=1e-6,
        max_iter=1000,
        warm_start=False,
        compute_inference=False,
        verbose=0,
        progress=False,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.positive = positive
        self.copy_X = copy_X
        self.n_jobs = n_jobs
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.compute_inference = compute_inference
        self.verbose = verbose
        self.progress = progress
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    def _n_outputs(self, n_classes, y_shape):
        return 1 if len(y_shape) == 1 else int(y_shape[1])

    def _penalties(self, sw_sum):
        return self.alpha * (1.0 - self.l1_ratio), self.alpha * self.l1_ratio

    def to_sklearn(self):
        """The equivalent fitted scikit-learn model of this objective's family.

        ``alpha=0``: ``LinearRegression``; ``l1_ratio=0``: ``Ridge(alpha=alpha * S)``
        (``S`` the sum of the sample weights of the fit, see above);
        ``l1_ratio=1``: ``Lasso(alpha)``; otherwise ``ElasticNet(alpha, l1_ratio)``.
        It has this model's fitted attributes, so its predictions are these;
        it needs neither a cluster nor this package.

        Returns
        -------
        sklearn.linear_model.LinearRegression, Ridge, Lasso or ElasticNet

        Examples
        --------
        >>> LinearRegression(alpha=0.1, l1_ratio=1.0).fit(X, y).to_sklearn()  # doctest: +SKIP
        Lasso(alpha=0.1, max_iter=1000, tol=1e-06)
        """
        from sklearn import linear_model as lm

        check_is_fitted(self)
        common = dict(fit_intercept=self.fit_intercept, positive=self.positive)
        iterative = dict(common, tol=self.tol, max_iter=self.max_iter)
        n_targets = 1 if np.ndim(self.coef_) == 1 else self.coef_.shape[0]
        if self.alpha == 0:
            return self._sklearn_fitted(lm.LinearRegression(**common), names=("coef_", "intercept_"))
        if self.l1_ratio == 0:
            est = lm.Ridge(alpha=self.alpha * self.fit_stats_["weight_sum"], **iterative)
            est = self._sklearn_fitted(est, names=("coef_", "intercept_"))
            est.n_iter_ = np.full(n_targets, self.n_iter_, dtype=np.int32)
            return est
        if self.l1_ratio == 1:
            est = lm.Lasso(alpha=self.alpha, warm_start=self.warm_start, **iterative)
        else:
            est = lm.ElasticNet(alpha=self.alpha, l1_ratio=self.l1_ratio, warm_start=self.warm_start, **iterative)
        est = self._sklearn_fitted(est, names=("coef_", "intercept_"))
        est.n_iter_ = self.n_iter_ if n_targets == 1 else [self.n_iter_] * n_targets
        return est

    def _set_params_from(self, w, spec, y_shape):
        super()._set_params_from(w, spec, y_shape)
        if len(y_shape) == 1:
            self.coef_ = self.coef_[0]
            if spec.fit_intercept:
                self.intercept_ = self.intercept_[0]  # as scikit-learn: a NumPy scalar

    def predict(self, X):
        """Predicted targets (lazy dask array for dask input).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        if np.ndim(self.coef_) == 1:
            return self._map_rows(X, lambda A: self._decision(A)[:, 0], None)
        return self._map_rows(X, self._decision, self.coef_.shape[0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class LinearSVR(_LinearSVMMixin, DaskScoreMixin, RegressorMixin, DistributedLinearModel):
    """Linear support vector regression (epsilon-insensitive loss or its square) fitted on a Dask cluster.

    Solves LIBLINEAR's problem (scikit-learn's ``LinearSVR``)::

        1/2 * ||w~||_2^2 + C * sum_i s_i * loss(|y_i - x_i . w - b| - epsilon)

    with ``loss(r) = max(0, r)`` (``"epsilon_insensitive"``, the default, as in
    scikit-learn) or ``max(0, r)^2`` (``"squared_epsilon_insensitive"``).  As
    in LIBLINEAR the intercept is the weight of a constant feature of value
    ``intercept_scaling``, penalised with the coefficients:
    ``w~ = [w, b / intercept_scaling]``.

    ``dual=True`` (the only form of ``"epsilon_insensitive"``) uses distributed
    dual coordinate descent (CoCoA+, one pass of LIBLINEAR's method over each
    worker's rows per round, one reduction per round), stopping when the
    violations of the optimality conditions have shrunk by ``tol`` relative to
    the first round, as LIBLINEAR.  ``dual=False`` (squared loss only) uses the
    scipy solvers on the smooth primal objective.

    Parameters
    ----------
    epsilon : float, default=0.0
        Half-width of the insensitive tube.
    C : float, default=1.0
        Weight of the data term; ``np.inf`` for no penalty (an unpenalised
        fit of the primal, which scikit-learn's ``LinearSVR`` does not accept).
    loss : {{"epsilon_insensitive", "squared_epsilon_insensitive"}}, default="epsilon_insensitive"
    dual : "auto" or bool, default="auto"
        Solve the dual (True) or the primal (False) problem.  ``"auto"`` picks
        as scikit-learn does (the dual when ``n_samples < n_features`` or the
        loss has no primal form, else the primal); an explicit primal
        ``solver``, ``warm_start=True`` or ``C=np.inf`` make it pick the primal
        when the loss has one.  ``loss="epsilon_insensitive", dual=False``
        raises scikit-learn's ``ValueError``.
    fit_intercept : bool, default=True
    intercept_scaling : float, default=1.0
        Value of LIBLINEAR's constant feature (see above).  Used only with
        ``fit_intercept=True``.
    {common}
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : ndarray of shape (1,); 0.0 where ``fit_intercept=False``, as scikit-learn's
    {fitted}
    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sklearn.preprocessing import StandardScaler
    >>> from dask_estimators import LinearSVR
    >>> X, y = load_diabetes(return_X_y=True)
    >>> LinearSVR(C=10.0).fit(StandardScaler().fit_transform(X), y)  # doctest: +SKIP
    LinearSVR(C=10.0)
    """

    _loss = "squared_epsilon_insensitive"  # the primal's loss (the only one with a primal form)
    _auto_solver = "lbfgs"
    _parameter_constraints = {
        **DistributedLinearModel._parameter_constraints,
        "epsilon": [Interval(Real, 0, None, closed="left")],
        "C": [Interval(Real, 0, None, closed="right")],
        "loss": [StrOptions({"epsilon_insensitive", "squared_epsilon_insensitive"})],
        "dual": ["boolean", StrOptions({"auto"})],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        epsilon=0.0,
        *,
        C=1.0,
        loss="epsilon_insensitive",
        dual="auto",
        fit_intercept=True,
        intercept_scaling=1.0,
        solver="auto",
        tol=1e-4,
        max_iter=1000,
        warm_start=False,
        verbose=0,
        progress=False,
        random_state=None,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.epsilon = epsilon
        self.C = C
        self.loss = loss
        self.dual = dual
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.verbose = verbose
        self.progress = progress
        self.random_state = random_state
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    def _penalties(self, sw_sum):
        return (0.0 if np.isinf(self.C) else 1.0 / (self.C * sw_sum)), 0.0

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.svm.LinearSVR``.

        It has this model's parameters and fitted attributes, so its
        predictions are these; it needs neither a cluster nor this package.
        With ``C=np.inf`` its ``fit`` refuses the parameter (scikit-learn's
        constraint), its predictions do not.

        Returns
        -------
        sklearn.svm.LinearSVR

        Examples
        --------
        >>> sk = LinearSVR(C=10.0).fit(X, y).to_sklearn()  # doctest: +SKIP
        """
        from sklearn.svm import LinearSVR as SkLinearSVR

        check_is_fitted(self)
        est = SkLinearSVR(
            epsilon=self.epsilon, loss=self.loss, dual=self.dual, C=self.C, fit_intercept=self.fit_intercept,
            intercept_scaling=self.intercept_scaling, verbose=self.verbose, random_state=self.random_state,
            tol=self.tol, max_iter=self.max_iter,
        )
        return self._sklearn_fitted(est)

    def _set_params_from(self, w, spec, y_shape):
        super()._set_params_from(w, spec, y_shape)
        self.coef_ = self.coef_[0]

    def predict(self, X):
        """Predicted targets (lazy dask array for dask input).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
        """
        return self._map_rows(X, lambda A: self._decision(A)[:, 0], None)


_AUTO_DOC = {
    "LinearRegression": (
        '\n        ``"auto"``: "newton-cholesky" without L1 and with at most 5000\n'
        '        parameters, "newton-cg" above that, "lbfgs" with L1.'
    ),
    "LinearSVC": (
        '\n        ``"auto"``: the dual method (``solver_ = "dual-cd"``) when ``dual``\n'
        '        resolves to True; else "newton-cg" (LIBLINEAR\'s TRON method for this\n'
        '        loss) with ``penalty="l2"``, "lbfgs" with ``penalty="l1"``.  A primal\n'
        '        solver needs ``dual=False`` or "auto".'
    ),
    "LinearSVR": (
        '\n        ``"auto"``: the dual method (``solver_ = "dual-cd"``) when ``dual``\n'
        '        resolves to True, else "lbfgs".  A primal solver needs ``dual=False``\n'
        '        or "auto".'
    ),
}


_RANDOM_STATE_DOC = """
    random_state : int, RandomState instance or None, default=None
        Accepted and validated as in scikit-learn, where it seeds only its
        randomised solvers.  Every solver here is deterministic, so it does
        not change the fit."""

_SVM_RANDOM_STATE_DOC = """
    random_state : int, RandomState instance or None, default=None
        Seeds the order in which the dual method visits the rows (a new
        order each pass, as LIBLINEAR).  The primal solvers are
        deterministic and do not use it."""


def _fill_docs():
    for cls, default, tol, max_iter, n_iter in [
        (LogisticRegression, "lbfgs", "1e-4", 100, "ndarray of shape (1,)"),
        (LinearSVC, "auto", "1e-4", 1000, "int"),
        (LinearRegression, "auto", "1e-6", 1000, "int"),
        (LinearSVR, "auto", "1e-4", 1000, "int"),
    ]:
        auto = default.startswith("auto")
        default = "auto" if auto else default
        common = _COMMON_DOC.format(
            random_state=(_SVM_RANDOM_STATE_DOC if cls in (LinearSVC, LinearSVR)
                          else _RANDOM_STATE_DOC if cls is not LinearRegression else ""),
            auto=', "auto"' if auto else "",
            default=default,
            auto_doc=_AUTO_DOC[cls.__name__] if auto else "",
            tol=tol,
            max_iter=max_iter,
        ).strip("\n")
        cls.__doc__ = cls.__doc__.format(common=common.lstrip() + "\n", fitted=_FITTED_DOC.format(n_iter=n_iter).strip("\n").lstrip() + "\n")


_fill_docs()
