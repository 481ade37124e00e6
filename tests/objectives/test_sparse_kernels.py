"""The linear kernels on a sparse CSR X: equal to the dense kernels, derivatives by finite differences, shard sums.

A shard's sparse X is a torch sparse CSR tensor (float64, int32 indices, canonical), built here
without the engine.  Every loss is checked with and without intercept and sample weights, on the
numba CSR kernels and on the torch sparse path; the dense kernels on the same matrix, densified
in the test only, are the reference.
"""

from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard, to_host
from dask_estimators.objectives import LinearObjective, LinearSpec
from dask_estimators.objectives import _fused
from dask_estimators.objectives import linear as lin
from dask_estimators.objectives._sparse import csr_parts, is_sparse
from dask_estimators.objectives.losses import get_loss
from dask_estimators.objectives.targets import prepare_targets
from sparse_guard import forbid_densify  # tests/sparse_guard.py

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning"),
]

N, D = 37, 9
L2 = 0.3
H = 1e-6
KINK_GAP = 1e-3


@dataclass(frozen=True)
class Case:
    id: str
    loss: str
    n_outputs: int = 1
    n_classes: int | None = None  # None: regression
    class_weight: tuple | None = None
    epsilon: float = 0.0
    params: tuple = ()
    positive: bool = False  # identity link with power > 0: the predictions must stay positive


CASES = [
    Case("squared", "squared"),
    Case("squared-2out", "squared", 2),
    Case("eps-insensitive", "squared_epsilon_insensitive", epsilon=0.2),
    Case("binomial", "binomial", n_classes=2),
    Case("binomial-cw", "binomial", n_classes=2, class_weight=(0.7, 1.6)),
    Case("multinomial", "multinomial", 3, n_classes=3),
    Case("multinomial-cw", "multinomial", 3, n_classes=3, class_weight=(1.0, 2.0, 0.5)),
    Case("hinge-binary", "squared_hinge", 1, n_classes=2),
    Case("hinge-ovr-cw", "squared_hinge", 3, n_classes=3, class_weight=(1.0, 2.5, 0.4)),
    Case("poisson", "poisson"),
    Case("gamma", "gamma"),
    Case("tweedie-1.5", "tweedie", params=(("link", "log"), ("power", 1.5))),
    Case("tweedie-3-fisher", "tweedie", params=(("link", "log"), ("power", 3.0))),
    Case("tweedie-0-identity", "tweedie", params=(("link", "identity"), ("power", 0.0))),
    Case("tweedie-1.5-identity", "tweedie", params=(("link", "identity"), ("power", 1.5)), positive=True),
]
SEPARABLE_ONE_OUTPUT = [c for c in CASES if c.n_outputs == 1 and c.loss != "squared_hinge"]


def _backends(case):
    """The CSR paths a loss has: the numba kernels where it has a code, the torch sparse products always."""
    return (["fused"] if _has_kernel(case) else []) + ["torch"]


def _has_kernel(case):
    """Whether the loss has a numba kernel (every loss with a code, and Tweedie with the log link, any power)."""
    return get_loss(case.loss, epsilon=case.epsilon, **dict(case.params)).kernel() is not None


def _params(cases, intercepts=(True, False), weights=(True, False)):
    out = []
    for c in cases:
        for b in _backends(c):
            for fi in intercepts:
                if c.positive and not fi:
                    continue  # an empty row would predict 0, outside the identity link's domain
                for sw in weights:
                    name = f"{c.id}-{b}-{'icpt' if fi else 'noicpt'}-{'sw' if sw else 'nosw'}"
                    out.append(pytest.param(c, b, fi, sw, id=name))
    return out


# ------------------------------------------------------------------ helpers
def make_csr(rng, n=N, d=D, positive=False, density=0.3):
    """A canonical CSR with an empty first row and values of both signs (positive ones when asked)."""
    rvs = (lambda k: rng.uniform(0.2, 1.0, k)) if positive else (lambda k: rng.normal(scale=0.8, size=k))
    A = sp.random(n, d, density=density, format="csr", random_state=rng, data_rvs=rvs)
    A = A.tolil()
    A[0, :] = 0.0
    A = A.tocsr()
    A.eliminate_zeros()
    A.sum_duplicates()
    A.sort_indices()
    return A


def torch_csr(A, dtype=torch.float64):
    return torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)),
        torch.from_numpy(A.indices.astype(np.int64)),
        torch.from_numpy(A.data).to(dtype),
        size=A.shape,
    )


def make_targets(case, A, rng):
    n = A.shape[0]
    if case.n_classes is not None:
        y = np.arange(n) % case.n_classes
        rng.shuffle(y)
        return y
    loss = get_loss(case.loss, **dict(case.params))
    beta = rng.uniform(0.1, 0.5, size=A.shape[1]) if case.positive else rng.normal(scale=0.4, size=A.shape[1])
    eta = A @ beta + (0.5 if case.positive else 0.3)
    if case.loss in ("squared", "squared_epsilon_insensitive"):
        y = eta[:, None] + 0.5 * rng.normal(size=(n, case.n_outputs))
        return y[:, 0] if case.n_outputs == 1 else y
    mu = loss.inverse_link(eta)
    if case.loss == "poisson":
        return rng.poisson(mu).astype(float)
    if dict(case.params).get("power") == 0.0:
        return mu + rng.normal(size=n)
    y = rng.gamma(2.0, mu / 2.0)
    if case.id == "tweedie-1.5":
        y[::4] = 0.0
    return y


def make_shard(case, X, y, s):
    arrays = {"X": X, "y": y}
    if s is not None:
        arrays["sample_weight"] = s
    shard = Shard(arrays, device="cpu")
    cw = None if case.class_weight is None else np.asarray(case.class_weight)
    prepare_targets(shard, case.loss, case.n_outputs, cw)
    return shard


def make_spec(case, fit_intercept, backend, d=D):
    return LinearSpec(case.loss, d, case.n_outputs, fit_intercept, case.epsilon, backend=backend,
                      loss_params=case.params)


def draw_point(case, A, fit_intercept, rng, scale=0.3):
    K, d = case.n_outputs, A.shape[1]
    if case.positive:
        return np.concatenate([rng.uniform(0.05, 0.3, size=K * d), np.full(K, 0.5)])
    return scale * rng.normal(size=K * (d + int(fit_intercept)))


def data(case, rng, weighted, n=N):
    A = make_csr(rng, n=n, positive=case.positive)
    y = make_targets(case, A, rng)
    s = rng.uniform(0.2, 2.0, size=n) if weighted else None
    return A, y, s


def kernels(shard, w, p, spec, inference=False):
    """Every kernel's raw sums at ``w`` (and ``p``), as NumPy."""
    loss, grad = to_host(lin.value_grad(shard, torch.as_tensor(w), spec))
    out = {"loss": loss, "grad": grad, "curv": np.array(shard.cache["linear_curv"]),
           "hessp": to_host(lin.hessp(shard, torch.as_tensor(p), spec)), "hess": to_host(lin.hess(shard, spec))}
    if inference:
        for name, v in zip(("fisher", "observed", "meat", "pearson"),
                           to_host(lin.inference_sums(shard, torch.as_tensor(w), spec))):
            out[name] = v
    return out


def assert_same(got, want, rtol=1e-12):
    for k, v in want.items():
        v = np.asarray(v)
        scale = np.max(np.abs(v)) if v.size else 0.0
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=rtol * scale, err_msg=k)


# ------------------------------------------------------------------ the contract's helpers
def test_is_sparse_and_csr_parts_are_views(rng):
    A = make_csr(rng)
    X = torch_csr(A)
    assert is_sparse(X) and not is_sparse(torch.from_numpy(A.toarray())) and not is_sparse(A)
    data, indices, indptr = csr_parts(X)
    np.testing.assert_array_equal(indptr, A.indptr)
    np.testing.assert_array_equal(indices, A.indices)
    data[0] = 123.0  # a view: the tensor sees the write
    assert X.values()[0].item() == 123.0
    with pytest.raises(TypeError, match="sparse CSR"):
        csr_parts(torch.zeros(2, 2))


def test_shard_holds_sparse_x_by_its_arrays(rng):
    A = make_csr(rng, n=50, d=1 << 20, density=1e-5)
    shard = Shard({"X": torch_csr(A), "y": np.zeros(50)}, device="cpu")
    assert shard.n_rows == 50 and is_sparse(shard.get("X"))
    # the CSR's arrays and y, not the 50 x 2^20 dense size
    assert shard.__sizeof__() < 8 * (A.nnz * 2 + 51 + 50) + 1000


# ------------------------------------------------------------------ CSR = dense
@pytest.mark.parametrize("case,backend,fit_intercept,weighted", _params(CASES))
def test_csr_kernels_equal_dense_kernels(case, backend, fit_intercept, weighted, rng):
    """value, gradient, curvature, Hessian product and dense Hessian on CSR equal the dense kernels to 1e-12."""
    A, y, s = data(case, rng, weighted)
    spec = make_spec(case, fit_intercept, backend)
    w = draw_point(case, A, fit_intercept, rng)
    p = rng.normal(size=spec.n_params)
    sparse = make_shard(case, torch_csr(A), y, s)
    dense = make_shard(case, A.toarray(), y, s)
    assert lin._use_fused(sparse.get("X"), spec) == (backend == "fused")
    inference = case in SEPARABLE_ONE_OUTPUT
    got, want = kernels(sparse, w, p, spec, inference), kernels(dense, w, p, spec, inference)
    assert np.isfinite(got["loss"]) and np.all(np.isfinite(got["grad"]))
    assert_same(got, want)


# ------------------------------------------------------------------ the two CSR paths
@pytest.mark.parametrize("case", [c for c in CASES if _has_kernel(c)], ids=lambda c: c.id)
@pytest.mark.parametrize("n", [1, 2, 300])
def test_numba_and_torch_csr_paths_agree(case, n, rng):
    """The numba CSR kernels and torch's sparse products: same raw sums, curvature, products, Hessian.

    A few rows are scaled by 400, so that the binomial and multinomial losses reach their far tails (where they
    stay finite); for the log-link GLMs, whose losses are infinite there (``exp`` of hundreds), by 20."""
    A, y, s = data(case, rng, True, n=n)
    tail = 20.0 if case.loss in ("poisson", "gamma", "tweedie") else 400.0
    A = sp.diags(np.where(np.arange(n) < 3, tail, 1.0)) @ A
    A = A.tocsr()
    w = draw_point(case, A, True, rng, scale=1.0)
    p = rng.normal(size=len(w))
    got = kernels(make_shard(case, torch_csr(A), y, s), w, p, make_spec(case, True, "fused"))
    want = kernels(make_shard(case, torch_csr(A), y, s), w, p, make_spec(case, True, "torch"))
    assert np.isfinite(got["loss"])
    assert_same(got, want, rtol=1e-11)


# ------------------------------------------------------------------ derivatives
def _away_from_kinks(case, A, y, w, fit_intercept):
    if case.loss not in ("squared_hinge", "squared_epsilon_insensitive"):
        return True
    K, d = case.n_outputs, A.shape[1]
    Z = A @ w[: K * d].reshape(K, d).T + (w[K * d :] if fit_intercept else 0.0)
    if case.loss == "squared_hinge":
        T = np.where(y == 1, 1.0, -1.0)[:, None] if K == 1 else np.where(np.eye(K)[y] == 1, 1.0, -1.0)
        return bool(np.all(np.abs(1.0 - T * Z) > KINK_GAP))
    return bool(np.all(np.abs(np.abs(Z - y[:, None]) - case.epsilon) > KINK_GAP))


def _fd(f, w):
    g = np.empty_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = H
        g[j] = (f(w + e) - f(w - e)) / (2 * H)
    return g


@pytest.mark.parametrize("case,backend,fit_intercept,weighted", _params(CASES, weights=(True,)))
def test_gradient_and_hessp_by_finite_differences(case, backend, fit_intercept, weighted, rng):
    A, y, s = data(case, rng, weighted)
    spec = make_spec(case, fit_intercept, backend)
    obj = LinearObjective(LocalEvaluator([make_shard(case, torch_csr(A), y, s)]), spec, l2=L2)
    for _ in range(200):
        w = draw_point(case, A, fit_intercept, rng)
        if _away_from_kinks(case, A, y, w, fit_intercept):
            break
    f, g = obj.fun_and_grad(w)
    fd = _fd(lambda v: obj.fun_and_grad(v)[0], w)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7 * max(1.0, np.abs(fd).max()))
    p = rng.normal(size=obj.n_params)
    t = 1e-6
    hp_fd = (obj.fun_and_grad(w + t * p)[1] - obj.fun_and_grad(w - t * p)[1]) / (2 * t)
    hp = obj.hessp(w, p)
    loss = get_loss(case.loss, **dict(case.params))
    if getattr(loss, "fisher", False):  # Fisher scoring: the expected curvature, not the derivative of the gradient
        return
    np.testing.assert_allclose(hp, hp_fd, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(hp_fd).max()))
    np.testing.assert_allclose(obj.hess(w) @ p, hp, rtol=1e-10, atol=1e-12 * np.abs(hp).max())


# ------------------------------------------------------------------ shards
@pytest.mark.parametrize("case,backend,fit_intercept,weighted", _params(CASES, intercepts=(True,), weights=(True,)))
def test_three_row_split_csr_shards_sum_to_the_whole(case, backend, fit_intercept, weighted, rng):
    A, y, s = data(case, rng, weighted)
    spec = make_spec(case, fit_intercept, backend)
    bounds = [0, 7, 19, N]
    parts = [make_shard(case, torch_csr(A[a:b]), y[a:b], s[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    split = LinearObjective(LocalEvaluator(parts), spec, l2=L2)
    whole = LinearObjective(LocalEvaluator([make_shard(case, torch_csr(A), y, s)]), spec, l2=L2)
    w = draw_point(case, A, fit_intercept, rng)
    p = rng.normal(size=spec.n_params)

    def results(obj):
        f, g = obj.fun_and_grad(w)
        return {"S": obj.sw_sum, "n": obj.n_samples, "f": f, "g": g, "hessp": obj.hessp(w, p), "hess": obj.hess(w)}

    assert_same(results(split), results(whole))


# ------------------------------------------------------------------ never densified
def test_no_dense_copy_of_x_is_made(monkeypatch, rng):
    """No kernel turns the (n, d) CSR into a dense array, on either path."""
    n, d = 41, 13
    real = torch.Tensor.to_dense

    def guarded(self, *a, **k):
        if tuple(self.shape) == (n, d):
            raise AssertionError("X was densified")
        return real(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to_dense", guarded)
    monkeypatch.setattr(sp.csr_matrix, "toarray", lambda *a, **k: (_ for _ in ()).throw(AssertionError("toarray")))
    for case in (CASES[3], CASES[5], CASES[9]):
        A = make_csr(rng, n=n, d=d)
        y = make_targets(case, A, rng)
        for backend in _backends(case):
            shard = make_shard(case, torch_csr(A), y, None)
            spec = make_spec(case, True, backend, d=d)
            w = draw_point(case, A, True, rng)
            kernels(shard, w, np.ones_like(w), spec, inference=case.n_outputs == 1)


@pytest.mark.parametrize("backend", ["fused", "torch"])
def test_kernels_on_a_csr_whose_dense_form_would_not_fit(backend, rng):
    """2^17 rows x 2^22 columns, 4 TiB if densified: gradient and Hessian product in O(nnz + d) memory.

    The reference is scipy's CSR products (``A @ w``, ``A.T @ r``), which never densify either."""
    n, d = 1 << 17, 1 << 22
    start = rng.integers(0, d - 3, size=n)
    indices = (start[:, None] + np.array([0, 1, 2])).reshape(-1)  # three increasing columns per row
    indptr = np.arange(0, 3 * n + 1, 3, dtype=np.int64)
    vals = rng.normal(size=3 * n)
    A = sp.csr_matrix((vals, indices, indptr), shape=(n, d))
    X = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices), torch.from_numpy(vals),
                                size=(n, d))
    y = (rng.uniform(size=n) < 0.5).astype(np.int64)
    shard = Shard({"X": X, "y": y}, device="cpu")
    prepare_targets(shard, "binomial", 1)
    spec = LinearSpec("binomial", d, 1, True, backend=backend)
    w = np.zeros(spec.n_params)
    w[rng.integers(0, d, size=1000)] = rng.normal(size=1000)
    w[-1] = 0.2
    loss, g = to_host(lin.value_grad(shard, torch.as_tensor(w), spec))
    v = rng.normal(size=spec.n_params)
    hp = to_host(lin.hessp(shard, torch.as_tensor(v), spec))
    z = A @ w[:-1] + w[-1]
    prob = 1.0 / (1.0 + np.exp(-z))
    np.testing.assert_allclose(loss, (np.logaddexp(0.0, z) - y * z).sum(), rtol=1e-12)
    r = prob - y
    np.testing.assert_allclose(g, np.append(A.T @ r, r.sum()), rtol=1e-10, atol=1e-10 * np.abs(r).sum())
    q = prob * (1.0 - prob) * (A @ v[:-1] + v[-1])
    np.testing.assert_allclose(hp, np.append(A.T @ q, q.sum()), rtol=1e-10, atol=1e-10 * np.abs(q).sum())


# ------------------------------------------------------------------ float32 and the backend choice
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_float32_csr_is_read_as_it_is_and_summed_in_float64(backend, rng):
    """float32 CSR values take the numba kernels (or, asked, torch's products); the sums are carried in float64
    and equal those of float64 values of the same numbers (to rounding; to float32 rounding on torch)."""
    case = CASES[3]
    A, y, s = data(case, rng, True)
    A = A.astype(np.float32)
    spec = make_spec(case, True, backend)
    w = draw_point(case, A.astype(np.float64), True, rng)
    X32 = torch_csr(A, torch.float32)
    assert lin._use_fused(X32, spec) == (backend == "auto")
    l32, g32 = to_host(lin.value_grad(make_shard(case, X32, y, s), torch.as_tensor(w), spec))
    assert np.asarray(g32).dtype == np.float64
    l64, g64 = to_host(lin.value_grad(make_shard(case, torch_csr(A.astype(np.float64)), y, s), torch.as_tensor(w),
                                      make_spec(case, True, "auto")))
    rtol = 1e-12 if backend == "auto" else 2e-6
    np.testing.assert_allclose(float(l32), l64, rtol=rtol)
    np.testing.assert_allclose(g32, g64, rtol=rtol, atol=rtol * np.abs(g64).max())


def test_sparse_backend_choice(rng):
    X = torch_csr(make_csr(rng))
    assert lin._use_fused(X, LinearSpec("binomial", D))  # numba CSR kernels where they exist
    assert lin._use_fused(X, LinearSpec("multinomial", D, 3))
    assert lin._use_fused(X, LinearSpec("poisson", D))
    assert lin._use_fused(X, LinearSpec("tweedie", D, loss_params=(("power", 1.5),)))  # every log-link power
    identity = (("link", "identity"), ("power", 1.5))
    assert not lin._use_fused(X, LinearSpec("tweedie", D, loss_params=identity))  # no numba kernel: torch
    assert not lin._use_fused(X, LinearSpec("binomial", D, backend="torch"))
    with pytest.raises(ValueError, match="fused kernel"):
        lin._use_fused(X, LinearSpec("tweedie", D, loss_params=identity, backend="fused"))


# ------------------------------------------------------------------ the SVM dual passes
DUAL = ["hinge", "squared_hinge", "epsilon_insensitive", "squared_epsilon_insensitive"]


def _dual_shards(X, y, loss, K, n_shards, sw=None, cw=None):
    from dask_estimators.objectives.dual import set_shard_index

    shards = []
    for i, idx in enumerate(np.array_split(np.arange(X.shape[0]), n_shards)):
        Xi = torch_csr(X[idx]) if sp.issparse(X) else X[idx]
        arrays = {"X": Xi, "y": y[idx]}
        if sw is not None:
            arrays["sample_weight"] = sw[idx]
        shard = Shard(arrays, device="cpu")
        encoding = "squared_hinge" if loss in ("hinge", "squared_hinge") else "squared_epsilon_insensitive"
        prepare_targets(shard, encoding, K, cw)
        set_shard_index(shard, i)
        shards.append(shard)
    return shards


def _dual_data(loss, rng, n=150, d=40):
    A = make_csr(rng, n=n, d=d, density=0.15)
    if loss in ("hinge", "squared_hinge"):
        y = np.argmax(A @ rng.normal(size=(d, 3)) + 0.3 * rng.normal(size=(n, 3)), axis=1)
        return A, y, 3
    return A, A @ rng.normal(size=d) + 0.2 * rng.normal(size=n), 1


@pytest.mark.parametrize("n_shards", [1, 3])
@pytest.mark.parametrize("loss", DUAL)
def test_dual_passes_on_csr_equal_the_dense_passes(loss, n_shards, rng):
    """Dual coordinate ascent on CSR shards: the same rounds, dual state and primal w as on the dense matrix."""
    from dask_estimators.objectives.dual import DualSpec
    from dask_estimators.optim.dual_driver import dual_coordinate_ascent

    A, y, K = _dual_data(loss, rng)
    sw = rng.uniform(0.0, 2.0, A.shape[0])
    sw[:4] = 0.0
    cw = np.array([2.0, 1.0, 0.5]) if K == 3 else None
    spec = DualSpec(loss, A.shape[1], K, C=0.5, bias=1.5, epsilon=0.1, n_shards=n_shards, tol=1e-6)
    runs = []
    for X in (A, A.toarray()):
        shards = _dual_shards(X, y, loss, K, n_shards, sw, cw)
        res = dual_coordinate_ascent(LocalEvaluator(shards), spec, max_iter=30, seed=0)
        runs.append((res, shards))
    (rs, ss), (rd, sd) = runs
    assert rs.rounds == rd.rounds and rs.nit == rd.nit
    np.testing.assert_allclose(rs.x, rd.x, rtol=1e-12, atol=1e-12 * np.abs(rd.x).max())
    for key in ("primal", "dual"):
        np.testing.assert_allclose([h[key] for h in rs.history], [h[key] for h in rd.history], rtol=1e-11,
                                   err_msg=key)
    for a, b in zip(ss, sd):
        sa, sb = a.cache["dual_state"], b.cache["dual_state"]
        assert sp.issparse(sa["X"]) and isinstance(sb["X"], np.ndarray)
        np.testing.assert_allclose(sa["sqnorm"], sb["sqnorm"], rtol=1e-14)
        np.testing.assert_allclose(sa["alpha"], sb["alpha"], rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(sa["v"], sb["v"], rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_dual_on_csr_equals_liblinear_on_the_same_csr(loss, rng):
    """LIBLINEAR (scikit-learn's LinearSVC, dual=True) on the same scipy CSR gives the same W~."""
    from sklearn import svm

    from dask_estimators.objectives.dual import DualSpec
    from dask_estimators.optim.dual_driver import dual_coordinate_ascent

    A, y, _ = _dual_data(loss, rng, n=200)
    y = (y == 0).astype(int)
    ref = svm.LinearSVC(loss=loss, dual=True, C=0.5, tol=1e-10, max_iter=200_000).fit(A, y)
    spec = DualSpec(loss, A.shape[1], 1, C=0.5, bias=1.0, n_shards=1, tol=1e-9)
    res = dual_coordinate_ascent(LocalEvaluator(_dual_shards(A, y, loss, 1, 1)), spec, max_iter=20_000, seed=0)
    assert res.success
    want = np.column_stack([ref.coef_, ref.intercept_])
    np.testing.assert_allclose(res.x, want, rtol=1e-5, atol=1e-6)


def test_dual_state_keeps_the_csr_sparse(rng):
    from dask_estimators.objectives.dual import DualSpec, dual_state

    A, y, K = _dual_data("hinge", rng)
    (shard,) = _dual_shards(A, y, "hinge", K, 1)
    st = dual_state(shard, DualSpec("hinge", A.shape[1], K, bias=2.0))
    assert sp.issparse(st["X"]) and st["X"].nnz == A.nnz
    assert np.shares_memory(st["X"].data, csr_parts(shard.get("X"))[0])  # views, not copies
    np.testing.assert_allclose(st["sqnorm"], np.asarray(A.multiply(A).sum(1)).ravel() + 4.0, rtol=1e-14)


# ------------------------------------------------------------------ cross-validation kernels
def test_take_rows_of_a_csr(rng):
    from dask_estimators.objectives._sparse import take_rows

    A = make_csr(rng)
    idx = np.array([5, 0, 36, 5, 12])  # repeats and the empty row 0 included
    got = take_rows(torch_csr(A), torch.from_numpy(idx))
    want = A[idx]
    np.testing.assert_array_equal(got.crow_indices().numpy(), want.indptr)
    np.testing.assert_array_equal(got.col_indices().numpy(), want.indices)
    np.testing.assert_array_equal(got.values().numpy(), want.data)
    assert take_rows(torch_csr(A), torch.zeros(0, dtype=torch.int64)).shape == (0, D)


CV_CASES = [c for c in CASES if c.id in ("squared", "binomial-cw", "multinomial", "poisson")]


@pytest.mark.parametrize("case", CV_CASES, ids=lambda c: c.id)
def test_cv_kernels_on_csr_equal_dense(case, rng):
    """fold_value_grad_many, the fold views and the held-out sums on a CSR shard equal those on the dense one."""
    from dask_estimators.objectives import cv

    A, y, s = data(case, rng, True)
    n_splits = 3
    roles = np.where(np.arange(N)[None, :] % n_splits == np.arange(n_splits)[:, None], cv.TEST, cv.TRAIN)
    cw = None if case.class_weight is None else np.asarray(case.class_weight)
    spec = make_spec(case, True, "auto")
    ws = rng.normal(scale=0.3, size=(3, spec.n_params))
    folds = [0, 2, None]
    regression = {"squared": ["squared_error", "r2"], "poisson": ["squared_error"]}
    metrics = regression.get(case.loss, ["accuracy", "log_loss"])
    out = []
    for X in (torch_csr(A), A.toarray()):
        arrays = {"X": X, "y": y, "sample_weight": s}
        shard = Shard(arrays, device="cpu")
        cv.set_roles(shard, roles.astype(np.int8))
        sums = cv.prepare(shard, case.loss, case.n_outputs, cw)
        losses, grads = to_host(cv.fold_value_grad_many(shard, folds, torch.as_tensor(ws), spec))
        on_fold = to_host(cv.on_fold(shard, 1, lin.value_grad, torch.as_tensor(ws[0]), spec))
        held = {m: to_host(cv.heldout_sums(shard, 1, ws, spec, m)) for m in metrics}
        out.append({"sums": sums, "losses": losses, "grads": grads, "fold_loss": on_fold[0], "fold_grad": on_fold[1],
                    **{f"held {m}": v for m, v in held.items()}})
    assert_same(out[0], out[1])


# ------------------------------------------------------------------ in a worker process
def _kernels_in_worker(A, y, s, case, w, p, backend):
    """Task body: a CSR shard on the worker, its kernels run with every densifying call made to raise."""
    from dask_estimators.engine.data._worker import run_kernel

    shard = make_shard(case, torch_csr(A), y, s)
    spec = make_spec(case, True, backend)
    # the shared guard, which restores the classes as they were (assigning the looked-up methods back, as
    # this task once did, left csr_matrix a toarray of its own that hid later patches of its bases)
    forbid_densify(True)
    try:
        return (run_kernel(lin.value_grad, shard, w, spec), run_kernel(lin.hessp, shard, p, spec),
                run_kernel(lin.weight_sum, shard), lin._use_fused(shard.get("X"), spec))
    finally:
        forbid_densify(False)


@pytest.mark.parametrize("case", [CASES[4], CASES[5], CASES[11]], ids=lambda c: c.id)
def test_csr_kernels_in_a_worker_process_never_densify(case, client, rng):
    """On a cluster worker (another process, several threads allowed) the CSR kernels run without any
    to_dense/toarray and give the raw sums of the dense kernels run here."""
    A, y, s = data(case, rng, True)
    spec = make_spec(case, True, "auto")
    w, p = draw_point(case, A, True, rng), rng.normal(size=spec.n_params)
    dense = make_shard(case, A.toarray(), y, s)
    vg = to_host(lin.value_grad(dense, torch.as_tensor(w), spec))
    want = {"loss": vg[0], "grad": vg[1], "hessp": to_host(lin.hessp(dense, torch.as_tensor(p), spec))}
    S_want = lin.weight_sum(dense)[0]
    for backend in _backends(case):
        (loss, grad), hp, (S, n), fused = client.submit(_kernels_in_worker, A, y, s, case, w, p, backend,
                                                        pure=False).result()
        assert fused == (backend == "fused") and n == N
        np.testing.assert_allclose(S, S_want, rtol=1e-12)
        assert_same({"loss": loss, "grad": grad, "hessp": hp}, want)


@pytest.mark.parametrize("weighted", [True, False], ids=["sw", "nosw"])
def test_alpha_grid_sums_on_csr_equal_dense(weighted, rng):
    """LinearRegressionCV's alpha-grid kernel (X^T s y, sum s x, sum s y, sum s) on a CSR shard."""
    from dask_estimators.objectives.cv import xy_sums as _xy_sums

    case = CASES[0]
    A, y, s = data(case, rng, weighted)
    got, want = (to_host(_xy_sums(make_shard(case, X, y, s))) for X in (torch_csr(A), A.toarray()))
    sv = np.ones(N) if s is None else s
    np.testing.assert_allclose(want[0], A.T @ (sv * y), rtol=1e-12)
    assert_same(dict(enumerate(got)), dict(enumerate(want)))


@pytest.mark.parametrize("loss, K", [("binomial", 1), ("squared", 2), ("multinomial", 3)])
def test_csr_kernels_take_int32_and_int64_indices_alike(loss, K):
    """int32 (a shard's, where they fit) and int64 indices (past 2^31 - 1) give the same bits."""
    rng = np.random.default_rng(3)
    A = sp.random(40, 11, density=0.3, format="csr", random_state=3)
    y = (np.arange(40) % 3).astype(float) if loss == "multinomial" else rng.integers(0, 2, (40, K)).astype(float)
    W, b = rng.normal(size=(K, 11)), rng.normal(size=K)
    out = {}
    for itype in (np.int32, np.int64):
        arrays = (A.data, A.indices.astype(itype), A.indptr.astype(itype), 11)
        curv = np.empty((40, K))
        total, gW, gb = _fused.csr_value_grad(*arrays, y.reshape(40, -1), None, W, b, loss, 0.0, curv)
        hW, hb = _fused.csr_hessp(*arrays, None, curv, W, b, loss)
        out[itype] = (total, gW, gb, hW, hb)
    for got, want in zip(out[np.int32], out[np.int64]):
        np.testing.assert_array_equal(got, want)
