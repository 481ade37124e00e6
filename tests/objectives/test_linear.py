"""LinearObjective: value against the documented formula, derivatives by finite differences, shard sums.

F(w) = (1/S) sum_i s_i loss(y_i, z_i) + l2/2 ||W||^2   (intercept not penalised, l1 not in fun_and_grad)
"""

from dataclasses import dataclass

import math

import numpy as np
import pytest
import torch

from dask_estimators.engine import DistributedEvaluator, LocalEvaluator, place
from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import LinearObjective, LinearSpec
from dask_estimators.objectives import linear as lin
from dask_estimators.objectives.targets import prepare_targets

N, D = 30, 4
L2 = 0.3
H = 1e-6
KINK_GAP = 1e-3


@dataclass(frozen=True)
class Config:
    id: str
    loss: str
    n_outputs: int
    n_classes: int | None = None  # None: regression
    class_weight: tuple | None = None
    epsilon: float = 0.0


CONFIGS = [
    Config("squared", "squared", 1),
    Config("squared-2out", "squared", 2),
    Config("eps-insensitive", "squared_epsilon_insensitive", 1, epsilon=0.2),
    Config("binomial", "binomial", 1, n_classes=2),
    Config("binomial-cw", "binomial", 1, n_classes=2, class_weight=(0.7, 1.6)),
    Config("multinomial", "multinomial", 3, n_classes=3),
    Config("multinomial-cw", "multinomial", 3, n_classes=3, class_weight=(1.0, 2.0, 0.5)),
    Config("hinge-binary-cw", "squared_hinge", 1, n_classes=2, class_weight=(1.5, 0.5)),
    Config("hinge-ovr", "squared_hinge", 3, n_classes=3),
    Config("hinge-ovr-cw", "squared_hinge", 3, n_classes=3, class_weight=(1.0, 2.5, 0.4)),
]
CONFIG_IDS = [c.id for c in CONFIGS]


# ------------------------------------------------------------------ helpers
def make_data(cfg, rng, weighted=True, n=N):
    X = rng.normal(size=(n, D))
    if cfg.n_classes is None:
        beta = rng.normal(size=(D, cfg.n_outputs))
        y = X @ beta + 0.5 * rng.normal(size=(n, cfg.n_outputs))
        y = y[:, 0] if cfg.n_outputs == 1 else y
    else:
        y = np.arange(n) % cfg.n_classes  # every class present
        rng.shuffle(y)
    s = rng.uniform(0.2, 2.0, size=n) if weighted else None
    return X, y, s


def make_shard(cfg, X, y, s):
    arrays = {"X": X, "y": y}
    if s is not None:
        arrays["sample_weight"] = s
    shard = Shard(arrays, device="cpu")
    cw = None if cfg.class_weight is None else np.asarray(cfg.class_weight)
    prepare_targets(shard, cfg.loss, cfg.n_outputs, cw)
    return shard


def make_spec(cfg, fit_intercept, backend="auto"):
    return LinearSpec(cfg.loss, D, cfg.n_outputs, fit_intercept, cfg.epsilon, backend=backend)


def unpack(cfg, w, fit_intercept):
    K = cfg.n_outputs
    W = w[: K * D].reshape(K, D)
    b = w[K * D :] if fit_intercept else np.zeros(K)
    return W, b


def reference(cfg, X, y, s, w, fit_intercept, l2):
    """The documented objective, computed directly in NumPy from the raw targets.

    Returns (F, S) with per-sample(-and-output) weights built independently of prepare_targets.
    """
    W, b = unpack(cfg, w, fit_intercept)
    Z = X @ W.T + b
    n, K = Z.shape
    s = np.ones(n) if s is None else s
    cw = None if cfg.class_weight is None else np.asarray(cfg.class_weight)
    if cfg.loss == "squared":
        L = 0.5 * (Z - y.reshape(n, K)) ** 2
    elif cfg.loss == "squared_epsilon_insensitive":
        L = np.maximum(0.0, np.abs(Z - y.reshape(n, 1)) - cfg.epsilon) ** 2
    elif cfg.loss == "binomial":
        t = (y == 1).astype(float)[:, None]
        L = np.logaddexp(0.0, Z) - t * Z
    elif cfg.loss == "multinomial":
        m = Z.max(1, keepdims=True)
        L = (m[:, 0] + np.log(np.exp(Z - m).sum(1)) - Z[np.arange(n), y])[:, None]
    elif cfg.loss == "squared_hinge":
        T = np.where(y == 1, 1.0, -1.0)[:, None] if K == 1 else np.where(np.eye(K)[y] == 1, 1.0, -1.0)
        L = np.maximum(0.0, 1.0 - T * Z) ** 2
    else:  # pragma: no cover
        raise AssertionError(cfg.loss)

    if cw is None:
        sw = s[:, None]
    elif cfg.loss == "squared_hinge" and K > 1:  # one-vs-rest: class k's weight on output k for class-k rows
        sw = s[:, None] * np.where(np.eye(K)[y] == 1, cw[None, :], 1.0)
    else:
        sw = (s * cw[y])[:, None]
    S = sw.sum() / sw.shape[1]  # per-output weights: averaged over the outputs
    F = float((sw * L).sum() / S + 0.5 * l2 * np.sum(W * W))
    return F, S


def margins_ok(cfg, X, y, w, fit_intercept):
    """True when no sample sits within KINK_GAP of a kink (so FD sees the generalized Hessian)."""
    W, b = unpack(cfg, w, fit_intercept)
    Z = X @ W.T + b
    K = Z.shape[1]
    if cfg.loss == "squared_hinge":
        T = np.where(y == 1, 1.0, -1.0)[:, None] if K == 1 else np.where(np.eye(K)[y] == 1, 1.0, -1.0)
        return bool(np.all(np.abs(1.0 - T * Z) > KINK_GAP))
    if cfg.loss == "squared_epsilon_insensitive":
        return bool(np.all(np.abs(np.abs(Z - y[:, None]) - cfg.epsilon) > KINK_GAP))
    return True


def draw_point(cfg, X, y, n_params, fit_intercept, rng):
    for _ in range(200):
        w = 0.5 * rng.normal(size=n_params)
        if margins_ok(cfg, X, y, w, fit_intercept):
            return w
    raise AssertionError("no point away from the kinks")  # pragma: no cover


def fd_grad(f, w):
    g = np.empty_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = H
        g[j] = (f(w + e) - f(w - e)) / (2 * H)
    return g


def setup(cfg, rng, fit_intercept=True, weighted=True, l2=L2, backend="auto"):
    X, y, s = make_data(cfg, rng, weighted)
    spec = make_spec(cfg, fit_intercept, backend)
    obj = LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), spec, l2=l2)
    w = draw_point(cfg, X, y, obj.n_params, fit_intercept, rng)
    return obj, w, (X, y, s)


both = pytest.mark.parametrize("fit_intercept", [True, False], ids=["intercept", "no-intercept"])
weighted = pytest.mark.parametrize("weighted", [True, False], ids=["sw", "no-sw"])
configs = pytest.mark.parametrize("cfg", CONFIGS, ids=CONFIG_IDS)
# the one-pass numba kernels (CPU) and the torch kernels (GPU, float32, multi-threaded workers)
backends = pytest.mark.parametrize("backend", ["fused", "torch"])


# ------------------------------------------------------------------ value
@configs
@both
@weighted
@backends
def test_value_matches_documented_objective(cfg, fit_intercept, weighted, backend, rng):
    obj, w, (X, y, s) = setup(cfg, rng, fit_intercept, weighted, backend=backend)
    F, S = reference(cfg, X, y, s, w, fit_intercept, L2)
    assert obj.n_params == cfg.n_outputs * (D + int(fit_intercept))
    assert obj.n_samples == N
    np.testing.assert_allclose(obj.sw_sum, S, rtol=1e-13)
    f, g = obj.fun_and_grad(w)
    assert isinstance(f, float)
    assert g.dtype == np.float64 and g.shape == (obj.n_params,)
    np.testing.assert_allclose(f, F, rtol=1e-12)


@configs
def test_intercept_not_penalised_and_l1_not_in_smooth_part(cfg, rng):
    X, y, s = make_data(cfg, rng)
    spec = make_spec(cfg, True)
    objs = [
        LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), spec, l2=l2, l1=l1)
        for l2, l1 in [(0.0, 0.0), (L2, 0.0), (L2, 0.7)]
    ]
    w = draw_point(cfg, X, y, spec.n_params, True, rng)
    (f0, g0), (f1, g1), (f2, g2) = (o.fun_and_grad(w) for o in objs)
    K = cfg.n_outputs
    np.testing.assert_allclose(f1 - f0, 0.5 * L2 * np.sum(w[: K * D] ** 2), rtol=1e-10)
    np.testing.assert_allclose(g1[: K * D] - g0[: K * D], L2 * w[: K * D], rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(g1[K * D :], g0[K * D :])  # intercept: no penalty
    assert (f2, list(g2)) == (f1, list(g1))  # l1 is left to the driver
    p = rng.normal(size=spec.n_params)
    np.testing.assert_allclose(objs[1].hessp(w, p) - objs[0].hessp(w, p), L2 * p * objs[0].penalized, atol=1e-14)


def test_zero_weight_sum_rejected():
    """All-zero weights in scikit-learn's words; a negative sum (weights that may be negative) in ours."""
    cfg = CONFIGS[0]
    X = np.ones((3, D))
    for weights, message in ((np.zeros(3), "at least one non-zero number"), (-np.ones(3), "must be positive")):
        shard = make_shard(cfg, X, np.ones(3), weights)
        with pytest.raises(ValueError, match=message):
            LinearObjective(LocalEvaluator([shard]), make_spec(cfg, True))


# ------------------------------------------------------------------ derivatives
@configs
@both
@weighted
@backends
def test_gradient_finite_differences(cfg, fit_intercept, weighted, backend, rng):
    obj, w, _ = setup(cfg, rng, fit_intercept, weighted, backend=backend)
    _, g = obj.fun_and_grad(w)
    fd = fd_grad(lambda v: obj.fun_and_grad(v)[0], w)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@configs
@both
@weighted
@backends
def test_hessp_and_hess_finite_differences(cfg, fit_intercept, weighted, backend, rng):
    obj, w, _ = setup(cfg, rng, fit_intercept, weighted, backend=backend)
    P = obj.n_params
    H_ = obj.hess(w)
    assert H_.shape == (P, P) and H_.dtype == np.float64
    np.testing.assert_allclose(H_, H_.T, rtol=1e-13, atol=1e-15)
    assert np.linalg.eigvalsh(H_).min() >= -1e-10  # convex

    # Hessian columns by central differences of the gradient
    H_fd = np.empty((P, P))
    for j in range(P):
        e = np.zeros(P)
        e[j] = H
        H_fd[:, j] = (obj.fun_and_grad(w + e)[1] - obj.fun_and_grad(w - e)[1]) / (2 * H)
    np.testing.assert_allclose(H_, H_fd, rtol=1e-6, atol=1e-7)

    for _ in range(2):
        p = rng.normal(size=P)
        obj.fun_and_grad(w)
        hp = obj.hessp(w, p)
        np.testing.assert_allclose(hp, H_ @ p, rtol=1e-12, atol=1e-13)
        fd = (obj.fun_and_grad(w + H * p)[1] - obj.fun_and_grad(w - H * p)[1]) / (2 * H)
        # the objective was last evaluated elsewhere: hessp must refresh its curvature state at w
        np.testing.assert_allclose(obj.hessp(w, p), hp, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(hp, fd, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ float32 storage
def _float32_objectives(cfg, rng, fit_intercept, backend):
    """The objective on a float32 shard, and on a float64 shard of the same (float32-rounded) values."""
    X, y, s = make_data(cfg, rng)
    X = X.astype(np.float32).astype(np.float64)
    spec = make_spec(cfg, fit_intercept, backend)
    shard32 = make_shard(cfg, X.astype(np.float32), y, s)
    assert shard32.get("X").dtype == torch.float32
    obj32 = LinearObjective(LocalEvaluator([shard32]), spec, l2=L2)
    obj64 = LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), spec, l2=L2)
    return obj32, obj64, draw_point(cfg, X, y, spec.n_params, fit_intercept, rng)


@configs
@both
@backends
def test_float32_storage_gives_the_float64_sums_of_its_values(cfg, fit_intercept, backend, rng):
    """A float32 X is read as it is and summed in float64: the numba kernels give float64's sums on its values to
    rounding; the torch kernels (float32 products, float64 sums over blocks) to float32's rounding."""
    obj32, obj64, w = _float32_objectives(cfg, rng, fit_intercept, backend)
    p = rng.normal(size=obj32.n_params)
    got, want = _results(obj32, w, p), _results(obj64, w, p)
    rtol = 1e-12 if backend == "fused" else 2e-6
    for k, v in want.items():
        assert np.asarray(got[k]).dtype == np.float64, k
        scale = np.max(np.abs(v)) if np.ndim(v) else abs(v)
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=rtol * scale, err_msg=k)


@configs
@both
@backends
def test_float32_storage_gradient_and_hessp_finite_differences(cfg, fit_intercept, backend, rng):
    obj, _, w = _float32_objectives(cfg, rng, fit_intercept, backend)
    # the numba kernels' sums are float64's: the usual step; the torch kernels' float32 products are noisy at
    # about 1e-7 of the value, so their differences need a larger step (and a looser tolerance)
    h, rtol = (H, 1e-6) if backend == "fused" else (1e-3, 2e-3)
    _, g = obj.fun_and_grad(w)
    fd = np.array([(obj.fun_and_grad(w + e)[0] - obj.fun_and_grad(w - e)[0]) / (2 * h)
                   for e in np.eye(w.size) * h])
    np.testing.assert_allclose(g, fd, rtol=rtol, atol=rtol * 1e-2 * np.abs(g).max())
    p = rng.normal(size=obj.n_params)
    obj.fun_and_grad(w)
    hp = obj.hessp(w, p)
    fd = (obj.fun_and_grad(w + h * p)[1] - obj.fun_and_grad(w - h * p)[1]) / (2 * h)
    np.testing.assert_allclose(hp, fd, rtol=rtol, atol=rtol * 1e-1 * np.abs(hp).max())


@pytest.mark.parametrize("rows", [lin.FLOAT32_BLOCK_ROWS + 7])
def test_float32_torch_kernels_sum_their_row_blocks_in_float64(rows, rng):
    """More rows than a float32 block: the blocks' sums are added in float64, and agree with the numba kernels'."""
    cfg = CONFIGS[3]  # binomial
    X, y, s = make_data(cfg, rng, n=rows)
    X32 = X.astype(np.float32)
    assert len(lin._row_blocks(torch.from_numpy(X32))) == 2
    w = 0.3 * rng.normal(size=D + 1)
    p = rng.normal(size=D + 1)
    out = {}
    for backend in ("fused", "torch"):
        obj = LinearObjective(LocalEvaluator([make_shard(cfg, X32, y, s)]), make_spec(cfg, True, backend), l2=L2)
        out[backend] = _results(obj, w, p)
    for k, v in out["fused"].items():
        scale = np.max(np.abs(v)) if np.ndim(v) else abs(v)
        np.testing.assert_allclose(out["torch"][k], v, rtol=2e-6, atol=2e-6 * scale, err_msg=k)


@configs
def test_hessp_follows_the_last_point(cfg, rng):
    """hessp/hess at w after the state was left at another point equal those of a fresh objective at w."""
    obj, w, (X, y, s) = setup(cfg, rng)
    fresh = LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), make_spec(cfg, True), l2=L2)
    w2 = draw_point(cfg, X, y, obj.n_params, True, rng)
    p = rng.normal(size=obj.n_params)
    obj.fun_and_grad(w2)
    w_copy = w.copy()
    np.testing.assert_array_equal(obj.hessp(w, p), fresh.hessp(w, p))
    obj.fun_and_grad(w2)
    np.testing.assert_array_equal(obj.hess(w), fresh.hess(w))
    np.testing.assert_array_equal(w, w_copy)


# ------------------------------------------------------------------ shards
def _split_shards(cfg, X, y, s, bounds):
    return [
        make_shard(cfg, X[a:b], y[a:b], None if s is None else s[a:b]) for a, b in zip(bounds[:-1], bounds[1:])
    ]


def _results(obj, w, p):
    f, g = obj.fun_and_grad(w)
    return {"sw_sum": obj.sw_sum, "n": obj.n_samples, "f": f, "g": g, "hessp": obj.hessp(w, p), "hess": obj.hess(w)}


def _assert_same(got, want):
    for k, v in want.items():
        scale = np.max(np.abs(v)) if np.ndim(v) else abs(v)
        np.testing.assert_allclose(got[k], v, rtol=1e-12, atol=1e-12 * scale, err_msg=k)


@configs
def test_sum_over_local_shards_equals_whole(cfg, rng):
    X, y, s = make_data(cfg, rng)
    spec = make_spec(cfg, True)
    whole = LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), spec, l2=L2)
    split = LinearObjective(LocalEvaluator(_split_shards(cfg, X, y, s, [0, 7, 19, N])), spec, l2=L2)
    w = draw_point(cfg, X, y, spec.n_params, True, rng)
    p = rng.normal(size=spec.n_params)
    _assert_same(_results(split, w, p), _results(whole, w, p))


@pytest.mark.parametrize("transport", ["actors", "tasks"])
@configs
def test_sum_over_cluster_shards_equals_whole(cfg, transport, client, rng):
    X, y, s = make_data(cfg, rng, n=41)
    spec = make_spec(cfg, True)
    whole = LinearObjective(LocalEvaluator([make_shard(cfg, X, y, s)]), spec, l2=L2)
    w = draw_point(cfg, X, y, spec.n_params, True, rng)
    p = rng.normal(size=spec.n_params)
    want = _results(whole, w, p)
    cw = None if cfg.class_weight is None else np.asarray(cfg.class_weight)
    with place(client, {"X": X, "y": y, "sample_weight": s}, transport=transport) as placement:
        assert len(placement.shards) == 2 and placement.n_samples == 41
        placement.map(prepare_targets, cfg.loss, cfg.n_outputs, cw)
        for reduction in ("tree", "gather", "single"):
            dist = LinearObjective(DistributedEvaluator(placement, reduction=reduction), spec, l2=L2)
            _assert_same(_results(dist, w, p), want)


# ------------------------------------------------------------------ the two kernel backends
@configs
@both
@weighted
@pytest.mark.parametrize("n", [1, 2, 257])
def test_fused_and_torch_kernels_agree(cfg, fit_intercept, weighted, n, rng):
    """The one-pass numba kernels and the torch kernels give the same raw sums, curvature and Hessian products.

    The point is drawn large, so that the binomial and multinomial losses reach their far tails too.  The
    numba kernels walk the rows as two halves at once; 1, 2 and 257 rows (odd: the middle row alone, and
    more than one block) check that every row is counted once."""
    X, y, s = make_data(cfg, rng, weighted, n=n)
    X[:3] *= 400.0  # margins of several hundred: log1p(exp(-800)) must stay finite in both
    spec_f, spec_t = make_spec(cfg, fit_intercept, "fused"), make_spec(cfg, fit_intercept, "torch")
    w = torch.as_tensor(rng.normal(size=spec_f.n_params))
    p = torch.as_tensor(rng.normal(size=spec_f.n_params))
    sh_f, sh_t = make_shard(cfg, X, y, s), make_shard(cfg, X, y, s)
    lf, gf = to_host(lin.value_grad(sh_f, w, spec_f))
    lt, gt = to_host(lin.value_grad(sh_t, w, spec_t))
    assert np.isfinite(lf) and np.all(np.isfinite(gf))
    np.testing.assert_allclose(lf, lt, rtol=1e-12)
    np.testing.assert_allclose(gf, gt, rtol=1e-11, atol=1e-11 * np.abs(gt).max())
    curv_f, curv_t = (np.asarray(sh.cache["linear_curv"]) for sh in (sh_f, sh_t))
    np.testing.assert_allclose(curv_f, curv_t, rtol=1e-12, atol=1e-300)
    hf, ht = to_host(lin.hessp(sh_f, p, spec_f)), to_host(lin.hessp(sh_t, p, spec_t))
    np.testing.assert_allclose(hf, ht, rtol=1e-11, atol=1e-11 * np.abs(ht).max())
    Hf, Ht = to_host(lin.hess(sh_f, spec_f)), to_host(lin.hess(sh_t, spec_t))
    np.testing.assert_allclose(Hf, Ht, rtol=1e-10, atol=1e-11 * np.abs(Ht).max())
    assert not sh_f._tensors  # the numba side read the shard's NumPy arrays: no tensor was made of them


def _kernel_targets(loss, n, K, rng):
    """Targets in the numba kernels' form for ``loss``: int64 codes (multinomial), else float (n, K)."""
    if loss == "multinomial":
        return rng.integers(0, K, n)
    if loss in ("binomial", "squared_hinge"):
        y = (rng.random((n, K)) < 0.5).astype(float)
        return y if loss == "binomial" else 2.0 * y - 1.0
    if loss in ("poisson", "gamma"):
        return rng.gamma(2.0, 1.0, size=(n, K)) + (0.1 if loss == "gamma" else 0.0)
    return rng.normal(size=(n, K))


@pytest.mark.parametrize("loss", ["squared", "binomial", "multinomial", "squared_hinge", "squared_epsilon_insensitive",
                                  "poisson", "gamma"])
@weighted
@pytest.mark.parametrize("n", [1, 2, 3, 9, 257])
@pytest.mark.parametrize("dtype,d", [(np.float64, 48), (np.float32, 96), (np.float32, 400)])
def test_kernels_that_ask_for_rows_ahead_give_the_sums_of_those_that_do_not(loss, weighted, n, dtype, d, rng,
                                                                             monkeypatch):
    """Rows of 384 and 1,600 bytes: the numba kernels ask for rows ahead of their loops (4 and 1 row pairs); the
    sums, curvature and Hessian products are those of the same kernels compiled without asking, for every loss,
    with and without weights, and for row counts where the rows asked for run past the last row (1, 2, 3, 9)
    and past a block of the binomial kernel (257)."""
    from dask_estimators.objectives import _fused

    K = 3 if loss in ("multinomial", "squared") else 1
    X = rng.normal(size=(n, d)).astype(dtype)
    assert _fused._ahead(X) == (4 if d * X.itemsize == 384 else 1)
    y = _kernel_targets(loss, n, K, rng)
    s = rng.uniform(0.2, 2.0, size=n) if weighted else None
    W, b = rng.normal(size=(K, d)) * (0.01 if loss in ("poisson", "gamma") else 0.2), rng.normal(size=K) * 0.1
    P, pb = rng.normal(size=(K, d)), rng.normal(size=K)
    eps = 0.2 if loss == "squared_epsilon_insensitive" else 0.0

    def sums():
        curv = np.empty((n, K))
        value, gW, gb = _fused.value_grad(X, y, s, W, b, loss, eps, curv)
        return (value, gW, gb, curv) + _fused.hessp(X, s, curv, P, pb, loss)

    asked = sums()
    monkeypatch.setattr(_fused, "_ahead", lambda X: None)
    plain = sums()
    for a, p in zip(asked, plain):
        np.testing.assert_allclose(a, p, rtol=1e-13, atol=1e-13 * np.abs(p).max())


def test_rows_are_asked_for_ahead_only_where_that_was_measured_to_pay():
    """The kernels ask for rows about 1.6 KB ahead, for rows of 200 bytes to 2 KB only (``_fused._ahead``)."""
    from dask_estimators.objectives import _fused

    ahead = {(d, np.dtype(t).name): _fused._ahead(np.empty((2, d), dtype=t))
             for d in (10, 24, 25, 50, 100, 200, 256, 257, 512, 513, 1000) for t in (np.float64, np.float32)}
    assert ahead[(24, "float64")] is None and ahead[(25, "float64")] == 8  # 192 and 200 bytes
    assert ahead[(50, "float32")] == 8 and ahead[(25, "float32")] is None  # 200 and 100 bytes
    assert ahead[(100, "float64")] == 2 and ahead[(100, "float32")] == 4
    assert ahead[(256, "float64")] == 1 and ahead[(257, "float64")] is None  # 2,048 and 2,056 bytes
    assert ahead[(512, "float32")] == 1 and ahead[(513, "float32")] is None
    assert ahead[(1000, "float64")] is None and ahead[(10, "float64")] is None


@configs
@both
@weighted
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernels_read_x_in_row_segments_as_in_one_array(cfg, fit_intercept, weighted, dtype, rng):
    """A shard whose X is the blocks it was placed from (``RowSegments``: a user's persisted blocks, read where
    they lie) gives the numba kernels' sums, curvature, Hessian products and Hessian of the same X in one array,
    and never joins the blocks."""
    from dask_estimators.engine.data._worker import RowSegments

    X, y, s = make_data(cfg, rng, weighted, n=257)
    X = X.astype(dtype)
    cuts = [0, 1, 100, 101, 257]  # a block of one row, and blocks of odd sizes
    segs = RowSegments([X[a:b].copy() for a, b in zip(cuts[:-1], cuts[1:])])
    spec = make_spec(cfg, fit_intercept, "fused")
    w = rng.normal(size=spec.n_params)
    p = rng.normal(size=spec.n_params)
    whole, split = make_shard(cfg, X, y, s), make_shard(cfg, segs, y, s)
    for kernel, args in ((lin.value_grad, (w,)), (lin.hessp, (p,)), (lin.hess, ())):
        a, b = to_host(kernel(whole, *args, spec)), to_host(kernel(split, *args, spec))
        for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-12 * np.abs(u).max())
    np.testing.assert_array_equal(split.cache["linear_curv"], whole.cache["linear_curv"])
    assert segs._joined is None and not split._tensors  # every kernel read the parts where they lie


@pytest.mark.parametrize("label", [0.0, 1.0])
def test_vectorised_binomial_matches_libm(label):
    """The blocked binomial kernel's own exp and log1p against math.exp/math.log1p, row by row.

    Margins from 1e-300 to 745 of both signs: the loss, its derivative and
    curvature to a few units of rounding, log1p's relative accuracy for tiny
    exp(-|z|) included; past |z| = 708, exp(-|z|) (subnormal or 0) is taken as 0.
    """
    from dask_estimators.objectives import _fused

    mag = np.concatenate([[0.0, 1e-300, 1e-17], np.logspace(-12, np.log10(745.0), 600), [707.9, 708.0, 708.1, 1e4]])
    z = np.concatenate([mag, -mag])
    m = z.size
    loss, dz, curv = np.empty(m), np.empty(m), np.empty(m)
    _fused._binomial_block(z, np.full(m, label), m, np.empty(m, dtype=np.int64), loss, dz, curv)
    for i, zi in enumerate(z):
        e = math.exp(-abs(zi)) if abs(zi) <= 708.0 else 0.0
        p = (1.0 if zi >= 0 else e) / (1.0 + e)
        ref = max(zi, 0.0) - label * zi + math.log1p(e)
        assert loss[i] == pytest.approx(ref, rel=4e-16, abs=1e-300), zi
        assert dz[i] == pytest.approx(p - label, rel=4e-16, abs=1e-300), zi
        assert curv[i] == pytest.approx(p * (1.0 - p), rel=1e-15, abs=1e-300), zi
    # NaN margins give NaN, never a finite gradient
    _fused._binomial_block(np.array([np.nan]), np.array([label]), 1, np.empty(1, dtype=np.int64), loss, dz, curv)
    assert np.isnan(loss[0]) and np.isnan(dz[0]) and np.isnan(curv[0])


def test_backend_choice():
    spec = LinearSpec("binomial", D)
    X64 = torch.zeros((5, D), dtype=torch.float64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert lin._use_fused(X64, spec)
        assert lin._use_fused(X64.to(torch.float32), spec)  # float32: read as it is, summed in float64
        assert not lin._use_fused(X64.T.contiguous().T, spec)  # not C-contiguous: torch
        assert not lin._use_fused(X64, LinearSpec("binomial", D, backend="torch"))
        torch.set_num_threads(2)
        assert not lin._use_fused(X64, spec)  # several BLAS threads: BLAS
        assert lin._use_fused(X64, LinearSpec("binomial", D, backend="fused"))
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="float X"):
        lin._use_fused(X64.to(torch.float16), LinearSpec("binomial", D, backend="fused"))
    with pytest.raises(ValueError, match="backend must be one of"):
        LinearSpec("binomial", D, backend="numba")


# ------------------------------------------------------------------ centred variables (objectives.centred)
@configs
def test_centred_variables_give_the_same_function_with_finite_difference_derivatives(cfg, rng):
    """``b = c - xbar @ W`` per output: the same objective of other variables, its derivatives by differences."""
    from dask_estimators.objectives.centred import CentredObjective

    obj, w, _ = setup(cfg, rng)
    K, P = cfg.n_outputs, obj.n_params
    xbar = rng.normal(size=(K, D))
    cen = CentredObjective(obj, xbar)
    v = cen.from_inner(w)
    np.testing.assert_allclose(cen.to_inner(v), w, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(v[: K * D], w[: K * D])  # the coefficients are the same variables
    np.testing.assert_allclose(v[K * D :], w[K * D :] + (xbar * w[: K * D].reshape(K, D)).sum(1), rtol=1e-14)
    f, g = cen.fun_and_grad(v)
    assert f == pytest.approx(obj.fun_and_grad(w)[0], rel=1e-14)
    np.testing.assert_allclose(g, fd_grad(lambda u: cen.fun_and_grad(u)[0], v), rtol=1e-6, atol=1e-8)
    Hc = cen.hess(v)
    H_fd = np.empty((P, P))
    for j in range(P):
        e = np.zeros(P)
        e[j] = H
        H_fd[:, j] = (cen.fun_and_grad(v + e)[1] - cen.fun_and_grad(v - e)[1]) / (2 * H)
    np.testing.assert_allclose(Hc, H_fd, rtol=1e-6, atol=1e-7)
    p = rng.normal(size=P)
    np.testing.assert_allclose(cen.hessp(v, p), Hc @ p, rtol=1e-10, atol=1e-12)
    # the penalty, the L1 term and the bounds are on the same entries (the coefficients)
    np.testing.assert_array_equal(cen.penalized, obj.penalized)
    assert (cen.l1, cen.l2, cen.n_params, cen.sw_sum) == (obj.l1, obj.l2, obj.n_params, obj.sw_sum)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.loss in ("squared", "binomial", "multinomial")],
                         ids=lambda c: c.id)
def test_row_means_are_the_weighted_mean_rows_and_uncouple_the_intercepts_at_the_start(cfg, rng):
    """At zero coefficients these losses curve alike on every row (their curvature depends on the linear
    predictor alone): one Hessian-vector product gives the mean row weighted by the sample and class weights,
    and in the centred variables the Hessian there has no block between coefficients and intercepts."""
    from dask_estimators.objectives.centred import CentredObjective, row_means

    obj, w, (X, y, s) = setup(cfg, rng)
    K = cfg.n_outputs
    weights = s if cfg.class_weight is None else s * np.asarray(cfg.class_weight)[y]
    xbar, (point, f, g) = row_means(obj, w)
    assert np.array_equal(point[: K * D], np.zeros(K * D)) and f == pytest.approx(obj.fun_and_grad(point)[0])
    np.testing.assert_allclose(xbar, np.tile((weights[:, None] * X).sum(0) / weights.sum(), (K, 1)), rtol=1e-10)
    cen = CentredObjective(obj, xbar)
    start = w.copy()
    start[: K * D] = 0.0
    np.testing.assert_allclose(cen.hess(cen.from_inner(start))[: K * D, K * D :], 0.0, atol=1e-12)
