"""The dual kernels of the linear SVMs (objectives/dual.py) and their outer loop (optim/dual_driver.py).

In-process shards (LocalEvaluator): the shard sums equal the whole-data
values, weak duality holds at every round and the gap closes, and the
solutions equal LIBLINEAR's (scikit-learn's LinearSVC/LinearSVR, dual=True)
on 1, 2 and 3 shards.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import svm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.preprocessing import StandardScaler

from dask_estimators.engine import LocalEvaluator
from dask_estimators.objectives.dual import DualSpec, dual_objective, dual_round, dual_state
from dask_estimators.optim.dual_driver import dual_coordinate_ascent
from dual_shards import indexed_shards  # tests/dual_shards.py

CLASSIFICATION = ("hinge", "squared_hinge")


def _scaled(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _shards(X, y, loss, n_outputs, n_shards, sample_weight=None, class_weight=None):
    encoding = "squared_hinge" if loss in CLASSIFICATION else "squared_epsilon_insensitive"
    return indexed_shards(X, y, encoding, n_outputs, n_shards, sample_weight, class_weight)


def _solve(X, y, loss, n_outputs, n_shards, *, C=0.1, bias=1.0, epsilon=0.0, tol=1e-8, max_iter=20_000,
           sample_weight=None, class_weight=None, aggregation="line-search"):
    shards = _shards(X, y, loss, n_outputs, n_shards, sample_weight, class_weight)
    spec = DualSpec(loss, X.shape[1], n_outputs, C=C, bias=bias, epsilon=epsilon, n_shards=n_shards, tol=tol,
                    aggregation=aggregation)
    return dual_coordinate_ascent(LocalEvaluator(shards), spec, max_iter=max_iter, seed=0), shards, spec


def _liblinear_W(est, bias):
    """scikit-learn's fitted LinearSVC/LinearSVR as our W~ = [coef, intercept / bias]."""
    coef = np.atleast_2d(est.coef_)
    return np.column_stack([coef, np.reshape(est.intercept_, (-1,)) / bias * np.ones(len(coef))])


# ------------------------------------------------------- shard sums = whole data
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "epsilon_insensitive", "squared_epsilon_insensitive"])
def test_pieces_and_v_of_shards_sum_to_the_whole_data(loss):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 3, 60) if loss in CLASSIFICATION else rng.normal(size=60) * 3
    K = 3 if loss in CLASSIFICATION else 1
    sw = rng.uniform(0.0, 2.0, 60)
    sw[:5] = 0.0  # rows of weight 0 are not part of the problem
    spec_of = lambda n: DualSpec(loss, 4, K, C=0.7, bias=1.5, epsilon=0.3, n_shards=n)  # noqa: E731
    alpha = rng.uniform(0.0, 0.5, size=(K, 60)) * (1 if loss in CLASSIFICATION else rng.choice([-1, 1], (K, 60)))
    W = rng.normal(size=(K, 5))

    def evaluate(n):
        shards = _shards(X, y, loss, K, n, sample_weight=sw)
        for shard, idx in zip(shards, np.array_split(np.arange(60), n)):
            st = dual_state(shard, spec_of(n))
            st["alpha"][...] = alpha[:, idx]
            yy = st["y"] if loss in CLASSIFICATION else 1.0
            live = st["c"] > 0
            st["alpha"][~live] = 0.0
            Xb = np.column_stack([st["X"], np.full(len(idx), 1.5)])
            st["v"][...] = (st["alpha"] * yy) @ Xb
        return LocalEvaluator(shards)(dual_objective, W, np.ones(K), spec_of(n))

    whole, parts = evaluate(1), evaluate(3)
    for key in ("primal", "dual", "v"):
        np.testing.assert_allclose(parts[key], whole[key], rtol=1e-12, atol=1e-12, err_msg=key)


def test_a_round_leaves_the_weights_equal_to_w_of_alpha():
    X, y = _scaled(load_iris)
    res, shards, spec = _solve(X, y, "hinge", 3, 2, tol=1e-3, max_iter=7)
    # the last step's scale is applied by the final kernel call: every shard's v is its w~(alpha)
    total = np.zeros_like(res.x)
    for shard in shards:
        st = shard.cache["dual_state"]
        Xb = np.column_stack([st["X"], np.ones(len(st["X"]))])
        np.testing.assert_allclose(st["v"], (st["alpha"] * st["y"]) @ Xb, atol=1e-10)
        assert np.all(st["alpha"] >= 0) and np.all(st["alpha"] <= st["c"] + 1e-15)  # hinge: 0 <= alpha <= C_i
        total += st["v"]
    np.testing.assert_allclose(res.x, total, atol=1e-10)


# ----------------------------------------------------------- duality, the gap
@pytest.mark.parametrize("loss, n_shards", [("hinge", 2), ("squared_hinge", 3), ("epsilon_insensitive", 2),
                                            ("squared_epsilon_insensitive", 2)])
def test_weak_duality_every_round_and_the_gap_closes(loss, n_shards):
    if loss in CLASSIFICATION:
        X, y = _scaled(load_breast_cancer)
        res, _, _ = _solve(X, y, loss, 1, n_shards, tol=1e-8)
    else:
        X, y = _scaled(load_diabetes)
        res, _, _ = _solve(X, y.astype(float), loss, 1, n_shards, epsilon=5.0, tol=1e-8, max_iter=400)
    primal = np.array([h["primal"] for h in res.history])
    dual = np.array([h["dual"] for h in res.history])
    scale = abs(primal[0])
    assert np.all(dual <= primal + 1e-9 * scale)
    # each round's step descends on the dual (it never gets worse, beyond rounding)
    assert np.all(np.diff(dual) >= -1e-9 * scale)
    assert res.gap >= -1e-9 * scale
    assert res.gap < primal[0] - dual[0]
    if res.success:
        assert res.gap <= 1e-6 * res.fun


# ---------------------------------------------------------- LIBLINEAR's solution
@pytest.mark.parametrize("n_shards", [1, 2, 3])
@pytest.mark.parametrize("loss", CLASSIFICATION)
def test_binary_equals_liblinear(loss, n_shards):
    X, y = _scaled(load_breast_cancer)
    ref = svm.LinearSVC(loss=loss, dual=True, C=0.1, tol=1e-10, max_iter=100_000).fit(X, y)
    res, _, _ = _solve(X, y, loss, 1, n_shards)
    assert res.success
    np.testing.assert_allclose(res.x, _liblinear_W(ref, 1.0), rtol=1e-5, atol=1e-6)
    if n_shards == 1:  # one shard: LIBLINEAR's iterations (its rule on each pass; no shrinking here)
        assert res.rounds == res.nit


@pytest.mark.parametrize("n_shards", [1, 2])
@pytest.mark.parametrize("loss", CLASSIFICATION)
def test_one_vs_rest_weighted_equals_liblinear(loss, n_shards):
    X, y = _scaled(load_iris)
    sw = np.random.default_rng(3).uniform(0.2, 2.0, len(y))
    cw = {0: 2.0, 2: 0.5}
    ref = svm.LinearSVC(loss=loss, dual=True, C=0.1, intercept_scaling=2.0, class_weight=cw, tol=1e-10,
                        max_iter=100_000).fit(X, y, sample_weight=sw)
    res, _, _ = _solve(X, y, loss, 3, n_shards, bias=2.0, sample_weight=sw, class_weight=[2.0, 1.0, 0.5])
    assert res.success and res.x.shape == (3, 5)
    np.testing.assert_allclose(res.x, _liblinear_W(ref, 2.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_shards", [1, 2])
def test_svr_equals_liblinear(n_shards):
    X, y = _scaled(load_diabetes)
    ref = svm.LinearSVR(loss="epsilon_insensitive", dual=True, C=0.1, epsilon=5.0, tol=1e-10,
                        max_iter=100_000).fit(X, y)
    res, _, _ = _solve(X, y.astype(float), "epsilon_insensitive", 1, n_shards, epsilon=5.0)
    np.testing.assert_allclose(res.x, _liblinear_W(ref, 1.0), rtol=1e-6, atol=1e-6)


def test_squared_svr_one_shard_equals_liblinear():
    X, y = _scaled(load_diabetes)
    ref = svm.LinearSVR(loss="squared_epsilon_insensitive", dual=True, C=0.1, epsilon=5.0, tol=1e-10,
                        max_iter=100_000).fit(X, y)
    res, _, _ = _solve(X, y.astype(float), "squared_epsilon_insensitive", 1, 1, epsilon=5.0, tol=1e-10)
    assert res.success
    np.testing.assert_allclose(res.x, _liblinear_W(ref, 1.0), rtol=1e-7, atol=1e-7)


def test_cocoa_plus_adding_reaches_the_same_solution():
    X, y = _scaled(load_breast_cancer)
    a, _, _ = _solve(X, y, "hinge", 1, 2, aggregation="add", tol=1e-8)
    b, _, _ = _solve(X, y, "hinge", 1, 2, tol=1e-8)
    assert a.success and b.success
    assert all(np.all(h["step"] == 1.0) for h in a.history)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-5, atol=1e-6)


def test_max_iter_zero_and_the_spec_checks():
    X, y = _scaled(load_iris)
    res, _, _ = _solve(X, y, "hinge", 3, 2, max_iter=0)
    assert res.nit == 0 and res.rounds == 0 and not res.success and not np.any(res.x)
    with pytest.raises(ValueError, match="finite positive C"):
        DualSpec("hinge", 3, C=np.inf)
    with pytest.raises(ValueError, match="loss must be one of"):
        DualSpec("log_loss", 3)
    with pytest.raises(ValueError, match="aggregation"):
        DualSpec("hinge", 3, aggregation="average")


def test_round_kernel_contract():
    # the round returns raw sums: v at the start (their sum is W), u the step, the stopping slot of its shard
    X, y = _scaled(load_iris)
    shards = _shards(X, y, "hinge", 3, 2)
    spec = DualSpec("hinge", 4, 3, C=0.1, bias=1.0, n_shards=2)
    out = dual_round(shards[1], np.zeros((3, 5)), np.ones(3), np.ones(3), np.zeros(3), 5, 1, spec)
    assert not np.any(out["v"]) and np.any(out["u"])
    assert not np.any(out["stop"][0]) and np.all(out["stop"][1, 0] >= out["stop"][1, 1])
    assert out["passes"][1].tolist() == [1, 1, 1] and not np.any(out["passes"][0])


# ------------------------------------------------------------------ rows asked for ahead
@pytest.mark.parametrize("layout,kind", [(layout, kind) for layout in ("dense", "csr")
                                         for kind in ("svc", "svc-squared", "svr", "svr-squared", "crammer-singer")
                                         if (layout, kind) != ("csr", "crammer-singer")])  # asks on dense only
@pytest.mark.parametrize("n", [1, 5, 9, 20, 300])
def test_passes_that_ask_for_rows_ahead_step_as_those_that_do_not(layout, kind, n):
    """A pass that asks for the row 8 steps on in its order (shards of 2 MiB and more; a CSR pass for the row
    pointers 16 steps on too) makes the steps of the same pass compiled without asking: the same dual point,
    weights and stopping values, for every loss, on fewer rows than the distances asked (1, 5, 9) and more
    (20, 300), with empty CSR rows among them."""
    import scipy.sparse as sp

    from dask_estimators.objectives import dual
    from dask_estimators.objectives._sparse import index_array
    from dask_estimators.objectives.crammer_singer import _cs_pass

    rng = np.random.default_rng(n)
    p = 30
    X = rng.normal(size=(n, p))
    if layout == "csr":
        X[rng.random((n, p)) < 0.7] = 0.0
        if n > 2:
            X[n // 3] = 0.0  # an empty row
        csr = sp.csr_matrix(X)
        xargs = (csr.data, index_array(csr.indices), index_array(csr.indptr))
    else:
        xargs = (X,)
    sqnorm = np.einsum("ij,ij->i", X, X) + 1.0
    c = rng.uniform(0.05, 0.5, n)
    if n > 2:
        c[n // 2] = 0.0  # a row outside the problem
    perm = rng.permutation(n).astype(np.int64)
    squared = kind.endswith("squared")

    def one_pass(ahead):
        if kind == "crammer-singer":
            K = 3
            y = rng.integers(0, K, n) if ahead is None else one_pass.y
            one_pass.y = y
            alpha, W, U = np.zeros((n, K)), np.zeros((K, p + 1)), np.zeros((K, p + 1))
            e = np.zeros(0, np.int64)
            out = _cs_pass(X, np.zeros(0), e, e, True, y, c, alpha, sqnorm, W, U, 1.0, 1.0, perm, ahead)
            return (out, alpha, W, U)
        if kind.startswith("svc"):
            y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1.0, -1.0)
            alpha, w, u = np.zeros(n), np.zeros(p + 1), np.zeros(p + 1)
            svc = dual._svc_pass if layout == "dense" else dual._svc_pass_csr
            out = svc(*xargs, y, c, alpha, sqnorm, w, u, 1.0, 1.0, squared, perm, ahead)
        else:
            y = X[:, 0] - 0.5 * X[:, 2]
            alpha, w, u = np.zeros(n), np.zeros(p + 1), np.zeros(p + 1)
            svr = dual._svr_pass if layout == "dense" else dual._svr_pass_csr
            out = svr(*xargs, y, c, alpha, sqnorm, w, u, 1.0, 1.0, squared, 0.1, perm, ahead)
        return (out, alpha, w, u)

    plain = one_pass(None)
    asked = one_pass(dual._DUAL_AHEAD)
    assert np.any(plain[1] != 0)  # the pass moved the dual point
    for a, b in zip(asked, plain):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_passes_ask_for_rows_ahead_on_shards_of_2_mib_and_more():
    import scipy.sparse as sp

    from dask_estimators.objectives import dual

    assert dual._dual_ahead(np.empty((2, 10))) is None
    assert dual._dual_ahead(np.empty((1 << 18, 1))) == 8  # 2 MiB
    assert dual._dual_ahead(np.empty((1 << 18, 1), dtype=np.float32)) is None  # 1 MiB
    small = sp.random(1 << 10, 1 << 10, density=0.1, format="csr")  # 1.3 MB of values and indices
    large = sp.random(1 << 12, 1 << 10, density=0.1, format="csr")  # 5 MB
    assert dual._dual_ahead(small) is None and dual._dual_ahead(large) == 8
