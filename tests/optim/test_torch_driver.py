"""The torch training driver (``optim/torch_driver.py``): scikit-learn's stopping rules, the rounds strategy
over in-process shards, seeded determinism, and the full-batch L-BFGS against scikit-learn's.

Everything runs in-process (``LocalEvaluator`` over CPU ``Shard`` objects), so no Dask cluster is needed.
"""

import copy
import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.neural_network import MLPClassifier, MLPRegressor

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard
from dask_estimators.objectives import module as M
from dask_estimators.optim.torch_driver import (
    AdamPartStep,
    Monitor,
    TrainConfig,
    adam_zero_state,
    fast_step,
    make_optimizer,
    minimize_lbfgs,
    steps_in_parts,
    train_rounds,
)
from mlp_split import hold_out  # tests/mlp_split.py

D = 3
HISTORY_KEYS = {"epoch", "loss", "validation_score", "seconds", "samples_per_s"}


@pytest.fixture(scope="module")
def client():
    """Override the session's autouse cluster fixture: nothing in this module talks to Dask."""
    return None


# ------------------------------------------------------------------ helpers
def regression_data(n=60, seed=0, weighted=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = np.tanh(X @ np.array([1.0, -0.5, 0.3])) + 0.1 * rng.normal(size=n)
    s = rng.uniform(0.5, 1.5, size=n) if weighted else None
    return X, y, s


SPEC = M.MLPSpec(D, (6,), 1, activation="tanh", out="identity")


def make_shards(X, y, s, spec, sizes, *, seed=0, validation_fraction=0.0, n_steps=None):
    """Shards of consecutive rows, prepared; with ``validation_fraction``, scikit-learn's split of all the rows
    held out as a fit holds it out (``mlp_split.hold_out``), in ``n_steps`` global batches."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    assert bounds[-1] == X.shape[0]
    shards, infos = [], []
    for r, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        arrays = {"X": X[lo:hi], "y": y[lo:hi]}
        if s is not None:
            arrays["sample_weight"] = s[lo:hi]
        sh = Shard(arrays, device="cpu")
        infos.append(M.prepare(sh, spec, r))
        shards.append(sh)
    if validation_fraction:
        infos = hold_out(shards, validation_fraction, seed, n_steps=n_steps)
    return LocalEvaluator(shards), infos


def fit(sizes=(25, 35), *, data=None, spec=SPEC, validation_fraction=0.0, w0=None, opt_state=None, monitor=None,
        report=None, **cfg_kw):
    X, y, s = regression_data() if data is None else data
    kw = dict(solver="adam", learning_rate_init=1e-2, max_iter=20, tol=0.0, n_steps=3, seed=0, alpha=1e-4)
    kw.update(cfg_kw)
    ev, infos = make_shards(X, y, s, spec, list(sizes), seed=kw["seed"], validation_fraction=validation_fraction,
                            n_steps=kw["n_steps"])
    cfg = TrainConfig(n_train=sum(i["n_train"] for i in infos), **kw)
    if monitor is None:
        monitor = Monitor(cfg.tol, cfg.n_iter_no_change, cfg.early_stopping)
    if w0 is None:
        w0 = M.glorot_init(spec, np.random.RandomState(0))
    # a copy: train_rounds writes into the array it is given (see test_train_rounds_does_not_modify_w0)
    out = train_rounds(ev, spec, np.array(w0, copy=True), cfg, monitor, opt_state=opt_state, report=report)
    return out, cfg, ev


# ------------------------------------------------------------------ Monitor vs scikit-learn's rule
def sklearn_stub(tol, early_stopping):
    est = MLPClassifier(tol=tol, early_stopping=early_stopping)
    est._no_improvement_count = 0
    est.loss_curve_ = []
    if early_stopping:
        est.validation_scores_ = []
        est.best_validation_score_ = -np.inf
    else:
        est.best_loss_ = np.inf
    return est


LOSSES = [1.0, 0.9, 0.8999, 0.95, 0.5, 0.49995, 0.5, 0.52, 0.3, 0.3, 0.2999, 0.4]


@pytest.mark.parametrize("tol", [0.0, 1e-3, 0.05])
def test_monitor_loss_rule_matches_sklearn(tol):
    mon = Monitor(tol=tol, n_iter_no_change=3, early_stopping=False)
    est = sklearn_stub(tol, False)
    counts = []
    for loss in LOSSES:
        mon.update(loss, None, params=lambda: pytest.fail("params are only kept with early_stopping"))
        est.loss_curve_.append(loss)
        est._update_no_improvement_count(False, None, None, None)
        assert mon.no_improvement_count == est._no_improvement_count
        assert mon.best_loss == est.best_loss_
        counts.append(mon.no_improvement_count)
    assert mon.loss_curve == LOSSES
    assert mon.validation_scores == [] and mon.best_params is None
    assert max(counts) > 0 and 0 in counts[1:]  # the sequence exercises both branches


def test_monitor_loss_rule_hand_computed():
    mon = Monitor(tol=1e-3, n_iter_no_change=3, early_stopping=False)
    for loss in LOSSES:
        mon.update(loss, None, params=None)
    # 1.0 (0), .9 (0), .8999 (1: not better by tol, but best), .95 (2), .5 (0), .49995 (1), .5 (2), .52 (3),
    # .3 (0), .3 (1), .2999 (2), .4 (3)
    assert mon.no_improvement_count == 3
    assert mon.best_loss == 0.2999


@pytest.mark.parametrize("tol", [0.0, 1e-2])
def test_monitor_early_stopping_matches_sklearn_and_keeps_best_params(tol):
    scores = [0.1, 0.5, 0.505, 0.4, 0.7, 0.7, 0.69, float("nan"), 0.71, 0.2]
    mon = Monitor(tol=tol, n_iter_no_change=2, early_stopping=True)
    est = sklearn_stub(tol, True)
    for epoch, score in enumerate(scores):
        params = np.array([float(epoch)])
        est.coefs_, est.intercepts_ = [params.copy()], [params.copy()]
        est._score = lambda X, y, sample_weight=None, v=score: v
        est.loss_curve_.append(1.0)
        est._update_no_improvement_count(True, None, None, None)
        mon.update(1.0, score, params=lambda p=params: p.copy())
        assert mon.no_improvement_count == est._no_improvement_count
        assert mon.best_validation_score == est.best_validation_score_
        np.testing.assert_array_equal(mon.best_params, est._best_coefs[0])
    np.testing.assert_array_equal(mon.validation_scores, scores)
    assert mon.best_validation_score == 0.71
    np.testing.assert_array_equal(mon.best_params, [8.0])  # the parameters of the best epoch, not the last


# ------------------------------------------------------------------ the rounds strategy
def test_train_rounds_runs_max_iter_epochs_and_decreases_the_loss():
    records = []
    out, cfg, _ = fit(max_iter=25, report=records.append)
    mon = out.monitor
    assert out.n_epochs == 25 and not out.stopped
    assert len(out.history) == len(mon.loss_curve) == 25
    assert records == out.history
    assert [r["epoch"] for r in out.history] == list(range(1, 26))
    for r in out.history:
        assert set(r) == HISTORY_KEYS
        assert r["validation_score"] is None
        assert r["seconds"] >= 0 and r["samples_per_s"] > 0
        assert math.isfinite(r["loss"])
    assert [r["loss"] for r in out.history] == mon.loss_curve
    curve = np.array(mon.loss_curve)
    assert curve[-1] < 0.5 * curve[0]
    assert np.mean(np.diff(curve) < 0) > 0.8  # decreases from epoch to epoch (almost always)
    assert out.t == 25 * cfg.n_train
    assert out.w.shape == (SPEC.n_params,)
    assert not np.array_equal(out.w, M.glorot_init(SPEC, np.random.RandomState(0)))


def test_epoch_loss_is_the_row_weighted_mean_of_batch_objectives():
    """With n_steps=1 and SGD at learning rate ~0, the epoch loss is the full-batch objective at w0."""
    X, y, s = regression_data(weighted=True)
    w0 = M.glorot_init(SPEC, np.random.RandomState(0))
    out, cfg, ev = fit(data=(X, y, s), w0=w0, solver="sgd", learning_rate_init=1e-300, momentum=0.0, n_steps=1,
                       max_iter=1, alpha=0.3)
    coefs, intercepts = M.unflatten(SPEC, w0)
    z = M.forward_numpy(SPEC, coefs, intercepts, X)[:, 0]
    expected = (np.sum(s * 0.5 * (z - y) ** 2) + 0.5 * 0.3 * sum(np.sum(W * W) for W in coefs)) / s.sum()
    assert out.history[0]["loss"] == pytest.approx(expected, rel=1e-12)


def test_train_rounds_stops_early_when_tol_is_large():
    out, _, _ = fit(max_iter=50, tol=1e9, n_iter_no_change=2)
    # epoch 1 sets the best loss; every later epoch counts as no improvement; stop once count > 2
    assert out.stopped
    assert out.n_epochs == 2 + 2 == len(out.monitor.loss_curve)
    assert out.monitor.no_improvement_count == 3


def test_train_rounds_adaptive_sgd_divides_the_learning_rate_by_5():
    out, _, _ = fit(solver="sgd", learning_rate="adaptive", learning_rate_init=0.01, max_iter=6, tol=1e9,
                    n_iter_no_change=1)
    # counts: 0, 1, 2 -> lr/5 and reset, 1, 2 -> lr/5 and reset, 1: never stops, 2 divisions
    assert not out.stopped and out.n_epochs == 6
    assert out.opt_state["param_groups"][0]["lr"] == pytest.approx(0.01 / 25, rel=1e-12)
    assert out.monitor.no_improvement_count == 1


def test_train_rounds_adaptive_sgd_stops_below_1e_6():
    out, _, _ = fit(solver="sgd", learning_rate="adaptive", learning_rate_init=4e-6, max_iter=50, tol=1e9,
                    n_iter_no_change=1)
    # epoch 3: lr 4e-6 > 1e-6 -> 8e-7; epoch 5: 8e-7 is not > 1e-6 -> stop
    assert out.stopped and out.n_epochs == 5
    assert out.opt_state["param_groups"][0]["lr"] == pytest.approx(8e-7, rel=1e-12)


def test_train_rounds_constant_and_adam_keep_their_learning_rate():
    for solver in ("sgd", "adam"):
        out, _, _ = fit(solver=solver, learning_rate="constant", learning_rate_init=0.01, max_iter=8, tol=1e9,
                        n_iter_no_change=1)
        assert out.stopped and out.n_epochs == 3
        assert out.opt_state["param_groups"][0]["lr"] == 0.01


def test_train_rounds_invscaling_learning_rate():
    out, cfg, _ = fit(solver="sgd", learning_rate="invscaling", learning_rate_init=0.05, power_t=0.5, max_iter=4,
                      t0=7)
    assert out.t == 7 + 4 * cfg.n_train
    assert out.opt_state["param_groups"][0]["lr"] == pytest.approx(0.05 / (7 + 4 * cfg.n_train + 1) ** 0.5)


def test_train_rounds_incremental_runs_one_epoch():
    out, cfg, _ = fit(max_iter=50, incremental=True, epoch0=3)
    assert out.n_epochs == 1 and not out.stopped
    assert out.history[0]["epoch"] == 4
    assert out.t == cfg.n_train


def test_train_rounds_early_stopping_keeps_the_best_parameters():
    out, cfg, ev = fit(max_iter=15, early_stopping=True, validation_fraction=0.25, learning_rate_init=0.1,
                       n_iter_no_change=100)
    mon = out.monitor
    scores = [r["validation_score"] for r in out.history]
    assert scores == mon.validation_scores and len(scores) == 15
    assert all(math.isfinite(v) for v in scores)
    assert mon.best_validation_score == max(scores) > scores[-1]  # the best epoch is not the last
    # best_params is the vector whose validation score is the best one
    best = M.validation_score(SPEC, ev(M.validation_stats, mon.best_params, SPEC))
    assert best == pytest.approx(mon.best_validation_score, rel=1e-12)
    last = M.validation_score(SPEC, ev(M.validation_stats, out.w, SPEC))
    assert last == pytest.approx(scores[-1], rel=1e-12)
    assert cfg.n_train == 60 - 15  # train_test_split's validation rows: 0.25 of 60


def test_train_rounds_seeded_determinism():
    a, _, _ = fit(seed=3, max_iter=6)
    b, _, _ = fit(seed=3, max_iter=6)
    c, _, _ = fit(seed=4, max_iter=6)
    np.testing.assert_array_equal(a.w, b.w)
    assert a.monitor.loss_curve == b.monitor.loss_curve
    assert not np.allclose(a.w, c.w, rtol=1e-6, atol=0)


def test_train_rounds_does_not_modify_w0():
    X, y, s = regression_data()
    ev, infos = make_shards(X, y, s, SPEC, [25, 35])
    cfg = TrainConfig(n_train=60, max_iter=2, n_steps=3, learning_rate_init=1e-2)
    w0 = M.glorot_init(SPEC, np.random.RandomState(0))
    keep = w0.copy()
    out = train_rounds(ev, SPEC, w0, cfg, Monitor(cfg.tol, cfg.n_iter_no_change, False))
    assert not np.array_equal(out.w, keep)  # it trained
    np.testing.assert_array_equal(w0, keep)  # the caller's starting point is left alone


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_full_batch_one_shard_equals_two_shards(solver):
    """shuffle=False, n_steps=1: every step is the full batch, so the sharding must not matter."""
    data = regression_data(weighted=True)
    one, _, _ = fit((60,), data=data, solver=solver, shuffle=False, n_steps=1, max_iter=15, alpha=0.01)
    two, _, _ = fit((25, 35), data=data, solver=solver, shuffle=False, n_steps=1, max_iter=15, alpha=0.01)
    three, _, _ = fit((10, 30, 20), data=data, solver=solver, shuffle=True, n_steps=1, max_iter=15, alpha=0.01)
    np.testing.assert_allclose(two.w, one.w, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(three.w, one.w, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(two.monitor.loss_curve, one.monitor.loss_curve, rtol=1e-10)
    assert not np.allclose(one.w, M.glorot_init(SPEC, np.random.RandomState(0)))


def test_minibatches_depend_on_the_sharding_but_stay_valid():
    """With several steps per epoch the batches of 1 and 2 shards differ (different row sets per step)."""
    data = regression_data()
    one, _, _ = fit((60,), data=data, shuffle=False, n_steps=2, max_iter=5)
    two, _, _ = fit((30, 30), data=data, shuffle=False, n_steps=2, max_iter=5)
    assert not np.allclose(one.w, two.w, rtol=1e-6, atol=0)
    assert one.monitor.loss_curve[-1] < one.monitor.loss_curve[0]
    assert two.monitor.loss_curve[-1] < two.monitor.loss_curve[0]


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_train_rounds_resumes_from_opt_state(solver):
    """Two runs of 3 epochs (the second from the first's weights, optimizer state and epoch count)
    equal one run of 6 epochs."""
    full, _, _ = fit(solver=solver, max_iter=6, seed=5)
    mon = Monitor(0.0, 10, False)
    first, _, _ = fit(solver=solver, max_iter=3, seed=5, monitor=mon)
    second, _, _ = fit(solver=solver, max_iter=3, seed=5, monitor=mon, w0=first.w, opt_state=first.opt_state,
                       epoch0=3)
    np.testing.assert_array_equal(second.w, full.w)
    assert mon.loss_curve == full.monitor.loss_curve
    assert [r["epoch"] for r in second.history] == [4, 5, 6]


def test_make_optimizer_settings():
    p = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]
    adam = make_optimizer(p, TrainConfig(solver="adam", learning_rate_init=0.02, beta_1=0.8, beta_2=0.95,
                                         epsilon=1e-7))
    assert isinstance(adam, torch.optim.Adam)
    g = adam.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"]) == (0.02, (0.8, 0.95), 1e-7)
    sgd = make_optimizer(p, TrainConfig(solver="sgd", learning_rate_init=0.1, momentum=0.7, nesterovs_momentum=True))
    g = sgd.param_groups[0]
    assert isinstance(sgd, torch.optim.SGD) and (g["lr"], g["momentum"], g["nesterov"]) == (0.1, 0.7, True)
    plain = make_optimizer(p, TrainConfig(solver="sgd", momentum=0.0, nesterovs_momentum=True))
    assert plain.param_groups[0]["nesterov"] is False  # Nesterov needs momentum
    with pytest.raises(ValueError, match="lbfgs"):
        make_optimizer(p, TrainConfig(solver="lbfgs"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_adam_step_equals_torch_optim(dtype):
    """fast_step's direct call of the fused kernel takes torch.optim's steps to the bit, state_dict included,
    also after a change of the learning rate; what it does not cover keeps opt.step."""
    rng = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (4,), (1, 4), (1,)]

    def make():
        params = [torch.zeros(s, dtype=dtype).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.zeros_like(p)
        return params, make_optimizer(params, TrainConfig(solver="adam", learning_rate_init=0.05))

    ref_params, ref = make()
    params, opt = make()
    step = fast_step(opt)
    assert step != opt.step  # the fast path applies to scikit-learn's Adam settings
    for k in range(6):
        if k == 4:
            for o in (ref, opt):
                o.param_groups[0]["lr"] = 0.01
        for p, q in zip(ref_params, params):
            g = torch.randn(p.shape, generator=rng, dtype=torch.float64).to(dtype)
            p.grad.copy_(g)
            q.grad.copy_(g)  # in place: the fast path keeps the gradient tensors
        ref.step()
        step()
        for p, q in zip(ref_params, params):
            assert torch.equal(p, q)
    a, b = ref.state_dict(), opt.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(a["state"][i][key], b["state"][i][key])
    assert float(b["state"][0]["step"]) == 6
    sgd = make_optimizer(ref_params, TrainConfig(solver="sgd"))
    assert fast_step(sgd) == sgd.step
    amsgrad = torch.optim.Adam(ref_params, amsgrad=True)
    assert fast_step(amsgrad) == amsgrad.step
    hooked = make_optimizer(ref_params, TrainConfig(solver="adam"))
    hooked.register_step_post_hook(lambda *a: None)
    assert fast_step(hooked) == hooked.step


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_l2_equals_the_added_term(dtype):
    """The fused step's ``decay`` (the L2 term taken inside the kernel, for the weights only) steps as adding
    ``decay * w`` to the weights' gradients and then ``opt.step()``, to the bit, the first step (which makes
    the state) included, with the decay changing between steps and a step without it; the gradients are left
    as they were."""
    rng = torch.Generator().manual_seed(1)
    shapes = [(300, 7), (300,), (1, 300), (1,)]  # long enough for the kernels' vector loops and their tails

    def make():
        params = [torch.randn(s, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
                  .requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.zeros_like(p)
        return params, make_optimizer(params, TrainConfig(solver="adam", learning_rate_init=0.05))

    ref_params, ref = make()
    params, opt = make()
    ref_w, w = ref_params[0::2], params[0::2]
    step = fast_step(opt, l2=w)
    for k, decay in enumerate([1e-3, 1e-3, 0.0, 2.5e-4, 1e-3 / 3]):
        for p, q in zip(ref_params, params):
            g = torch.randn(p.shape, generator=rng, dtype=torch.float64).to(dtype)
            p.grad.copy_(g)
            q.grad.copy_(g)
        if decay:
            for p in ref_w:
                p.grad.add_(p.detach(), alpha=decay)
        ref.step()
        step(decay)
        for p, q in zip(ref_params, params):
            assert torch.equal(p, q), k
        if k > 0:  # after the first step the kernel takes the term: the weights' gradients are as computed
            assert not decay or not torch.equal(ref_w[0].grad, w[0].grad)
    a, b = ref.state_dict(), opt.state_dict()
    for i in a["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(a["state"][i][key], b["state"][i][key])


@pytest.mark.parametrize("solver", ["sgd", "adam"])
def test_full_batch_steps_match_sklearn_optimizers(solver):
    """Full-batch epochs (n_steps=1, no shuffle) step as scikit-learn's own SGDOptimizer (Nesterov momentum)
    and AdamOptimizer would with the same gradients.  torch's Adam adds epsilon to the bias-corrected
    sqrt(v_hat) where scikit-learn adds it to sqrt(v), a relative difference of order epsilon / sqrt(v) that
    is large for parameters with tiny gradients; a tiny epsilon makes the two updates the same."""
    from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer

    X, y, s = regression_data(weighted=True)
    alpha, lr, n_epochs = 0.01, 0.05, 5
    w0 = M.glorot_init(SPEC, np.random.RandomState(0))
    out, _, ev = fit((25, 35), data=(X, y, s), w0=w0, solver=solver, learning_rate_init=lr, momentum=0.9,
                     n_steps=1, max_iter=n_epochs, shuffle=False, alpha=alpha, epsilon=1e-20)
    w = w0.copy()
    if solver == "sgd":
        opt = SGDOptimizer([w], learning_rate_init=lr, lr_schedule="constant", momentum=0.9, nesterov=True)
    else:
        opt = AdamOptimizer([w], learning_rate_init=lr, epsilon=1e-20)
    losses = []
    for _ in range(n_epochs):
        loss, g, sw, _ = ev(M.value_grad, w, SPEC, None)
        coefs, intercepts = M.unflatten(SPEC, w)
        losses.append(loss / sw + 0.5 * alpha * sum(np.sum(W * W) for W in coefs) / sw)
        opt.update_params([w], [g / sw + M.flatten([alpha * W for W in coefs], [0 * b for b in intercepts]) / sw])
    np.testing.assert_allclose(out.w, w, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(out.monitor.loss_curve, losses, rtol=1e-10)
    assert np.abs(out.w - w0).max() > 1e-2  # it moved


def test_train_rounds_raises_sklearns_error_on_non_finite_weights():
    """A diverged fit without early stopping ends in scikit-learn's ValueError once the weights are non-finite."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, D)) * 10
    y = 1e6 * rng.normal(size=40)
    spec = M.MLPSpec(D, (5,), 1, activation="identity", out="identity")
    with pytest.raises(ValueError, match="Solver produced non-finite parameter weights"):
        fit((20, 20), data=(X, y, None), spec=spec, solver="sgd", learning_rate_init=10.0, momentum=0.9,
            n_steps=4, max_iter=50, w0=M.glorot_init(spec, np.random.RandomState(0)))


# ------------------------------------------------------------------ L-BFGS
def lbfgs_setup(sizes=(27, 33)):
    X, y, _ = regression_data()
    spec = M.MLPSpec(D, (3,), 1, activation="tanh", out="identity")
    ev, _ = make_shards(X, y, None, spec, list(sizes))
    return X, y, spec, ev


def sklearn_lbfgs(X, y, alpha, max_iter, tol):
    est = MLPRegressor(hidden_layer_sizes=(3,), activation="tanh", solver="lbfgs", alpha=alpha, random_state=0,
                       max_iter=max_iter, tol=tol)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning when max_iter is small on purpose
        est.fit(X, y)
    return est


def test_minimize_lbfgs_converges_and_matches_sklearn():
    X, y, spec, ev = lbfgs_setup()
    alpha, tol = 1.0, 1e-4
    records = []
    res, curve = minimize_lbfgs(ev, spec, M.glorot_init(spec, np.random.RandomState(0)), alpha=alpha,
                                max_iter=1000, max_fun=15000, tol=tol, report=records.append)
    assert res.success
    assert np.abs(res.jac).max() <= tol  # scipy's gtol: the projected gradient's max norm
    est = sklearn_lbfgs(X, y, alpha, 1000, tol)
    assert abs(res.fun - est.loss_) < 1e-6
    assert len(curve) == res.nit and curve[-1] == pytest.approx(res.fun, rel=1e-15)
    assert np.all(np.diff(curve) <= 1e-15)
    assert [r["epoch"] for r in records] == list(range(1, len(curve) + 1))
    assert [r["loss"] for r in records] == curve
    # the gradient at the solution, recomputed, is below tol too
    loss, g, sw, _ = ev(M.value_grad, res.x, spec, None)
    coefs, intercepts = M.unflatten(spec, res.x)
    grad = g / sw + M.flatten([alpha * W for W in coefs], [0 * b for b in intercepts]) / sw
    np.testing.assert_allclose(grad, res.jac, rtol=1e-12, atol=1e-15)


def test_minimize_lbfgs_follows_sklearn_step_by_step():
    """Same start (glorot_init(RandomState(0)) is sklearn's random_state=0 init), same objective, same
    L-BFGS-B: a few iterations land on the same point."""
    X, y, spec, ev = lbfgs_setup()
    res, curve = minimize_lbfgs(ev, spec, M.glorot_init(spec, np.random.RandomState(0)), alpha=0.1, max_iter=5,
                                max_fun=15000, tol=1e-5)
    est = sklearn_lbfgs(X, y, 0.1, 5, 1e-5)
    assert res.nit == est.n_iter_ == 5
    assert res.fun == pytest.approx(est.loss_, rel=1e-10)
    np.testing.assert_allclose(res.x, M.flatten(est.coefs_, est.intercepts_), rtol=1e-7, atol=1e-10)


def test_minimize_lbfgs_respects_max_fun():
    _, _, spec, ev = lbfgs_setup()
    res, _ = minimize_lbfgs(ev, spec, M.glorot_init(spec, np.random.RandomState(0)), alpha=0.1, max_iter=1000,
                            max_fun=7, tol=1e-12)
    assert not res.success
    assert ev.stats.by_kernel["value_grad"] == res.nfev
    assert 7 <= res.nfev <= 7 + 3  # stops at the limit (scipy checks it once per line-search evaluation)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_minimize_lbfgs_stops_on_non_finite_loss():
    """As scikit-learn's lbfgs: a non-finite objective is L-BFGS-B's to handle; it stops, not converged."""
    X, y, _ = regression_data()
    X = X * 1e200
    spec = M.MLPSpec(D, (3,), 1, activation="identity", out="identity")
    ev, _ = make_shards(X, y, None, spec, [30, 30])
    w0 = M.glorot_init(spec, np.random.RandomState(0))
    res, _ = minimize_lbfgs(ev, spec, w0, alpha=0.1, max_iter=10, max_fun=100, tol=1e-5)
    assert not res.success and not np.isfinite(res.fun)


def test_fast_step_without_private_fused_adam_is_opt_step(monkeypatch):
    """docs/private-apis.md: a torch without ``torch._fused_adam_`` gets torch.optim's own step, which trains."""
    p = [torch.zeros(3, dtype=torch.float64).requires_grad_()]
    opt = make_optimizer(p, TrainConfig(solver="adam", learning_rate_init=0.1))
    assert fast_step(opt) != opt.step  # the private kernel is used where it exists
    monkeypatch.delattr(torch, "_fused_adam_")
    step = fast_step(opt)
    assert step == opt.step
    monkeypatch.undo()  # torch.optim's fused Adam calls the kernel itself: give it back to run the step
    p[0].grad = torch.ones(3, dtype=torch.float64)
    step()
    np.testing.assert_allclose(p[0].detach().numpy(), -0.1 / (1 + 1e-8), rtol=1e-12)  # -lr g / (|g| + eps)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "loaded-state"])
def test_adam_in_parts_equals_torch_optim(dtype, resumed):
    """Ranks that share the parameters and Adam's state, each stepping its part (AdamPartStep, each with its
    own optimizer and step counters), take torch.optim's steps to the bit where the parts are cut at
    multiples of 64 elements from a parameter's start: the L2 decay, a learning-rate change, a fresh state
    (adam_zero_state) and a loaded one included; every rank's state_dict is then torch.optim's."""
    rng = torch.Generator().manual_seed(3)
    shapes = [(300, 7), (300,), (2, 300), (2,)]  # vector loops and their tails, a part ending inside each

    def make(n_opts=1):
        params = [torch.randn(s, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
                  .requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.zeros_like(p)
        cfg = TrainConfig(solver="adam", learning_rate_init=0.05)
        return params, [make_optimizer(params, cfg) for _ in range(n_opts)]

    def gradients(params_sets):
        for ps in zip(*params_sets):
            g = torch.randn(ps[0].shape, generator=rng, dtype=torch.float64).to(dtype)
            for p in ps:
                p.grad.copy_(g)

    ref_params, (ref,) = make()
    ref_step = fast_step(ref, l2=ref_params[0::2])  # torch.optim's steps (test_fused_l2_equals_the_added_term)
    params, opts = make(3)
    decays = [1e-3, 0.0, 2.5e-4, 1e-3 / 3, 1e-3]
    if resumed:  # two steps first, then every rank loads that state
        for decay in decays[:2]:
            gradients([ref_params])
            ref_step(decay)
        for p, q in zip(ref_params, params):
            q.detach().copy_(p.detach())
        for o in opts:
            o.load_state_dict(copy.deepcopy(ref.state_dict()))  # load_state_dict may keep the tensors given
    for o in opts:
        adam_zero_state(o)  # no change to a loaded state
    for o in opts[1:]:  # one copy of the state, as in the ranks' shared memory
        for p in params:
            o.state[p]["exp_avg"], o.state[p]["exp_avg_sq"] = (opts[0].state[p][k] for k in ("exp_avg", "exp_avg_sq"))
    cuts = [0, 64 * 20, 2100 + 300 + 64 * 3, sum(p.numel() for p in params)]  # inside the first and third tensors
    steps = [AdamPartStep(o, lo, hi, l2=params[0::2]) for o, lo, hi in zip(opts, cuts, cuts[1:])]
    for k, decay in enumerate(decays):
        if k == 3:
            for o in (ref, *opts):
                o.param_groups[0]["lr"] = 0.01
        gradients([ref_params, params])
        ref_step(decay)
        for step in steps:
            step(decay)
        for p, q in zip(ref_params, params):
            assert torch.equal(p, q), k
    a = ref.state_dict()
    for o in opts:
        b = o.state_dict()
        assert a["param_groups"] == b["param_groups"]
        for i in a["state"]:
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(a["state"][i][key], b["state"][i][key]), (i, key)
    assert float(opts[2].state_dict()["state"][0]["step"]) == len(decays) + 2 * resumed


def test_which_optimizers_step_in_parts(monkeypatch):
    assert steps_in_parts(TrainConfig(solver="adam"))
    assert not steps_in_parts(TrainConfig(solver="sgd"))
    monkeypatch.delattr(torch, "_fused_adam_")  # the private kernel is what steps a part
    assert not steps_in_parts(TrainConfig(solver="adam"))


# ------------------------------------------------------------------ the layer's boundaries
def test_the_driver_sees_no_dask_and_the_networks_declare_their_protocol():
    """``optim`` imports neither Dask nor the engine (the ddp rank loop lives in ``engine/ddp/train.py``), and both
    network problems offer what the loops need, with ``hand_gradient`` declared rather than probed."""
    import subprocess
    import sys

    code = ("import sys, dask_estimators.optim.torch_driver; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed') "
            "or m.startswith('dask_estimators.engine')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout

    from dask_estimators.objectives.sequence import CharLSTMSpec

    mlp, lstm = M.MLPSpec(D, (4,), 1), CharLSTMSpec(vocab_size=6)
    assert isinstance(mlp, M.NetworkProblem) and isinstance(lstm, M.NetworkProblem)
    assert mlp.hand_gradient and callable(mlp.loss_grad_)
    assert not lstm.hand_gradient and not hasattr(lstm, "loss_grad_")


def _quadratic_run(cfg, target):
    """A run on ``0.5 * ||w - target||^2`` summed over each batch's 10 rows: (its parameter, optimizer, step)."""
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = make_optimizer([w], cfg)

    def step(epoch, k):
        opt.zero_grad()
        loss = 0.5 * ((w - torch.as_tensor(target) * (1 + k)) ** 2).sum() * 10
        loss.backward()
        opt.step()
        return float(loss)

    return w, opt, step


def test_runs_in_lockstep_end_as_each_run_alone_each_at_its_own_epoch():
    from dask_estimators.optim.torch_driver import EpochRun, run_epochs, run_epochs_together

    cfgs = [TrainConfig(solver="sgd", learning_rate_init=0.01, max_iter=30, tol=t, n_iter_no_change=2, n_steps=3,
                        n_train=30, momentum=0.0) for t in (1e-1, 0.0)]
    cfgs.append(TrainConfig(solver="adam", learning_rate_init=0.05, max_iter=7, tol=0.0, n_steps=3, n_train=30))
    targets = [np.array([1.0, -2.0]), np.array([0.5, 3.0]), np.array([-1.0, 1.0])]
    alone = []
    for cfg, target in zip(cfgs, targets):
        w, opt, step = _quadratic_run(cfg, target)
        alone.append((run_epochs(step, cfg, opt, Monitor(cfg.tol, cfg.n_iter_no_change, False)), w.detach().clone()))
    runs, ws = [], []
    for cfg, target in zip(cfgs, targets):
        w, opt, step = _quadratic_run(cfg, target)
        runs.append((EpochRun(cfg, opt, Monitor(cfg.tol, cfg.n_iter_no_change, False)), step))
        ws.append(w)
    seen = []

    def together(epoch, k, active):
        seen.append(tuple(active))
        return [runs[i][1](epoch, k) for i in active]

    results = run_epochs_together(together, [r for r, _ in runs])
    for (ref, w_ref), res, w in zip(alone, results, ws):
        assert [r["loss"] for r in res.history] == [r["loss"] for r in ref.history]
        assert res.n_epochs == ref.n_epochs and res.stopped == ref.stopped
        torch.testing.assert_close(w.detach(), w_ref, rtol=0, atol=0)
    # each at its own epoch: two by their stopping rule, the third at its max_iter
    assert len({r.n_epochs for r in results}) == 3 and results[2].n_epochs == 7 and not results[2].stopped
    assert results[0].stopped and results[1].stopped
    assert len(set(seen)) == 3  # the active runs shrink twice
    with pytest.raises(ValueError, match="n_steps"):
        run_epochs_together(together, [EpochRun(TrainConfig(n_steps=2), None, Monitor(0, 1, False)),
                                       EpochRun(TrainConfig(n_steps=3), None, Monitor(0, 1, False))])
