"""Multilayer perceptrons in torch: MLPClassifier and MLPRegressor, trained on a Dask cluster.

scikit-learn's parameters and meaning, plus ``device``, ``strategy`` and
``client``.  Two strategies share the data placement, the seeded batches and
the stopping rules (see :mod:`dask_estimators.optim.torch_driver`):

- ``"rounds"``: the optimizer on the client, one engine round (gradient
  tree-summed over the workers) per global batch (``"tree"``, its old name, is
  a deprecated alias);
- ``"ddp"``: one long-running call per worker joins a ``torch.distributed``
  group and trains with ``DistributedDataParallel``; per-epoch records are
  streamed to the client as Dask events.

Sparse X (scipy.sparse, dask arrays of sparse blocks) is placed as CSR and
never densified: the first layer is a sparse-dense product (see
:mod:`dask_estimators.objectives.module`), the hidden layers stay dense.
"""

from __future__ import annotations

import copy
import math
import warnings
from numbers import Integral, Real

import distributed
import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_softmax
from sklearn.base import ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets, type_of_target, unique_labels
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..objectives import module as M
from ..objectives import targets as T
from .._progress import check_progress
from ..optim.torch_driver import LockstepMember, Monitor, TrainConfig, minimize_lbfgs
from ..session import DataSession
from ._base import (DaskScoreMixin, DistributedEstimator, accepts_kept_data, check_class_share, dask_label_set,
                    warn_column_y)
from ._torch import Progress, renamed_strategy, resolve_strategy, split_callbacks, strategy_constraint

__all__ = ["MLPClassifier", "MLPRegressor"]


class _BaseMLP(DistributedEstimator):
    """Shared fitting of the two perceptrons."""

    _fit_dtype = (np.float64, np.float32)
    #: scipy.sparse X and dask arrays of sparse blocks: placed as CSR, the first layer a sparse-dense product
    _accept_sparse = True

    _parameter_constraints: dict = {
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(M.ACTIVATIONS))],
        "solver": [StrOptions({"lbfgs", "sgd", "adam"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "learning_rate": [StrOptions({"constant", "invscaling", "adaptive"})],
        "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
        "power_t": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "progress": ["boolean"],
        "callbacks": [list, tuple, None],
        "warm_start": ["boolean"],
        "momentum": [Interval(Real, 0, 1, closed="both")],
        "nesterovs_momentum": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "beta_1": [Interval(Real, 0, 1, closed="left")],
        "beta_2": [Interval(Real, 0, 1, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), Options(Real, {np.inf})],
        "max_fun": [Interval(Integral, 1, None, closed="left")],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "strategy": [strategy_constraint()],
        "client": [None, str, distributed.Client],
        "timeout": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        *,
        solver="adam",
        alpha=0.0001,
        batch_size="auto",
        learning_rate="constant",
        learning_rate_init=0.001,
        power_t=0.5,
        max_iter=200,
        shuffle=True,
        random_state=None,
        tol=1e-4,
        verbose=False,
        progress=False,
        callbacks=None,
        warm_start=False,
        momentum=0.9,
        nesterovs_momentum=True,
        early_stopping=False,
        validation_fraction=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        n_iter_no_change=10,
        max_fun=15000,
        device="auto",
        strategy="auto",
        client=None,
        timeout=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.solver = solver
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.learning_rate_init = learning_rate_init
        self.power_t = power_t
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.tol = tol
        self.verbose = verbose
        self.progress = progress
        self.callbacks = callbacks
        self.warm_start = warm_start
        self.momentum = momentum
        self.nesterovs_momentum = nesterovs_momentum
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.n_iter_no_change = n_iter_no_change
        self.max_fun = max_fun
        self.device = device
        self.strategy = strategy
        self.client = client
        self.timeout = timeout

    # --------------------------------------------------------------- fitting
    def _hidden(self) -> tuple:
        sizes = self.hidden_layer_sizes
        sizes = (sizes,) if np.ndim(sizes) == 0 else tuple(sizes)
        if any(int(s) != s or s < 1 for s in sizes):
            raise ValueError(f"hidden_layer_sizes must be > 0, got {sizes}.")
        return tuple(int(s) for s in sizes)

    def _resolve_strategy(self) -> str:
        strategy = renamed_strategy(self.strategy)  # "tree": a FutureWarning, then "rounds"
        if self.solver == "lbfgs":
            if strategy == "ddp":
                raise ValueError("strategy='ddp' trains with minibatch steps; solver='lbfgs' needs strategy='rounds'.")
            return "rounds"
        return resolve_strategy(strategy)

    @accepts_kept_data
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        """Fit the network on the Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features), or KeptData
            Training data.  Dask input is validated and placed on the workers
            without passing through the client.  Sparse X (scipy.sparse of any
            format, converted once to CSR, or a dask array of sparse blocks)
            stays sparse on the workers: the first layer is a sparse-dense
            product and minibatches are cut from the CSR arrays.  A
            :class:`~dask_estimators.KeptData` brings its own y and weights, and its placement stays on the
            workers for the next fit on it.
        y : array-like or dask collection of shape (n_samples,) or (n_samples, n_outputs), default=None
            Targets (class labels for the classifier); None only with a KeptData.
        sample_weight : array-like or dask collection of shape (n_samples,), default=None
            Weights of the samples; negative ones are accepted, as by scikit-learn's MLPs.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        return self._fit(X, y, sample_weight, incremental=False)

    def _fit(self, X, y, sample_weight, incremental, classes=None):
        check_progress(self.progress)  # a missing tqdm fails now, before any cluster starts
        hidden = self._hidden()
        first_call = not hasattr(self, "coefs_")
        reset = first_call or not (self.warm_start or incremental)
        if incremental:
            self._check_solver()
            if self.early_stopping:
                raise ValueError("partial_fit does not support early_stopping=True")
        if not reset and getattr(self, "_hidden_fitted", hidden) != hidden:
            raise ValueError(
                f"hidden_layer_sizes changed from {self._hidden_fitted} to {hidden}; a warm start or "
                "partial_fit needs the same architecture."
            )
        if not reset:
            prev_features = self.n_features_in_
        X, y, sample_weight, dask_input = self._validate_input(X, y, sample_weight)
        if not reset and self.n_features_in_ != prev_features:
            raise ValueError(
                f"X has {self.n_features_in_} features, but {type(self).__name__} is expecting "
                f"{prev_features} features as input."
            )
        storage = self._storage_dtype(X)  # float32 input trains in float32, as scikit-learn's MLPs
        dtype = storage.name
        check = self._block_check(dtype=storage)
        if dask_input and getattr(y, "ndim", 1) == 2 and y.shape[1] == 1:
            warn_column_y(stacklevel=4)  # column_or_1d's, which _encode_targets runs on in-memory y
            y = y.iloc[:, 0] if hasattr(y, "iloc") else y[:, 0]  # and its ravel: one target, not a (n, 1) matrix
        y_placed, out, n_outputs = self._encode_targets(y, dask_input, classes, reset, incremental)
        with DataSession(self.client, device=self.device, timeout=self.timeout) as session:
            data = session.data(X=X, y=y_placed, sample_weight=sample_weight, check=check, same_layout=True,
                                workers=self._workers_worth(session, X, hidden, n_outputs))
            if out is None:  # dask labels: found and encoded on the workers
                out, n_outputs = self._encode_on_workers(data, classes, reset, incremental)
            spec = M.MLPSpec(self.n_features_in_, hidden, n_outputs, self.activation, out, dtype)
            stats = self._fit_placed(data, spec, reset, incremental)
        self._hidden_fitted = hidden
        self.fit_stats_ = stats
        return self

    def _workers_worth(self, session, X, hidden, n_outputs):
        """The workers this fit's steps are worth (:meth:`~dask_estimators.session.DataSession.workers_worth`);
        None: all.

        Chosen from those :meth:`~dask_estimators.session.DataSession.workers_per_gpu` gives (one worker per GPU on a cluster
        with GPUs; with ``device="cpu"``, None: every worker, looked up by ``workers_worth``).
        A step's arithmetic is about 6 multiply-adds per parameter and row of
        the batch (the forward pass, the two products of the backward one).
        """
        ws = session.workers_per_gpu()
        try:
            n = int(X.shape[0])
        except (AttributeError, TypeError, ValueError):  # a dask collection of unknown length: every worker
            return ws
        vf = self.validation_fraction if self.early_stopping and self.solver != "lbfgs" else 0.0
        n_train = max(1, int(n * (1.0 - vf)))
        if self.solver == "lbfgs":
            batch = n_train
        else:
            batch = min(200 if self.batch_size == "auto" else max(int(self.batch_size), 1), n_train)
        units = (self.n_features_in_, *hidden, n_outputs or 1)
        params = sum((a + 1) * b for a, b in zip(units[:-1], units[1:]))
        nbytes = getattr(X, "nbytes", None)
        if nbytes is None and hasattr(X, "data"):  # scipy.sparse
            nbytes = X.data.nbytes + X.indices.nbytes
        try:
            nbytes = int(nbytes or 0)
        except (TypeError, ValueError):  # a dask array's unknown bytes
            nbytes = 0
        return session.workers_worth(6.0 * batch * params, nbytes, workers=ws)

    def _encode_targets(self, y, dask_input, classes, reset, incremental):
        """(targets to place or None to encode on the workers, output link, n_outputs or None)."""
        raise NotImplementedError

    def _check_solver(self):
        """True for the stochastic solvers, else scikit-learn's AttributeError: ``partial_fit`` exists for those only."""
        if self.solver not in ("sgd", "adam"):
            raise AttributeError(
                f"partial_fit is only available for stochastic optimizers. {self.solver} is not stochastic."
            )
        return True

    def _fit_placed(self, data, spec, reset, incremental):
        if spec.n_outputs is None:  # regression on dask input: the targets' width, from a worker
            spec = M.MLPSpec(spec.n_features, spec.hidden, _n_targets(data), spec.activation, spec.out,
                             spec.dtype)
        if not reset and getattr(self, "n_outputs_", spec.n_outputs) != spec.n_outputs:
            raise ValueError(f"y has {spec.n_outputs} outputs but the fitted network has {self.n_outputs_}.")
        rng = check_random_state(self.random_state)
        w0 = M.glorot_init(spec, rng) if reset else M.flatten(self.coefs_, self.intercepts_)
        drawn = M.shuffle_state(rng)  # where scikit-learn's shuffles start: after the initial weights
        seed = int(rng.randint(np.iinfo(np.int32).max))
        early_stopping = self.early_stopping and self.solver != "lbfgs"  # lbfgs ignores it, as in scikit-learn
        vf = self.validation_fraction if early_stopping else 0.0
        # each shard takes its rows of scikit-learn's global batches (whichever rows it holds); without validation
        # rows every row trains, and one round both prepares the shards and gives them their order
        batch = orders = None
        rows = _shard_rows(data)
        epoch0 = 0 if reset else getattr(self, "_epochs_run", self.n_iter_)
        if not early_stopping and self.solver != "lbfgs":
            batch = self._batch_size(data.n_samples)
            orders = [M.BatchOrder(tuple(r), data.n_samples, batch, drawn, epoch0) for r in rows]
        # a classifier of one output has its validation rows stratified, as scikit-learn's
        stratify = early_stopping and spec.out == "logistic" and spec.n_outputs == 1
        counts = data.map_each(M.prepare, [(spec, r, None if orders is None else orders[r], stratify)
                                           for r in range(data.n_shards)])
        n_train = sum(c["n_train"] for c in counts)
        if early_stopping:  # scikit-learn's split of the global rows, from where the initial weights leave its rng
            drawn, orders = self._validation_split(data, rows, counts, vf, drawn, epoch0, stratify)
            batch = orders[0].batch_size
            counts = data.map_each(M.set_batch_order, [(o,) for o in orders])
            n_train = sum(c["n_train"] for c in counts)
        if reset:
            self._reset_fitted(spec)
        strategy = self._resolve_strategy()
        stats = dict(data.stats(), strategy=strategy)
        if self.solver == "lbfgs":
            if self.callbacks:
                raise ValueError("callbacks hook into the epochs of the stochastic solvers ('adam', 'sgd'); "
                                 "solver='lbfgs' has none. Remove them or choose a stochastic solver.")
            stats.update(self._fit_lbfgs(data, spec, w0))
            return stats
        loop_callbacks, client_callbacks = split_callbacks(copy.deepcopy(self.callbacks))
        if not early_stopping and any(getattr(cb, "monitor", None) == "validation_score"
                                      for cb in loop_callbacks + client_callbacks):
            raise ValueError("A callback monitors 'validation_score', which needs a validation set: set "
                             "early_stopping=True (validation_fraction of the training rows are held out).")
        cfg = self._train_config(
            early_stopping, seed, n_train, batch, epoch0=epoch0, t0=self.t_,
            incremental=incremental, send_params=any(cb.needs_params for cb in client_callbacks),
        )
        monitor = self._monitor(early_stopping, reset)
        opt_state = self._optimizer_state if incremental else None
        progress = Progress(self.verbose, 1 if incremental else self.max_iter, type(self).__name__,
                            progress=self.progress, callbacks=client_callbacks, spec=spec)
        try:
            # the workers this fit does not use make the networks' first uses meanwhile, for the next fit
            data.warm_others(networks=True)
            res, round_stats = data.train(strategy, spec, w0, cfg, monitor, opt_state, progress,
                                          callbacks=loop_callbacks)
            stats.update(round_stats)
        finally:
            progress.close()
        self.callbacks_ = res.callbacks + client_callbacks
        self._set_result(spec, res, early_stopping, incremental)
        stats.update(batch_size=batch, steps_per_epoch=cfg.n_steps, seconds=sum(r["seconds"] for r in res.history))
        return stats

    def _reset_fitted(self, spec):
        """The fitted state of a fit from scratch, before its training (``spec``: its network)."""
        self.n_iter_, self.t_, self._epochs_run = 0, 0, 0
        self.n_outputs_, self.n_layers_ = spec.n_outputs, len(spec.hidden) + 2
        self.out_activation_ = spec.out
        self.history_, self.loss_curve_ = [], []
        self.validation_scores_ = None
        self._monitor_state = None
        self._optimizer_state = None

    def _lockstep_member(self, n_features, n_outputs, out, dtype, n_rows, labels=None):
        """This model (not fitted) as one network of a search's lockstep (:func:`fit_lockstep`), on ``n_rows``
        rows (``labels``: their classes, for a classifier's stratified early-stopping split): (its network, the
        optimizer layer's ``LockstepMember``), made as :meth:`fit` makes its training run on one worker."""
        spec = M.MLPSpec(n_features, self._hidden(), n_outputs, self.activation, out, dtype)
        rng = check_random_state(self.random_state)
        w0 = M.glorot_init(spec, rng)
        state = M.shuffle_state(rng)
        drawn = int(rng.randint(np.iinfo(np.int32).max))
        early_stopping = self.early_stopping and self.solver != "lbfgs"
        vf = self.validation_fraction if early_stopping else 0.0
        place, n_train = None, n_rows
        if early_stopping:
            stratify = out == "logistic" and spec.n_outputs == 1
            place, n_train, state = _split(n_rows, vf, state, np.asarray(labels, dtype=np.int8).reshape(-1)
                                           if stratify else None, getattr(self, "classes_", None))
        batch = self._batch_size(n_train)
        order = M.BatchOrder(((0, n_rows),), n_train, batch, state, 0, positions=place)
        cfg = self._train_config(early_stopping, drawn, n_train, batch)
        return spec, LockstepMember(spec, w0, cfg, self._monitor(early_stopping, True), batch, vf, order=order)

    def _train_config(self, early_stopping, seed, n_train, batch, **more):
        """The optimizer layer's ``TrainConfig`` of this model's parameters, for ``n_train`` training rows in
        batches of ``batch``; ``more``: its other fields (a warm start's or ``partial_fit``'s)."""
        return TrainConfig(
            solver=self.solver, learning_rate_init=self.learning_rate_init, learning_rate=self.learning_rate,
            power_t=self.power_t, momentum=self.momentum, nesterovs_momentum=self.nesterovs_momentum,
            beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon, alpha=self.alpha,
            max_iter=self.max_iter, tol=self.tol, n_iter_no_change=self.n_iter_no_change,
            early_stopping=early_stopping, shuffle=self.shuffle, seed=seed,
            n_steps=math.ceil(n_train / batch), n_train=n_train, **more,
        )

    def _lockstep_fitted(self, member, res, stats):
        """Take the result ``res`` of this model's training in a search's lockstep (as its ``member``, of
        :meth:`_lockstep_member`), as :meth:`fit` takes its own."""
        spec = member.spec
        self._reset_fitted(spec)
        self.callbacks_ = list(res.callbacks)
        self._set_result(spec, res, member.cfg.early_stopping, False)
        self._hidden_fitted = tuple(spec.hidden)
        self.fit_stats_ = dict(stats, seconds=sum(r["seconds"] for r in res.history), **res.info.get("lockstep", {}))
        return self

    def _validation_split(self, data, rows, counts, vf, drawn, epoch0, stratify):
        """scikit-learn's early-stopping split of the global rows (``train_test_split`` from the random state
        ``drawn``, stratified for a classifier of one output), and each shard's ``BatchOrder`` over the training
        rows: (the random state after the split, where the epochs' shuffles start; the orders)."""
        n = data.n_samples
        labels = None
        if stratify:  # the rows' classes, one byte each, put in global order
            labels = np.empty(n, dtype=np.int8)
            for r, c in zip(rows, counts):
                labels[M.rows_of_ranges(r)] = c["labels"]
        place, n_train, drawn = _split(n, vf, drawn, labels, getattr(self, "classes_", None))
        batch = self._batch_size(n_train)
        return drawn, [M.BatchOrder(tuple(r), n_train, batch, drawn, epoch0, positions=place[M.rows_of_ranges(r)])
                       for r in rows]

    def _batch_size(self, n_train):
        if self.batch_size == "auto":
            return min(200, n_train)
        if self.batch_size > n_train:
            warnings.warn("Got `batch_size` less than 1 or larger than sample size. It is going to be clipped")
        return int(np.clip(self.batch_size, 1, n_train))

    def _monitor(self, early_stopping, reset):
        m = Monitor(self.tol, self.n_iter_no_change, early_stopping)
        if not reset and self._monitor_state is not None and self._monitor_state["early_stopping"] == early_stopping:
            m.best_loss = self._monitor_state["best_loss"]
            m.best_validation_score = self._monitor_state["best_validation_score"]
            m.no_improvement_count = self._monitor_state["no_improvement_count"]
        return m

    def _set_result(self, spec, res, early_stopping, incremental):
        monitor, history = res.monitor, res.history
        w = monitor.best_params if early_stopping and monitor.best_params is not None else res.w
        self._set_weights(spec, w)
        # as scikit-learn: the epochs of this call (a warm start counts afresh, partial_fit gives 1); the batch
        # seeds go on from all the epochs run so far
        self.n_iter_ = res.n_epochs
        self._epochs_run = getattr(self, "_epochs_run", 0) + res.n_epochs
        self.t_ = res.t
        self.history_ = list(self.history_) + history
        self.loss_curve_ = list(self.loss_curve_) + [np.float64(r["loss"]) for r in history]  # scikit-learn's type
        self.loss_ = self.loss_curve_[-1]
        if early_stopping:  # a warm start adds its scores to the earlier ones, as scikit-learn's
            self.validation_scores_ = list(getattr(self, "validation_scores_", None) or []) + list(
                monitor.validation_scores
            )
            self.best_validation_score_ = monitor.best_validation_score
            self.best_loss_ = None
        else:
            self.validation_scores_ = None
            self.best_validation_score_ = None
            self.best_loss_ = None if monitor.best_loss is None else np.float64(monitor.best_loss)
        self._monitor_state = {
            "early_stopping": early_stopping,
            "best_loss": monitor.best_loss,
            "best_validation_score": monitor.best_validation_score,
            "no_improvement_count": monitor.no_improvement_count,
        }
        self._optimizer_state = res.opt_state
        if not incremental and not res.stopped and res.n_epochs == self.max_iter:
            warnings.warn(
                f"Stochastic Optimizer: Maximum iterations ({self.max_iter}) reached and the optimization "
                "hasn't converged yet.",
                ConvergenceWarning,
            )

    def _fit_lbfgs(self, data, spec, w0):
        evaluator = data.evaluator()
        progress = Progress(self.verbose, self.max_iter, type(self).__name__, progress=self.progress)
        try:
            res, curve = minimize_lbfgs(
                evaluator, spec, w0, alpha=self.alpha, max_iter=self.max_iter, max_fun=self.max_fun, tol=self.tol,
                report=progress,
            )
        finally:
            progress.close()
        self._set_weights(spec, res.x, np.float64)  # scipy's L-BFGS-B works in float64; scikit-learn keeps that
        self.n_iter_ = int(res.nit)
        self.loss_ = np.float64(res.fun)
        self.loss_curve_ = [np.float64(v) for v in curve]
        self.history_ = progress.records
        if res.status != 0:
            warnings.warn(
                f"lbfgs failed to converge after {res.nit} iteration(s) (status={res.status}):\n{res.message}\n\n"
                "Increase the number of iterations to improve the convergence (max_iter="
                f"{self.max_iter}).",
                ConvergenceWarning,
            )
        return evaluator.stats.as_dict()

    def _set_weights(self, spec, w, dtype=None):
        """``coefs_`` and ``intercepts_`` from the flat vector, in X's float dtype (or ``dtype``) as scikit-learn.

        Non-finite weights are scikit-learn's ValueError (a diverged fit; with
        ``early_stopping`` the best weights, restored, are finite).
        """
        coefs, intercepts = M.unflatten(spec, w)
        if not all(np.all(np.isfinite(a)) for a in coefs + intercepts):
            raise ValueError(
                "Solver produced non-finite parameter weights. The input data may contain large values and "
                "need to be preprocessed."
            )
        dtype = np.dtype(spec.dtype if dtype is None else dtype)
        self.coefs_ = [c.astype(dtype, copy=False) for c in coefs]
        self.intercepts_ = [b.astype(dtype, copy=False) for b in intercepts]

    def _param_dtype(self):
        return np.dtype(self.coefs_[0].dtype)

    def _sklearn_params(self):
        """This model's parameters that scikit-learn's MLP has."""
        skip = {"device", "strategy", "client", "timeout", "progress", "callbacks"}
        return {k: v for k, v in self.get_params(deep=False).items() if k not in skip}

    def _sklearn_fitted(self, est):
        """Give the scikit-learn MLP ``est`` copies of this model's fitted attributes; returns it."""
        check_is_fitted(self)
        names = ["coefs_", "intercepts_", "n_layers_", "n_outputs_", "out_activation_", "n_iter_", "t_", "loss_",
                 "loss_curve_", "best_loss_", "validation_scores_", "best_validation_score_", "n_features_in_",
                 "feature_names_in_", "classes_"]
        for name in names:
            if hasattr(self, name):
                value = getattr(self, name)
                if isinstance(value, list):
                    value = [v.copy() if isinstance(v, np.ndarray) else v for v in value]
                elif isinstance(value, np.ndarray):
                    value = value.copy()
                setattr(est, name, value)
        # what scikit-learn's own warm start / partial_fit reads back (private attributes of its MLPs)
        est._best_coefs = [c.copy() for c in self.coefs_]
        est._best_intercepts = [b.copy() for b in self.intercepts_]
        est._no_improvement_count = int((getattr(self, "_monitor_state", None) or {}).get("no_improvement_count", 0))
        return est

    # ------------------------------------------------------------ prediction
    def _spec(self):
        return M.MLPSpec(self.n_features_in_, self._hidden_fitted, self.n_outputs_, self.activation,
                         self.out_activation_)

    def _forward(self, A, link=True):
        return M.forward_numpy(self._spec(), self.coefs_, self.intercepts_, A, link=link)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


def _split(n, vf, drawn, labels, classes):
    """scikit-learn's early-stopping split of ``n`` rows (``train_test_split`` from the random state ``drawn``,
    stratified by ``labels`` where given) and its errors: (each row's place among the training rows, -1 for a
    validation row; the training rows; the random state after the split, where the epochs' shuffles start)."""
    from sklearn.model_selection import train_test_split

    if labels is not None:
        _check_stratifiable([np.bincount(labels)], classes)
    if not vf:  # no validation row
        _check_validation_rows(None, 0, classes)
    rng = M.random_state_of(drawn)
    train, val = train_test_split(np.arange(n), random_state=rng, test_size=vf, stratify=labels)
    _check_validation_rows(None, len(val), classes)
    place = np.full(n, -1, dtype=np.int64)
    place[train] = np.arange(len(train))
    return place, len(train), M.shuffle_state(rng)


def _shard_rows(data) -> list:
    """The global rows (``[start, stop)`` ranges) of each shard of ``data``: its placement's, where they cover
    the input's rows once and agree with the shards' counts, else the shards' rows one after the other."""
    ranges = data.row_ranges
    n_rows = [int(n) for n in data.n_rows]
    if ranges is not None and len(ranges) == len(n_rows):
        spans = sorted((int(a), int(b)) for r in ranges for a, b in r)
        if ([sum(b - a for a, b in r) for r in ranges] == n_rows and all(a <= b for a, b in spans)
                and [a for a, _ in spans] == [0] + [b for _, b in spans[:-1]]):
            return [[(int(a), int(b)) for a, b in r] for r in ranges]
    starts = np.concatenate([[0], np.cumsum(n_rows)]).astype(int)
    return [[(int(starts[i]), int(starts[i + 1]))] for i in range(len(n_rows))]


def _n_targets(data) -> int:
    shape = data.map(_y_width)[0]
    return int(shape)


def _y_width(shard):
    y = shard.get("y")
    return 1 if y.ndim == 1 else int(y.shape[1])


class MLPClassifier(DaskScoreMixin, ClassifierMixin, _BaseMLP):
    """Multilayer perceptron classifier in torch, trained on a Dask cluster.

    scikit-learn's ``MLPClassifier``: the same parameters, objective (log-loss
    plus ``alpha / 2 * ||W||^2`` per batch weight), initialisation, stopping
    rules and fitted attributes.  Two classes use one logistic output,
    several classes a softmax, a label-indicator matrix one logistic output
    per label.

    Parameters
    ----------
    hidden_layer_sizes : array-like of shape (n_layers - 2,), default=(100,)
        Units of each hidden layer.
    activation : {"identity", "logistic", "tanh", "relu"}, default="relu"
        Activation of the hidden layers.
    solver : {"adam", "sgd", "lbfgs"}, default="adam"
        ``"adam"`` and ``"sgd"`` step ``torch.optim.Adam``/``SGD`` on minibatches;
        ``"lbfgs"`` is scipy's full-batch L-BFGS-B (one distributed round per
        evaluation).
    alpha : float, default=1e-4
        Strength of the L2 penalty on the weights (not the biases).
    batch_size : int or "auto", default="auto"
        Rows of each global minibatch (``min(200, n_samples)`` for "auto"),
        exactly as scikit-learn's batches (the last one the remainder); every
        worker takes its share, in proportion to its rows, from its own shard
        (a batch smaller than the number of workers goes to some of them).
    learning_rate : {"constant", "invscaling", "adaptive"}, default="constant"
        SGD's schedule, as in scikit-learn.
    learning_rate_init : float, default=0.001
    power_t : float, default=0.5
    max_iter : int, default=200
        Epochs (stochastic solvers) or iterations (lbfgs).
    shuffle : bool, default=True
        Draw each epoch's batches in a new seeded order.
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the batch order and the validation split.
    tol : float, default=1e-4
    verbose : bool, default=False
        Print one line per epoch (lbfgs: per iteration) with its loss (and
        validation score), as it ends on the workers.
    progress : bool, default=False
        Show a tqdm progress bar of the epochs (up to ``max_iter``) on
        stderr.  Needs tqdm (``pip install tqdm``).
    callbacks : list of dask_estimators.callbacks.Callback, default=None
        Hooks into the stochastic solvers' epochs, skorch-style:
        ``EarlyStopping``, ``LRScheduler``, ``Checkpoint``, ``ProgressBar``,
        or your own (:mod:`dask_estimators.callbacks`).  They run after
        scikit-learn's own rule (``tol``, ``n_iter_no_change``,
        ``early_stopping``), which is itself such a callback; any of them may
        stop the training.  Each fit works on copies of them, kept after
        the fit in ``callbacks_``.  ``solver="lbfgs"`` has no epochs and
        refuses them.
    warm_start : bool, default=False
        Start from the fitted weights.
    momentum : float, default=0.9
    nesterovs_momentum : bool, default=True
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows: scikit-learn's
        ``train_test_split`` of all the rows, drawn from ``random_state`` as
        scikit-learn draws it, stratified by class for a classifier of one
        output (two classes, or one multilabel column), as scikit-learn's.
        Stop when the validation accuracy, scored on the workers (each on
        the validation rows it holds), stalls, and keep the best weights.  For the
        stochastic solvers only: ``"lbfgs"`` trains on all rows, as in
        scikit-learn.
    validation_fraction : float, default=0.1
    beta_1, beta_2, epsilon : float
        Adam's parameters.
    n_iter_no_change : int, default=10
    max_fun : int, default=15000
        Evaluations allowed to lbfgs.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where each worker computes; "auto" uses its GPU when it has one.
    strategy : {"auto", "rounds", "ddp"}, default="auto"
        ``"rounds"``: one engine round per batch, the optimizer on the client.
        ``"ddp"``: ``DistributedDataParallel`` inside one long-running call
        per worker process, progress streamed back.  ``"auto"``: "ddp" for
        the stochastic solvers (on a threads-based cluster one rank trains
        on every shard), "rounds" for ``solver="lbfgs"``.  ``"tree"`` is a
        deprecated alias of ``"rounds"`` (a FutureWarning; removed in 0.4.0).
    client : distributed.Client, str or None, default=None
        The cluster to fit on; never stored in the fitted model.
    timeout : float or None, default=None
        Seconds one distributed round may take (with ``strategy="ddp"``: one
        collective operation) before a ``TimeoutError``.  None sets no limit.
        The loss of a worker does not end the fit: the lost shards are
        re-placed from their sources, and ``"rounds"`` runs the round again,
        ``"ddp"`` resumes from the last finished epoch; the loss of the
        scheduler or of the client ends it with an error.

    Attributes
    ----------
    classes_ : ndarray
    coefs_, intercepts_ : list of ndarray
        Weights (fan_in, fan_out) and biases of each layer.
    n_iter_ : int
        Epochs (or lbfgs iterations) of the last call, as scikit-learn: a
        warm-started ``fit`` counts afresh, ``partial_fit`` gives 1.
    t_ : int
        Training samples seen, over all calls.
    loss_, loss_curve_, best_loss_ : float, list, float or None
    validation_scores_, best_validation_score_ : list or None, float or None
    history_ : list of dict
        Per epoch: loss, validation score, seconds, samples per second.
    callbacks_ : list of Callback
        The last fit's copies of ``callbacks`` as the training left them
        (loop callbacks first; with ``strategy="ddp"``, rank 0's copies).
    n_outputs_, n_layers_, out_activation_ : int, int, str
    n_features_in_, feature_names_in_
    fit_stats_ : dict
        The strategy used, rows per shard, rounds and seconds; with ``strategy="ddp"``
        also how the gradients were summed (``allreduce``: ``"shared memory"`` between
        workers of one host, else ``"gloo"`` or ``"nccl"``) and computed (``gradient``:
        ``"hand-written"``, the network's own backward into one flat buffer; ``kernel``:
        ``"numba"``, one compiled call per step for float64 on CPU, or ``"torch"``, torch ops; for
        sparse X ``"csr-numba"``, the first layer's sparse products compiled, the rest torch ops, or
        ``"csr-torch"``), and where the steps spent their time (``step_seconds``: rank 0's seconds over
        the run in each part of a step: ``batch``, finding the batch's rows; ``gradient``, the forward and
        backward; ``allreduce``, summing the gradients over the ranks, or None where
        ``DistributedDataParallel`` sums inside the backward; ``l2``, the penalty; ``optimizer``, its
        step), and ``epochs_kept``: the epochs whose state the ranks kept for a run resumed after a
        worker loss (each epoch's, unless keeping it would take more than the dask config
        ``dask-estimators.checkpoint-share``, 5%, of the training time), and ``result_transfer``: how
        rank 0's parameters and optimizer state came back (``"shared memory"`` to a client on its host,
        for arrays of 256 KiB or more, else ``"network"``).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from dask_estimators import MLPClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = MLPClassifier((20,), max_iter=300, random_state=0).fit(X, y)  # doctest: +SKIP
    >>> clf.score(X, y) > 0.9  # doctest: +SKIP
    True
    """

    _is_classifier = True
    _multi_output = True  # label-indicator matrices (multilabel)

    def _validate_input(self, X, y, sample_weight, return_classes=False):
        # a sparse label-indicator matrix, which scikit-learn's MLPClassifier takes: trained on as dense rows,
        # and predict then gives a sparse matrix, as scikit-learn's does
        sparse_y = sp.issparse(y)
        if sparse_y:
            y = y.toarray()
        out = super()._validate_input(X, y, sample_weight, return_classes)
        self._sparse_y = sparse_y
        return out

    def _encode_targets(self, y, dask_input, classes, reset, incremental):
        if dask_input:
            return y, None, None
        if np.ndim(y) == 2 and np.shape(y)[1] == 1:
            y = column_or_1d(y, warn=True)
        kind = type_of_target(y)
        if kind == "multilabel-indicator":
            Y = np.asarray(y)
            self._set_classes(np.arange(Y.shape[1]), classes, reset, incremental, multilabel=True)
            return Y.astype(np.float64), "logistic", Y.shape[1]
        if kind not in ("binary", "multiclass"):
            if kind.endswith("multioutput") and np.ndim(y) == 2:  # scikit-learn's LabelBinarizer's error
                raise ValueError("Multioutput target data is not supported with label binarization")
            check_classification_targets(y)  # scikit-learn's error for the other kinds (continuous, unknown)
            raise ValueError(f"Unknown label type: {kind!r}.")
        found = unique_labels(y)  # LabelBinarizer's classes: labels of Python strings in a NumPy string array
        check_class_share(len(found), len(y))
        self._set_classes(found, classes, reset, incremental)
        codes = np.searchsorted(self.classes_, y)
        if np.any(codes >= len(self.classes_)) or not np.all(self.classes_[np.minimum(codes, len(self.classes_) - 1)] == y):
            raise ValueError(f"y has labels not in classes_ {list(self.classes_)}.")
        return codes, *self._out_for_classes()

    def _out_for_classes(self):
        k = len(self.classes_)
        return ("logistic", 1) if k <= 2 else ("softmax", k)  # one class: one logistic output, as scikit-learn

    def _set_classes(self, found, classes, reset, incremental, multilabel=False):
        self._multilabel = multilabel
        if not reset:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(
                    f"`classes={classes!r}` is not the same as on last call to partial_fit, was: "
                    f"{self.classes_!r}"
                )
            if self.warm_start:  # fit and partial_fit, as scikit-learn
                if set(found) != set(self.classes_):
                    raise ValueError(
                        "warm_start can only be used where `y` has the same classes as in the previous call to "
                        f"fit. Previously got {self.classes_}, `y` has {found}"
                    )
            elif not set(found) <= set(self.classes_):
                raise ValueError(
                    f"`y` has classes not in `self.classes_`. `self.classes_` has {self.classes_}. 'y' has {found}."
                )
            return
        if classes is not None:
            classes = np.unique(classes)
            if not set(found) <= set(classes):
                raise ValueError(
                    f"`y` has classes not in `self.classes_`. `self.classes_` has {classes}. 'y' has {found}."
                )
            found = classes
        self.classes_ = found

    def _encode_on_workers(self, data, classes, reset, incremental):
        found = dask_label_set(data.map(T.unique_labels), data.n_samples)
        shape = data.map(T.trailing_shape)[0]
        if shape:  # a label-indicator matrix: one logistic output per column, as for NumPy input
            if not set(found.tolist()) <= {0, 1}:
                raise ValueError("Multioutput target data is not supported with label binarization")
            self._set_classes(np.arange(shape[0]), classes, reset, incremental, multilabel=True)
            data.map(T.float_targets)
            return "logistic", shape[0]
        # LabelBinarizer's classes, as for NumPy y: labels of Python strings in a NumPy string array
        self._set_classes(unique_labels(found), classes, reset, incremental)
        data.map(T.encode_labels, self.classes_)
        return self._out_for_classes()

    @available_if(lambda est: est._check_solver())
    def partial_fit(self, X, y, sample_weight=None, classes=None):
        """One epoch over the given data, continuing the optimizer's state.

        Only for the stochastic solvers (``hasattr`` is False for ``"lbfgs"``)
        and without ``early_stopping``, as in scikit-learn.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)
        y : array-like or dask collection of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
        classes : array of shape (n_classes,), default=None
            All the classes; required on the first call.

        Returns
        -------
        self : object
        """
        if not hasattr(self, "coefs_"):
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
            self._validate_params()
        return self._fit(X, y, sample_weight, incremental=True, classes=classes)

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes), columns in ``classes_`` order.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)

        def proba(A):
            p = self._forward(A)
            if self.out_activation_ == "logistic" and not getattr(self, "_multilabel", False):
                p = np.hstack([1.0 - p, p])
            return p

        n = self.n_outputs_ if self.n_outputs_ > 1 or getattr(self, "_multilabel", False) else 2
        return self._map_rows(X, proba, n)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed stably from the raw outputs.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)

        def log_proba(A):
            z = self._forward(A, link=False)
            if self.out_activation_ == "softmax":
                return log_softmax(z, axis=1)
            if getattr(self, "_multilabel", False):
                # the log of predict_proba's rounded probabilities, so that both agree on the most likely label
                # where several round to 1 (independent sigmoids), as in scikit-learn
                with np.errstate(divide="ignore"):
                    return np.log(expit(z))
            lp, lq = -np.logaddexp(0, -z), -np.logaddexp(0, z)
            return np.hstack([lq, lp])

        n = self.n_outputs_ if self.n_outputs_ > 1 or getattr(self, "_multilabel", False) else 2
        return self._map_rows(X, log_proba, n)

    def predict(self, X):
        """Predicted class labels (an indicator matrix for multilabel targets; lazy for dask input).

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array
        """
        check_is_fitted(self)
        classes = self.classes_
        multilabel = getattr(self, "_multilabel", False)

        def labels(A):
            z = self._forward(A, link=False)
            if multilabel:
                return (z > 0).astype(int)
            if len(classes) == 1:  # fitted on one class: always that class, as scikit-learn
                return np.repeat(classes, len(z))
            idx = (z[:, 0] > 0).astype(int) if z.shape[1] == 1 else z.argmax(1)
            return classes[idx]

        if multilabel:
            out = self._map_rows(X, labels, self.n_outputs_)
            return sp.csr_matrix(out) if getattr(self, "_sparse_y", False) and isinstance(out, np.ndarray) else out
        return self._map_rows(X, labels, None)

    def _output_dtype(self, fn):
        return self.classes_.dtype if fn.__name__ == "labels" else None

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.neural_network.MLPClassifier``.

        The same parameters (less ``device``, ``strategy``, ``client`` and
        ``timeout``) and fitted attributes (weights, ``classes_``, the label
        binarizer scikit-learn predicts with, curves), so its predictions are
        these; it needs neither a cluster nor this package (pickle it and
        load it where only scikit-learn is installed).

        Returns
        -------
        sklearn.neural_network.MLPClassifier

        Examples
        --------
        >>> sk = MLPClassifier((20,), max_iter=300, random_state=0).fit(X, y).to_sklearn()  # doctest: +SKIP
        >>> sk.predict(X[:3])  # doctest: +SKIP
        """
        from sklearn.neural_network import MLPClassifier as SkMLPClassifier
        from sklearn.preprocessing import LabelBinarizer

        est = self._sklearn_fitted(SkMLPClassifier(**self._sklearn_params()))
        binarizer = LabelBinarizer()
        if getattr(self, "_multilabel", False):
            eye = np.eye(len(self.classes_), dtype=int)
            binarizer.fit(sp.csr_matrix(eye) if getattr(self, "_sparse_y", False) else eye)
        else:
            binarizer.fit(self.classes_)
        est._label_binarizer = binarizer
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        return tags


class MLPRegressor(DaskScoreMixin, RegressorMixin, _BaseMLP):
    """Multilayer perceptron regressor in torch, trained on a Dask cluster.

    scikit-learn's ``MLPRegressor``: half the squared error (identity output)
    or the Poisson deviance (``loss="poisson"``, exp output) plus
    ``alpha / 2 * ||W||^2`` per batch weight, the same parameters,
    initialisation, stopping rules (the validation score is R^2) and fitted
    attributes.

    Parameters
    ----------
    loss : {"squared_error", "poisson"}, default="squared_error"
        The loss; "poisson" needs non-negative targets.
    hidden_layer_sizes, activation, solver, ... : see :class:`MLPClassifier`
        The same parameters, names and meanings.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from dask_estimators import MLPRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = MLPRegressor((50,), solver="lbfgs", max_iter=500).fit(X, y)  # doctest: +SKIP
    """

    _multi_output = True

    _parameter_constraints: dict = {**_BaseMLP._parameter_constraints, "loss": [StrOptions({"squared_error", "poisson"})]}

    def __init__(
        self,
        loss="squared_error",
        hidden_layer_sizes=(100,),
        activation="relu",
        *,
        solver="adam",
        alpha=0.0001,
        batch_size="auto",
        learning_rate="constant",
        learning_rate_init=0.001,
        power_t=0.5,
        max_iter=200,
        shuffle=True,
        random_state=None,
        tol=1e-4,
        verbose=False,
        progress=False,
        callbacks=None,
        warm_start=False,
        momentum=0.9,
        nesterovs_momentum=True,
        early_stopping=False,
        validation_fraction=0.1,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        n_iter_no_change=10,
        max_fun=15000,
        device="auto",
        strategy="auto",
        client=None,
        timeout=None,
    ):
        super().__init__(
            hidden_layer_sizes,
            activation,
            solver=solver,
            alpha=alpha,
            batch_size=batch_size,
            learning_rate=learning_rate,
            learning_rate_init=learning_rate_init,
            power_t=power_t,
            max_iter=max_iter,
            shuffle=shuffle,
            random_state=random_state,
            tol=tol,
            verbose=verbose,
            progress=progress,
            callbacks=callbacks,
            warm_start=warm_start,
            momentum=momentum,
            nesterovs_momentum=nesterovs_momentum,
            early_stopping=early_stopping,
            validation_fraction=validation_fraction,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            n_iter_no_change=n_iter_no_change,
            max_fun=max_fun,
            device=device,
            strategy=strategy,
            client=client,
            timeout=timeout,
        )
        self.loss = loss

    @available_if(lambda est: est._check_solver())
    def partial_fit(self, X, y, sample_weight=None):
        """One epoch over the given data, continuing the optimizer's state.

        Only for the stochastic solvers (``hasattr`` is False for ``"lbfgs"``)
        and without ``early_stopping``, as scikit-learn intends.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)
        y : array-like or dask collection of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        if not hasattr(self, "coefs_"):
            self._validate_params()
        return self._fit(X, y, sample_weight, incremental=True)

    def predict(self, X):
        """Predicted targets (lazy dask array for dask input).

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask dataframe} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, n_outputs)
        """
        check_is_fitted(self)
        single = self.n_outputs_ == 1  # one output: 1-D, also for y of shape (n, 1), as scikit-learn's MLPRegressor

        def values(A):
            out = self._forward(A)
            return out[:, 0] if single else out

        return self._map_rows(X, values, None if single else self.n_outputs_)

    def to_sklearn(self):
        """The equivalent fitted ``sklearn.neural_network.MLPRegressor``.

        The same parameters (less ``device``, ``strategy``, ``client`` and
        ``timeout``) and fitted attributes, so its predictions are these; it
        needs neither a cluster nor this package.

        Returns
        -------
        sklearn.neural_network.MLPRegressor

        Examples
        --------
        >>> sk = MLPRegressor((50,), solver="lbfgs").fit(X, y).to_sklearn()  # doctest: +SKIP
        >>> sk.predict(X[:3])  # doctest: +SKIP
        """
        from sklearn.neural_network import MLPRegressor as SkMLPRegressor

        return self._sklearn_fitted(SkMLPRegressor(**self._sklearn_params()))

    def _encode_targets(self, y, dask_input, classes, reset, incremental):
        out = "exp" if self.loss == "poisson" else "identity"
        if dask_input:
            return y, out, None
        y2 = np.asarray(y, dtype=np.float64)
        if y2.ndim == 2 and y2.shape[1] == 1:  # a column: scikit-learn's DataConversionWarning, one output
            y2 = column_or_1d(y2, warn=True)
        if out == "exp" and np.any(y2 < 0):
            raise ValueError("loss='poisson' requires non-negative y.")
        return y2, out, 1 if y2.ndim == 1 else y2.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


def _check_validation_rows(shard_counts, n_val, classes):
    """scikit-learn's errors of a fit with ``early_stopping``: a class too small for the stratified split
    (:func:`_check_stratifiable`; ``shard_counts`` None where the split is not stratified), or fewer than two
    validation rows (``n_val``) in all."""
    if shard_counts is not None:
        _check_stratifiable(shard_counts, classes)
    if n_val < 2:
        raise ValueError(
            "The validation set is too small. Increase 'validation_fraction' or the size of your dataset."
        )


def _check_stratifiable(shard_counts, classes):
    """scikit-learn's error when a class has fewer than 2 rows for the stratified early-stopping split."""
    total = np.zeros(max(map(len, shard_counts)), dtype=np.int64)
    for c in shard_counts:
        total[: len(c)] += c
    if classes is not None and len(total) < len(classes):
        total = np.pad(total, (0, len(classes) - len(total)))
    present = total[total > 0]
    if present.size and present.min() < 2:
        idx = np.flatnonzero((total > 0) & (total < 2))
        too_few = (np.asarray(classes)[idx] if classes is not None else idx).tolist()
        raise ValueError(
            "The least populated classes in y have only 1 member, which is too few for the stratified "
            "early-stopping split. The minimum number of groups for any class cannot be less than 2. "
            f"Classes with too few members are: {too_few}"
        )


# ----------------------------------------------------------------------------- a search's lockstep
def lockstep_ready(est) -> bool:
    """Whether ``est`` (not fitted) can train in a search's lockstep (:func:`fit_lockstep`): our
    ``MLPClassifier`` or ``MLPRegressor`` (not a subclass) with a stochastic solver, fitted from scratch, with
    nothing shown or called per epoch, no timeout on its rounds, and the ddp strategy."""
    return (type(est) in (MLPClassifier, MLPRegressor) and est.solver in ("adam", "sgd") and not est.warm_start
            and not est.callbacks and not est.verbose and not est.progress and est.timeout is None
            and est.strategy in ("auto", "ddp"))


def fit_lockstep(models, X, y, sample_weight, splits, on_done=None, scalers=None):
    """Fit each of ``models`` (:func:`lockstep_ready`, not fitted) on each split's training rows of X (NumPy or
    pandas, dense): a grid ``[model][split]`` of fitted models, and the grid of their fitted scalers.

    ``scalers``: for each model, None or the scaler (not fitted; one of
    :func:`~dask_estimators.estimators._grid.affine_transformer`'s, without a set output) it sees X through, as
    the last step of ``Pipeline([(name, scaler), (name, model)])``: fitted on each split's training rows on the
    client (once for the models whose scalers have the same parameters), and its fitted copy scales the split's
    rows where X is, on the worker; without one, the scalers' grid holds None.

    Each model comes out as its own ``fit`` on those rows would train it on one worker: the same initial
    weights, batches, steps and stopping rules.  X is placed whole on every worker, once
    (:meth:`~dask_estimators.session.DataSession.replicas`); the models of a split that take the same batches
    (batch size, shuffling, validation rows, and the seed their ``random_state`` draws; models without one
    take their group's) form a group, which trains in lockstep in one task on one worker
    (:meth:`~dask_estimators.session.PlacedData.train_lockstep`), each step's batch read once for all of them.
    The groups run on the workers as they free up, the costliest first (halved where there are fewer than two a
    worker: :func:`_shared_out`).  The models share ``client`` and
    ``device``.  ``on_done(n)``: ``n`` more fits have ended.

    Input a model refuses, or a training that fails (such as non-finite weights), raises
    :class:`~dask_estimators.estimators._grid.RejectedInput` with the model's error as its cause.
    """
    import scipy.sparse as sp
    from sklearn.base import clone
    from sklearn.utils import _safe_indexing

    from ._grid import RejectedInput

    first = models[0]
    scalers = [None] * len(models) if scalers is None else list(scalers)
    tmpl = clone(first)
    try:
        Xv, yv, swv, dask_input = tmpl._validate_input(X, y, sample_weight)
    except (ValueError, TypeError) as e:
        raise RejectedInput(str(e)) from e
    if dask_input or sp.issparse(Xv):
        raise ValueError("fit_lockstep takes dense NumPy or pandas X.")
    storage = tmpl._storage_dtype(Xv)
    fitted = [[None] * len(splits) for _ in models]
    scaled = [[None] * len(splits) for _ in models]
    # the attributes each model takes from the input: a scaled model sees the scaler's NumPy output, without names
    seen = ("n_features_in_", "feature_names_in_")
    task_members = []
    for k, (train, _) in enumerate(splits):
        train = np.asarray(train)
        train = np.flatnonzero(train) if train.dtype == bool else train.astype(np.int64, copy=False)
        fold = clone(first)
        try:
            codes, out, n_out = fold._encode_targets(_safe_indexing(yv, train), False, None, True, False)
        except ValueError as e:
            raise RejectedInput(str(e)) from e
        sw_k = None if swv is None else np.asarray(swv)[train]
        groups, seeds, fitted_scalers = {}, {}, {}
        for i, model in enumerate(models):
            est = clone(model)
            through = None
            if scalers[i] is not None:  # fitted once a split for each of its parameters
                key = (type(scalers[i]), repr(sorted(scalers[i].get_params().items())))
                if key not in fitted_scalers:
                    try:
                        fitted_scalers[key] = clone(scalers[i]).fit(_safe_indexing(X, train), _safe_indexing(y, train))
                    except (ValueError, TypeError) as e:
                        raise RejectedInput(str(e)) from e
                scaled[i][k] = fitted_scalers[key]
                through = key
            for source, names in ((tmpl, seen[:1] if through else seen), (fold, ("classes_", "_multilabel"))):
                for name in names:
                    if hasattr(source, name):
                        setattr(est, name, copy.copy(getattr(source, name)))
            try:
                spec, member = est._lockstep_member(tmpl.n_features_in_, n_out, out, storage.name, len(train),
                                                    labels=codes)
            except ValueError as e:  # the early-stopping split's errors, as each fit's
                raise RejectedInput(str(e)) from e
            if est.random_state is None:  # random batches: the group's
                free = member.batches()[:2] + member.batches()[3:]
                member.cfg.seed, member.order = seeds.setdefault(free, (member.cfg.seed, member.order))
            groups.setdefault((member.batches(), through), []).append((i, est, member))
        for (_, through), group in groups.items():
            task_members.append((k, group, (train, codes, sw_k), _unnamed(fitted_scalers.get(through))))

    def done(i, results):
        if on_done is not None:
            on_done(len(results))

    with DataSession(first.client, device=first.device) as session:
        replicas = session.replicas(X=Xv, check=tmpl._block_check(dtype=storage))
        task_members = _shared_out(task_members, len(replicas))
        tasks = [(_cost(group, len(data[0])), "train_lockstep", (*data, [g[2] for g in group], through))
                 for _, group, data, through in task_members]
        try:
            results = session.spread(replicas, tasks, on_done=done)
        except ValueError as e:  # a model's training failed (non-finite weights): in the model's words
            raise RejectedInput(str(e)) from e
        placement = replicas[0].stats()["placement"]
    for (k, group, data, _), res in zip(task_members, results):
        for (i, est, member), r in zip(group, res):
            stats = {"strategy": "lockstep", "n_shards": 1, "rows_per_shard": [len(data[0])],
                     "placement": placement, "batch_size": member.batch_size, "steps_per_epoch": member.cfg.n_steps}
            fitted[i][k] = est._lockstep_fitted(member, r, stats)
    return fitted, scaled


def _unnamed(scaler):
    """A fitted scaler to scale the validated X's rows on a worker: a copy without the column names it was fitted
    with (the worker's rows have none); None for None."""
    if scaler is None:
        return None
    scaler = copy.copy(scaler)
    scaler.__dict__.pop("feature_names_in_", None)
    return scaler


def _cost(group, n_rows) -> int:
    """A lockstep group's work, about: its networks' parameters times their epochs, times the rows."""
    return n_rows * sum(g[2].spec.n_params * g[2].cfg.max_iter for g in group)


def _shared_out(task_members, n_workers) -> list:
    """The lockstep groups ``[(split, group, data, scaler)]`` cut so that the workers share them out evenly: while there
    are fewer than two a worker, the costliest group of several members is halved."""
    tasks = list(task_members)
    while len(tasks) < 2 * n_workers:
        splittable = [i for i, t in enumerate(tasks) if len(t[1]) > 1]
        if not splittable:
            break
        i = max(splittable, key=lambda j: _cost(tasks[j][1], len(tasks[j][2][0])))
        k, group, data, through = tasks.pop(i)
        half = len(group) // 2
        tasks += [(k, group[:half], data, through), (k, group[half:], data, through)]
    return tasks
