"""Workflows with data that already lives in Dask, against scikit-learn on the same data in pandas.

All fits run on the session's real process-based LocalCluster (2 workers).
"""

import re

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn import linear_model as sklm

import dask_estimators as de

TIGHT = dict(tol=1e-10, max_iter=1000)


def _frame(rng, n=2000, p=20):
    X = rng.standard_normal((n, p))
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(p)])
    df["target"] = (X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    return df


def test_parquet_workflow_with_fused_target_partitions(client, rng, tmp_path):
    """dd.read_parquet, then X = drop(target), y = [target]: Dask's optimizer gives y fewer partitions than X."""
    df = _frame(rng)
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 8)):
        df.iloc[rows].to_parquet(tmp_path / f"part{i}.parquet")
    ddf = dd.read_parquet(str(tmp_path))
    X, y = ddf.drop(columns="target"), ddf["target"]
    assert y.optimize().npartitions < X.optimize().npartitions  # the case this test is about

    est = de.LogisticRegression(**TIGHT).fit(X, y)
    ref = sklm.LogisticRegression(**TIGHT).fit(df.drop(columns="target"), df["target"])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(est.feature_names_in_, ref.feature_names_in_)
    np.testing.assert_array_equal(est.classes_, ref.classes_)


def _with_column(rng, kind, n=400):
    X = rng.standard_normal((n, 3))
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    if kind == "categorical-int":
        df["d"] = pd.Categorical(rng.integers(0, 3, n))
    elif kind == "categorical-str":
        df["d"] = pd.Categorical(rng.choice(["x", "y"], n))
    elif kind == "str":
        df["d"] = rng.choice(["x", "y"], n).astype(object)
    elif kind == "bool":
        df["d"] = rng.random(n) > 0.5
    elif kind == "int":
        df["d"] = rng.integers(0, 5, n)
    y = (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(int)
    return df, y


@pytest.mark.parametrize("kind", ["categorical-int", "categorical-str", "str", "bool", "int"])
def test_dataframe_column_dtypes_behave_as_scikit_learn(client, rng, kind):
    df, y = _with_column(rng, kind)
    ddf, ys = dd.from_pandas(df, npartitions=3), dd.from_pandas(pd.Series(y), npartitions=2)
    try:
        ref = sklm.LogisticRegression(**TIGHT).fit(df, y)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            de.LogisticRegression(**TIGHT).fit(ddf, ys)
        return
    est = de.LogisticRegression(**TIGHT).fit(ddf, ys)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(est.feature_names_in_, ref.feature_names_in_)


def test_string_labels_in_a_dask_series(client, rng):
    df, y = _with_column(rng, "int")
    labels = np.array(["cat", "dog", "emu"])[(df["a"] > 0.5).astype(int) + (df["b"] > 0).astype(int)]
    ddf = dd.from_pandas(df, npartitions=4)
    ys = dd.from_pandas(pd.Series(labels, dtype=object), npartitions=3)
    est = de.LogisticRegression(**TIGHT).fit(ddf, ys)
    ref = sklm.LogisticRegression(**TIGHT).fit(df, labels)
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    pred = est.predict(ddf)
    assert isinstance(pred, dd.Series) and pred.divisions == ddf.divisions
    np.testing.assert_array_equal(pred.compute().to_numpy(), ref.predict(df))


@pytest.mark.parametrize("dtype", ["Int64", "boolean", "Float64"])
@pytest.mark.parametrize("where", ["dask", "pandas"])
def test_a_nullable_target_gives_scikit_learns_classes(client, rng, dtype, where):
    """pandas' nullable y (``Int64``, ``boolean``): scikit-learn converts it to float64, so its classes_ are
    floats; a missing value is its NaN error.  As a dask Series, or in memory beside a dask dataframe."""
    df, _ = _with_column(rng, "int")
    y = pd.Series((df["a"] > 0).to_numpy()).astype(dtype)
    ddf = dd.from_pandas(df, npartitions=3)
    ys = dd.from_pandas(y, npartitions=2) if where == "dask" else y
    ref = sklm.LogisticRegression(**TIGHT).fit(df, y)
    est = de.LogisticRegression(**TIGHT).fit(ddf, ys)
    assert est.classes_.dtype == ref.classes_.dtype == np.float64
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert est.predict(df).dtype == ref.predict(df).dtype
    y_na = y.copy()
    y_na.iloc[3] = pd.NA
    with pytest.raises(ValueError, match="Input y contains NaN"):
        sklm.LogisticRegression().fit(df, y_na)
    with pytest.raises(ValueError, match="Input y contains NaN"):
        de.LogisticRegression().fit(ddf, dd.from_pandas(y_na, npartitions=2) if where == "dask" else y_na)


def test_numpy_target_beside_a_dask_dataframe_is_not_computed_twice(client, rng, tmp_path):
    """y in memory, X a dataframe of unknown partition lengths: aligned by position, X not computed for y."""
    df, y = _with_column(rng, "int")
    ddf = dd.from_pandas(df, npartitions=5).map_partitions(_counted, str(tmp_path), meta=df.iloc[:0])
    est = de.LogisticRegression(**TIGHT).fit(ddf, y)
    ref = sklm.LogisticRegression(**TIGHT).fit(df, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    import os

    assert len(os.listdir(tmp_path)) == 5


def _counted(part, path):
    import os

    with open(os.path.join(path, os.urandom(6).hex()), "w"):
        pass
    return part


def test_numpy_target_of_another_length_raises(client, rng):
    df, y = _with_column(rng, "int")
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        de.LogisticRegression().fit(dd.from_pandas(df, npartitions=3), y[:-5])


@pytest.mark.parametrize(
    "make",
    # the primal: both fits converge to the optimum far below rtol (the dual method's iterates depend
    # on the shards' rows; tests/estimators/test_svm_dual.py compares its dask and NumPy fits)
    [de.LinearRegression, lambda: de.LinearSVR(loss="squared_epsilon_insensitive", dual=False)],
    ids=["LinearRegression", "LinearSVR"],
)
def test_regressors_on_a_persisted_dask_array_with_other_chunks_for_y(client, rng, make):
    X = rng.standard_normal((3000, 6))
    y = X @ rng.standard_normal(6) + 0.1 * rng.standard_normal(3000)
    Xd, yd = client.persist([da.from_array(X, chunks=(700, 3)), da.from_array(y, chunks=1100)])
    est = make().fit(Xd, yd)
    ref = make().fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    assert sum(est.fit_stats_["rows_per_shard"]) == 3000


def test_mlp_from_a_dask_array_with_other_chunks_for_y(client, rng):
    X = rng.standard_normal((600, 5))
    y = (X[:, 0] > 0).astype(int)
    kw = dict(hidden_layer_sizes=(8,), max_iter=20, random_state=0, batch_size=600, strategy="rounds")
    est = de.MLPClassifier(**kw).fit(da.from_array(X, chunks=(150, 5)), da.from_array(y, chunks=250))
    ref = de.MLPClassifier(**kw).fit(X, y)
    for a, b in zip(est.coefs_, ref.coefs_):  # one full batch per epoch: the same steps, summed in another order
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_charlstm_from_a_dask_series_of_strings(client):
    names = pd.Series(["rex", "fido", "luna", "max", "bella", "coco", "milo", "nala"] * 4)
    est = de.CharLSTM(hidden_size=8, embedding_dim=4, max_epochs=1, batch_size=8, random_state=0)
    est.fit(dd.from_pandas(names, npartitions=3))
    assert set(est.classes_) >= set("rexfidolunambcna")  # every character of every partition
    assert est._training_strings == frozenset(names)  # every string of every partition reached a shard


@pytest.mark.parametrize("make", [
    lambda: de.LogisticRegression(), lambda: de.LinearSVC(), lambda: de.LinearRegression(), lambda: de.LinearSVR(),
    lambda: de.MLPClassifier((5,), max_iter=5, random_state=0),
    lambda: de.MLPRegressor(hidden_layer_sizes=(5,), max_iter=5, random_state=0),
], ids=["logistic", "svc", "linear", "svr", "mlp-classifier", "mlp-regressor"])
def test_score_on_dask_rows_of_unknown_count_is_the_score_of_the_same_rows_in_memory(client, rng, make):
    """A mask leaves the rows' count unknown until computed: fit and predict take such input, and so does score
    (scikit-learn's metrics cannot), with and without sample weights."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    X = rng.normal(size=(400, 3))
    y = (X[:, 0] > 0).astype(int)
    Xd, yd, wd = da.from_array(X, chunks=100), da.from_array(y, chunks=100), da.from_array(rng.uniform(size=400),
                                                                                         chunks=100)
    keep = Xd[:, 1] > -1.0
    Xm, ym, wm = Xd[keep], yd[keep], wd[keep]
    assert np.isnan(Xm.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = make().fit(Xm, ym)
    Xn, yn, wn = (a.compute() for a in (Xm, ym, wm))
    assert est.score(Xm, ym) == pytest.approx(est.score(Xn, yn), rel=1e-12)
    assert est.score(Xm, ym, sample_weight=wm) == pytest.approx(est.score(Xn, yn, sample_weight=wn), rel=1e-12)


def test_a_dask_frames_column_names_are_checked_in_scikit_learns_words(client, rng):
    """Mixed name types at fit, and at predict reordered, missing, added or renamed columns: the error scikit-learn
    gives for the same pandas frame, word for word."""
    df = pd.DataFrame(rng.normal(size=(200, 3)), columns=list("abc"))
    y = (df["a"] > 0).astype(int)
    mixed = df.set_axis(["a", 1, "c"], axis=1)
    for fit in (lambda: sklm.LogisticRegression().fit(mixed, y),
                lambda: de.LogisticRegression().fit(dd.from_pandas(mixed, npartitions=2), dd.from_pandas(y, 2))):
        with pytest.raises(TypeError, match="Feature names are only supported if all input features have string"):
            fit()
    ref, ours = sklm.LogisticRegression().fit(df, y), de.LogisticRegression().fit(dd.from_pandas(df, 2),
                                                                                    dd.from_pandas(y, 2))
    for other in (df[["c", "b", "a"]], df[["a", "b"]], df.assign(d=1.0), df.rename(columns={"b": "z"})):
        with pytest.raises(ValueError) as theirs:
            ref.predict(other)
        with pytest.raises(ValueError) as got:
            ours.predict(dd.from_pandas(other, npartitions=2))
        assert str(got.value) == str(theirs.value)


def test_a_numpy_target_beside_a_dask_dataframe_warns_nothing(client, rng):
    import warnings

    df = pd.DataFrame(rng.normal(size=(400, 3)), columns=list("abc"))
    y = (df["a"] > 0).astype(int).to_numpy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = de.LogisticRegression().fit(dd.from_pandas(df, npartitions=4), y)
    assert not [str(w.message) for w in caught if "Port" not in str(w.message)]
    np.testing.assert_allclose(est.coef_, de.LogisticRegression().fit(df, y).coef_, rtol=1e-6)


@pytest.mark.parametrize("make, methods", [
    (lambda: de.LogisticRegression(), ("predict", "predict_proba", "decision_function")),
    (lambda: de.LinearRegression(), ("predict",)),
    (lambda: de.PoissonRegressor(), ("predict",)),
    (lambda: de.MLPClassifier(hidden_layer_sizes=(3,), max_iter=5), ("predict", "predict_proba")),
])
def test_predicting_on_an_empty_dask_array_raises_scikit_learns_error(client, rng, make, methods):
    """A dask array known to have no rows gets scikit-learn's error for empty input, as the same rows in memory
    do; it gave an empty result.  The error names the estimator."""
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int) + 1
    est = make().fit(X, y)
    for method in methods:
        for empty in (X[:0], da.from_array(X, chunks=20)[:0]):
            with pytest.raises(ValueError, match=re.escape(
                    f"Found array with 0 sample(s) (shape=(0, 3)) while a minimum of 1 is required by {type(est).__name__}.")):
                getattr(est, method)(empty)


@pytest.mark.parametrize("kinds", ["array series array", "frame array series", "array array series",
                                   "series-y frame array"])
def test_x_y_and_weights_of_mixed_dask_kinds_are_not_taken_for_one_another(client, rng, kinds):
    """Dask gives the results of one persist or compute of arrays mixed with dataframes grouped by kind
    (``compute(array0, series1, array2)`` returns ``(array0, array2, series1)``): a fit on X, y and weights of
    mixed kinds took the weights for y or y for X, with no error, and ``score`` scored the weights.  Both now
    equal the same data's fit and score in memory."""
    n = 400
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=n)
    w = rng.uniform(0.5, 2.0, size=n)
    names = ["a", "b", "c"]

    def dask_of(kind, v, parts):
        if kind == "array":
            return da.from_array(v, chunks=(n // parts,) + v.shape[1:])
        if v.ndim == 2:
            return dd.from_pandas(pd.DataFrame(v, columns=names), npartitions=parts)
        return dd.from_pandas(pd.Series(v, name="v"), npartitions=parts)

    kx, ky, kw = kinds.replace("series-y", "series").split()
    Xd, yd, wd = dask_of(kx, X, 4), dask_of(ky, y, 4), dask_of(kw, w, 2)
    Xm = pd.DataFrame(X, columns=names) if kx == "frame" else X
    ref = de.LinearRegression().fit(Xm, y, sample_weight=w)
    ours = de.LinearRegression().fit(Xd, yd, sample_weight=wd)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6)
    assert ours.score(Xd, yd, sample_weight=wd) == pytest.approx(ref.score(Xm, y, sample_weight=w), rel=1e-9)
    clf = de.LogisticRegression().fit(Xd, (yd > 0).astype(int), sample_weight=wd)
    ref_clf = de.LogisticRegression().fit(Xm, (y > 0).astype(int), sample_weight=w)
    np.testing.assert_allclose(clf.coef_, ref_clf.coef_, rtol=1e-5)


@pytest.mark.parametrize("container", ["dask array", "dask frame", "numpy"])
def test_an_mlp_on_dask_x_takes_a_column_y_as_one_target(client, rng, container):
    """scikit-learn's MLPs warn for y of shape (n, 1) and ravel it.  With dask X ours warned and then trained
    one logistic output per column (classes_ [0], predictions of shape (n, 1)), or refused three classes as
    a multilabel target.  The model now equals the fit on the raveled y."""
    from sklearn.exceptions import DataConversionWarning

    X = rng.normal(size=(300, 4))
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    Xd = da.from_array(X, chunks=(100, 4))
    col = y.reshape(-1, 1)
    yc = {"dask array": lambda: da.from_array(col, chunks=(100, 1)),
          "dask frame": lambda: dd.from_pandas(pd.DataFrame({"t": y}), npartitions=3),
          "numpy": lambda: col}[container]()
    kw = dict(hidden_layer_sizes=(5,), max_iter=30, random_state=0)
    with pytest.warns(DataConversionWarning):
        ours = de.MLPClassifier(**kw).fit(Xd, yc)
    flat_y = dd.from_pandas(pd.Series(y, name="t"), npartitions=3) if container == "dask frame" else \
        da.from_array(y, chunks=100)
    flat = de.MLPClassifier(**kw).fit(Xd, flat_y)
    np.testing.assert_array_equal(ours.classes_, [0, 1, 2])
    assert ours.predict(X).shape == (300,) and ours.predict_proba(X).shape == (300, 3)
    np.testing.assert_allclose(ours.predict_proba(X), flat.predict_proba(X), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("labels", ["dask array", "dask series", "categorical series", "numpy beside dask X"])
def test_an_mlps_string_classes_from_dask_are_numpy_strings(client, rng, labels):
    """scikit-learn's MLPClassifier (its LabelBinarizer) keeps string classes in a NumPy string array, and ours
    does for NumPy y; from dask y they were an object array, and so were the predictions."""
    X = rng.normal(size=(300, 3))
    y = np.array(["apple", "banana", "cherry"], dtype=object)[np.digitize(X[:, 0], [-0.5, 0.5])]
    Xd = da.from_array(X, chunks=100)
    yd = {"dask array": lambda: da.from_array(y, chunks=100),
          "dask series": lambda: dd.from_pandas(pd.Series(y), npartitions=3),
          "categorical series": lambda: dd.from_pandas(pd.Series(y, dtype="category"), npartitions=3),
          "numpy beside dask X": lambda: y}[labels]()
    ours = de.MLPClassifier(hidden_layer_sizes=(5,), max_iter=5, random_state=0).fit(Xd, yd)
    assert ours.classes_.dtype == np.dtype("<U6")
    np.testing.assert_array_equal(ours.classes_, ["apple", "banana", "cherry"])
    assert ours.predict(X).dtype == np.dtype("<U6") and ours.predict(Xd).dtype == np.dtype("<U6")


@pytest.mark.parametrize("name", ["LogisticRegression", "LinearRegression", "MLPRegressor"])
def test_nan_in_dask_x_gets_scikit_learns_whole_message(client, rng, name):
    """NumPy X with NaN gets scikit-learn's message, which names the estimator and says what to do; dask X got
    its first line only."""
    X = rng.normal(size=(200, 3))
    X[150, 1] = np.nan
    y = (rng.normal(size=200) > 0).astype(int)
    with pytest.raises(ValueError) as numpy_error:
        getattr(de, name)().fit(X, y)
    with pytest.raises(ValueError) as dask_error:
        getattr(de, name)().fit(da.from_array(X, chunks=50), da.from_array(y, chunks=50))
    assert f"{name} does not accept missing values encoded as NaN natively" in str(dask_error.value)
    assert str(dask_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("kind", ["array", "frame"])
def test_nan_in_dask_x_to_predict_gets_scikit_learns_whole_message(client, rng, kind):
    """The lazy predict's check of each block said "Input contains NaN." only."""
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(int)
    model = de.LogisticRegression().fit(X, y)
    X[150, 1] = np.nan
    Xd = da.from_array(X, chunks=50) if kind == "array" else dd.from_pandas(pd.DataFrame(X), npartitions=4)
    with pytest.raises(ValueError) as numpy_error:
        model.predict(X)
    with pytest.raises(ValueError) as dask_error:
        model.predict(Xd).compute()
    assert str(dask_error.value) == str(numpy_error.value)
    assert "LogisticRegression does not accept missing values encoded as NaN natively" in str(dask_error.value)


def test_a_dask_frame_with_duplicate_column_names_gets_scikit_learns_error(client, rng):
    """It fitted, with feature_names_in_ ['a', 'a', 'b']; the same pandas frame gets scikit-learn's error."""
    frame = pd.DataFrame(rng.normal(size=(100, 3)), columns=["a", "a", "b"])
    y = (frame.iloc[:, 0] > 0).astype(int)
    with pytest.raises(Exception) as pandas_error:
        de.LogisticRegression().fit(frame, y)
    with pytest.raises(type(pandas_error.value)) as dask_error:
        de.LogisticRegression().fit(dd.from_pandas(frame, npartitions=2), dd.from_pandas(y, npartitions=2))
    assert str(dask_error.value) == str(pandas_error.value)


def test_a_dask_series_as_x_is_scikit_learns_1d_error_with_its_shape(client, rng):
    """The message printed the shape of a dask series as dask's expression of its size."""
    x = dd.from_pandas(pd.Series(rng.normal(size=100), name="x0"), npartitions=2)
    with pytest.raises(ValueError, match=re.escape("a dask collection of shape (nan,).")):
        de.LinearRegression().fit(x, x)



def test_a_scalar_sample_weight_beside_dask_input_weighs_every_row(client, rng):
    """scikit-learn takes a scalar sample_weight as that weight for every row (it scales C's sum); beside dask X
    it raised IndexError.  It is made lazily for X's rows, their number unknown too."""
    X = rng.normal(size=(3000, 4))
    y = (X[:, 0] + rng.logistic(size=3000) > 0).astype(int)
    ref = sklm.LogisticRegression(C=0.01, tol=1e-10).fit(X, y, sample_weight=50.0)
    plain = sklm.LogisticRegression(C=0.01).fit(X, y)
    assert not np.allclose(ref.coef_, plain.coef_, rtol=1e-2)  # the scalar matters here
    frame = dd.from_pandas(pd.DataFrame(X, columns=list("abcd")), npartitions=3)
    for Xd, yd in ((da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)),
                   (frame, dd.from_pandas(pd.Series(y), npartitions=3)),
                   (frame.to_dask_array(), dd.from_pandas(pd.Series(y), npartitions=3))):
        est = de.LogisticRegression(C=0.01, tol=1e-10).fit(Xd, yd, sample_weight=50.0)
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="sum of sample weights must be positive"):  # as NumPy input, here
        de.LogisticRegression().fit(da.from_array(X, chunks=1000), da.from_array(y, chunks=1000), sample_weight=-1.0)
