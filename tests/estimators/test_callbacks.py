"""Callbacks as objects (dask_estimators.callbacks) on the MLPs, with both strategies on the process cluster.

* a user's EarlyStopping and LRScheduler act the same in the client's loop (rounds) and on every rank (ddp);
* Checkpoint writes the best epoch's layers, which are the fitted ones when the last epoch is the best;
* the estimator's own rule (tol, n_iter_no_change, early_stopping) is such a callback, run first;
* the objects given are never changed by a fit (its copies are ``callbacks_``); bad callbacks are refused;
* a loop callback that fails on one rank only fails the fit with its own error, and frees the other rank.
"""

import time

import numpy as np
import pytest

import dask_estimators as de
from dask_estimators.callbacks import Callback, Checkpoint, EarlyStopping, LRScheduler, PrintLog
from dask_estimators.optim.torch_driver import Monitor


def _data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    return X, (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)


def _mlp(client, strategy, callbacks, **kw):
    kw = {"max_iter": 30, "random_state": 0, **kw}
    return de.MLPClassifier((8,), strategy=strategy, client=client, callbacks=callbacks, **kw)


def test_lr_schedule_after_an_epoch_whose_steps_did_not_call_optimizer_step_warns_nothing():
    """A ddp rank's loop (SGD, the char-LSTM) updates the parameters without ``optimizer.step()``: each rank
    printed torch's false warning that the schedule stepped before the optimizer, and would skip its first
    value."""
    import warnings

    import torch

    w = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    sched = LRScheduler("StepLR", step_size=1, gamma=0.5)
    sched.on_train_begin(optimizer=opt)
    with torch.no_grad():
        w -= 0.1  # the epoch's step, taken by the loop itself
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched.on_epoch_end([{"epoch": 1, "loss": 0.0}])
    assert not [str(c.message) for c in caught if "lr_scheduler" in str(c.message)]
    assert opt.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize("strategy", ["rounds", "ddp"])
def test_early_stopping_and_lr_schedule_act_alike_on_both_strategies(client, strategy):
    X, y = _data()
    stop = EarlyStopping(tol=0.05, patience=1)
    sched = LRScheduler("StepLR", step_size=1, gamma=0.5)
    est = _mlp(client, strategy, [stop, sched]).fit(X, y)
    losses = [r["loss"] for r in est.history_]
    # the rule by hand: epoch 1 sets the best; later epochs count when they gain less than 0.05; stop at count 2
    count, best, expected = 0, np.inf, None
    for k, loss in enumerate(losses, 1):
        count = count + 1 if loss > best - 0.05 else 0
        best = min(best, loss)
        if count > 1:
            expected = k
            break
    assert expected is not None and est.n_iter_ == expected < 30
    assert est._optimizer_state["param_groups"][0]["lr"] == pytest.approx(1e-3 * 0.5 ** est.n_iter_, rel=1e-12)
    # the objects given are not touched; the fit's copies are kept
    assert stop.no_improvement_count == 0 and stop.loss_curve == []
    kept = est.callbacks_[0]
    assert isinstance(kept, EarlyStopping) and kept is not stop
    assert kept.loss_curve == losses and kept.no_improvement_count == 2


def test_the_strategies_give_the_same_run(client):
    X, y = _data(seed=1)
    runs = {s: _mlp(client, s, [EarlyStopping(tol=0.02, patience=2),
                                LRScheduler("ExponentialLR", gamma=0.8)]).fit(X, y) for s in ("rounds", "ddp")}
    rounds, ddp = runs["rounds"], runs["ddp"]
    assert rounds.n_iter_ == ddp.n_iter_
    np.testing.assert_allclose([r["loss"] for r in ddp.history_], [r["loss"] for r in rounds.history_], rtol=1e-9)
    for a, b in zip(ddp.coefs_, rounds.coefs_):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("strategy", ["rounds", "ddp"])
def test_checkpoint_holds_the_best_epochs_layers(client, strategy, tmp_path):
    X, y = _data(seed=2)
    path = tmp_path / "best.npz"
    est = _mlp(client, strategy, [Checkpoint(path)], max_iter=6, tol=0.0, n_iter_no_change=100).fit(X, y)
    losses = [r["loss"] for r in est.history_]
    saved = np.load(path)
    best = int(np.argmin(losses)) + 1
    assert int(saved["epoch"]) == best and float(saved["loss"]) == losses[best - 1]
    assert est.callbacks_[-1].saved_epochs[-1] == best
    if best == len(losses):  # the last epoch is the best: its layers are the fitted ones
        for i, (c, b) in enumerate(zip(est.coefs_, est.intercepts_)):
            np.testing.assert_array_equal(saved[f"coefs_{i}"], c)
            np.testing.assert_array_equal(saved[f"intercepts_{i}"], b)


def test_sklearn_stopping_rule_is_a_callback_run_first(client, capsys):
    X, y = _data(seed=3)
    assert issubclass(Monitor, EarlyStopping)
    # tol so large that every epoch after the first counts: scikit-learn's rule stops when the count passes
    # n_iter_no_change, on epoch 1 + 3; the user's PrintLog saw every epoch
    est = _mlp(client, "rounds", [PrintLog()], tol=1e9, n_iter_no_change=2).fit(X, y)
    assert est.n_iter_ == 4 and est.callbacks_[0].__class__ is PrintLog
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in printed] == [f"Iteration {k}" for k in range(1, 5)]


def test_a_copy_of_a_stopping_rule_is_independent_of_it():
    """A ddp rank keeps a deep copy of its stopping rule at each epoch's end (a resumed run goes on from it): the
    copy's curves, best parameters and a subclass's own state are its own, and it decides as the original."""
    import copy

    class Counting(EarlyStopping):
        def __init__(self):
            super().__init__("validation_score", tol=0.1, patience=1)
            self.seen = {"epochs": []}

        def on_epoch_end(self, history, **info):
            self.seen["epochs"].append(history[-1]["epoch"])
            return super().on_epoch_end(history, **info)

    rule, history = Counting(), []
    for e, score in enumerate([0.5, 0.8, 0.85], 1):
        history.append({"epoch": e, "loss": 1.0 / e, "validation_score": score})
        rule.on_epoch_end(history, params=lambda e=e: np.full(3, float(e)))
    kept = copy.deepcopy(rule)
    assert type(kept) is Counting and kept.validation_scores == [0.5, 0.8, 0.85] and kept.seen == rule.seen
    for a, b in [(kept.loss_curve, rule.loss_curve), (kept.validation_scores, rule.validation_scores),
                 (kept.seen, rule.seen), (kept.best_params, rule.best_params)]:
        assert a is not b
    np.testing.assert_array_equal(kept.best_params, [3.0, 3.0, 3.0])  # the best score, 0.85, at epoch 3
    history.append({"epoch": 4, "loss": 0.2, "validation_score": 0.84})
    stops = [r.on_epoch_end(history, params=lambda: np.zeros(3)) for r in (rule, kept)]
    assert stops == [True, True]  # two epochs without a 0.1 gain, past patience 1, on both
    assert kept.validation_scores == rule.validation_scores and kept.seen == {"epochs": [1, 2, 3, 4]}
    kept.best_params[0] = -1.0
    assert rule.best_params[0] == 3.0


def test_ranks_send_the_epochs_records_only_to_a_listening_client(client, monkeypatch, capsys):
    """A ddp fit sends each epoch's record to the client as a Dask event only where a client callback takes it
    (here the verbose log); without one no topic is opened, and the fitted history is the same."""
    X, y = _data(seed=4)
    topics = []
    subscribe = client.subscribe_topic
    monkeypatch.setattr(client, "subscribe_topic", lambda topic, handler: (topics.append(topic),
                                                                            subscribe(topic, handler))[1])
    quiet = _mlp(client, "ddp", [], max_iter=4).fit(X, y)
    assert topics == [] and quiet.fit_stats_["strategy"] == "ddp" and len(quiet.history_) == 4
    loud = _mlp(client, "ddp", [], max_iter=4, verbose=True).fit(X, y)
    assert len(topics) == 1
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in printed] == [f"Iteration {k}" for k in range(1, 5)]
    assert [r["loss"] for r in loud.history_] == [r["loss"] for r in quiet.history_]


def test_refusals(client):
    X, y = _data(n=300)
    with pytest.raises(ValueError, match="needs a validation set: set early_stopping=True"):
        _mlp(client, "rounds", [EarlyStopping(monitor="validation_score")]).fit(X, y)
    with pytest.raises(ValueError, match="solver='lbfgs' has none"):
        _mlp(client, "rounds", [EarlyStopping()], solver="lbfgs").fit(X, y)
    with pytest.raises(TypeError, match="must be dask_estimators.callbacks.Callback instances"):
        _mlp(client, "rounds", [lambda history: None]).fit(X, y)
    with pytest.raises(ValueError, match="monitor must be 'loss' or 'validation_score'"):
        EarlyStopping(monitor="accuracy")
    assert Callback().on_epoch_end([{"loss": 1.0}]) is None  # the base class's hooks do nothing


class _Epochs(Callback):
    """A client callback that keeps the epochs it saw."""

    on_client = True

    def __init__(self):
        self.epochs = []

    def on_epoch_end(self, history, **info):
        self.epochs.append(history[-1]["epoch"])


@pytest.mark.parametrize("strategy", ["rounds", "ddp"])
def test_charlstm_takes_the_same_callbacks(client, strategy, tmp_path):
    """CharLSTM: a user's EarlyStopping stops it (in the loop, on every rank with ddp), a client callback sees every
    epoch, and the checkpoint file that warm_start resumes from is still written, by a callback of its own."""
    names = ["luna", "bella", "max", "charlie", "lucy", "cooper", "daisy", "milo"] * 20
    seen = _Epochs()
    path = tmp_path / "resume.pt"
    # tol so large that every epoch after the first counts; the count passes patience=1 on epoch 3
    model = de.CharLSTM(hidden_size=8, embedding_dim=4, max_epochs=20, random_state=0, strategy=strategy,
                        checkpoint_path=str(path), callbacks=[EarlyStopping(tol=1e9, patience=1), seen],
                        client=client).fit(names)
    assert model.n_iter_ == 3 and len(model.history_) == 3
    stop, kept = model.callbacks_
    assert isinstance(stop, EarlyStopping) and stop.no_improvement_count == 2
    assert kept.epochs == [1, 2, 3] and seen.epochs == []  # the fit's copy saw them; the object given is untouched
    import torch

    saved = torch.load(path, weights_only=False)
    assert saved["n_iter"] == 3
    np.testing.assert_array_equal(saved["params"], model.params_)
    with pytest.raises(ValueError, match="CharLSTM holds out no validation strings"):
        de.CharLSTM(max_epochs=1, callbacks=[EarlyStopping(monitor="validation_score")], client=client).fit(names)


def _fail_here(on):
    """On a worker: whether the test's loop callback raises there."""
    import dask

    dask.config.set({"dask-estimators-test.fail-here": on})


def _group_free():
    from dask_estimators.engine.ddp import collective

    return not collective._PG_LOCK.locked()


def _fit_failing_on(client, worker, error, X, y):
    """A ddp fit whose loop callback raises ``error`` at epoch 2 on ``worker``'s rank only; the fit must raise it."""

    class FailOnOneWorker(Callback):
        def on_epoch_end(self, history, **info):
            import dask

            if len(history) >= 2 and dask.config.get("dask-estimators-test.fail-here", False):
                raise error

    client.run(_fail_here, True, workers=[worker])
    try:
        with pytest.raises(type(error), match=str(error)):
            _mlp(client, "ddp", [FailOnOneWorker()], max_iter=5, timeout=600).fit(X, y)
    finally:
        client.run(_fail_here, False)


@pytest.fixture
def graces(monkeypatch):
    """The grace of each wait for news of a lost worker (``collective._lost_soon``) in this test, in order."""
    from dask_estimators.engine.ddp import collective

    seen, real = [], collective._lost_soon

    def recorded(placement, grace=3.0):
        seen.append(grace)
        return real(placement, grace)

    monkeypatch.setattr(collective, "_lost_soon", recorded)
    return seen


def test_a_rank_that_fails_alone_stops_the_others_and_its_error_is_the_fits(client, graces):
    """A loop callback raises on one worker's rank only, its process alive: the fit raises that error (not the
    other rank's), and the other rank stops at its next sum instead of waiting out the collective timeout (600 s
    here) while it holds its worker's process group; the next fit trains.  Each worker's rank in turn.  A
    ``RuntimeError`` may be how a rank saw its peer die (gloo's broken connection, the shared-memory sum's dead
    peer), so the fit waits for the scheduler's news a while before raising it."""
    X, y = _data()
    for worker in sorted(client.nthreads()):
        _fit_failing_on(client, worker, RuntimeError("this rank's own error"), X, y)
        deadline = time.monotonic() + 30
        while not all(client.run(_group_free).values()):
            assert time.monotonic() < deadline, "a rank still holds its worker's process group"
            time.sleep(0.05)
        est = _mlp(client, "ddp", None, max_iter=2, timeout=600).fit(X, y)
        assert est.n_iter_ == 2 and est.fit_stats_["n_shards"] == 2
    assert graces == [3.0, 3.0]


def test_a_ranks_own_error_is_raised_without_waiting_for_news_of_a_lost_worker(client, graces):
    """A ``ValueError`` in one rank's callback cannot come from a lost worker: the fit asks the scheduler once
    (no grace) and raises it."""
    X, y = _data()
    _fit_failing_on(client, sorted(client.nthreads())[-1], ValueError("this rank's own bad value"), X, y)
    assert graces == [0.0]
    est = _mlp(client, "ddp", None, max_iter=2, timeout=600).fit(X, y)  # the workers train on
    assert est.n_iter_ == 2 and est.fit_stats_["n_shards"] == 2


@pytest.mark.parametrize("err, may", [
    (ValueError("x"), False), (TypeError("x"), False), (ZeroDivisionError(), False), (NotImplementedError(), False),
    (RuntimeError("Connection reset by peer"), True), (ConnectionResetError(), True), (TimeoutError(), True),
])
def test_which_rank_errors_may_tell_of_a_lost_worker(err, may):
    from dask_estimators.engine.ddp.collective import _may_tell_a_loss

    assert _may_tell_a_loss(err) is may
