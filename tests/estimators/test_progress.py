"""What a fit shows while it runs: ``verbose`` (a line per solver iteration or epoch) and ``progress`` (a tqdm bar).

The linear estimators print one line per solver iteration: exactly
``n_iter_`` lines whose objective and gradient are those of the iterates
(the last line is checked against the objective recomputed here with NumPy
at the fitted coefficients).  ``progress=True`` shows a tqdm bar on stderr,
only when asked; without tqdm it is an ImportError that says what to install,
raised before any cluster work.
"""

import re
import sys

import numpy as np
import pytest
from scipy.special import expit

import dask_estimators as de

LINE = re.compile(
    r"^Iteration (\d+), objective = (\S+), max \|gradient\| = (\S+), (\S+) s$"
)


def _binary(n=400, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y


def _iterations(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("Iteration ")]
    parsed = []
    for ln in lines:
        m = LINE.match(ln)
        assert m, ln
        parsed.append((int(m[1]), float(m[2]), float(m[3]), float(m[4])))
    return parsed


def _logistic_objective_and_grad_max(est, X, y, centred=False):
    """The normalised objective of LogisticRegression (binary, L2) and max |gradient| at the fitted parameters.

    ``centred``: the gradient in the variables lbfgs and newton-cg solve in, the intercept measured at the mean
    row (``c = b + mean(X) @ w``; unweighted rows curve alike at the start): ``g_w - mean(X) * g_b``, ``g_b``.
    """
    n = X.shape[0]
    w, b = est.coef_.ravel(), float(est.intercept_[0])
    t = 2.0 * y - 1.0
    z = X @ w + b
    f = np.mean(np.logaddexp(0.0, -t * z)) + 0.5 * (w @ w) / (est.C * n)
    r = -t * expit(-t * z) / n
    g = np.r_[X.T @ r + w / (est.C * n), r.sum()]
    if centred:
        g[:-1] -= X.mean(axis=0) * g[-1]
    return f, np.max(np.abs(g))


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg", "newton-cholesky"])
def test_logistic_verbose_prints_one_line_per_iteration(solver, capsys):
    X, y = _binary()
    est = de.LogisticRegression(C=0.5, solver=solver, tol=1e-6, verbose=1).fit(X, y)
    out = capsys.readouterr()
    rows = _iterations(out.out)
    assert len(rows) == est.n_iter_[0] >= 2
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    seconds = [r[3] for r in rows]
    assert seconds == sorted(seconds) and seconds[0] >= 0
    # the last line is the fitted model's objective and gradient (the one tol bounds), recomputed here
    f, gmax = _logistic_objective_and_grad_max(est, X, y, centred=solver != "newton-cholesky")
    assert rows[-1][1] == pytest.approx(f, rel=1e-9)
    assert rows[-1][2] == pytest.approx(gmax, rel=5e-3, abs=1e-12)
    assert rows[-1][2] <= 1e-6
    assert rows[-1][1] == pytest.approx(est.fit_stats_["objective"], rel=1e-9)
    if solver == "lbfgs":
        objectives = [r[1] for r in rows]
        assert all(b <= a for a, b in zip(objectives, objectives[1:]))
    # the solver's summary line follows; no bar without progress=True
    assert f"{solver}: {est.n_iter_[0]} iteration(s)" in out.out
    assert "it/s" not in out.err and "%|" not in out.err


@pytest.mark.parametrize(
    "est",
    [
        de.LinearSVC(C=0.5),
        de.LinearSVC(penalty="l1", C=0.5),
        de.LinearRegression(alpha=0.01, l1_ratio=0.5),
        de.LinearRegression(alpha=0.1, solver="newton-cg"),
        de.LinearSVR(C=1.0, loss="squared_epsilon_insensitive", dual=False),
        de.LogisticRegression(l1_ratio=1.0, C=0.2),
    ],
    ids=lambda e: repr(e),
)
def test_every_linear_estimator_prints_n_iter_lines(est, capsys):
    X, y = _binary()
    if not isinstance(est, de.LinearSVC) and not isinstance(est, de.LogisticRegression):
        y = X @ np.arange(1.0, 6.0) + 0.1 * np.random.default_rng(1).normal(size=len(y))
    est.set_params(verbose=1).fit(X, y)
    rows = _iterations(capsys.readouterr().out)
    assert len(rows) == int(np.ravel(est.n_iter_)[0]) >= 1
    assert all(np.isfinite(r[1]) and r[2] >= 0 for r in rows)
    assert rows[-1][1] == pytest.approx(est.fit_stats_["objective"], rel=1e-9)
    if est.get_params().get("solver") in ("lbfgs", "auto") and (
        getattr(est, "l1_ratio", 0) > 0 or getattr(est, "penalty", "l2") == "l1"
    ):  # L-BFGS-B on the split variables: the objective it minimises never increases
        f = [r[1] for r in rows]
        assert all(b <= a for a, b in zip(f, f[1:]))


def test_tight_tol_counts_the_newton_polish(capsys):
    """Below what L-BFGS-B reaches, Newton steps finish the fit; they are iterations and lines too."""
    X, y = _binary()
    est = de.LogisticRegression(tol=1e-13, max_iter=500, verbose=1).fit(X, y)
    rows = _iterations(capsys.readouterr().out)
    assert len(rows) == est.n_iter_[0]
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))


def test_verbose_2_prints_evaluations_too(capsys):
    X, y = _binary()
    est = de.LogisticRegression(verbose=2).fit(X, y)
    out = capsys.readouterr().out
    evaluations = [ln for ln in out.splitlines() if ln.startswith("evaluation ")]
    assert len(_iterations(out)) == est.n_iter_[0]
    assert len(evaluations) >= est.n_iter_[0] + 1  # the start and at least one per iteration


def test_quiet_by_default(capsys):
    X, y = _binary()
    de.LogisticRegression().fit(X, y)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


# LinearSVR's default loss (epsilon_insensitive) runs the dual method: its bar counts the passes over the data
@pytest.mark.parametrize("Estimator", [de.LogisticRegression, de.LinearRegression, de.LinearSVC, de.LinearSVR])
def test_linear_progress_bar(Estimator, capsys):
    X, y = _binary()
    est = Estimator(progress=True).fit(X, y)
    out = capsys.readouterr()
    assert out.out == ""  # the bar alone, on stderr
    n_iter = int(np.ravel(est.n_iter_)[0])
    assert f"{Estimator.__name__}:" in out.err
    assert re.search(rf"\b{n_iter}/{est.max_iter}\b", out.err), out.err


def test_progress_and_verbose_together(capsys):
    X, y = _binary()
    est = de.LogisticRegression(progress=True, verbose=1).fit(X, y)
    out = capsys.readouterr()
    assert len(_iterations(out.out)) == est.n_iter_[0]
    assert f"{est.n_iter_[0]}/{est.max_iter}" in out.err


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_progress_bar_counts_epochs(capfd):
    X, y = _binary()
    est = de.MLPClassifier((8,), max_iter=3, random_state=0, progress=True).fit(X, y)
    captured = capfd.readouterr()
    assert "Iteration" not in captured.out + captured.err  # progress alone prints no lines
    assert "MLPClassifier:" in captured.err and f"{est.n_iter_}/3" in captured.err
    assert "epoch" in captured.err


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_verbose_alone_shows_no_bar(capfd):
    X, y = _binary()
    est = de.MLPRegressor(hidden_layer_sizes=(8,), max_iter=2, random_state=0, verbose=True, strategy="rounds")
    est.fit(X, y.astype(float))
    captured = capfd.readouterr()
    assert "Iteration 2, loss = " in captured.out
    assert "%|" not in captured.err and "epoch/s" not in captured.err


def test_charlstm_progress_bar(capfd):
    names = ["luna", "bella", "max", "charlie", "lucy", "cooper"] * 10
    de.CharLSTM(hidden_size=8, embedding_dim=4, max_epochs=2, random_state=0, progress=True).fit(names)
    captured = capfd.readouterr()
    assert "CharLSTM:" in captured.err and "2/2" in captured.err


@pytest.mark.parametrize(
    "est",
    [de.LogisticRegression(progress=True), de.LinearSVR(progress=True), de.MLPClassifier(progress=True),
     de.CharLSTM(progress=True)],
    ids=lambda e: type(e).__name__,
)
def test_progress_without_tqdm_says_what_to_install(est, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    X, y = _binary()
    args = (["ab", "cd"],) if isinstance(est, de.CharLSTM) else (X, y)
    with pytest.raises(ImportError, match=r"pip install tqdm"):
        est.fit(*args)
    assert not hasattr(est, "n_features_in_") and not hasattr(est, "classes_")  # it failed before any fitting
    # without progress, tqdm is not needed
    if not isinstance(est, (de.MLPClassifier, de.CharLSTM)):
        est.set_params(progress=False).fit(X, y)
