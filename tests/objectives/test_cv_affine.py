"""Splits that see X through a per-feature affine map (objectives.cv.set_affine), and the scalers fitted on the
splits' rows where they are placed (objectives.cv.partial_fit_on_folds).

A split's models are evaluated on the stored X in the map's coordinates: the
loss and gradient must be those of the same models on ``a + s * X`` stored
as such (both kernels, every loss kind, with and without an intercept), and
the gradient that of the loss by finite differences.  A scaler chained over
two shards' training rows must be the scaler scikit-learn fits on the split's
rows.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler

from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import LinearSpec
from dask_estimators.objectives import cv as CV
from dask_estimators.objectives import linear as lin

N, D = 301, 6


def _problem(loss, rng, weighted):
    X = rng.normal(size=(N, D)) * np.arange(1, D + 1) + np.linspace(-20, 40, D)  # offsets and scales per feature
    K = 3 if loss == "multinomial" else 1
    if loss == "squared":
        y = rng.normal(size=N)
    elif K == 1:
        y = rng.integers(0, 2, N).astype(float)
    else:  # class codes, as placed
        y = rng.integers(0, K, N)
    arrays = {"X": X, "y": y}
    if weighted:
        arrays["sample_weight"] = rng.uniform(0.5, 2.0, N)
    return arrays, K


def _shard(arrays, loss, K, X=None):
    shard = Shard(dict(arrays, **({} if X is None else {"X": X})), device="cpu")
    CV.assign_kfold(shard, [(0, N)], N, 3)
    CV.prepare(shard, loss, K)
    return shard


def _maps(rng):
    return [(rng.normal(size=D), rng.uniform(0.2, 3.0, D)), None, (np.zeros(D), rng.uniform(0.5, 2.0, D))]


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("loss", ["binomial", "squared", "multinomial"])
@pytest.mark.parametrize("intercept", [True, False], ids=["b", "nob"])
@pytest.mark.parametrize("weighted", [False, True], ids=["nosw", "sw"])
def test_a_mapped_split_is_evaluated_as_on_its_mapped_rows(backend, loss, intercept, weighted):
    import torch

    rng = np.random.default_rng(3)
    arrays, K = _problem(loss, rng, weighted)
    maps = _maps(rng)
    stored = _shard(arrays, loss, K)
    CV.set_affine(stored, maps)
    spec = LinearSpec(loss, D, K, intercept, backend=backend)
    folds = [0, 1, 2, 0, None]
    ws = torch.as_tensor(0.05 * rng.normal(size=(len(folds), spec.n_params)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # "auto" takes the fused kernel on a one-thread worker where it can
    try:
        losses, grads = to_host(CV.fold_value_grad_many(stored, folds, ws, spec))
        for i, k in enumerate(folds):
            a, s = maps[k] if k is not None and maps[k] is not None else (np.zeros(D), np.ones(D))
            mapped = _shard(arrays, loss, K, X=a + s * arrays["X"])
            want_loss, want_grad = to_host(CV.on_fold(mapped, k, lin.value_grad, ws[i], spec))
            np.testing.assert_allclose(losses[i], want_loss, rtol=1e-10)
            np.testing.assert_allclose(grads[i], want_grad, rtol=1e-9, atol=1e-9)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("loss", ["binomial", "multinomial"])
def test_a_mapped_splits_gradient_is_its_losss_by_finite_differences(loss):
    rng = np.random.default_rng(5)
    arrays, K = _problem(loss, rng, weighted=True)
    shard = _shard(arrays, loss, K)
    CV.set_affine(shard, _maps(rng))
    spec = LinearSpec(loss, D, K, True)
    w = 0.05 * rng.normal(size=spec.n_params)

    def f(v):
        out, g = to_host(CV.fold_value_grad_many(shard, [0], v[None, :], spec))
        return float(out[0]), g[0]

    _, g = f(w)
    h = 1e-6
    fd = np.array([(f(w + h * e)[0] - f(w - h * e)[0]) / (2 * h) for e in np.eye(spec.n_params)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("loss", ["binomial", "squared", "multinomial"])
@pytest.mark.parametrize("intercept", [True, False], ids=["b", "nob"])
def test_the_solvers_one_model_kernels_on_a_mapped_split_are_those_of_its_mapped_rows(loss, intercept):
    """value_grad, hessp and hess on a mapped split (the solvers' own rounds, a Newton polish), and its held-out
    sums: the same values as on ``a + s * X`` stored as such; any other kernel is refused there."""
    rng = np.random.default_rng(6)
    arrays, K = _problem(loss, rng, weighted=True)
    maps = _maps(rng)
    stored = _shard(arrays, loss, K)
    CV.set_affine(stored, maps)
    spec = LinearSpec(loss, D, K, intercept)
    import torch

    w = torch.as_tensor(0.05 * rng.normal(size=spec.n_params))  # as the rounds hand them to a kernel
    p = torch.as_tensor(rng.normal(size=spec.n_params))
    for k in (0, 2):
        mapped = _shard(arrays, loss, K, X=maps[k][0] + maps[k][1] * arrays["X"])
        got, want = [], []
        for shard, out in ((stored, got), (mapped, want)):
            loss_, g = to_host(CV.on_fold(shard, k, lin.value_grad, w, spec))
            out += [loss_, g, to_host(CV.on_fold(shard, k, lin.hessp, p, spec)),
                    to_host(CV.on_fold(shard, k, lin.hess, spec))]
            for metric in ("log_loss", "accuracy") if loss != "squared" else ("r2", "squared_error"):
                out.append(to_host(CV.heldout_sums(shard, k, np.stack([w.numpy(), p.numpy() * 0.01]), spec, metric)))
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="affine map"):
        CV.on_fold(stored, 0, lin.inference_sums, w, spec)


def _two_shards(X, roles):
    """Two shards of X's rows (as a placement cuts them), each with its rows' roles."""
    cut = X.shape[0] // 2 + 7
    shards = []
    for rows in (slice(0, cut), slice(cut, None)):
        shard = Shard({"X": X[rows], "y": np.zeros(X[rows].shape[0])}, device="cpu")
        CV.set_roles(shard, roles[:, rows])
        shards.append(shard)
    return shards


@pytest.mark.parametrize("kind", ["kfold", "shuffled"])
@pytest.mark.parametrize("scaler", [StandardScaler(), MinMaxScaler(), MaxAbsScaler()], ids=lambda s: type(s).__name__)
def test_scalers_chained_over_the_shards_are_the_scalers_of_the_splits_rows(kind, scaler):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(N, D)) * 3 + 10
    if kind == "kfold":  # training rows in two runs on each shard: handed over as views
        fold = np.arange(N) * 3 // N
    else:  # scattered: one copy per shard
        fold = rng.integers(0, 3, N)
    roles = np.where(fold[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN).astype(np.int8)
    shards = _two_shards(X, roles)
    fitted = [(type(scaler)(**scaler.get_params()), k) for k in range(3)]
    for shard in shards:
        fitted = list(zip(CV.partial_fit_on_folds(shard, fitted), range(3)))
    for t, k in fitted:
        want = type(scaler)(**scaler.get_params()).fit(X[roles[k] == CV.TRAIN])
        np.testing.assert_allclose(t.transform(X), want.transform(X), rtol=1e-12, atol=1e-12)


def test_a_sparse_shards_scaler_sees_its_training_rows():
    X = sp.random(N, D, density=0.3, format="csr", random_state=4) * 5
    fold = np.arange(N) % 3
    roles = np.where(fold[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN).astype(np.int8)
    shards = _two_shards(X, roles)
    fitted = [(MaxAbsScaler(), k) for k in range(3)]
    for shard in shards:
        fitted = list(zip(CV.partial_fit_on_folds(shard, fitted), range(3)))
    for t, k in fitted:
        want = MaxAbsScaler().fit(X[roles[k] == CV.TRAIN])
        np.testing.assert_allclose(t.max_abs_, want.max_abs_, rtol=1e-12)


_SCALERS = [StandardScaler(), StandardScaler(with_mean=False), StandardScaler(with_std=False),
            StandardScaler(with_mean=False, with_std=False), MinMaxScaler(), MinMaxScaler(feature_range=(-2, 3)),
            MaxAbsScaler()]


def _same_fitted(got, want, rtol):
    """Every fitted attribute of two scalers alike: the same names, types, dtypes and values."""
    assert sorted(vars(got)) == sorted(vars(want))
    for name, value in vars(want).items():
        other = getattr(got, name)
        assert type(other) is type(value), name
        if isinstance(value, np.ndarray):
            assert other.dtype == value.dtype, name
            np.testing.assert_allclose(other, value, rtol=rtol, atol=0, err_msg=name)
        elif isinstance(value, (float, np.floating, int, np.integer)):
            np.testing.assert_allclose(other, value, rtol=rtol, err_msg=name)
        else:
            assert other == value, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["kfold", "shuffled"])
@pytest.mark.parametrize("scaler", _SCALERS, ids=lambda s: repr(s))
def test_scalers_made_from_row_group_statistics_are_those_fitted_on_the_splits_rows(dtype, kind, scaler):
    """One pass over each shard's row groups (role_group_stats), summed per split (combine_group_stats), makes
    each split's scaler: every attribute as scikit-learn's fit on the split's rows, constant and
    nearly constant features included; with a fourth split of every row (a search's refit)."""
    from dask_estimators.estimators._grid import _STATS_KIND, _scaler_from_stats

    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, D)) * np.arange(1, D + 1) + np.linspace(-20, 40, D)
    X[:, 1] = 7.25  # constant: scale 1
    X[:, 2] = 1e8 + rng.normal(size=N) * 1e-9  # constant to the precision: scale 1
    X = X.astype(dtype)
    fold = np.arange(N) * 3 // N if kind == "kfold" else rng.integers(0, 3, N)
    roles = np.where(fold[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN).astype(np.int8)
    roles = np.vstack([roles, np.full((1, N), CV.TRAIN, dtype=np.int8)])
    stat = _STATS_KIND[type(scaler)]
    groups = [g for shard in _two_shards(X, roles) for g in CV.role_group_stats(shard, stat)]
    for k in range(4):
        got = _scaler_from_stats(scaler, *CV.combine_group_stats(stat, groups, k), D, dtype)
        want = type(scaler)(**scaler.get_params()).fit(X[roles[k] == CV.TRAIN])
        _same_fitted(got, want, rtol=1e-12 if dtype == np.float64 else 1e-5)
        np.testing.assert_allclose(got.transform(X), want.transform(X), rtol=1e-5, atol=1e-6)


def test_row_group_statistics_leave_sparse_shards_to_partial_fit():
    X = sp.random(N, D, density=0.3, format="csr", random_state=4)
    roles = np.full((2, N), CV.TRAIN, dtype=np.int8)
    assert all(CV.role_group_stats(shard, "maxabs") is None for shard in _two_shards(X, roles))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("intercept", [True, False], ids=["b", "nob"])
@pytest.mark.parametrize("outputs", [1, 2])
@pytest.mark.parametrize("kind", ["kfold", "shuffled"])
def test_quadratic_hessians_of_every_split_are_each_splits_own(sparse, intercept, outputs, kind):
    """quadratic_hessians, one pass over the shard for every split, gives each split's Hessian of the squared
    loss as on_fold(hess) computes it alone: mapped splits (in their map's coordinates) and unmapped, with and
    without an intercept, one or two outputs, weighted rows, row groups in runs or scattered."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, D)) * np.arange(1, D + 1) + np.linspace(-20, 40, D)
    if sparse:
        X = sp.csr_matrix(np.where(rng.random((N, D)) < 0.5, X, 0.0))
    y = rng.normal(size=(N, outputs))
    shard = Shard({"X": X, "y": y, "sample_weight": rng.uniform(0.5, 2.0, N)}, device="cpu")
    fold = np.arange(N) * 3 // N if kind == "kfold" else rng.integers(0, 3, N)
    roles = np.where(fold[None, :] == np.arange(3)[:, None], CV.TEST, CV.TRAIN).astype(np.int8)
    CV.set_roles(shard, np.vstack([roles, np.full((1, N), CV.TRAIN, dtype=np.int8)]))
    CV.prepare(shard, "squared", outputs)
    if not sparse:
        CV.set_affine(shard, _maps(rng) + [None])
    spec = LinearSpec("squared", D, n_outputs=outputs, fit_intercept=intercept)
    got = to_host(CV.quadratic_hessians(shard, spec))
    w = rng.normal(size=spec.n_params)
    for k in range(4):
        CV.on_fold(shard, k, lin.value_grad, w, spec)  # the curvature hess reads
        want = to_host(CV.on_fold(shard, k, lin.hess, spec))
        np.testing.assert_allclose(got[k], want, rtol=1e-10, atol=1e-8 * np.abs(want).max())
