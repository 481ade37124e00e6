"""A test helper: bad inputs, the input forms users pass, and scikit-learn's outcome on the same data.

Shared by ``tests/test_bad_input_battery.py`` (the property-based battery)
and usable from a shell to survey the whole grid::

    python tests/bad_inputs.py [ESTIMATOR ...] [-v]   # -v: also where the messages differ

An outcome is ``"fit"`` or the exception's class name, so that ours can be
compared with scikit-learn's on the same data.  ``sklearn_outcome`` fits the
scikit-learn estimator of the same objective on the NumPy form.
"""

from __future__ import annotations

import warnings

import numpy as np

#: our estimator -> (scikit-learn's, task, parameters for a short fit: ours, scikit-learn's)
ESTIMATORS = {
    "LogisticRegression": ("sklearn.linear_model.LogisticRegression", "classification", {}),
    "LinearSVC": ("sklearn.svm.LinearSVC", "classification", {}),
    "MLPClassifier": ("sklearn.neural_network.MLPClassifier", "classification", {"max_iter": 3}),
    "LogisticRegressionCV": ("sklearn.linear_model.LogisticRegressionCV", "classification", {"Cs": 2, "cv": 2}),
    "LinearRegression": ("sklearn.linear_model.LinearRegression", "regression", {}),
    "LinearSVR": ("sklearn.svm.LinearSVR", "regression", {}),
    "MLPRegressor": ("sklearn.neural_network.MLPRegressor", "regression", {"max_iter": 3}),
    "PoissonRegressor": ("sklearn.linear_model.PoissonRegressor", "poisson", {}),
    "GammaRegressor": ("sklearn.linear_model.GammaRegressor", "gamma", {}),
    "TweedieRegressor": ("sklearn.linear_model.TweedieRegressor", "gamma", {"power": 1.5}),
}

#: the bad inputs; "ok" is the control
KINDS = (
    "ok", "y_continuous", "y_multilabel", "y_2d_columns", "single_class", "many_classes",
    "X_complex", "X_strings", "X_bool", "y_strings", "X_3d", "len_y", "len_sw", "rows_0", "features_0",
    "nan_X", "inf_X", "nan_y", "inf_y", "nan_sw", "inf_sw", "negative_sw", "y_domain",
)
#: the input forms
FORMS = ("numpy", "pandas", "dask_array", "dask_unknown_chunks", "dask_dataframe")


def make_case(kind: str, task: str, n: int = 90, d: int = 3, where: int = 0, seed: int = 0):
    """``(X, y, sample_weight)`` as NumPy (y of objects where labels are strings), or None where ``kind``
    does not apply to ``task``.  ``where``: the row of a single bad value (any block)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    z = X @ np.array([1.0, -0.5, 0.25][:d] + [0.0] * max(0, d - 3))
    if task == "classification":
        y = (z > 0).astype(np.int64)
    elif task == "regression":
        y = z + 0.1 * rng.normal(size=n)
    elif task == "poisson":
        y = rng.poisson(np.exp(0.3 * z)).astype(np.float64)
    else:  # gamma: strictly positive
        y = np.exp(0.3 * z) * rng.gamma(2.0, 0.5, size=n)
    sw = rng.uniform(0.5, 1.5, size=n)
    where = where % n
    classifier = task == "classification"
    if kind == "ok":
        pass
    elif kind == "y_continuous":
        if not classifier:
            return None
        y = z + 0.001
    elif kind == "y_multilabel":
        if not classifier:
            return None
        y = np.stack([y, 1 - y * (z > 1)], axis=1)
    elif kind == "y_2d_columns":
        y = np.stack([y, y[::-1]], axis=1).astype(np.float64) if not classifier else np.stack([y, 2 * y], axis=1)
    elif kind == "single_class":
        if not classifier:
            return None
        y = np.zeros(n, dtype=np.int64)
    elif kind == "many_classes":
        if not classifier:
            return None
        y = np.arange(n) % (n // 2 + 3)  # integer labels, more distinct ones than half the rows
    elif kind == "X_complex":
        X = X + 1j * X
    elif kind == "X_strings":
        X = X.astype(str).astype(object)
        X[where, 0] = "a"
    elif kind == "X_bool":
        X = X > 0
    elif kind == "y_strings":
        y = np.where(y > np.median(y), "high", "low").astype(object)
    elif kind == "X_3d":
        X = X.reshape(n, d, 1)
    elif kind == "len_y":
        y = y[:-1]
    elif kind == "len_sw":
        sw = sw[:-1]
    elif kind == "rows_0":
        X, y, sw = X[:0], y[:0], sw[:0]
    elif kind == "features_0":
        X = X[:, :0]
    elif kind in ("nan_X", "inf_X"):
        X[where, where % d] = np.nan if kind == "nan_X" else np.inf
    elif kind in ("nan_y", "inf_y"):
        y = y.astype(np.float64)
        y[where] = np.nan if kind == "nan_y" else -np.inf
    elif kind in ("nan_sw", "inf_sw"):
        sw[where] = np.nan if kind == "nan_sw" else np.inf
    elif kind == "negative_sw":
        sw[where] = -0.25
    elif kind == "y_domain":
        if task == "poisson":
            y[where] = -1.0
        elif task == "gamma":
            y[where] = 0.0
        else:
            return None
    else:
        raise ValueError(kind)
    return X, y, sw


def to_form(form: str, X, y, sw, chunks: int = 3):
    """The case in ``form``, or None where the form cannot hold it (a 3-D X in a dataframe)."""
    if form == "numpy":
        return X, y, sw
    import pandas as pd

    if form == "pandas":
        if X.ndim != 2:
            return None
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
        ys = pd.Series(y, name="y") if y.ndim == 1 else pd.DataFrame(y)
        return df, ys, pd.Series(sw)
    import dask.array as da
    import dask.dataframe as dd

    n = max(1, X.shape[0])
    rows = max(1, -(-n // chunks))
    if form == "dask_array":
        return (da.from_array(X, chunks=(rows,) + X.shape[1:]),
                da.from_array(y, chunks=(max(1, rows),) + y.shape[1:]),
                da.from_array(sw, chunks=max(1, rows)))
    if X.ndim != 2 or X.shape[0] == 0:
        return None
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), npartitions=chunks)
    if form == "dask_unknown_chunks":  # a dask array whose row counts are unknown until computed
        Xd = df.to_dask_array()
        yd = dd.from_pandas(pd.DataFrame(y) if y.ndim > 1 else pd.Series(y), npartitions=chunks).to_dask_array()
        swd = dd.from_pandas(pd.Series(sw), npartitions=chunks).to_dask_array()
        return Xd, yd, swd
    if form == "dask_dataframe":
        ys = dd.from_pandas(pd.DataFrame(y) if y.ndim > 1 else pd.Series(y, name="y"), npartitions=chunks)
        return df, ys, dd.from_pandas(pd.Series(sw), npartitions=chunks)
    raise ValueError(form)


#: Where ours differs from scikit-learn on purpose: (kind) -> (our outcome, the reason)
DIVERGENCES = {
    "many_classes": (
        "ValueError",
        "more classes than half the rows: scikit-learn warns and fits one problem per class; here the fit stops "
        "before any solver starts (dask-estimators.max-class-share), so float-like labels cannot run for hours",
    ),
}


def expected_outcome(name, kind, use_sw, **case):
    """scikit-learn's outcome on the NumPy form, or ours where :data:`DIVERGENCES` says we differ."""
    ref = sklearn_outcome(name, kind, use_sw, **case)
    if ref is None or kind not in DIVERGENCES or ESTIMATORS[name][1] != "classification":
        return ref
    return DIVERGENCES[kind][0], ""


def _sklearn_class(path):
    import importlib

    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def outcome(fit) -> tuple[str, str]:
    """``("fit", "")`` or the exception's ``(class name, first line of its message)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fit()
        except Exception as e:  # noqa: BLE001 - the outcome is the exception
            return type(e).__name__, str(e).splitlines()[0] if str(e) else ""
    return "fit", ""


def sklearn_outcome(name, kind, use_sw, **case):
    path, task, params = ESTIMATORS[name]
    data = make_case(kind, task, **case)
    if data is None:
        return None
    X, y, sw = data
    est = _sklearn_class(path)(**params)
    return outcome(lambda: est.fit(X, y, **({"sample_weight": sw} if use_sw else {})))


def ours_outcome(name, kind, form, use_sw, **case):
    import dask_estimators as de

    path, task, params = ESTIMATORS[name]
    data = make_case(kind, task, **case)
    if data is None:
        return None
    data = to_form(form, *data)
    if data is None:
        return None
    X, y, sw = data
    est = getattr(de, name)(**params)
    return outcome(lambda: est.fit(X, y, **({"sample_weight": sw} if use_sw else {})))


if __name__ == "__main__":  # the survey: every row where ours differs from scikit-learn's
    import sys
    import time

    import distributed

    flags = [a for a in sys.argv[1:] if a.startswith("-")]
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(ESTIMATORS)
    with distributed.Client(n_workers=2, threads_per_worker=1, dashboard_address=None):
        bad = total = 0
        for name in names:
            for kind in KINDS:
                for use_sw in (False, True):
                    if kind.endswith("_sw") and not use_sw:
                        continue
                    ref = expected_outcome(name, kind, use_sw, where=70)
                    if ref is None:
                        continue
                    for form in FORMS:
                        t = time.perf_counter()
                        got = ours_outcome(name, kind, form, use_sw, where=70)
                        dt = time.perf_counter() - t
                        if got is None:
                            continue
                        total += 1
                        if got[0] != ref[0] or dt > 10 or (ref[1] and got[1] != ref[1] and "-v" in flags):
                            bad += 1
                            print(f"{name:22s} {kind:14s} sw={use_sw:d} {form:20s} sk={ref} ours={got} {dt:.1f}s",
                                  flush=True)
        print(f"{bad} of {total} differ")
