"""The character-level LSTM objective (``objectives/sequence.py``): encoding and exact shard sums.

Everything here is in-process (``LocalEvaluator`` over ``Shard`` objects on
the CPU, float64), so these tests need no Dask cluster.
"""

import numpy as np
import pytest
import torch

from dask_estimators.engine import LocalEvaluator
from dask_estimators.engine.data._worker import Shard
from dask_estimators.objectives import module as M
from dask_estimators.objectives import sequence as S

STRINGS = ["luna", "bella", "max", "charlie", "lucy", "cooper", "daisy", "milo", "", "zoe", "oliver", "a"]
CHARS = sorted(set("".join(STRINGS)))
VOCAB = list(S.SPECIALS) + CHARS
INDEX = {c: i for i, c in enumerate(VOCAB) if i >= len(S.SPECIALS)}


@pytest.fixture(scope="module")
def client():
    """Override the session's autouse cluster fixture: nothing in this module talks to Dask."""
    return None


def _strings_array(strings):
    a = np.empty(len(strings), dtype=object)
    a[:] = strings
    return a


def _spec(**kw):
    kw = {"context_length": 4, "embedding_dim": 5, "hidden_size": 6, "num_layers": 1, "dtype": "float64", **kw}
    return S.CharLSTMSpec(len(VOCAB), **kw)


def _shards(parts, spec, seed=3):
    """One prepared shard per list of strings (ranks 0, 1, ...)."""
    shards = []
    for rank, part in enumerate(parts):
        sh = Shard({"X": _strings_array(part)}, device="cpu")
        S.prepare_text(sh, VOCAB, spec.context_length, False, None, seed, rank)
        shards.append(sh)
    return shards


def _w0(spec, seed=0):
    torch.manual_seed(seed)
    net = spec.build("cpu", torch.float64)
    return torch.nn.utils.parameters_to_vector(net.parameters()).detach().numpy().copy()


def _autograd(spec, w, ctx, y):
    """(loss sum, gradient) of plain single-process torch on the rows (ctx, y)."""
    net = spec.build("cpu", torch.float64)
    params = list(net.parameters())
    torch.nn.utils.vector_to_parameters(torch.as_tensor(w, dtype=torch.float64), params)
    loss = torch.nn.functional.cross_entropy(net(torch.as_tensor(ctx)), torch.as_tensor(y), reduction="sum")
    loss.backward()
    return float(loss.detach()), torch.cat([p.grad.reshape(-1) for p in params]).numpy()


# ------------------------------------------------------------------ encode_pairs
def test_specials():
    assert (S.PAD, S.BOS, S.EOS) == (0, 1, 2)
    assert S.SPECIALS == ("<pad>", "<s>", "</s>")


def test_encode_pairs_shapes_and_padding():
    L = 4
    ctx, y = S.encode_pairs(["ab"], INDEX, L, False, None)
    assert ctx.dtype == np.int64 and y.dtype == np.int64
    assert ctx.shape == (3, L) and y.shape == (3,)
    a, b = INDEX["a"], INDEX["b"]
    P, B, E = S.PAD, S.BOS, S.EOS
    np.testing.assert_array_equal(ctx, [[P, P, P, B], [P, P, B, a], [P, B, a, b]])
    np.testing.assert_array_equal(y, [a, b, E])


@pytest.mark.parametrize("s", ["", "a", "max", "charlie", "oliverbellacooper"])
@pytest.mark.parametrize("L", [1, 3, 8])
def test_encode_pairs_m_plus_one(s, L):
    ctx, y = S.encode_pairs([s], INDEX, L, False, None)
    m = len(s)
    assert ctx.shape == (m + 1, L) and y.shape == (m + 1,)
    assert y[-1] == S.EOS
    codes = [INDEX[c] for c in s]
    np.testing.assert_array_equal(y[:-1], codes)
    full = [S.PAD] * (L - 1) + [S.BOS] + codes
    for t in range(m + 1):  # the context of position t: the L symbols before it
        np.testing.assert_array_equal(ctx[t], full[t : t + L])
    # the first context is all padding then BOS
    assert ctx[0, -1] == S.BOS and np.all(ctx[0, :-1] == S.PAD)
    assert S.EOS not in ctx  # EOS is only ever a target


def test_encode_pairs_concatenates_strings():
    ctx, y = S.encode_pairs(["ab", "max"], INDEX, 3, False, None)
    assert ctx.shape == (3 + 4, 3)
    assert (y == S.EOS).sum() == 2
    c1, y1 = S.encode_pairs(["ab"], INDEX, 3, False, None)
    c2, y2 = S.encode_pairs(["max"], INDEX, 3, False, None)
    np.testing.assert_array_equal(ctx, np.concatenate([c1, c2]))
    np.testing.assert_array_equal(y, np.concatenate([y1, y2]))


def test_encode_pairs_max_length_truncates():
    ctx, y = S.encode_pairs(["charlie"], INDEX, 4, False, 3)
    assert ctx.shape == (4, 4)
    np.testing.assert_array_equal(y, [INDEX["c"], INDEX["h"], INDEX["a"], S.EOS])


def test_encode_pairs_lowercase():
    ctx, y = S.encode_pairs(["MaX"], INDEX, 4, True, None)
    ctx2, y2 = S.encode_pairs(["max"], INDEX, 4, False, None)
    np.testing.assert_array_equal(ctx, ctx2)
    np.testing.assert_array_equal(y, y2)
    with pytest.raises(ValueError, match="'M'"):
        S.encode_pairs(["MaX"], INDEX, 4, False, None)


def test_encode_pairs_unknown_error_names_character():
    with pytest.raises(ValueError, match="'#'"):
        S.encode_pairs(["ab#c"], INDEX, 4, False, None, unknown="error")
    with pytest.raises(ValueError, match="'#'"):  # the default is "error"
        S.encode_pairs(["ab", "a#"], INDEX, 4, False, None)


def test_encode_pairs_unknown_skip():
    ctx, y = S.encode_pairs(["ab", "a#", "max"], INDEX, 4, False, None, unknown="skip")
    ref_ctx, ref_y = S.encode_pairs(["ab", "max"], INDEX, 4, False, None)
    np.testing.assert_array_equal(ctx, ref_ctx)
    np.testing.assert_array_equal(y, ref_y)
    # a character cut off by max_length is not unknown
    ctx, y = S.encode_pairs(["ab#"], INDEX, 4, False, 2, unknown="skip")
    assert y.shape == (3,)


def test_encode_pairs_empty():
    ctx, y = S.encode_pairs([], INDEX, 5, False, None)
    assert ctx.shape == (0, 5) and y.shape == (0,)
    assert ctx.dtype == np.int64 and y.dtype == np.int64
    ctx, y = S.encode_pairs(["#"], INDEX, 5, False, None, unknown="skip")
    assert ctx.shape == (0, 5) and y.shape == (0,)


def test_text_chars():
    sh = Shard({"X": _strings_array(["Bob", "ann", "", "bob", "Bob"])}, device="cpu")
    chars, distinct = S.text_chars(sh, False, None)
    assert chars == sorted(set("Bobann"))
    assert distinct == sorted({"Bob", "ann", "bob"})
    chars, distinct = S.text_chars(sh, True, 2)
    assert chars == ["a", "b", "n", "o"]
    assert distinct == ["an", "bo"]
    bad = Shard({"X": _strings_array(["ok", 3])}, device="cpu")
    with pytest.raises(ValueError, match="strings"):
        S.text_chars(bad, False, None)


def test_prepare_text_counts():
    spec = _spec()
    (sh,) = _shards([STRINGS], spec)
    n_pairs = sum(len(s) + 1 for s in STRINGS if s)
    assert sh.n_rows == n_pairs
    assert tuple(sh.get("X").shape) == (n_pairs, spec.context_length)
    assert sh.get("X").dtype == torch.int64 and sh.get("y").dtype == torch.int64
    sh2 = Shard({"X": _strings_array(STRINGS)}, device="cpu")
    counts = S.prepare_text(sh2, VOCAB, spec.context_length, False, None, 0, 0)
    assert counts["n_train"] == n_pairs
    assert counts["n_strings"] == sum(1 for s in STRINGS if s)


# ------------------------------------------------------------------ spec
def test_spec_interface():
    spec = _spec()
    net = spec.build("cpu")
    assert isinstance(net, S.CharNet)
    assert spec.n_params == sum(p.numel() for p in net.parameters())
    assert spec.n_outputs == len(VOCAB)
    assert spec.penalty_mask().shape == (spec.n_params,) and not spec.penalty_mask().any()
    assert len(spec.weight_flags()) == len(list(net.parameters()))
    ctx = torch.zeros((7, spec.context_length), dtype=torch.int64)
    assert tuple(net(ctx).shape) == (7, len(VOCAB))
    assert net.head.weight.dtype == torch.float64
    assert spec.build("cpu", torch.float32).head.weight.dtype == torch.float32


# ------------------------------------------------------------------ value_grad
@pytest.mark.parametrize("embedding_dim", [5, 0], ids=["embedding", "one_hot"])
def test_value_grad_finite_differences(embedding_dim):
    spec = _spec(embedding_dim=embedding_dim)
    (sh,) = _shards([STRINGS], spec)
    ev = LocalEvaluator([sh])
    w = _w0(spec, 1)
    loss, g, sw, n = ev(M.value_grad, w, spec, None)
    assert n == sh.n_rows and sw == n
    assert g.shape == (spec.n_params,)
    rng = np.random.default_rng(0)
    h = 1e-6
    for j in rng.choice(spec.n_params, 8, replace=False):
        e = np.zeros_like(w)
        e[j] = h
        fp = ev(M.value_grad, w + e, spec, None)[0]
        fm = ev(M.value_grad, w - e, spec, None)[0]
        fd = (fp - fm) / (2 * h)
        assert fd == pytest.approx(g[j], rel=1e-5, abs=1e-7), j


@pytest.mark.parametrize("embedding_dim", [5, 0], ids=["embedding", "one_hot"])
def test_value_grad_two_shards_equal_one(embedding_dim):
    spec = _spec(embedding_dim=embedding_dim, num_layers=2)
    parts = [STRINGS[:5], STRINGS[5:]]
    two = LocalEvaluator(_shards(parts, spec))
    one = LocalEvaluator(_shards([STRINGS], spec))
    w = _w0(spec, 2)
    l2, g2, sw2, n2 = two(M.value_grad, w, spec, None)
    l1, g1, sw1, n1 = one(M.value_grad, w, spec, None)
    assert n1 == n2 == sum(len(s) + 1 for s in STRINGS if s)
    assert sw1 == sw2 == n1
    np.testing.assert_allclose(l2, l1, rtol=1e-10)
    np.testing.assert_allclose(g2, g1, rtol=1e-10, atol=1e-13)
    # and both equal single-process autograd on all pairs
    ctx, y = S.encode_pairs([s for s in STRINGS if s], INDEX, spec.context_length, False, None)
    la, ga = _autograd(spec, w, ctx, y)
    np.testing.assert_allclose(l1, la, rtol=1e-10)
    np.testing.assert_allclose(g1, ga, rtol=1e-10, atol=1e-13)


def test_minibatch_gradient_equals_autograd_on_its_rows():
    spec = _spec()
    shards = _shards([STRINGS[:6], STRINGS[6:]], spec, seed=11)
    ev = LocalEvaluator(shards)
    w = _w0(spec, 3)
    n_total = sum(sh.n_rows for sh in shards)
    n_steps = 3
    for epoch in (0, 1):
        seen = []
        for step in range(n_steps):
            batch = (11, epoch, step, n_steps, True)
            loss, g, sw, n = ev(M.value_grad, w, spec, batch)
            rows = [M.batch_rows(sh, batch) for sh in shards]
            ctx = np.concatenate([sh.get("X")[r].numpy() for sh, r in zip(shards, rows)])
            y = np.concatenate([sh.get("y")[r].numpy() for sh, r in zip(shards, rows)])
            assert n == len(y) == sw
            la, ga = _autograd(spec, w, ctx, y)
            np.testing.assert_allclose(loss, la, rtol=1e-10)
            np.testing.assert_allclose(g, ga, rtol=1e-10, atol=1e-13)
            seen.append(sum(len(r) for r in rows))
            for sh, r in zip(shards, rows):
                assert len(r) == 0 or (r.min() >= 0 and r.max() < sh.n_rows)
        assert sum(seen) == n_total  # an epoch covers every pair once
    # the batches of an epoch partition the rows of each shard
    for sh in shards:
        rows = torch.cat([M.batch_rows(sh, (11, 0, k, n_steps, True)) for k in range(n_steps)])
        assert sorted(rows.tolist()) == list(range(sh.n_rows))


def test_one_hot_network():
    spec = _spec(embedding_dim=0)
    net = spec.build("cpu")
    assert net.embedding is None and net.one_hot
    assert net.lstm.input_size == len(VOCAB)
    (sh,) = _shards([STRINGS], spec)
    loss, g, sw, n = LocalEvaluator([sh])(M.value_grad, _w0(spec), spec, None)
    assert np.isfinite(loss) and np.all(np.isfinite(g)) and np.any(g != 0)
    # roughly uniform predictions at initialisation: mean loss near log(vocab_size)
    assert loss / n == pytest.approx(np.log(len(VOCAB)), rel=0.2)
