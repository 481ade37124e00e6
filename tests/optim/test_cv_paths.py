"""Independent fits on the splits of one placement (optim.cv_paths), in process over two CPU shards.

A squared loss's Hessian is the same at every point and for every penalty: the fits of one split compute it
once between them, and each fit's result is the one it reaches alone.  Other losses' Hessians are computed at
each of their points.
"""

import numpy as np
import pytest

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard
from dask_estimators.objectives import LinearSpec
from dask_estimators.objectives import cv as CV
from dask_estimators.objectives import linear as lin
from dask_estimators.optim.cv_paths import FoldProblem, independent_fits

N, D, K = 240, 5, 3


class _Counting(LocalEvaluator):
    """A LocalEvaluator that counts the Hessians it computes on a split's rows, and the rounds that share
    every split's."""

    def __init__(self, shards):
        super().__init__(shards)
        self.hessians = self.shared = self.row_sums = 0

    def __call__(self, fn, *args):
        if fn is CV.on_fold and args[1] is lin.hess:
            self.hessians += 1
        self.shared += fn is CV.quadratic_hessians
        self.row_sums += fn is CV.fold_row_sums
        return super().__call__(fn, *args)


def _problem(loss):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)) + 3.0
    z = X @ rng.normal(size=D)
    y = z + rng.normal(size=N) if loss == "squared" else (z + rng.normal(size=N) > np.median(z)).astype(float)
    shards = []
    for rows in (slice(0, 130), slice(130, None)):
        shard = Shard({"X": X[rows], "y": y[rows], "sample_weight": rng.uniform(0.5, 2.0, N)[rows]}, device="cpu")
        shards.append(shard)
    starts = (0, 130)
    for shard, start in zip(shards, starts):
        CV.assign_kfold(shard, [(start, start + shard.n_rows)], N, K)
    evaluate = _Counting(shards)
    sums = evaluate(CV.prepare, loss, 1)
    return evaluate, FoldProblem(evaluate, LinearSpec(loss, D), sums, K)


@pytest.mark.parametrize("loss", ["squared", "binomial"])
def test_a_squared_losss_hessian_is_computed_once_per_split(loss):
    alphas = [1e-3, 1e-1, 1.0]
    runs = [(k, a, 0.0, "newton-cholesky", 1e-10, 50) for a in alphas for k in range(K)]
    evaluate, problem = _problem(loss)
    together = independent_fits(problem, runs)
    shared = evaluate.hessians
    alone = []
    for run in runs:  # each fit on a problem of its own: nothing shared
        evaluate, problem = _problem(loss)
        alone.append(independent_fits(problem, [run])[0])
        assert evaluate.hessians >= 1
    for (x, n_iter, solver), (x_alone, n_alone, _) in zip(together, alone):
        np.testing.assert_allclose(x, x_alone, rtol=1e-10, atol=1e-12)
        assert n_iter == n_alone and solver == "newton-cholesky"
    if loss == "squared":
        assert shared == K  # one per split, for its three fits
    else:
        assert shared == sum(int(n) for _, n, _ in together)  # one at each Newton iteration of each fit


def test_hessians_shared_beforehand_are_the_ones_the_fits_would_compute():
    runs = [(k, a, 0.0, "newton-cholesky", 1e-10, 50) for a in (1e-3, 1.0) for k in range(K)]
    evaluate, problem = _problem("squared")
    alone = independent_fits(problem, runs)
    evaluate, problem = _problem("squared")
    problem.share_quadratic_hessians()  # every split's in one round
    shared = independent_fits(problem, runs)
    assert evaluate.hessians == 0
    problem.share_quadratic_hessians()  # kept already (as at a search's refit): no second pass
    assert evaluate.shared == 1
    for (x, n_iter, _), (x_alone, n_alone, _) in zip(shared, alone):
        np.testing.assert_allclose(x, x_alone, rtol=1e-10, atol=1e-12)
        assert n_iter == n_alone
    evaluate, problem = _problem("binomial")
    problem.share_quadratic_hessians()  # not a quadratic: nothing kept
    independent_fits(problem, runs[:1])
    assert evaluate.hessians > 0


def test_the_splits_mean_rows_are_their_training_rows_weighted_means_as_their_models_see_them():
    """fold_row_sums: every split's (and all rows') weighted sum of the rows in one round, through a split's
    affine map where it has one; row_means divides, and keeps them until the roles or maps change."""
    evaluate, problem = _problem("binomial")
    rng = np.random.default_rng(1)
    X = np.concatenate([sh.get("X").numpy() for sh in evaluate.shards])
    s = np.concatenate([sh.get("sample_weight").numpy() for sh in evaluate.shards])
    test = CV.kfold_test_fold(np.arange(N), N, K)
    np.testing.assert_allclose(problem.row_means(None), [np.average(X, axis=0, weights=s)], rtol=1e-12)
    for k in range(K):
        np.testing.assert_allclose(problem.row_means(k), [np.average(X[test != k], axis=0, weights=s[test != k])],
                                   rtol=1e-12)
    maps = [None, (rng.normal(size=D), rng.uniform(0.5, 2.0, D)), None]
    for shard in evaluate.shards:
        CV.set_affine(shard, maps)
    a, scale = maps[1]
    kept = problem.row_means(1)
    assert not np.allclose(kept, a + scale * kept)  # kept, until forgotten
    problem.forget_hessians()
    mapped = a + scale * np.average(X[test != 1], axis=0, weights=s[test != 1])
    np.testing.assert_allclose(problem.row_means(1), [mapped], rtol=1e-12)


@pytest.mark.parametrize("batched", [True, False])
def test_a_splits_lbfgs_fits_solve_in_centred_variables_with_the_mean_rows_of_one_round(batched, monkeypatch):
    """Columns far from zero (mean 200): each split's L-BFGS fit measures its intercept at the split's mean row,
    from one round for all the splits (not a Hessian product each), and reaches the optimum of the split's own
    objective in a fraction of the iterations it takes in the stored variables."""
    from dask_estimators.optim import scipy_driver

    def far(loss):
        evaluate, problem = _problem(loss)
        for shard in evaluate.shards:
            shard.put("X", shard.get("X") + 197.0)
        return evaluate, problem

    runs = [(k, 1e-2, 0.0, "lbfgs", 1e-8, 5000) for k in range(K)]
    evaluate, problem = far("binomial")
    centred = independent_fits(problem, runs, batched=batched)
    assert evaluate.row_sums == 1
    evaluate, problem = far("binomial")
    monkeypatch.setattr(scipy_driver, "_centred", lambda *a: None)  # in the stored variables
    plain = independent_fits(problem, runs, batched=batched)
    for (x, n_iter, _), (x_plain, n_plain, _) in zip(centred, plain):
        np.testing.assert_allclose(x, x_plain, rtol=1e-4, atol=1e-6)
        assert n_iter * 3 < n_plain, (n_iter, n_plain)


def test_splits_of_columns_near_zero_keep_the_stored_variables(monkeypatch):
    """Columns whose means lie within a standard deviation of zero (scaled data): the fits keep the stored
    variables, and so the iterates of scikit-learn's searches, which do not centre; one column far from zero
    is enough to centre."""
    from dask_estimators.optim import scipy_driver

    runs = [(k, 1e-2, 0.0, "lbfgs", 1e-8, 5000) for k in range(K)]

    def fits(shift, centring=True):
        evaluate, problem = _problem("binomial")
        for shard in evaluate.shards:
            X = shard.get("X").numpy() - 3.0
            X[:, 0] += shift
            shard.put("X", X)
        with monkeypatch.context() as m:
            if not centring:
                m.setattr(scipy_driver, "_centred", lambda *a: None)
            return problem, independent_fits(problem, runs)

    problem, near = fits(0.5)
    assert problem.row_means(0) is None
    _, plain = fits(0.5, centring=False)
    for (x, n_iter, _), (x_plain, n_plain, _) in zip(near, plain):
        np.testing.assert_array_equal(x, x_plain)
        assert n_iter == n_plain
    problem, far = fits(3.0)
    assert problem.row_means(0)[0, 0] == pytest.approx(3.0, abs=0.3)
    _, plain = fits(3.0, centring=False)
    assert [n for _, n, _ in far] != [n for _, n, _ in plain]
