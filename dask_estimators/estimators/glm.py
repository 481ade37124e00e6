"""Generalized linear models: PoissonRegressor, GammaRegressor, TweedieRegressor.

Each family is a loss class in :mod:`dask_estimators.objectives.losses` (its
half deviance, link, domain of y, curvature) and a thin estimator class here;
everything else (placement, solvers, warm starts, inference) is
:class:`~dask_estimators.estimators._base.DistributedLinearModel`'s.
"""

from __future__ import annotations

import warnings
from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_array, check_consistent_length, check_is_fitted, column_or_1d

from ..session import is_dask_collection
from ..objectives.losses import get_loss
from ._base import DistributedLinearModel, InferenceMixin
from .linear import _COMMON_DOC, _FITTED_DOC

__all__ = ["PoissonRegressor", "GammaRegressor", "TweedieRegressor"]


class _GeneralizedLinearRegressor(InferenceMixin, RegressorMixin, DistributedLinearModel):
    """Base class: a GLM with scikit-learn's objective::

        1 / (2 * S) * sum_i s_i * deviance(y_i, mu_i) + alpha * (1 - l1_ratio) / 2 * ||w||_2^2
            + alpha * l1_ratio * ||w||_1

    with ``mu_i = inverse_link(x_i . w + b)`` and ``S = sum(s)``.  The
    intercept is never penalised.  A subclass names its loss (``_loss``) or
    builds it (:meth:`_loss_params`).
    """

    _strings_refused = ()  # scikit-learn's GLMs convert numeric strings, at fit and predict

    _keeps_float32 = True
    _start_at_mean = True
    _parameter_constraints = {
        **DistributedLinearModel._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "verbose": ["verbose"],
        "progress": ["boolean"],
        "compute_inference": ["boolean"],
    }

    def __init__(
        self,
        *,
        alpha=1.0,
        l1_ratio=0.0,
        fit_intercept=True,
        solver="lbfgs",
        max_iter=100,
        tol=1e-4,
        warm_start=False,
        verbose=0,
        progress=False,
        compute_inference=False,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.progress = progress
        self.compute_inference = compute_inference
        self.client = client
        self.reduction = reduction
        self.device = device
        self.timeout = timeout

    # ----------------------------------------------------------------- hooks
    def _family_loss(self):
        """This family's loss (:mod:`dask_estimators.objectives.losses`): deviance, link, domain of y."""
        return get_loss(self._loss, **self._loss_params())

    def _get_loss(self, *args, **kwargs):
        """scikit-learn's loss object for this model's family and link: the private hook of scikit-learn's GLMs,
        which its own GLM tests call on the estimator they test.  Given by scikit-learn's estimator of the same
        parameters; nothing here uses it."""
        from sklearn import linear_model as lm

        return getattr(lm, self._sklearn_name)(**self._sklearn_params())._get_loss(*args, **kwargs)

    def _y_loss(self):
        return self._family_loss()

    def _penalties(self, sw_sum):
        return self.alpha * (1.0 - self.l1_ratio), self.alpha * self.l1_ratio

    def _set_params_from(self, w, spec, y_shape):
        super()._set_params_from(w, spec, y_shape)
        self.coef_ = self.coef_[0]
        if spec.fit_intercept:
            self.intercept_ = self.intercept_[0]  # as scikit-learn: a NumPy scalar

    # ------------------------------------------------------------ prediction
    def _linear_predictor(self, A):
        return self._decision(A)[:, 0]

    def predict(self, X):
        """Predicted means ``inverse_link(X @ coef_ + intercept_)`` (lazy dask array for dask input).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
        """
        check_is_fitted(self)
        loss = self._family_loss()
        return self._map_rows(X, lambda A: loss.inverse_link(self._linear_predictor(A)), None)

    def score(self, X, y, sample_weight=None):
        """D^2, the share of the deviance explained: ``1 - D(y, predict(X)) / D(y, mean(y))``.

        As scikit-learn's GLMs: the deviance of this model's family, the
        null model predicts the (weighted) mean of y; 1 is best, and it can be
        negative.  Dask input is computed (the predictions and y are vectors).

        Parameters
        ----------
        X : {array-like, dask array, dask dataframe} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        check_is_fitted(self)
        mu = self.predict(X)
        if is_dask_collection(mu):
            mu = mu.compute()
        if is_dask_collection(y):
            y = y.compute()
        if sample_weight is not None and is_dask_collection(sample_weight):
            sample_weight = sample_weight.compute()
        mu = np.asarray(mu, dtype=np.float64)
        y = check_array(y, dtype=np.float64, ensure_2d=False, input_name="y")
        # one target: a column warns and is raveled, as fit takes it (it broadcast against mu, a wrong D²)
        y = column_or_1d(y, warn=True)
        check_consistent_length(y, mu)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, mu.reshape(-1, 1), dtype=np.float64)
        loss = self._family_loss()
        loss.check_y(y)
        y_mean = np.average(y, weights=sample_weight)
        dev = np.average(loss.deviance(y, mu), weights=sample_weight)
        dev_null = np.average(loss.deviance(y, np.full_like(y, y_mean)), weights=sample_weight)
        return float(1.0 - dev / dev_null)

    def to_sklearn(self):
        """The equivalent fitted scikit-learn GLM: ``PoissonRegressor``, ``GammaRegressor`` or ``TweedieRegressor``.

        It has this model's parameters and fitted attributes, so its
        predictions are these; it needs neither a cluster nor this package.
        scikit-learn's GLMs have no L1 term (``l1_ratio > 0`` raises) and no
        ``newton-cg`` solver (the model says ``lbfgs`` instead, which only
        matters for fitting it again).

        Returns
        -------
        sklearn.linear_model.PoissonRegressor, GammaRegressor or TweedieRegressor

        Examples
        --------
        >>> PoissonRegressor().fit(X, y).to_sklearn().predict(X)  # doctest: +SKIP
        """
        from sklearn import linear_model as lm

        check_is_fitted(self)
        if self.l1_ratio > 0:
            raise ValueError(
                f"scikit-learn's {self._sklearn_name} has no L1 term; this model has l1_ratio={self.l1_ratio}."
            )
        params = dict(
            alpha=self.alpha, fit_intercept=self.fit_intercept, max_iter=self.max_iter, tol=self.tol,
            solver="newton-cholesky" if self.solver_ == "newton-cholesky" else "lbfgs",
            **self._sklearn_params(),
        )
        est = getattr(lm, self._sklearn_name)(**params)
        # scikit-learn's GLM predicts through the loss that its fit sets up: a fit on two rows of zeros sets it
        # up (public API only), then this model's fitted attributes replace that fit's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(np.zeros((2, self.n_features_in_)), np.ones(2))
        for name in ("feature_names_in_",):
            est.__dict__.pop(name, None)
        est = self._sklearn_fitted(est, names=("coef_", "intercept_", "n_iter_"))
        est.coef_ = np.asarray(est.coef_, dtype=np.float64)
        return est

    def _sklearn_params(self):
        return {}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:  # positive targets for the estimator checks where the family needs them
            low = self._family_loss().y_interval[0]
            tags.target_tags.positive_only = low >= 0
        except (ValueError, TypeError):  # an invalid link or power: the default tags
            pass
        return tags


class PoissonRegressor(_GeneralizedLinearRegressor):
    """Poisson regression (log link) fitted on a Dask cluster.

    Minimises scikit-learn's ``PoissonRegressor`` objective::

        1 / (2 * S) * sum_i s_i * deviance(y_i, exp(x_i . w + b))
            + alpha * (1 - l1_ratio) / 2 * ||w||_2^2 + alpha * l1_ratio * ||w||_1

    with the Poisson deviance ``2 * (y log(y / mu) - y + mu)`` and ``S = sum(s)``.
    The log link is canonical: the solvers' Hessian is the observed (= the
    expected) information.  y must be non-negative.  The dispersion is 1.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength; 0 is an unpenalised fit.
    l1_ratio : float in [0, 1], default=0.0
        Share of the L1 term (not in scikit-learn, which has only L2).  Needs
        ``solver="lbfgs"`` when positive.
    fit_intercept : bool, default=True
    verbose : int, default=0
        Print one line per solver iteration (objective, largest gradient
        entry, seconds since the fit began) and the solver's result; 2 also
        prints each evaluation of the objective.
    progress : bool, default=False
        Show a tqdm progress bar of the solver's iterations (up to
        ``max_iter``) on stderr.  Needs tqdm (``pip install tqdm``).
    compute_inference : bool, default=False
        After the fit, one more distributed round computes ``coef_cov_``,
        ``coef_cov_robust_`` and ``dispersion_`` for :meth:`summary` (at most
        5000 parameters).
    {common}
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    coef_cov_ : ndarray of shape (n_params, n_params)
        With ``compute_inference=True``: the dispersion times the inverse
        Fisher information, over ``coef_`` then the intercept.
    coef_cov_robust_ : ndarray of shape (n_params, n_params)
        With ``compute_inference=True``: the sandwich (HC0) covariance
        ``H^-1 (sum_i s_i g_i g_i^T) H^-1``, ``H`` the observed information
        and ``g_i`` a row's score; its terms are tree-summed on the workers.
    dispersion_ : float
        With ``compute_inference=True``: 1 for Poisson; Pearson's chi-square
        over the residual degrees of freedom for the other families.
    df_resid_ : float
        With ``compute_inference=True``: ``sum(sample_weight) - n_params``.
    {fitted}
    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators import PoissonRegressor
    >>> X = np.array([[1, 2], [2, 3], [3, 4], [4, 3]])
    >>> y = np.array([12, 17, 22, 21])
    >>> reg = PoissonRegressor().fit(X, y)  # doctest: +SKIP
    >>> reg.predict([[1, 1], [3, 4]]).round(1)  # doctest: +SKIP
    array([10.7, 21.3])
    """

    _loss = "poisson"
    _sklearn_name = "PoissonRegressor"


class GammaRegressor(_GeneralizedLinearRegressor):
    """Gamma regression (log link) fitted on a Dask cluster.

    Minimises scikit-learn's ``GammaRegressor`` objective::

        1 / (2 * S) * sum_i s_i * deviance(y_i, exp(x_i . w + b))
            + alpha * (1 - l1_ratio) / 2 * ||w||_2^2 + alpha * l1_ratio * ||w||_1

    with the Gamma deviance ``2 * (log(mu / y) + y / mu - 1)``.  The log link
    is not canonical; its observed curvature ``y / mu`` is positive for every
    ``y > 0``, so the solvers use the true Hessian, while ``coef_cov_``
    uses the expected information (as statsmodels).  y must be positive.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength; 0 is an unpenalised fit.
    l1_ratio : float in [0, 1], default=0.0
        Share of the L1 term (not in scikit-learn).  Needs ``solver="lbfgs"``
        when positive.
    fit_intercept : bool, default=True
    verbose : int, default=0
    compute_inference : bool, default=False
        See :class:`PoissonRegressor`; the dispersion is estimated.
    {common}
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    coef_cov_, coef_cov_robust_, dispersion_, df_resid_
        With ``compute_inference=True``, see :class:`PoissonRegressor`.
    {fitted}
    Examples
    --------
    >>> from dask_estimators import GammaRegressor
    >>> X = [[1, 2], [2, 3], [3, 4], [4, 3]]
    >>> y = [19, 26, 33, 30]
    >>> GammaRegressor().fit(X, y).score(X, y) > 0.7  # doctest: +SKIP
    True
    """

    _loss = "gamma"
    _sklearn_name = "GammaRegressor"


class TweedieRegressor(_GeneralizedLinearRegressor):
    """Tweedie regression (power ``p``, log or identity link) fitted on a Dask cluster.

    Minimises scikit-learn's ``TweedieRegressor`` objective::

        1 / (2 * S) * sum_i s_i * deviance_p(y_i, mu_i)
            + alpha * (1 - l1_ratio) / 2 * ||w||_2^2 + alpha * l1_ratio * ||w||_1

    ``power``: 0 normal, 1 Poisson, in (1, 2) compound Poisson-Gamma, 2
    Gamma, 3 inverse Gaussian.  Curvature the solvers use: the observed
    information where it is positive semi-definite (log link with
    ``1 <= power <= 2``, identity link with ``0 <= power <= 1``), else the
    expected information (Fisher scoring): log link with ``power < 1`` or
    ``power > 2``, identity link with ``power > 1``.  The gradient is exact
    either way, so the solution is the same.

    Parameters
    ----------
    power : float, default=0.0
        The power of the variance function ``V(mu) = mu^power``.  y may be any
        real for ``power <= 0``, must be non-negative for ``0 < power < 2``
        and positive for ``power >= 2``.
    alpha : float, default=1.0
    l1_ratio : float in [0, 1], default=0.0
    fit_intercept : bool, default=True
    link : {{"auto", "identity", "log"}}, default="auto"
        ``"auto"``: identity for ``power <= 0``, log otherwise (as scikit-learn).
        With the identity link and ``power > 0`` the predicted means must stay
        positive.
    verbose : int, default=0
    compute_inference : bool, default=False
        See :class:`PoissonRegressor`; the dispersion is estimated except for ``power=1``.
    {common}
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    coef_cov_, coef_cov_robust_, dispersion_, df_resid_
        With ``compute_inference=True``, see :class:`PoissonRegressor`.
    {fitted}
    Examples
    --------
    >>> from dask_estimators import TweedieRegressor
    >>> X = [[1, 2], [2, 3], [3, 4], [4, 3]]
    >>> y = [2, 3.5, 5, 5.5]
    >>> TweedieRegressor(power=1.5, alpha=0.5).fit(X, y).predict([[1, 1]])  # doctest: +SKIP
    """

    _loss = "tweedie"
    _sklearn_name = "TweedieRegressor"
    _parameter_constraints = {
        **_GeneralizedLinearRegressor._parameter_constraints,
        "power": [Interval(Real, None, None, closed="neither")],
        "link": [StrOptions({"auto", "identity", "log"})],
    }

    def __init__(
        self,
        *,
        power=0.0,
        alpha=1.0,
        l1_ratio=0.0,
        fit_intercept=True,
        link="auto",
        solver="lbfgs",
        max_iter=100,
        tol=1e-4,
        warm_start=False,
        verbose=0,
        progress=False,
        compute_inference=False,
        client=None,
        reduction="tree",
        device="auto",
        timeout=None,
    ):
        super().__init__(
            alpha=alpha, l1_ratio=l1_ratio, fit_intercept=fit_intercept, solver=solver, max_iter=max_iter, tol=tol,
            warm_start=warm_start, verbose=verbose, progress=progress, compute_inference=compute_inference, client=client,
            reduction=reduction, device=device, timeout=timeout,
        )
        self.power = power
        self.link = link

    def _sklearn_params(self):
        return {"power": self.power, "link": self.link}

    def _loss_params(self):
        link = self.link
        if link == "auto":
            link = "identity" if self.power <= 0 else "log"
        return {"power": float(self.power), "link": link}


def _fill_docs():
    for cls in (PoissonRegressor, GammaRegressor, TweedieRegressor):
        common = _COMMON_DOC.format(
            random_state="", auto="", default="lbfgs", auto_doc="", tol="1e-4", max_iter=100
        ).strip("\n")
        cls.__doc__ = cls.__doc__.format(
            common=common.lstrip() + "\n", fitted=_FITTED_DOC.format(n_iter="int").strip("\n").lstrip() + "\n"
        )


_fill_docs()
