"""The torch MLP objective (``objectives/module.py``): derivatives, shard sums, batches, scikit-learn parity.

The per-shard kernels return raw sums; the objective of a batch B is::

    F(w) = sum_{i in B} s_i loss_i / S_B + alpha/2 ||W||^2 / S_B,   S_B = sum_{i in B} s_i

Everything here is in-process (``LocalEvaluator`` over ``Shard`` objects on
the CPU, float64), so these tests need no Dask cluster.
"""

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy.special import expit, softmax
from sklearn.metrics import accuracy_score, r2_score
from sklearn.neural_network import MLPClassifier, MLPRegressor

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard
from dask_estimators.objectives import _fused_mlp
from dask_estimators.objectives import module as M
from mlp_split import hold_out, split_positions  # tests/mlp_split.py

D = 4
N = 30
H = 1e-6
KINK_GAP = 1e-3


@pytest.fixture(scope="module")
def client():
    """Override the session's autouse cluster fixture: nothing in this module talks to Dask."""
    return None


@dataclass(frozen=True)
class Case:
    id: str
    out: str
    n_outputs: int

    @property
    def classifier(self):
        return self.out in ("softmax", "logistic")


CASES = [
    Case("softmax3", "softmax", 3),
    Case("binary", "logistic", 1),
    Case("multilabel3", "logistic", 3),
    Case("identity1", "identity", 1),
    Case("identity2", "identity", 2),
    Case("exp2", "exp", 2),
]
CASE_IDS = [c.id for c in CASES]
BY_ID = {c.id: c for c in CASES}


# ------------------------------------------------------------------ helpers
def make_y(case, n, rng):
    k = case.n_outputs
    if case.out == "softmax":
        y = np.arange(n) % k  # every class present
        rng.shuffle(y)
        return y
    if case.out == "logistic":
        if k == 1:
            y = np.arange(n) % 2
            rng.shuffle(y)
            return y
        return (rng.uniform(size=(n, k)) < 0.5).astype(np.int64)
    if case.out == "identity":
        y = rng.normal(size=(n, k))
    else:  # exp: non-negative counts, some zeros
        y = rng.poisson(1.5, size=(n, k)).astype(np.float64)
    return y[:, 0] if k == 1 else y


def make_data(case, rng, n=N, weighted=True):
    X = rng.normal(size=(n, D))
    y = make_y(case, n, rng)
    s = rng.uniform(0.2, 2.0, size=n) if weighted else None
    return X, y, s


def make_spec(case, hidden=(5,), activation="tanh"):
    return M.MLPSpec(D, tuple(hidden), case.n_outputs, activation=activation, out=case.out)


def make_shard(X, y, s, spec, *, rank=0):
    arrays = {"X": X, "y": y}
    if s is not None:
        arrays["sample_weight"] = s
    shard = Shard(arrays, device="cpu")
    info = M.prepare(shard, spec, rank)
    return shard, info


def split_shards(X, y, s, spec, sizes, *, seed=0, validation_fraction=0.0, batch_size=None):
    """Contiguous pieces of the rows, one shard each, prepared with their rank; also the row offsets.  With
    ``validation_fraction``, scikit-learn's split of all the rows (seeded by ``seed``) held out as a fit holds it
    out: each shard given its part in a ``BatchOrder`` of global batches of ``batch_size`` rows (default: all
    the training rows), the epochs shuffled from ``RandomState(seed)`` (``mlp_split.hold_out``)."""
    assert sum(sizes) == X.shape[0]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    shards, infos = [], []
    for r, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        sh, info = make_shard(X[lo:hi], y[lo:hi], None if s is None else s[lo:hi], spec, rank=r)
        shards.append(sh)
        infos.append(info)
    if validation_fraction:
        infos = hold_out(shards, validation_fraction, seed, batch_size=batch_size)
    return shards, infos, bounds[:-1]


def random_w(spec, rng, scale=0.7):
    return scale * rng.normal(size=spec.n_params)


def encoded_targets(case, y):
    """The targets as scikit-learn's _backprop sees them (2-D, one-hot for several classes)."""
    n = y.shape[0]
    if case.out == "softmax":
        return np.eye(case.n_outputs)[y]
    return np.asarray(y, dtype=np.float64).reshape(n, -1)


def pre_activations(spec, w, X):
    """The hidden layers' pre-activations (NumPy), to keep finite differences away from ReLU kinks."""
    coefs, intercepts = M.unflatten(spec, w)
    a, pres = X, []
    for W, b in zip(coefs[:-1], intercepts[:-1]):
        z = a @ W + b
        pres.append(z)
        a = M._NP_ACT[spec.activation](z)
    return pres


def objective(ev, spec, w, alpha, batch=None):
    """The client side of the objective, written independently of the package (weights penalised, not biases)."""
    loss, g, sw, n = ev(M.value_grad, w, spec, batch)
    coefs, intercepts = M.unflatten(spec, w)
    pen = sum(float(np.sum(W * W)) for W in coefs)
    pen_grad = M.flatten([alpha * W for W in coefs], [np.zeros_like(b) for b in intercepts])
    return loss / sw + 0.5 * alpha * pen / sw, np.asarray(g) / sw + pen_grad / sw


def torch_loss_sum(case, z, y, s):
    """Sum of (weighted) per-row losses, written independently of ``M.loss_sum``."""
    if case.out == "softmax":
        per = -torch.log_softmax(z, 1)[torch.arange(z.shape[0]), y]
    elif case.out == "logistic":
        per = (torch.nn.functional.softplus(z) - y * z).sum(1)
    elif case.out == "exp":
        per = (torch.exp(z) - y * z + torch.xlogy(y, y) - y).sum(1)
    else:
        per = 0.5 * ((z - y) ** 2).sum(1)
    return per.sum() if s is None else (per * s).sum()


def torch_reference(case, spec, w, X, y, s):
    """Loss sum and its gradient by autograd through a hand-written forward pass of the flat vector."""
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    a, pos = torch.as_tensor(X), 0
    act = {"identity": lambda t: t, "logistic": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu}[spec.activation]
    for k, (fan_in, fan_out) in enumerate(spec.shapes):
        W = wt[pos : pos + fan_in * fan_out].reshape(fan_out, fan_in)
        pos += fan_in * fan_out
        b = wt[pos : pos + fan_out]
        pos += fan_out
        a = a @ W.T + b
        if k < len(spec.shapes) - 1:
            a = act(a)
    if case.out == "softmax":
        yt = torch.as_tensor(np.asarray(y), dtype=torch.int64).reshape(-1)
    else:
        yt = torch.as_tensor(np.asarray(y, dtype=np.float64)).reshape(X.shape[0], -1)
    st = None if s is None else torch.as_tensor(s)
    loss = torch_loss_sum(case, a, yt, st)
    loss.backward()
    return float(loss.detach()), wt.grad.numpy().copy()


# ------------------------------------------------------------------ finite differences
FD_PARAMS = [
    (c.id, act, hidden)
    for c in CASES
    for act, hidden in [("identity", (5,)), ("logistic", (4, 3)), ("tanh", (5,)), ("relu", (4, 3))]
]

FD_IDS = [f"{c}-{a}-{len(h)}layer" for c, a, h in FD_PARAMS]


@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("case_id,activation,hidden", FD_PARAMS, ids=FD_IDS)
def test_value_grad_finite_differences(case_id, activation, hidden, weighted):
    case = BY_ID[case_id]
    rng = np.random.default_rng(1)
    X, y, s = make_data(case, rng, weighted=weighted)
    spec = make_spec(case, hidden, activation)
    shard, _ = make_shard(X, y, s, spec)
    ev = LocalEvaluator([shard])
    for _ in range(50):  # ReLU: a point whose pre-activations are all away from 0
        w = random_w(spec, rng)
        if activation != "relu" or min(np.abs(p).min() for p in pre_activations(spec, w, X)) > KINK_GAP:
            break
    else:  # pragma: no cover
        pytest.fail("no kink-free point found")

    loss, g, sw, n = ev(M.value_grad, w, spec, None)
    assert n == N
    assert sw == pytest.approx(N if s is None else s.sum(), rel=1e-14)
    assert g.shape == (spec.n_params,)
    fd = np.empty(spec.n_params)
    for j in range(spec.n_params):
        e = np.zeros(spec.n_params)
        e[j] = H
        fd[j] = (ev(M.value_grad, w + e, spec, None)[0] - ev(M.value_grad, w - e, spec, None)[0]) / (2 * H)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * max(1.0, abs(loss)))


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_value_grad_matches_independent_torch(case_id):
    """Loss and gradient against an independent forward pass (checks the flat layout and the per-output sum)."""
    case = BY_ID[case_id]
    rng = np.random.default_rng(2)
    X, y, s = make_data(case, rng)
    spec = make_spec(case, (4, 3), "tanh")
    shard, _ = make_shard(X, y, s, spec)
    w = random_w(spec, rng)
    loss, g, sw, n = LocalEvaluator([shard])(M.value_grad, w, spec, None)
    ref_loss, ref_g = torch_reference(case, spec, w, X, y, s)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-12)


def _counting(fn, calls):
    def wrapped(*args):
        calls.append(1)
        return fn(*args)

    return wrapped


@pytest.mark.parametrize("path", ["numba-float64", "numba-float32", "torch-float64", "torch-float32"])
@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("activation", M.ACTIVATIONS)
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_hand_written_gradient_equals_autograd_on_the_module(case_id, activation, weighted, path, monkeypatch):
    """``loss_grad_`` (forward and backward by hand, into a flat buffer) against autograd through
    ``build_module`` and ``loss_sum``: the same loss and gradient, scaled, every entry of the buffer written;
    also for an empty batch and for a network without hidden layers.  Both ways it computes: one numba
    call (float64 and float32 on CPU) and the torch ops (GPUs, no numba)."""
    kernel, dtype = path.split("-")
    if kernel == "numba":
        if not _fused_mlp.AVAILABLE:
            pytest.skip("numba is not installed")
        calls = []
        monkeypatch.setattr(_fused_mlp, "_kernel", _counting(_fused_mlp._kernel, calls))
    else:
        monkeypatch.setattr(_fused_mlp, "AVAILABLE", False)
    case = BY_ID[case_id]
    rng = np.random.default_rng(11)
    X, y, s = make_data(case, rng, weighted=weighted)
    tol = 1e-12 if dtype == "float64" else 2e-5
    for hidden, rows in [((5, 4), None), ((), None), ((3,), torch.zeros(0, dtype=torch.int64))]:
        spec = M.MLPSpec(D, hidden, case.n_outputs, activation=activation, out=case.out, dtype=dtype)
        shard, _ = make_shard(X, y, s, spec)
        Xt, yt, st = M.take(shard, rows)
        w = torch.tensor(random_w(spec, rng), dtype=spec.torch_dtype)
        module = spec.build()
        params = list(module.parameters())
        torch.nn.utils.vector_to_parameters(w.clone(), params)
        ref = spec.loss(module(Xt), yt, st)
        ref.backward()
        ref_g = torch.cat([p.grad.reshape(-1) for p in params]).double()
        g = torch.full_like(w, float("nan"))
        work = {}
        for _ in range(2):  # the second call reuses the kept buffers
            g.fill_(float("nan"))
            loss = spec.loss_grad_(w, Xt, yt, st, g, 0.25, work)
            assert isinstance(loss, float)
            assert g.dtype == w.dtype and not torch.isnan(g).any()
            assert loss == pytest.approx(float(ref.detach()), rel=tol, abs=tol)
            scale = max(1.0, float(ref_g.abs().max()))
            np.testing.assert_allclose(g.double().numpy(), 0.25 * ref_g.numpy(), rtol=0, atol=tol * scale)
    if kernel == "numba":
        assert len(calls) == 4  # every non-empty call above went through the numba kernel


@pytest.mark.parametrize("path", ["numba-float64", "numba-float32", "torch-float64"])
@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_gradient_over_rows_equals_the_gradient_of_the_taken_batch(case_id, weighted, path, monkeypatch):
    """``loss_grad_(..., rows=)`` on a whole shard's arrays (the ddp step's way: the kernel gathers the
    rows) gives the same numbers, to the bit, as on the batch :func:`take` cuts; an empty batch gives 0."""
    kernel, dtype = path.split("-")
    if kernel == "numba" and not _fused_mlp.AVAILABLE:
        pytest.skip("numba is not installed")
    if kernel == "torch":
        monkeypatch.setattr(_fused_mlp, "AVAILABLE", False)
    case = BY_ID[case_id]
    rng = np.random.default_rng(5)
    X, y, s = make_data(case, rng, weighted=weighted)
    spec = M.MLPSpec(D, (5, 4), case.n_outputs, activation="tanh", out=case.out, dtype=dtype)
    shard, _ = make_shard(X, y, s, spec)
    Xs, ys, ss = M.take(shard, None)
    w = torch.tensor(random_w(spec, rng), dtype=spec.torch_dtype)
    every_reversed = torch.arange(Xs.shape[0] - 1, -1, -1)
    for rows in (torch.tensor([5, 0, 7, 7, 3, 11]), every_reversed, torch.zeros(0, dtype=torch.int64)):
        Xt, yt, st = M.take(shard, rows)
        g_taken, g_rows = torch.full_like(w, float("nan")), torch.full_like(w, float("nan"))
        loss_taken = spec.loss_grad_(w, Xt, yt, st, g_taken, 0.5, {})
        work = {}
        for _ in range(2):  # the second call reuses the kept buffers
            loss_rows = spec.loss_grad_(w, Xs, ys, ss, g_rows, 0.5, work, rows)
            assert loss_rows == loss_taken
            np.testing.assert_array_equal(g_rows.numpy(), g_taken.numpy())
        if rows.numel() == 0:
            assert loss_rows == 0.0 and not g_rows.any()


# ------------------------------------------------------------------ shard sums
@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_shard_sum_equals_whole_data_full_batch(case_id, weighted):
    case = BY_ID[case_id]
    rng = np.random.default_rng(3)
    n = 31
    X, y, s = make_data(case, rng, n=n, weighted=weighted)
    spec = make_spec(case, (4, 3), "relu")
    w = random_w(spec, rng)
    whole, _ = make_shard(X, y, s, spec)
    ref = LocalEvaluator([whole])(M.value_grad, w, spec, None)
    for sizes in ([12, 19], [7, 11, 13]):
        shards, _, _ = split_shards(X, y, s, spec, sizes)
        loss, g, sw, cnt = LocalEvaluator(shards)(M.value_grad, w, spec, None)
        assert cnt == ref[3] == n
        assert loss == pytest.approx(ref[0], rel=1e-10)
        assert sw == pytest.approx(ref[2], rel=1e-12)
        np.testing.assert_allclose(g, ref[1], rtol=1e-10, atol=1e-12 * np.abs(ref[1]).max())


def test_shard_sum_with_validation_split_equals_training_rows():
    """With a validation split, the full batch over shards is the value on the union of the training rows."""
    case = BY_ID["softmax3"]
    rng = np.random.default_rng(4)
    X, y, s = make_data(case, rng, n=40)
    spec = make_spec(case, (5,), "logistic")
    w = random_w(spec, rng)
    shards, infos, offsets = split_shards(X, y, s, spec, [15, 25], seed=7, validation_fraction=0.2)
    train = np.concatenate([off + sh.cache["mlp"]["train"].numpy() for sh, off in zip(shards, offsets)])
    assert len(train) == sum(i["n_train"] for i in infos) == 40 - 8  # train_test_split's: 0.2 of 40 held out
    loss, g, sw, n = LocalEvaluator(shards)(M.value_grad, w, spec, None)
    ref_loss, ref_g = torch_reference(case, spec, w, X[train], y[train], s[train])
    assert n == len(train)
    assert sw == pytest.approx(s[train].sum(), rel=1e-12)
    assert sum(i["sw_train"] for i in infos) == pytest.approx(s[train].sum(), rel=1e-12)
    assert loss == pytest.approx(ref_loss, rel=1e-10)
    np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ prepare, and the validation rows of a BatchOrder
@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
def test_batch_order_holds_out_the_validation_rows(weighted):
    """prepare trains on every row; a BatchOrder's positions (the shard's part of the client's split of the
    global rows) hold out the rows at -1, with their counts and weight sums, and the epochs take the others."""
    case = BY_ID["identity2"]
    rng = np.random.default_rng(5)
    X, y, s = make_data(case, rng, n=23, weighted=weighted)
    spec = make_spec(case)
    sw = np.ones(23) if s is None else s
    shard, info = make_shard(X, y, s, spec, rank=1)
    assert info["n_val"] == 0 and info["n_train"] == 23 and info["sw_val"] == 0.0
    assert info["sw_train"] == pytest.approx(sw.sum(), rel=1e-13)
    assert shard.cache["mlp"]["train"] is None and shard.cache["mlp"]["val"] is None
    # the shard holds the global rows 5..27 of a split of 40
    place = split_positions(40, 0.3, seed=3)
    mine = place[5:28]
    n_train = int(np.sum(place >= 0))
    info = M.set_batch_order(shard, M.BatchOrder(((5, 28),), n_train, 4, None, 0, positions=mine))
    state = shard.cache["mlp"]
    train, val = state["train"].numpy(), state["val"].numpy()
    np.testing.assert_array_equal(val, np.flatnonzero(mine < 0))
    np.testing.assert_array_equal(train, np.flatnonzero(mine >= 0))
    assert 0 < len(val) < 23
    assert info["n_val"] == len(val) and info["n_train"] == 23 - len(val) == state["n_train"]
    assert info["sw_train"] == pytest.approx(sw[train].sum(), rel=1e-13)
    assert info["sw_val"] == pytest.approx(sw[val].sum(), rel=1e-13)
    np.testing.assert_array_equal(M.batch_rows(shard, None).numpy(), train)  # a full batch: the training rows
    # unshuffled, the epoch's global batches of 4 take the training rows in the order of their places
    n_steps = -(-n_train // 4)
    rows = np.concatenate([M.batch_rows(shard, (0, 0, k, n_steps, False)).numpy() for k in range(n_steps)])
    np.testing.assert_array_equal(rows, train[np.argsort(mine[train])])
    with pytest.raises(ValueError, match="over 5 rows for a shard of 23"):
        M.set_batch_order(shard, M.BatchOrder(((5, 10),), n_train, 4, None, 0, positions=place[5:10]))


# ------------------------------------------------------------------ minibatches
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("n_steps", [1, 4, 7])
def test_epoch_batches_cover_every_row_once(n_steps, shuffle):
    """Without a BatchOrder (every row trains), each shard shuffles its own rows and takes its share of each
    step: every row once an epoch."""
    case = BY_ID["identity1"]
    rng = np.random.default_rng(6)
    sizes = [10, 13, 7]
    X, y, s = make_data(case, rng, n=sum(sizes))
    spec = make_spec(case)
    shards, infos, offsets = split_shards(X, y, s, spec, sizes)
    n_train_total = sum(i["n_train"] for i in infos)
    assert n_train_total == 30 and all(sh.cache["mlp"]["train"] is None for sh in shards)
    for epoch in (0, 3):
        seen = []
        for k in range(n_steps):
            step_total = 0
            for sh, info, off in zip(shards, infos, offsets):
                rows = M.batch_rows(sh, (11, epoch, k, n_steps, shuffle)).numpy()
                lo, hi = M.batch_slice(info["n_train"], k, n_steps)
                assert len(rows) == hi - lo
                # this shard's share of the step: its size over n_steps, within one row
                assert abs(len(rows) - info["n_train"] / n_steps) < 1
                if not shuffle:
                    np.testing.assert_array_equal(rows, np.arange(lo, hi))
                seen.append(off + rows)
                step_total += len(rows)
            assert abs(step_total - n_train_total / n_steps) < len(shards)
        seen = np.concatenate(seen)
        assert len(seen) == n_train_total  # each row exactly once
        np.testing.assert_array_equal(np.sort(seen), np.arange(30))


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_size", [24, 6, 5])
def test_batch_order_epochs_cover_every_training_row_once(batch_size, shuffle):
    """With validation rows held out (each shard's part of scikit-learn's split of the global rows, in its
    BatchOrder), the shards' rows of global batch k are the training rows whose places are scikit-learn's batch
    k: each training row once an epoch, no validation row, each batch ``batch_size`` rows (the last the rest)."""
    from sklearn.utils import shuffle as sk_shuffle

    case = BY_ID["identity1"]
    rng = np.random.default_rng(6)
    sizes = [10, 13, 7]
    X, y, s = make_data(case, rng, n=sum(sizes))
    spec = make_spec(case)
    shards, infos, offsets = split_shards(X, y, s, spec, sizes, seed=11, validation_fraction=0.2,
                                          batch_size=batch_size)
    place = split_positions(30, 0.2, seed=11)
    train_all = np.concatenate([off + sh.cache["mlp"]["train"].numpy() for sh, off in zip(shards, offsets)])
    val_all = np.concatenate([off + sh.cache["mlp"]["val"].numpy() for sh, off in zip(shards, offsets)])
    n_train_total = sum(i["n_train"] for i in infos)
    assert n_train_total == len(train_all) == 24 and len(val_all) == 6
    np.testing.assert_array_equal(np.sort(train_all), np.flatnonzero(place >= 0))
    n_steps = -(-n_train_total // batch_size)
    ref_rng, sample_idx = np.random.RandomState(11), np.arange(n_train_total)  # scikit-learn's epochs
    epochs = []
    for epoch in (0, 1, 2):
        if shuffle:
            sample_idx = sk_shuffle(sample_idx, random_state=ref_rng)
        seen = []
        for k in range(n_steps):
            rows = np.concatenate([off + M.batch_rows(sh, (11, epoch, k, n_steps, shuffle)).numpy()
                                   for sh, off in zip(shards, offsets)])
            assert len(rows) == min(batch_size, n_train_total - k * batch_size)
            np.testing.assert_array_equal(np.sort(place[rows]), np.sort(sample_idx[k * batch_size:][:batch_size]))
            seen.append(rows)
        seen = np.concatenate(seen)
        assert len(seen) == n_train_total  # each training row exactly once
        np.testing.assert_array_equal(np.sort(seen), np.sort(train_all))
        assert not np.isin(seen, val_all).any()
        epochs.append(seen)
    assert (not np.array_equal(epochs[0], epochs[1])) == shuffle


def test_epoch_permutation_is_seeded_by_seed_epoch_and_rank():
    case = BY_ID["identity1"]
    rng = np.random.default_rng(7)
    X, y, s = make_data(case, rng, n=50)
    spec = make_spec(case)
    a, _ = make_shard(X, y, s, spec, rank=0)
    b, _ = make_shard(X, y, s, spec, rank=0)
    c, _ = make_shard(X, y, s, spec, rank=1)

    def order(sh, seed, epoch, shuffle=True):
        return M.batch_rows(sh, (seed, epoch, 0, 1, shuffle)).numpy()

    np.testing.assert_array_equal(order(a, 5, 2), order(b, 5, 2))  # reproducible across shard objects
    np.testing.assert_array_equal(np.sort(order(a, 5, 2)), np.arange(50))
    assert not np.array_equal(order(a, 5, 2), order(a, 5, 3))  # another epoch
    assert not np.array_equal(order(a, 5, 2), order(a, 6, 2))  # another seed
    assert not np.array_equal(order(a, 5, 2), order(c, 5, 2))  # another rank
    np.testing.assert_array_equal(order(a, 5, 2, shuffle=False), np.arange(50))
    assert M.batch_rows(a, None) is None  # no validation split: all rows


@pytest.mark.parametrize("n_rows", [0, 1, 5, 24, 101])
@pytest.mark.parametrize("n_steps", [1, 3, 8])
def test_batch_slice_tiles_the_rows(n_rows, n_steps):
    slices = [M.batch_slice(n_rows, k, n_steps) for k in range(n_steps)]
    assert slices[0][0] == 0 and slices[-1][1] == n_rows
    for (lo, hi), (lo2, _) in zip(slices[:-1], slices[1:]):
        assert hi == lo2
    sizes = [hi - lo for lo, hi in slices]
    assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1
    assert sum(sizes) == n_rows


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_minibatch_gradient_equals_autograd_on_the_batch_rows(case_id):
    """The engine-summed gradient of one global step = autograd on exactly those rows, in one process."""
    case = BY_ID[case_id]
    rng = np.random.default_rng(8)
    sizes = [9, 14, 11]
    X, y, s = make_data(case, rng, n=sum(sizes))
    spec = make_spec(case, (4, 3), "tanh")
    shards, _, offsets = split_shards(X, y, s, spec, sizes, seed=2, validation_fraction=0.15, batch_size=10)
    ev = LocalEvaluator(shards)
    w = random_w(spec, rng)
    for batch in [(2, 0, 0, 3, True), (2, 5, 2, 3, True), (2, 1, 1, 4, False)]:
        loss, g, sw, n = ev(M.value_grad, w, spec, batch)
        idx = np.concatenate([off + M.batch_rows(sh, batch).numpy() for sh, off in zip(shards, offsets)])
        assert n == len(idx) > 0
        assert sw == pytest.approx(s[idx].sum(), rel=1e-12)
        # the single-process module: build_module + vector_to_parameters + loss_sum + autograd
        module = M.build_module(spec)
        params = list(module.parameters())
        torch.nn.utils.vector_to_parameters(torch.as_tensor(w), params)
        if case.out == "softmax":
            yt = torch.as_tensor(y[idx], dtype=torch.int64)
        else:
            yt = torch.as_tensor(np.asarray(y[idx], dtype=np.float64).reshape(len(idx), -1))
        total = M.loss_sum(spec, module(torch.as_tensor(X[idx])), yt, torch.as_tensor(s[idx]))
        total.backward()
        g_mod = torch.cat([p.grad.reshape(-1) for p in params]).numpy()
        assert loss == pytest.approx(float(total.detach()), rel=1e-12)
        np.testing.assert_allclose(g, g_mod, rtol=1e-10, atol=1e-12)
        # and against the hand-written loss and forward pass
        ref_loss, ref_g = torch_reference(case, spec, w, X[idx], y[idx], s[idx])
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        np.testing.assert_allclose(g, ref_g, rtol=1e-10, atol=1e-12)


def test_value_grad_empty_batch():
    case = BY_ID["softmax3"]
    rng = np.random.default_rng(9)
    X, y, s = make_data(case, rng, n=3)
    spec = make_spec(case)
    shards, _, _ = split_shards(X, y, s, spec, [1, 2])
    # 4 steps over shards of 1 and 2 rows: step 0 is empty on both
    assert [len(M.batch_rows(sh, (0, 0, 0, 4, True))) for sh in shards] == [0, 0]
    loss, g, sw, n = LocalEvaluator(shards)(M.value_grad, random_w(spec, rng), spec, (0, 0, 0, 4, True))
    assert (loss, sw, n) == (0.0, 0.0, 0)
    np.testing.assert_array_equal(g, np.zeros(spec.n_params))


# ------------------------------------------------------------------ scikit-learn parity
def sklearn_backprop(case, spec, w, X, Y, s, alpha):
    """scikit-learn's own _backprop at the coefficients ``w``: (loss, flat gradient in our layout)."""
    if case.classifier:
        est = MLPClassifier(hidden_layer_sizes=spec.hidden, activation=spec.activation, alpha=alpha)
        est.out_activation_ = "softmax" if case.out == "softmax" else "logistic"
    else:
        est = MLPRegressor(hidden_layer_sizes=spec.hidden, activation=spec.activation, alpha=alpha,
                           loss="poisson" if case.out == "exp" else "squared_error")
        est.out_activation_ = case.out
    coefs, intercepts = M.unflatten(spec, w)
    est.coefs_, est.intercepts_ = coefs, intercepts
    units = spec.layer_units
    est.n_layers_ = len(units)
    activations = [X] + [None] * (len(units) - 1)
    deltas = [None] * (len(units) - 1)
    coef_grads = [np.empty((i, o)) for i, o in spec.shapes]
    intercept_grads = [np.empty(o) for _, o in spec.shapes]
    loss, cg, ig = est._backprop(X, Y, s, activations, deltas, coef_grads, intercept_grads)
    return loss, M.flatten(cg, ig)


SK_CASES = [
    Case("softmax3", "softmax", 3),
    Case("binary", "logistic", 1),
    Case("multilabel3", "logistic", 3),
    Case("identity1", "identity", 1),  # sklearn's squared loss: see test_multioutput_squared_loss_vs_sklearn
    Case("exp1", "exp", 1),
    Case("exp2", "exp", 2),  # sklearn's Poisson loss sums over outputs, as ours
]


@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("activation,hidden", [("relu", (5,)), ("logistic", (4, 3)), ("tanh", (4, 3)),
                                               ("identity", (5,))])
@pytest.mark.parametrize("case", SK_CASES, ids=[c.id for c in SK_CASES])
def test_objective_matches_sklearn_backprop(case, activation, hidden, weighted):
    rng = np.random.default_rng(10)
    X, y, s = make_data(case, rng, weighted=weighted)
    spec = make_spec(case, hidden, activation)
    alpha = 0.37
    w = random_w(spec, rng, scale=0.5)
    shards, _, _ = split_shards(X, y, s, spec, [13, 17])
    f, g = objective(LocalEvaluator(shards), spec, w, alpha)
    sk_f, sk_g = sklearn_backprop(case, spec, w, X, encoded_targets(case, y), s, alpha)
    assert f == pytest.approx(sk_f, rel=1e-10)
    np.testing.assert_allclose(g, sk_g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("path", ["numba", "torch"])
@pytest.mark.parametrize("case", [c for c in SK_CASES if c.out in ("softmax", "logistic")], ids=lambda c: c.id)
def test_log_losses_clip_the_probabilities_as_sklearn_where_they_saturate(case, path, monkeypatch):
    """Far from the data's scale (a line search's trial point) some probabilities fall below eps: scikit-learn's
    log-loss takes them as eps (and 1 - eps), a value L-BFGS-B then compares; ours was the exact log-loss (4.19
    where scikit-learn's was 3.30), and the fits went apart.  The value is clipped, the gradient not (p - y)."""
    if path == "numba" and not _fused_mlp.AVAILABLE:
        pytest.skip("numba is not installed")
    if path == "torch":
        monkeypatch.setattr(_fused_mlp, "AVAILABLE", False)
    rng = np.random.default_rng(10)
    X, y, s = make_data(case, rng, weighted=True)
    spec = make_spec(case, (5,), "identity")
    w = random_w(spec, rng, scale=15.0)
    shards, _, _ = split_shards(X, y, s, spec, [13, 17])
    f, g = objective(LocalEvaluator(shards), spec, w, 0.1)
    sk_f, sk_g = sklearn_backprop(case, spec, w, X, encoded_targets(case, y), s, 0.1)
    eps = np.finfo(np.float64).eps
    proba = M.forward_numpy(spec, *M.unflatten(spec, w), X, link=True)
    assert np.mean((proba < eps) | (proba > 1 - eps)) > 0.05  # the point is saturated
    assert f == pytest.approx(sk_f, rel=1e-10)
    np.testing.assert_allclose(g, sk_g, rtol=1e-9, atol=1e-12)


def test_multioutput_squared_loss_vs_sklearn():
    """Several identity outputs: ours sums half the squared error over the outputs; sklearn's squared_loss
    averages it over them while its gradient (activations - y) is that of the sum.  By design we keep the
    consistent pair: the gradient equals sklearn's, the data term is n_outputs times sklearn's."""
    case = BY_ID["identity2"]
    rng = np.random.default_rng(11)
    X, y, s = make_data(case, rng)
    spec = make_spec(case, (5,), "tanh")
    alpha = 0.2
    w = random_w(spec, rng)
    f, g = objective(LocalEvaluator([make_shard(X, y, s, spec)[0]]), spec, w, alpha)
    sk_f, sk_g = sklearn_backprop(case, spec, w, X, y, s, alpha)
    coefs, _ = M.unflatten(spec, w)
    pen = 0.5 * alpha * sum(float(np.sum(W * W)) for W in coefs) / s.sum()
    np.testing.assert_allclose(g, sk_g, rtol=1e-9, atol=1e-12)
    assert f - pen == pytest.approx(2 * (sk_f - pen), rel=1e-10)


@pytest.mark.parametrize("activation", ["relu", "logistic", "tanh", "identity"])
@pytest.mark.parametrize("hidden", [(5,), (4, 3)], ids=["5", "4-3"])
def test_glorot_init_matches_sklearn(activation, hidden):
    for case in (BY_ID["softmax3"], BY_ID["identity1"]):
        spec = make_spec(case, hidden, activation)
        est = MLPRegressor(hidden_layer_sizes=hidden, activation=activation, random_state=0)
        est._random_state = np.random.RandomState(0)
        est._initialize(np.zeros((4, case.n_outputs)), spec.layer_units, np.float64)
        ours = M.glorot_init(spec, np.random.RandomState(0))
        assert ours.shape == (spec.n_params,)
        np.testing.assert_array_equal(ours, M.flatten(est.coefs_, est.intercepts_))
        # the bound: sqrt(6 / (fan_in + fan_out)), sqrt(2 / ...) for the logistic activation
        factor = 2.0 if activation == "logistic" else 6.0
        coefs, intercepts = M.unflatten(spec, ours)
        for (fan_in, fan_out), W, b in zip(spec.shapes, coefs, intercepts):
            bound = np.sqrt(factor / (fan_in + fan_out))
            assert np.abs(W).max() <= bound and np.abs(b).max() <= bound


def test_fitted_sklearn_init_equals_glorot_init():
    """End to end: sklearn's lbfgs with max_iter=1 starts at glorot_init(RandomState(0)) (one step away)."""
    case = BY_ID["identity1"]
    rng = np.random.default_rng(12)
    X, y, _ = make_data(case, rng)
    spec = make_spec(case, (5,), "tanh")
    w0 = M.glorot_init(spec, np.random.RandomState(0))
    # capture the initial point sklearn hands to scipy
    seen = []
    est = MLPRegressor(hidden_layer_sizes=(5,), activation="tanh", solver="lbfgs", max_iter=1, random_state=0)
    orig = est._loss_grad_lbfgs

    def spy(packed, *args):
        if not seen:
            seen.append([c.copy() for c in est.coefs_] + [i.copy() for i in est.intercepts_])
        return orig(packed, *args)

    est._loss_grad_lbfgs = spy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    assert seen
    coefs0, intercepts0 = M.unflatten(spec, w0)
    assert len(seen[0]) == len(coefs0) + len(intercepts0)
    for a, b in zip(seen[0], coefs0 + intercepts0):  # exactly our draws
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_forward_numpy_equals_torch_module(case_id):
    case = BY_ID[case_id]
    rng = np.random.default_rng(13)
    X = rng.normal(size=(17, D))
    for activation in ("relu", "logistic"):
        spec = make_spec(case, (4, 3), activation)
        w = random_w(spec, rng)
        coefs, intercepts = M.unflatten(spec, w)
        module = M.build_module(spec)
        torch.nn.utils.vector_to_parameters(torch.as_tensor(w), list(module.parameters()))
        with torch.no_grad():
            z = module(torch.as_tensor(X))
        link = {"softmax": lambda t: torch.softmax(t, 1), "logistic": torch.sigmoid, "exp": torch.exp,
                "identity": lambda t: t}[case.out]
        np.testing.assert_allclose(M.forward_numpy(spec, coefs, intercepts, X, link=False), z.numpy(), rtol=1e-12,
                                   atol=1e-13)
        np.testing.assert_allclose(M.forward_numpy(spec, coefs, intercepts, X), link(z).numpy(), rtol=1e-12,
                                   atol=1e-13)
        # and sklearn's forward pass at the same coefficients
        est = MLPRegressor(hidden_layer_sizes=spec.hidden, activation=activation)
        est.coefs_, est.intercepts_, est.n_layers_ = coefs, intercepts, len(spec.layer_units)
        est.out_activation_ = case.out
        np.testing.assert_allclose(M.forward_numpy(spec, coefs, intercepts, X),
                                   est._forward_pass_fast(X, check_input=False), rtol=1e-12, atol=1e-13)


def test_forward_numpy_links():
    spec = M.MLPSpec(2, (3,), 3, activation="identity", out="softmax")
    rng = np.random.default_rng(14)
    coefs, intercepts = M.unflatten(spec, random_w(spec, rng))
    X = rng.normal(size=(5, 2))
    z = (X @ coefs[0] + intercepts[0]) @ coefs[1] + intercepts[1]
    np.testing.assert_allclose(M.forward_numpy(spec, coefs, intercepts, X), softmax(z, axis=1), rtol=1e-13)
    np.testing.assert_allclose(M.forward_numpy(spec, coefs, intercepts, X).sum(1), 1.0, rtol=1e-13)
    lspec = M.MLPSpec(2, (3,), 3, activation="identity", out="logistic")
    np.testing.assert_allclose(M.forward_numpy(lspec, coefs, intercepts, X), expit(z), rtol=1e-13)


# ------------------------------------------------------------------ validation score
def reference_score(case, spec, w, Xv, yv, sv):
    coefs, intercepts = M.unflatten(spec, w)
    p = M.forward_numpy(spec, coefs, intercepts, Xv)
    if case.out == "softmax":
        return accuracy_score(yv, p.argmax(1), sample_weight=sv)
    if case.out == "logistic":
        pred = (p > 0.5).astype(np.int64)
        return accuracy_score(yv, pred[:, 0] if case.n_outputs == 1 else pred, sample_weight=sv)
    return r2_score(yv, p[:, 0] if case.n_outputs == 1 else p, sample_weight=sv, multioutput="uniform_average")


@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_validation_score_matches_sklearn_metrics(case_id, weighted):
    case = BY_ID[case_id]
    rng = np.random.default_rng(15)
    sizes = [20, 26, 14]
    X, y, s = make_data(case, rng, n=sum(sizes), weighted=weighted)
    spec = make_spec(case, (5,), "tanh")
    shards, infos, offsets = split_shards(X, y, s, spec, sizes, seed=4, validation_fraction=0.3)
    val = np.concatenate([off + sh.cache["mlp"]["val"].numpy() for sh, off in zip(shards, offsets)])
    assert len(val) == sum(i["n_val"] for i in infos) == 18  # train_test_split's: 0.3 of 60
    ev = LocalEvaluator(shards)
    scores = []
    for trial in range(3):
        w = random_w(spec, rng, scale=1.5)
        stats = ev(M.validation_stats, w, spec)
        score = M.validation_score(spec, stats)
        expected = reference_score(case, spec, w, X[val], y[val], None if s is None else s[val])
        assert score == pytest.approx(expected, rel=1e-10, abs=1e-12)
        scores.append(score)
    assert len(set(scores)) > 1  # the score depends on w


def test_validation_score_constant_target_column_and_empty():
    """R^2 with a constant column follows sklearn (1 when predicted exactly, else 0); no rows gives NaN."""
    case = BY_ID["identity2"]
    rng = np.random.default_rng(16)
    X, y, s = make_data(case, rng, n=40)
    y[:, 1] = 3.0
    spec = make_spec(case, (5,), "tanh")
    shards, _, offsets = split_shards(X, y, s, spec, [18, 22], validation_fraction=0.25)
    val = np.concatenate([off + sh.cache["mlp"]["val"].numpy() for sh, off in zip(shards, offsets)])
    w = random_w(spec, rng)
    score = M.validation_score(spec, LocalEvaluator(shards)(M.validation_stats, w, spec))
    assert score == pytest.approx(reference_score(case, spec, w, X[val], y[val], s[val]), rel=1e-10)
    # the constant column predicted exactly: last layer's weights 0 on it, intercept 3
    coefs, intercepts = M.unflatten(spec, w)
    coefs[-1][:, 1] = 0.0
    intercepts[-1][1] = 3.0
    w2 = M.flatten(coefs, intercepts)
    score2 = M.validation_score(spec, LocalEvaluator(shards)(M.validation_stats, w2, spec))
    assert score2 == pytest.approx(reference_score(case, spec, w2, X[val], y[val], s[val]), rel=1e-10)
    # no validation rows
    empty, _, _ = split_shards(X, y, s, spec, [18, 22], validation_fraction=0.0)
    stats = LocalEvaluator(empty)(M.validation_stats, w, spec)
    np.testing.assert_array_equal(stats, np.zeros(3 * 2 + 1))
    assert np.isnan(M.validation_score(spec, stats))
    cspec = make_spec(BY_ID["softmax3"])
    assert np.isnan(M.validation_score(cspec, np.zeros(2)))


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize("hidden", [(5,), (4, 3), (2, 3, 2)])
def test_flatten_unflatten_round_trip_and_torch_layout(hidden):
    spec = M.MLPSpec(D, hidden, 3, activation="relu", out="softmax")
    rng = np.random.default_rng(17)
    w = rng.normal(size=spec.n_params)
    coefs, intercepts = M.unflatten(spec, w)
    assert [c.shape for c in coefs] == spec.shapes
    assert [b.shape for b in intercepts] == [(o,) for _, o in spec.shapes]
    np.testing.assert_array_equal(M.flatten(coefs, intercepts), w)
    c2, i2 = M.unflatten(spec, M.flatten(coefs, intercepts))
    for a, b in zip(c2 + i2, coefs + intercepts):
        np.testing.assert_array_equal(a, b)
    # unflatten copies: editing its arrays leaves w alone
    coefs[0][0, 0] += 1.0
    assert w[0] == c2[0][0, 0]
    # the flat vector is module.parameters() order: Linear.weight = coef.T, then bias
    module = M.build_module(spec)
    linears = [m for m in module if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for lin, W, b in zip(linears, c2, i2):
            lin.weight.copy_(torch.as_tensor(W.T))
            lin.bias.copy_(torch.as_tensor(b))
    np.testing.assert_array_equal(torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy(), w)
    assert spec.n_params == sum(p.numel() for p in module.parameters())
    # the L2 mask covers exactly the weights
    mask = M.weight_mask(spec)
    np.testing.assert_array_equal(mask, M.flatten([np.ones_like(c) for c in c2], [np.zeros_like(b) for b in i2]) > 0)


def test_spec_rejects_unknown_names():
    with pytest.raises(ValueError, match="activation"):
        M.MLPSpec(2, (3,), 1, activation="softplus")
    with pytest.raises(ValueError, match="out"):
        M.MLPSpec(2, (3,), 1, out="tanh")


def test_a_ranks_module_skips_its_own_draws_unless_it_has_buffers():
    """The ddp rank's module is allocated, not initialised (the starting point overwrites it); a module with
    buffers, which no starting point sets, keeps its own initialisation."""
    from dask_estimators.engine.ddp.train import _built_empty

    spec = M.MLPSpec(5, (7,), 3, "relu", "softmax", "float64")
    empty, built = _built_empty(spec, "cpu"), spec.build("cpu")
    assert [(p.shape, p.dtype, p.device) for p in empty.parameters()] == \
        [(p.shape, p.dtype, p.device) for p in built.parameters()]
    assert [type(m) for m in empty] == [type(m) for m in built]

    class _WithBuffers:
        def build(self, device):
            return torch.nn.BatchNorm1d(3, device=device)

    bn = _built_empty(_WithBuffers(), "cpu")
    assert bn.running_var.tolist() == [1.0] * 3 and bn.weight.tolist() == [1.0] * 3
