"""Target preparation on shards: label discovery, encoding, class counts, per-loss encodings."""

import numpy as np
import pytest
import torch

from dask_estimators.engine import place
from dask_estimators.engine.data._worker import Shard
from dask_estimators.objectives.targets import class_counts, encode_labels, prepare_targets, unique_labels


def shard(**arrays):
    return Shard(arrays, device="cpu")


# ------------------------------------------------------------------ labels
@pytest.mark.parametrize("dtype", ["U", object])
def test_unique_and_encode_string_labels(dtype):
    y = np.array(["pear", "apple", "fig", "apple", "pear"], dtype=dtype)
    sh = shard(X=np.zeros((5, 2)), y=y)
    classes = unique_labels(sh)
    np.testing.assert_array_equal(classes, ["apple", "fig", "pear"])
    encode_labels(sh, classes)
    codes = sh.get("y")
    assert isinstance(codes, torch.Tensor) and codes.dtype == torch.int64
    np.testing.assert_array_equal(codes.numpy(), [2, 0, 1, 0, 2])


def test_encode_with_classes_from_several_shards():
    """Classes found on all shards; a shard missing a class still gets the global codes."""
    a = shard(y=np.array(["b", "b", "d"]))
    b = shard(y=np.array(["a", "c"]))
    classes = np.unique(np.concatenate([unique_labels(a), unique_labels(b)]))
    for sh in (a, b):
        encode_labels(sh, classes)
    np.testing.assert_array_equal(a.get("y").numpy(), [1, 1, 3])
    np.testing.assert_array_equal(b.get("y").numpy(), [0, 2])


def test_unique_and_encode_numeric_labels():
    sh = shard(y=np.array([2.5, -1.0, 2.5, 7.0]))
    classes = unique_labels(sh)
    np.testing.assert_array_equal(classes, [-1.0, 2.5, 7.0])
    encode_labels(sh, classes)
    np.testing.assert_array_equal(sh.get("y").numpy(), [1, 0, 1, 2])


@pytest.mark.parametrize("labels", [[3, 9, 5], [0.5, -2.0, 7.25], np.arange(200)])
def test_numeric_codes_kept_from_unique_equal_a_fresh_encoding(rng, labels):
    """Few numeric labels: the codes found with the shard's classes, mapped to the global ones, are exact."""
    labels = np.asarray(labels)
    ys = [labels[rng.integers(0, len(labels) - 1, 500)], labels[rng.integers(1, len(labels), 300)]]
    shards = [shard(y=y) for y in ys]
    classes = np.unique(np.concatenate([unique_labels(sh) for sh in shards]))
    np.testing.assert_array_equal(classes, np.unique(np.concatenate(ys)))
    for sh, y in zip(shards, ys):
        assert ("label_codes" in sh.cache) == (len(labels) <= 64)  # the one-pass path, for few labels
        encode_labels(sh, classes)
        np.testing.assert_array_equal(sh.get("y").numpy(), np.searchsorted(classes, y))
        assert "label_codes" not in sh.cache


def test_kept_codes_reject_labels_not_in_the_classes():
    sh = shard(y=np.array([0, 1, 5, 1]))
    unique_labels(sh)
    with pytest.raises(ValueError, match="not in classes_"):
        encode_labels(sh, np.array([0, 1]))


@pytest.mark.parametrize("y", [["a", "b", "z"], ["0", "a", "b"], [0, 1, 5]])
def test_encode_rejects_unknown_labels(y):
    classes = np.array(["a", "b"]) if isinstance(y[0], str) else np.array([0, 1])
    with pytest.raises(ValueError, match="not in classes_"):
        encode_labels(shard(y=np.array(y)), classes)


def test_unique_labels_keeps_bool_dtype():
    classes = unique_labels(shard(y=np.array([True, False, True])))
    assert classes.dtype == bool
    np.testing.assert_array_equal(classes, [False, True])


# ------------------------------------------------------------------ class counts
def test_class_counts_weighted_and_unweighted(rng):
    codes = rng.integers(0, 4, size=50)
    codes[codes == 2] = 1  # class 2 absent: count 0
    s = rng.uniform(0.1, 3.0, size=50)
    np.testing.assert_allclose(class_counts(shard(y=codes, sample_weight=s), 4), np.bincount(codes, s, 4), rtol=1e-14)
    counts = class_counts(shard(y=codes), 4)
    assert counts.dtype == np.float64
    np.testing.assert_array_equal(counts, np.bincount(codes, minlength=4))
    assert counts[2] == 0


def test_class_counts_minlength_pads_missing_high_classes():
    np.testing.assert_array_equal(class_counts(shard(y=np.array([0, 0, 1])), 5), [2, 1, 0, 0, 0])


# ------------------------------------------------------------------ prepare_targets
CODES3 = np.array([0, 2, 1, 1, 0, 2])
CODES2 = np.array([1, 0, 0, 1, 1])


@pytest.mark.parametrize("loss", ["squared", "squared_epsilon_insensitive"])
def test_prepare_regression_targets(loss):
    sh = shard(y=np.array([1, 2, 3]), sample_weight=np.array([1.0, 2.0, 3.0]))
    prepare_targets(sh, loss, 1, None)
    y = sh.get("y")
    assert y.dtype == torch.float64 and tuple(y.shape) == (3, 1)
    np.testing.assert_array_equal(y.numpy()[:, 0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(sh.get("sample_weight").numpy(), [1.0, 2.0, 3.0])
    Y = np.arange(6.0).reshape(3, 2)
    sh = shard(y=Y)
    prepare_targets(sh, "squared", 2, None)
    np.testing.assert_array_equal(sh.get("y").numpy(), Y)
    assert sh.get("sample_weight") is None


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("cw", [None, (0.5, 3.0)])
def test_prepare_binomial(weighted, cw):
    s = np.linspace(0.5, 2.5, 5) if weighted else None
    sh = shard(y=CODES2, sample_weight=s)
    prepare_targets(sh, "binomial", 1, None if cw is None else np.asarray(cw))
    y = sh.get("y")
    assert y.dtype == torch.float64 and tuple(y.shape) == (5, 1)
    np.testing.assert_array_equal(y.numpy()[:, 0], CODES2.astype(float))
    expected = (np.ones(5) if s is None else s) * (np.ones(2) if cw is None else np.asarray(cw))[CODES2]
    got = sh.get("sample_weight")
    if s is None and cw is None:
        assert got is None
    else:
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-15)


@pytest.mark.parametrize("weighted", [False, True])
def test_prepare_multinomial(weighted):
    s = np.arange(1.0, 7.0) if weighted else None
    cw = np.array([1.0, 2.0, 0.25])
    sh = shard(y=CODES3, sample_weight=s)
    prepare_targets(sh, "multinomial", 3, cw)
    y = sh.get("y")
    assert y.dtype == torch.int64 and tuple(y.shape) == (6,)
    np.testing.assert_array_equal(y.numpy(), CODES3)
    np.testing.assert_allclose(sh.get("sample_weight").numpy(), (1.0 if s is None else s) * cw[CODES3], rtol=1e-15)


def test_prepare_squared_hinge_binary():
    cw = np.array([2.0, 0.5])
    sh = shard(y=CODES2, sample_weight=np.full(5, 3.0))
    prepare_targets(sh, "squared_hinge", 1, cw)
    np.testing.assert_array_equal(sh.get("y").numpy()[:, 0], np.where(CODES2 == 1, 1.0, -1.0))
    assert tuple(sh.get("y").shape) == (5, 1)
    np.testing.assert_allclose(sh.get("sample_weight").numpy(), 3.0 * cw[CODES2])


@pytest.mark.parametrize("weighted", [False, True])
def test_prepare_squared_hinge_one_vs_rest(weighted):
    s = np.arange(1.0, 7.0) if weighted else None
    cw = np.array([1.0, 2.0, 0.25])
    sh = shard(y=CODES3, sample_weight=s)
    prepare_targets(sh, "squared_hinge", 3, cw)
    onehot = np.eye(3)[CODES3] == 1
    np.testing.assert_array_equal(sh.get("y").numpy(), np.where(onehot, 1.0, -1.0))
    sw = sh.get("sample_weight").numpy()
    assert sw.shape == (6, 3)
    base = np.ones(6) if s is None else s
    np.testing.assert_allclose(sw, base[:, None] * np.where(onehot, cw[None, :], 1.0), rtol=1e-15)

    # without class weights the sample weights stay per sample
    sh = shard(y=CODES3, sample_weight=s)
    prepare_targets(sh, "squared_hinge", 3, None)
    assert tuple(sh.get("y").shape) == (6, 3)
    if weighted:
        np.testing.assert_array_equal(sh.get("sample_weight").numpy(), s)
    else:
        assert sh.get("sample_weight") is None


def test_prepare_unknown_loss():
    with pytest.raises(ValueError, match="Unknown loss"):
        prepare_targets(shard(y=CODES2), "hinge", 1, None)


# ------------------------------------------------------------------ on the cluster
def test_string_labels_on_the_cluster(client, rng):
    labels = np.array(["cat", "dog", "emu"])
    y = labels[rng.integers(0, 3, size=21)]
    s = rng.uniform(0.5, 2.0, size=21)
    with place(client, {"X": rng.normal(size=(21, 2)), "y": y, "sample_weight": s}) as p:
        classes = np.unique(np.concatenate(p.map(unique_labels)))
        np.testing.assert_array_equal(classes, labels)
        p.map(encode_labels, classes)
        counts = np.sum(p.map(class_counts, 3), axis=0)
        codes = np.searchsorted(labels, y)
        np.testing.assert_allclose(counts, np.bincount(codes, s, 3), rtol=1e-13)


def test_integer_labels_keep_dtype_on_the_cluster(client):
    y = np.array([3, 1, 3, 7, 1, 7])
    with place(client, {"X": np.zeros((6, 1)), "y": y}) as p:
        classes = np.unique(np.concatenate(p.map(unique_labels)))
    assert classes.dtype == y.dtype
