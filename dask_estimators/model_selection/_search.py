"""GridSearchCV and RandomizedSearchCV whose fits of our linear models share their placements.

scikit-learn's searches fit each candidate on each split alone: a placement
of the split's rows per fit.  These subclasses take the same parameters and
give the same attributes; where every candidate's estimator is our
``LogisticRegression`` or ``LinearRegression`` (alone or the last step of a
``Pipeline``), the search goes differently:

- **The candidates are grouped** by what shapes their problem (the class,
  the loss, ``fit_intercept``, ``class_weight``, the pipeline's earlier
  steps); within a group they differ only in ``C``/``alpha``, ``l1_ratio``,
  ``solver``, ``tol`` and ``max_iter``
  (:data:`~dask_estimators.estimators._grid.PER_FIT`).
- **A group without earlier steps places X once** for all its candidates and
  splits: each shard learns its rows' roles in the splits, and every
  (candidate, split) fit runs in lockstep, one pass over X per round for all
  of them, each with its own line search and stopping test
  (:func:`~dask_estimators.estimators._grid.fit_candidates`).
- **A pipeline's scaler** is fitted for every split from the workers' sums
  over their rows, and the fits see X through it as an affine map; **other
  earlier steps** (an encoder, several steps) are fitted once per split on
  the client, their output placed once for all of the group's candidates.
- **The scores** of scikit-learn's accuracy, log-loss, r2 and squared-error
  scorers are sums over the held-out rows on the workers
  (:data:`_WORKER_METRICS`); other scorers, training scores and groups
  placed per split are scored on the client with scikit-learn's scorers.
  Dask input stays on the workers throughout.

Where every candidate is our ``MLPClassifier`` or ``MLPRegressor`` with a
stochastic solver (:func:`~dask_estimators.estimators.neural.lockstep_ready`),
alone or after one scaler in a ``Pipeline`` (fitted once a split on the
client, and applied to the split's rows on the worker), and X is dense
NumPy or pandas, X is placed whole on every worker once, and
each split's candidates that take the same batches train in lockstep in one
task on one worker, each as its own fit on one worker would
(:func:`~dask_estimators.estimators.neural.fit_lockstep`); they are scored
on the client.

Anything else (another estimator in the grid, metadata routing,
``class_weight="balanced"``, dask input with other scorers) runs
scikit-learn's own search, unchanged.
"""

from __future__ import annotations

import copy
import sys
import time
import traceback
import warnings
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from dask.base import is_dask_collection
from sklearn import get_config
from sklearn.base import _fit_context, clone, is_classifier

try:  # scikit-learn's private scorer of several metrics: without it, scikit-learn's own search runs
    from sklearn.metrics._scorer import _MultimetricScorer
except ImportError:  # pragma: no cover - a future scikit-learn
    _MultimetricScorer = None
from sklearn.model_selection import GridSearchCV as _SkGridSearchCV
from sklearn.model_selection import ParameterGrid, ParameterSampler
from sklearn.model_selection import RandomizedSearchCV as _SkRandomizedSearchCV
from sklearn.model_selection import check_cv
from sklearn.pipeline import Pipeline
from sklearn.utils import _safe_indexing, check_random_state
from sklearn.utils.validation import indexable

from .._progress import check_progress, progress_bar
from ..session import ReplicasWontFit
from ..estimators.cv import SplitsNotPlaceable, checked_splits
from ..estimators._grid import (
    PER_FIT,
    PlacedRuns,
    RejectedInput,
    SplitLacksClass,
    affine_map,
    affine_transformer,
    fit_candidates,
    grid_ready,
)

__all__ = ["GridSearchCV", "RandomizedSearchCV"]

#: The module of our networks: imported already wherever a candidate is one of them.
_NEURAL = "dask_estimators.estimators.neural"

#: scikit-learn's private methods of its searches that the placed path calls (docs/private-apis.md): where one
#: is missing, scikit-learn's own search runs.
_SEARCH_INTERNALS = ("_format_results", "_select_best_index", "_get_scorers", "_check_refit_for_multimetric",
                     "_check_scorers_accept_sample_weight")


#: scikit-learn's scorers whose held-out scores are sums on the workers (dask input): name -> (the sums'
#: metric, :func:`~dask_estimators.objectives.cv.heldout_sums`'s, and the score of those sums).
_WORKER_METRICS = {
    "accuracy": ("accuracy", lambda s: s[0] / s[1]),
    "neg_log_loss": ("log_loss", lambda s: -s[0] / s[1]),
    "neg_mean_squared_error": ("squared_error", lambda s: -s[0] / s[1]),
    "r2": ("r2", lambda s: _r2(*s)),
}
_CLASSIFIER_METRICS = ("accuracy", "neg_log_loss")
_REGRESSOR_METRICS = ("r2", "neg_mean_squared_error")


def _r2(sse, sy, syy, w):
    """scikit-learn's ``r2_score`` from the weighted sums of the squared errors, of y and of y² (and their
    weight): 1 where y is constant and predicted exactly, 0 where it is constant and not."""
    total = syy - sy * sy / w
    if total <= 0:
        return 1.0 if sse == 0 else 0.0
    return 1.0 - sse / total


class _Plan:
    """A search the placed path runs: its candidates, their groups, the name of the fit's weights (a
    pipeline's last step's), the weights, and whether the input stays on the workers (dask)."""

    def __init__(self, candidates, groups, weight_key, fit_weight, on_workers, networks=False):
        self.candidates, self.groups, self.weight_key = candidates, groups, weight_key
        self.fit_weight, self.on_workers = fit_weight, on_workers
        #: The candidates are our networks, trained in lockstep on X placed whole on every worker
        #: (:func:`~dask_estimators.estimators.neural.fit_lockstep`); one group
        self.networks = networks


class _PlacedSearch:
    """The placed path of a search (see the module's docstring); scikit-learn's own ``fit`` otherwise."""

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None, **params):
        """Run fit with all sets of parameters, as scikit-learn's search does.

        Where every candidate is our ``LogisticRegression`` or
        ``LinearRegression`` (alone or ending a ``Pipeline``) and X is NumPy,
        pandas or scipy.sparse, the data is placed once per group of
        candidates (and, with a pipeline's earlier steps, once per split), and
        all the group's fits run in lockstep.  Otherwise this is
        scikit-learn's search.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs), default=None
        **params : dict
            ``groups`` for the splitter, and the estimator's fit arguments
            (``sample_weight``; ``<step>__sample_weight`` for a pipeline), as
            scikit-learn's search takes them.

        Returns
        -------
        self : object
        """
        check_progress(self.progress)  # a missing tqdm fails now
        cv_given = self.cv
        if hasattr(cv_given, "__next__"):  # an iterator of splits (a splitter's split()): read once, for either path
            self.cv = list(cv_given)
        try:
            return self._fit(X, y, params)
        finally:
            self.cv = cv_given  # as scikit-learn's search leaves it: an iterator it has read

    def _fit(self, X, y, params):
        with warnings.catch_warnings():  # a draw's warnings (n_iter over the grid's size) come from the real draw
            warnings.simplefilter("ignore", UserWarning)
            draws = self._candidates(probe=True)
        plan = self._placed_plan(X, y, params, draws)
        if plan is None:
            return self._sklearn_fit(X, y, params)
        try:
            self._fit_placed(plan, X, y, params)
        except (ReplicasWontFit, SplitsNotPlaceable):  # the networks' X would not fit whole on every worker; splits
            pass                                        # that repeat a training row or hold one out too
        except RejectedInput as e:
            if self.error_score == "raise":
                raise e.__cause__ from None
        else:
            self._candidates(probe=False)  # the draws scikit-learn's search would have made (a RandomState moves on)
            return self
        # input the estimator refuses, or a candidate its fit refuses: scikit-learn's search records each fit's
        # failure as error_score, and warns; it draws its candidates from the random state as it was
        return self._sklearn_fit(X, y, params)

    def _sklearn_fit(self, X, y, params):
        frames = [name for name, v in [("X", X), ("y", y), *params.items()]
                  if is_dask_collection(v) and hasattr(v, "divisions")]
        if frames:  # scikit-learn's search cuts each split's rows by position, which a dask dataframe cannot give
            raise TypeError(
                f"This search runs scikit-learn's own search (another estimator, scorer or option than the placed "
                f"path takes: docs/search.md), which cuts each split's rows by position; {', '.join(frames)} "
                f"{'is a dask dataframe or series' if len(frames) == 1 else 'are dask dataframes or series'}, "
                f"which it cannot cut. Pass dask arrays (ddf.to_dask_array(lengths=True)), or pandas.")
        return super().fit(X, y, **params)

    def _placed_plan(self, X, y, params, candidates):
        """The plan of the placed path, or None where scikit-learn's search runs."""
        if get_config().get("enable_metadata_routing", False) or getattr(self, "_skl_callbacks", None):
            return None
        if _MultimetricScorer is None or not all(hasattr(self, name) for name in _SEARCH_INTERNALS):
            return None
        if y is None or not candidates:
            return None
        est = self.estimator
        last = est.steps[-1][0] if isinstance(est, Pipeline) else None
        weight_key = "sample_weight" if last is None else f"{last}__sample_weight"
        if set(params) - {"groups", weight_key}:
            return None
        neural = sys.modules.get(_NEURAL)
        if neural is not None and neural.lockstep_ready(_final(est)):
            return self._networks_plan(X, params, candidates, neural, last, weight_key)
        if not grid_ready(_final(est)) and not any(
                hasattr(v, "fit") for cand in candidates for v in cand.values()):  # no candidate brings ours
            return None
        on_workers = is_dask_collection(X)
        if on_workers and (self._worker_metrics() is None or self.return_train_score or getattr(y, "ndim", 1) != 1
                           or is_dask_collection(params.get("groups"))):
            return None  # scored on the client, or split by dask metadata: scikit-learn's search
        groups = defaultdict(list)
        for i, cand in enumerate(candidates):
            try:
                model = clone(est).set_params(**clone(cand, safe=False))
            except Exception:  # scikit-learn's search meets it in its own words
                return None
            final = _final(model)
            if isinstance(model, Pipeline) and model.steps[-1][0] != last:
                return None
            if not grid_ready(final):
                return None
            try:  # a bad candidate fails in scikit-learn's search, with its error_score
                final._validate_params()
            except ValueError:
                return None
            if on_workers and isinstance(model, Pipeline) and not (
                    len(model.steps) == 2 and _scaler_of(model) is not None):  # other steps: fitted on the client
                return None
            shape = frozenset((k, _exact(v)) for k, v in cand.items() if not _per_fit(k, last))
            groups[shape].append((i, model))
        return _Plan(candidates, list(groups.values()), weight_key, params.get(weight_key), on_workers)

    def _networks_plan(self, X, params, candidates, neural, last, weight_key):
        """The plan of a search over our networks (:func:`~dask_estimators.estimators.neural.lockstep_ready`
        candidates of one client and device, alone or after one scaler in a ``Pipeline`` whose last step is
        ``last``, on dense NumPy or pandas X), or None where scikit-learn's search runs."""
        est = self.estimator
        if is_dask_collection(X) or is_dask_collection(params.get(weight_key)) or is_dask_collection(
                params.get("groups")) or sp.issparse(X):
            return None
        final0 = _final(est)
        models = []
        for i, cand in enumerate(candidates):
            try:
                model = clone(est).set_params(**clone(cand, safe=False))
                model._validate_params()
            except Exception:  # scikit-learn's search meets it in its own words
                return None
            final = _final(model)
            if isinstance(model, Pipeline) and (model.steps[-1][0] != last or _scaler_of(model) is None):
                return None
            if not neural.lockstep_ready(final) or final.client is not final0.client or final.device != final0.device:
                return None
            models.append((i, model))
        return _Plan(candidates, [models], weight_key, params.get(weight_key), False, networks=True)

    def _scorer_names(self) -> dict | None:
        """``{result name: scikit-learn scorer name}`` where ``scoring`` names scikit-learn's own scorers (None:
        the estimator's default, as ``"score"``); None where it holds a callable."""
        scoring = self.scoring
        if scoring is None:
            return {"score": "accuracy" if is_classifier(self.estimator) else "r2"}
        if isinstance(scoring, str):
            return {"score": scoring}
        if isinstance(scoring, (list, tuple, set)) and all(isinstance(v, str) for v in scoring):
            return {v: v for v in scoring}
        if isinstance(scoring, dict) and all(isinstance(v, str) for v in scoring.values()):
            return dict(scoring)
        return None

    def _worker_scored(self, y) -> bool:
        """Whether the held-out scores of NumPy, pandas or sparse input are summed on the workers too (its
        fits' placement holds each split's held-out rows): with :meth:`_worker_metrics`' scorers, 1-D ``y`` and
        no training scores."""
        return self._worker_metrics() is not None and not self.return_train_score and np.ndim(y) == 1

    def _r2_shifts(self, y, splits) -> list | None:
        """Each split's mean of its held-out ``y``, subtracted from y in r2's sums (the total sum of squares
        is then not the difference of two large sums); None where r2 is not scored."""
        if "r2" not in (self._worker_metrics() or {}).values():
            return None
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        return [float(y[test].mean()) if len(test) else 0.0 for _, test in splits]

    def _worker_metrics(self) -> dict | None:
        """``{name: metric}`` of the held-out scores computed on the workers (:data:`_WORKER_METRICS`), for the
        search's ``scoring``; None where a scorer runs on the client."""
        named = self._scorer_names()
        allowed = _CLASSIFIER_METRICS if is_classifier(self.estimator) else _REGRESSOR_METRICS
        if named is None or not all(v in allowed for v in named.values()):
            return None
        return named

    def _fit_placed(self, plan, X, y, params):
        self._validate_params()
        scorers, refit_metric = self._get_scorers()
        groups = params.get("groups")
        if plan.on_workers:  # the splitter sees y's values and an X of no columns; the rows stay on the workers
            y_split = np.asarray(y.compute()).reshape(-1)
            X_split = np.empty((len(y_split), 0))
        else:
            X, y = indexable(X, y)
            X_split, y_split = X, y
        cv = check_cv(self.cv, y_split, classifier=is_classifier(self.estimator))
        self.n_splits_ = cv.get_n_splits(X_split, y_split, groups)
        splits = list(cv.split(X_split, y_split, groups))
        if len(splits) != self.n_splits_:
            raise ValueError(f"cv.split and cv.get_n_splits return inconsistent results. Expected "
                             f"{self.n_splits_} splits, got {len(splits)}")
        splits = checked_splits(splits, len(y_split))
        n_cand, n_splits = len(plan.candidates), len(splits)
        if self.verbose > 0:
            print(f"Fitting {n_splits} folds for each of {n_cand} candidates, totalling {n_cand * n_splits} fits")
        if plan.on_workers and is_classifier(self.estimator):
            classes = np.unique(y_split)
            for k, (train, _) in enumerate(splits):
                if np.unique(y_split[train]).size != classes.size:
                    raise ValueError(f"The training rows of split {k} lack a class of y: with dask input every "
                                     "split's training rows must hold every class (a stratified splitter does).")
        weight = plan.fit_weight
        if weight is not None and not is_dask_collection(weight):
            weight = np.asarray(weight)
        score_weight = None
        if weight is not None and plan.weight_key == "sample_weight" and self._check_scorers_accept_sample_weight():
            score_weight = weight
        scored_on_workers = not plan.networks and (plan.on_workers or self._worker_scored(y_split))
        worker_scores = [[None] * len(splits) for _ in plan.candidates] if scored_on_workers else None
        shifts = self._r2_shifts(y_split, splits) if scored_on_workers else None
        fitted = [[None] * n_splits for _ in range(n_cand)]
        fit_time = np.zeros((n_cand, n_splits))
        with ExitStack() as stack:
            bar = None
            if self.progress:
                bar = stack.enter_context(progress_bar(n_cand * n_splits, type(self).__name__, "fit"))
            self._bar = bar  # for the fits' ends (_fits_done); gone when the search ends
            stack.callback(self.__dict__.pop, "_bar", None)
            # one group: its placement also holds a split of every row, for the refit of its best candidate
            keep = len(plan.groups) == 1 and bool(self.refit)
            refit_on = None
            if plan.networks:
                self._fit_networks(plan.groups[0], X, y, weight, splits, fitted, fit_time)
            for members in [] if plan.networks else plan.groups:
                refit_on = self._fit_group(members, X, y, weight, splits, fitted, fit_time, stack, keep, len(y_split),
                                           worker_scores, shifts, plan.on_workers)
            if bar is not None:
                bar.set_description(f"{type(self).__name__}, scoring")
            out = self._scores(fitted, fit_time, scorers, X, y, splits, score_weight, worker_scores)
            self.multimetric_ = isinstance(out[0]["test_scores"], dict)
            if callable(self.scoring) and self.multimetric_:
                self._check_refit_for_multimetric(out[0]["test_scores"])
                refit_metric = self.refit
            results = self._format_results(plan.candidates, n_splits, out)
            if bar is not None:
                key = "mean_test_score" if "mean_test_score" in results else f"mean_test_{refit_metric}"
                if key in results:
                    bar.set_postfix(best=f"{np.nanmax(results[key]):.4g}")
            if self.refit or not self.multimetric_:
                self.best_index_ = self._select_best_index(self.refit, refit_metric, results)
                if not callable(self.refit):
                    self.best_score_ = results[f"mean_test_{refit_metric}"][self.best_index_]
                self.best_params_ = results["params"][self.best_index_]
            if self.refit:
                t0 = time.perf_counter()
                best = clone(self.estimator).set_params(**clone(self.best_params_, safe=False))
                if refit_on is not None:
                    best = refit_on(best)
                elif plan.on_workers:  # dask input: the best candidate's placement again, scaler and all
                    best = _refit_on_workers(best, X, y, weight, len(y_split))
                else:
                    best.fit(X, y, **({} if weight is None else {plan.weight_key: weight}))
                self.refit_time_ = time.perf_counter() - t0
                self.best_estimator_ = best
                if hasattr(best, "feature_names_in_"):
                    self.feature_names_in_ = best.feature_names_in_
        self.scorer_ = scorers._scorers if isinstance(scorers, _MultimetricScorer) else scorers
        self.cv_results_ = results
        return self

    def _fit_group(self, members, X, y, weight, splits, fitted, fit_time, stack, keep, n_rows, worker_scores=None,
                   shifts=None, on_workers=False):
        """Fit one group's candidates on every split, filling ``fitted`` and ``fit_time``.

        Without earlier steps, or with one scaler (:func:`~dask_estimators.estimators._grid.affine_transformer`),
        the group's data is placed once for all its splits (each split's scaler fitted
        where its rows are, and applied as an affine map).  Otherwise (other earlier steps, or a split that
        lacks a class) it is placed once per split, after the earlier steps fitted on the client.  ``keep``:
        the placement stays in ``stack`` with a split of every row, and this returns the refit (a function of
        the best candidate, not fitted); else None.  ``worker_scores``: filled with each fit's held-out
        scores, computed on the workers, and their seconds, where the group's data is placed once (``shifts``:
        each split's for r2, :meth:`_r2_shifts`).  ``on_workers`` (dask input): the rows must not come to the
        client, so a group that cannot be placed once is an error.
        """
        model0 = members[0][1]
        finals = [_final(m) for _, m in members]
        prefix = model0.steps[:-1] if isinstance(model0, Pipeline) else []
        scaler = _scaler_of(model0)
        if not prefix or scaler is not None:
            rows = [train for train, _ in splits] + ([np.arange(n_rows)] if keep else [])
            held = [test for _, test in splits] + ([np.arange(0)] if keep else [])
            runs = PlacedRuns(finals[0], X, y, weight, rows, held_out=held if worker_scores is not None else None,
                              fits=len(finals) * len(splits))
            try:
                with _refused():
                    stack.enter_context(runs)
            except SplitLacksClass:
                runs = None
            if runs is not None:
                t0 = time.perf_counter()
                steps = [None] * len(rows)
                if scaler is not None:
                    steps = _scaled(runs, prefix[0][0], scaler)
                    if steps is None:  # an offset too large for the stored X: placed per split
                        runs.__exit__(None, None, None)
                        runs = None
                        if on_workers:
                            raise ValueError(_FAR_MEAN)
            if runs is not None:
                with _refused():
                    grid = runs.fit(finals, list(range(len(splits))), feature_names=scaler is None,
                                    on_done=self._fits_done)
                seconds = time.perf_counter() - t0
                for (i, model), row in zip(members, grid):
                    for k, est in enumerate(row):
                        fitted[i][k] = _with_final(model, steps[k], est)
                        fit_time[i, k] = seconds / (len(members) * len(splits))
                if worker_scores is not None:
                    self._worker_scores(runs, members, len(splits), worker_scores, not prefix, shifts)
                if not keep:  # the next group's placement goes in its place
                    runs.__exit__(None, None, None)
                    return None

                def refit(best):
                    est = runs.fit([_final(best)], [len(splits)], feature_names=scaler is None)[0][0]
                    return _with_final(best, steps[-1], est)

                return refit
        if on_workers:  # the split's rows would come to the client
            raise ValueError("With dask input every split's training rows must hold every class.")
        for k, (train, _) in enumerate(splits):
            t0 = time.perf_counter()
            Xk, yk = _safe_indexing(X, train), _safe_indexing(y, train)
            wk = None if weight is None else weight[train]
            steps = None
            if prefix:
                earlier = clone(model0[:-1])
                try:
                    Xk = earlier.fit_transform(Xk, yk)
                except (ValueError, TypeError) as e:  # as the model's own validation: each fit fails alike
                    raise RejectedInput(str(e)) from e
                steps = earlier.steps
            with _refused():
                grid = fit_candidates(finals, Xk, yk, wk, None)
            self._fits_done(len(finals))
            seconds = time.perf_counter() - t0
            for (i, model), row in zip(members, grid):
                fitted[i][k] = _with_final(model, steps, row[0])
                fit_time[i, k] = seconds / len(members)
        return None

    def _fit_networks(self, members, X, y, weight, splits, fitted, fit_time):
        """Fit our networks ``members`` on every split, in lockstep groups on X placed whole on every worker
        (:func:`~dask_estimators.estimators.neural.fit_lockstep`), filling ``fitted`` and ``fit_time``."""
        neural = sys.modules[_NEURAL]
        t0 = time.perf_counter()
        grid, scalers = neural.fit_lockstep([_final(m) for _, m in members], X, y, weight, splits,
                                            on_done=self._fits_done, scalers=[_scaler_of(m) for _, m in members])
        seconds = (time.perf_counter() - t0) / (len(members) * len(splits))
        for (i, model), row, scaled in zip(members, grid, scalers):
            for k, est in enumerate(row):
                steps = None if scaled[k] is None else [(model.steps[0][0], scaled[k])]
                fitted[i][k] = _with_final(model, steps, est)
                fit_time[i, k] = seconds

    def _fits_done(self, n=1):
        """``n`` fits have ended: the bar (``progress``) counts them."""
        bar = getattr(self, "_bar", None)
        if bar is not None:
            bar.update(n)

    def _worker_scores(self, runs, members, n_splits, out, weighted, shifts):
        """Each member's held-out scores on every split, as sums on the workers: one round per split and
        metric for all of the group's fits.  Fills ``out[i][k]`` with ``(scores, seconds)``.  ``weighted``:
        with the sample weights, as scikit-learn's search hands them to the scorer of a plain estimator (a
        pipeline's are its step's alone).  ``shifts[k]``: split k's for r2 (:meth:`_r2_shifts`)."""
        named = self._worker_metrics()
        solutions = runs.solutions  # member by member, split by split
        for k in range(n_splits):
            t0 = time.perf_counter()
            xs = [solutions[j * n_splits + k] for j in range(len(members))]
            values = {name: [] for name in named}
            for name, scorer_name in named.items():
                metric, score = _WORKER_METRICS[scorer_name]
                sums = runs.heldout(k, xs, metric, weighted, shifts[k] if metric == "r2" else 0.0)
                values[name] = [float(score(np.asarray(row, dtype=np.float64))) for row in sums]
            seconds = (time.perf_counter() - t0) / len(members)
            for j, (i, _) in enumerate(members):
                scores = {name: v[j] for name, v in values.items()}
                out[i][k] = (scores["score"] if set(scores) == {"score"} else scores, seconds)

    def _scores(self, fitted, fit_time, scorers, X, y, splits, score_weight, done=None):
        """scikit-learn's entry of each fit, candidate by candidate and split by split: its test (and train)
        scores, times and test size.

        ``done[i][k]``, where not None: the fit's ``(scores, seconds)``, summed on the workers
        (:meth:`_worker_scores`).  The others are scored here.  Split by split, each split's rows are cut
        once for all candidates and, with scikit-learn's own scorers (a name, or a list or dict of names),
        passed once through each fitted earlier step of a pipeline: the scorer then gets the last step and the
        transformed rows, as it does through the pipeline.
        """
        n_cand = len(fitted)
        entries = [[None] * len(splits) for _ in range(n_cand)]
        through = self._scorer_names() is not None
        for k, (train, test) in enumerate(splits):
            held = None
            for i in range(n_cand):
                entry = {"fit_error": None, "n_test_samples": len(test), "fit_time": fit_time[i, k]}
                if done is not None and done[i][k] is not None:
                    entry["test_scores"], entry["score_time"] = done[i][k]
                    entries[i][k] = entry
                    continue
                if held is None:
                    held = {"test": _Rows(X, y, test, score_weight, through)}
                    if self.return_train_score:
                        held["train"] = _Rows(X, y, train, score_weight, through)
                t0 = time.perf_counter()
                entry["test_scores"] = self._score(fitted[i][k], scorers, held["test"])
                entry["score_time"] = time.perf_counter() - t0
                if self.return_train_score:
                    entry["train_scores"] = self._score(fitted[i][k], scorers, held["train"])
                entries[i][k] = entry
        return [e for row in entries for e in row]

    def _score(self, est, scorers, rows):
        try:
            est, Xr, yr, kwargs = rows.for_scoring(est)
            scores = scorers(est, Xr, yr, **kwargs)
        except Exception:
            if self.error_score == "raise":
                raise
            warnings.warn(f"Scoring failed. The score on this train-test partition for these parameters will be set "
                          f"to {self.error_score}. Details: \n{traceback.format_exc()}", UserWarning, stacklevel=2)
            if isinstance(scorers, _MultimetricScorer):
                return {name: self.error_score for name in scorers._scorers}
            return self.error_score
        if isinstance(scores, dict):  # several metrics: one that failed is its traceback's text (not "raise")
            out = {}
            for name, v in scores.items():
                if isinstance(v, str):
                    warnings.warn(f"Scoring failed. The score on this train-test partition for these parameters "
                                  f"will be set to {self.error_score}. Details: \n{v}", UserWarning, stacklevel=2)
                    v = self.error_score
                out[name] = float(v) if np.ndim(v) == 0 else v
            return out
        return float(scores) if np.ndim(scores) == 0 else scores


class _Rows:
    """The rows ``rows`` of a search's input, cut once; with ``through``, also once per fitted earlier steps."""

    def __init__(self, X, y, rows, weight, through):
        self.X, self.y = _safe_indexing(X, rows), _safe_indexing(y, rows)
        self.kwargs = {} if weight is None else {"sample_weight": weight[rows]}
        self.through, self._seen = through, {}

    def for_scoring(self, est):
        """``(estimator, X, y, kwargs)`` to score ``est`` on these rows."""
        if not (self.through and isinstance(est, Pipeline) and len(est.steps) > 1):
            return est, self.X, self.y, self.kwargs
        key = tuple(id(step) for _, step in est.steps[:-1])
        if key not in self._seen:  # the steps stay referenced by the fitted candidates: their ids stay theirs
            self._seen[key] = est[:-1].transform(self.X)
        return est.steps[-1][1], self._seen[key], self.y, self.kwargs


@contextmanager
def _refused():
    """A ``ValueError`` or ``TypeError`` of a group's placement or fits (a candidate's solver that does not take
    its penalty, a ``class_weight`` naming a class y lacks) raised as :class:`RejectedInput`: the search then
    runs as scikit-learn's, which gives each failing fit its ``error_score``.  :class:`SplitLacksClass` and
    :class:`RejectedInput` itself pass as they are."""
    try:
        yield
    except (RejectedInput, SplitLacksClass):
        raise
    except (ValueError, TypeError) as e:
        raise RejectedInput(str(e)) from e


def _exact(value):
    """A key equal for two candidate values only where they are the same: plain values (numbers, strings, None,
    and tuples, lists and dicts of them) by type and value, anything else (an estimator, an array) by identity.

    Not ``repr``: scikit-learn cuts the middle out of a long one, so two different pipelines' steps could share
    it.  Equal values that are distinct objects only make groups of their own.
    """
    if value is None or isinstance(value, (bool, Integral, Real, str, bytes)):
        return type(value), value
    if isinstance(value, (tuple, list)):
        return type(value), tuple(_exact(v) for v in value)
    if isinstance(value, dict):
        return dict, frozenset((_exact(k), _exact(v)) for k, v in value.items())
    return "object", id(value)


def _per_fit(key: str, last: str | None) -> bool:
    """Whether a candidate's ``key`` is one each fit of a shared placement may have its own of."""
    if last is None:
        return key in PER_FIT
    step, _, name = key.partition("__")
    return step == last and name in PER_FIT


_FAR_MEAN = ("A column's mean is more than 1e4 of its standard deviations from zero: the scaler cannot be applied "
             "to the stored values of dask input without losing digits; center that column before the search.")


def _refit_on_workers(best, X, y, weight, n_rows):
    """``best`` (a candidate, not fitted) fitted on every row of dask input, its scaler fitted where the rows
    are, without gathering them."""
    final, scaler = _final(best), _scaler_of(best)
    with PlacedRuns(final, X, y, weight, [np.arange(n_rows)]) as runs:
        steps = [None]
        if scaler is not None:
            steps = _scaled(runs, best.steps[0][0], scaler)
            if steps is None:
                raise ValueError(_FAR_MEAN)
        est = runs.fit([final], [0], feature_names=scaler is None)[0][0]
    return _with_final(best, steps[0], est)


def _scaled(runs, name, scaler):
    """``scaler`` fitted on each split of ``runs`` where its rows are, and each split's fits set to see X
    through it: each split's fitted earlier steps ``[(name, its scaler)]``; None (and nothing set) where a
    split's affine map is out of reach (:func:`~dask_estimators.estimators._grid.affine_map`)."""
    fitted = runs.fit_transformers([(scaler, k) for k in range(len(runs.splits))])
    maps = [affine_map(t, runs.model.n_features_in_) for t in fitted]
    if any(m is None for m in maps):
        return None
    runs.set_maps(maps)
    return [[(name, t)] for t in fitted]


def _scaler_of(model):
    """The scaler a pipeline's fits see X through (its one earlier step, an
    :func:`~dask_estimators.estimators._grid.affine_transformer` whose output is NumPy: neither its own
    ``set_output`` nor scikit-learn's ``transform_output`` config asks for a dataframe, whose column names the
    final step would keep), else None."""
    if not isinstance(model, Pipeline) or len(model.steps) != 2:
        return None
    step = model.steps[0][1]
    own = getattr(step, "_sklearn_output_config", None) or {}
    output = own.get("transform", get_config().get("transform_output", "default"))
    if affine_transformer(step) and output == "default":
        return step
    return None


def _final(model):
    """A candidate's estimator: the last step of a pipeline."""
    return model.steps[-1][1] if isinstance(model, Pipeline) else model


def _with_final(model, steps, final):
    """``model`` (a candidate: an estimator or a pipeline) fitted: ``final`` as its last step, after ``steps``
    (the fitted earlier ``(name, step)`` pairs; None: none)."""
    if not isinstance(model, Pipeline):
        return final
    out = clone(model)
    out.steps = list(steps or []) + [(model.steps[-1][0], final)]
    return out


#: The parameters both searches document alike (formatted into their docstrings below).
_SEARCH_PARAMS = """scoring : str, callable, list, tuple, dict or None, default=None
        As scikit-learn's: None is the estimator's ``score``.  With dask input
        the placed path computes None, ``"accuracy"`` and ``"neg_log_loss"``
        (classifiers), ``"r2"`` and ``"neg_mean_squared_error"``
        (regressors) on the workers.
    n_jobs : int or None, default=None
        The jobs of scikit-learn's own search, where it runs; the placed path
        runs its fits on the cluster.
    refit : bool, str or callable, default=True
        As scikit-learn's.
    cv : int, cross-validation generator or iterable, default=None
        As scikit-learn's (5 stratified or plain folds for None).
    verbose : int, default=0
        As scikit-learn's.
    pre_dispatch : int or str, default="2*n_jobs"
        As scikit-learn's (its own search only)."""


class GridSearchCV(_PlacedSearch, _SkGridSearchCV):
    """scikit-learn's ``GridSearchCV``, whose fits of our linear models share their placements.

    The same parameters, attributes and results as
    ``sklearn.model_selection.GridSearchCV``.  Where every candidate is our
    ``LogisticRegression`` or ``LinearRegression`` (alone or the last step of a
    ``Pipeline``) on NumPy, pandas or scipy.sparse input, the data is placed
    on the workers once per group of candidates that share a problem (once
    per split with a pipeline's earlier steps), and every candidate's fit on
    every split runs in lockstep: one pass over X per round for all of them,
    each with its own line search and stopping test, as it would alone.
    The held-out scores of scikit-learn's accuracy, log-loss, r2 and
    squared-error scorers are summed on the workers, others' computed by
    scikit-learn's scorers on the client.  Where every candidate is our
    ``MLPClassifier`` or ``MLPRegressor`` (solver "adam" or "sgd"; alone or
    after one scaler) on dense NumPy or pandas X, X is placed whole on
    every worker once, and each
    split's candidates that take the same batches train together on one
    worker, each step's batch read once for all of them; each comes out as
    its own fit on one worker would.  Anything else is scikit-learn's
    search (``n_jobs`` applies there).

    Parameters
    ----------
    estimator : estimator object
        The estimator (or pipeline) fitted for each candidate.
    param_grid : dict or list of dicts
        The candidates, as scikit-learn's ``ParameterGrid`` makes them.
    {search_params}
    error_score : "raise" or numeric, default=np.nan
        The score of a fit that fails, as scikit-learn's.
    return_train_score : bool, default=False
        As scikit-learn's.
    progress : bool, default=False
        A tqdm bar of the placed path's fits (candidates x splits) as they
        end, then of the best mean test score (needs tqdm).
        scikit-learn's own search shows ``verbose``'s lines.

    Attributes
    ----------
    cv_results_, best_estimator_, best_score_, best_params_, best_index_, scorer_, n_splits_, refit_time_,
    multimetric_, classes_, n_features_in_, feature_names_in_
        As in ``sklearn.model_selection.GridSearchCV``.  ``fit_time`` in
        ``cv_results_`` is, on the placed path, the group's wall time shared
        evenly among its fits.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from dask_estimators import LogisticRegression
    >>> from dask_estimators.model_selection import GridSearchCV
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression()),
    ...                       {"logisticregression__C": [0.01, 0.1, 1.0]}, cv=3)
    >>> search.fit(X, y).best_params_  # doctest: +SKIP
    {'logisticregression__C': 0.1}
    """

    _parameter_constraints = {**_SkGridSearchCV._parameter_constraints, "progress": ["boolean"]}

    def __init__(self, estimator, param_grid, *, scoring=None, n_jobs=None, refit=True, cv=None, verbose=0,
                 pre_dispatch="2*n_jobs", error_score=np.nan, return_train_score=False, progress=False):
        super().__init__(estimator, param_grid, scoring=scoring, n_jobs=n_jobs, refit=refit, cv=cv, verbose=verbose,
                         pre_dispatch=pre_dispatch, error_score=error_score, return_train_score=return_train_score)
        self.progress = progress

    def _candidates(self, probe):
        return list(ParameterGrid(self.param_grid))


class RandomizedSearchCV(_PlacedSearch, _SkRandomizedSearchCV):
    """scikit-learn's ``RandomizedSearchCV``, whose fits of our linear models share their placements.

    The same parameters, attributes and results as
    ``sklearn.model_selection.RandomizedSearchCV`` (the same candidates for
    the same ``random_state``); the fits go as in :class:`GridSearchCV`.

    Parameters
    ----------
    estimator : estimator object
        The estimator (or pipeline) fitted for each candidate.
    param_distributions : dict or list of dicts
        The candidates' distributions, as scikit-learn's ``ParameterSampler``
        draws them.
    n_iter : int, default=10
        The number of candidates drawn.
    {search_params}
    random_state : int, RandomState instance or None, default=None
        The draws' random state, as scikit-learn's.
    error_score : "raise" or numeric, default=np.nan
        The score of a fit that fails, as scikit-learn's.
    return_train_score : bool, default=False
        As scikit-learn's.
    progress : bool, default=False
        As in :class:`GridSearchCV`.

    Attributes
    ----------
    cv_results_, best_estimator_, best_score_, best_params_, best_index_, scorer_, n_splits_, refit_time_,
    multimetric_, classes_, n_features_in_, feature_names_in_
        As in ``sklearn.model_selection.RandomizedSearchCV``.
    """

    _parameter_constraints = {**_SkRandomizedSearchCV._parameter_constraints, "progress": ["boolean"]}

    def __init__(self, estimator, param_distributions, *, n_iter=10, scoring=None, n_jobs=None, refit=True, cv=None,
                 verbose=0, pre_dispatch="2*n_jobs", random_state=None, error_score=np.nan, return_train_score=False,
                 progress=False):
        super().__init__(estimator, param_distributions, n_iter=n_iter, scoring=scoring, n_jobs=n_jobs, refit=refit,
                         cv=cv, verbose=verbose, pre_dispatch=pre_dispatch, random_state=random_state,
                         error_score=error_score, return_train_score=return_train_score)
        self.progress = progress

    def _candidates(self, probe):
        """The candidates scikit-learn's search draws.  ``probe``: draw them from a copy of the random state,
        which stays where it was (scikit-learn's search, when it runs instead, draws the same)."""
        state = self.random_state
        if probe and not isinstance(state, Integral):
            state = copy.deepcopy(check_random_state(state))
        return list(ParameterSampler(self.param_distributions, self.n_iter, random_state=state))


for _cls in (GridSearchCV, RandomizedSearchCV):
    _cls.__doc__ = _cls.__doc__.replace("{search_params}", _SEARCH_PARAMS)
