"""A character-level LSTM: next-character prediction from a fixed context, as a flat parameter vector.

Knows nothing of Dask.  Text is encoded with a vocabulary whose first three
symbols are special: ``PAD`` (left padding of short contexts), ``BOS`` (the
start of a string) and ``EOS`` (its end).  A string ``c_1 .. c_m`` gives
``m + 1`` training pairs: the ``context_length`` symbols before each
position of ``BOS c_1 .. c_m EOS`` (left-padded), and the symbol at that
position.  The pairs are built on the worker from its own strings
(:func:`prepare_text`), so the expanded data set never exists on the client.

The objective is the mean cross-entropy of the next symbol; the kernels of
:mod:`.module` (``value_grad``) run on it unchanged through the spec's
``build``/``loss`` interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from .module import init_rows

__all__ = ["PAD", "BOS", "EOS", "SPECIALS", "CharLSTMSpec", "CharNet", "encode_pairs", "prepare_text", "text_chars"]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<s>", "</s>")


class CharNet(torch.nn.Module):
    """Embedding (or one-hot) -> LSTM -> linear layer on the last step: logits of the next symbol."""

    def __init__(self, spec: "CharLSTMSpec", device="cpu", dtype=None):
        super().__init__()
        dtype = dtype or spec.torch_dtype
        self.vocab_size = spec.vocab_size
        self.one_hot = spec.embedding_dim == 0
        width = spec.vocab_size if self.one_hot else spec.embedding_dim
        self.embedding = None if self.one_hot else torch.nn.Embedding(spec.vocab_size, width, device=device, dtype=dtype)
        self.lstm = torch.nn.LSTM(
            width, spec.hidden_size, spec.num_layers, batch_first=True,
            dropout=spec.dropout if spec.num_layers > 1 else 0.0, device=device, dtype=dtype,
        )
        self.head = torch.nn.Linear(spec.hidden_size, spec.vocab_size, device=device, dtype=dtype)
        self.out_dropout = torch.nn.Dropout(spec.dropout)

    def forward(self, ctx):
        if self.one_hot:
            x = torch.nn.functional.one_hot(ctx, self.vocab_size).to(self.head.weight.dtype)
        else:
            x = self.embedding(ctx)
        h, _ = self.lstm(x)
        return self.head(self.out_dropout(h[:, -1]))


@dataclass(frozen=True)
class CharLSTMSpec:
    """The architecture of :class:`CharNet`."""

    vocab_size: int
    context_length: int = 8
    embedding_dim: int = 32
    hidden_size: int = 128
    num_layers: int = 1
    dropout: float = 0.0
    dtype: str = "float32"
    out: str = "softmax"  # the validation score of :mod:`.module` reads it: next-symbol accuracy

    #: No hand-written backward: autograd (see :class:`~.module.NetworkProblem`).
    hand_gradient: ClassVar[bool] = False
    #: The loss reported is the plain sum over the symbols (see :class:`~.module.NetworkProblem`).
    loss_scale: ClassVar[float] = 1.0

    @property
    def torch_dtype(self):
        return getattr(torch, self.dtype)

    @property
    def n_outputs(self) -> int:
        return self.vocab_size

    def build(self, device="cpu", dtype=None) -> torch.nn.Module:
        return CharNet(self, device, dtype)

    def loss(self, z, y, sw):
        per = torch.nn.functional.cross_entropy(z, y, reduction="none")
        return per.sum() if sw is None else (per * sw).sum()

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.build("meta").parameters())

    def penalty_mask(self) -> np.ndarray:
        return np.zeros(self.n_params, dtype=bool)

    def weight_flags(self) -> list:
        return [False] * len(list(self.build("meta").parameters()))


def text_chars(shard, lowercase: bool, max_length):
    """The distinct characters of this shard's strings, and its distinct non-empty strings (as learned)."""
    chars: set = set()
    distinct: set = set()
    for s in shard.get("X"):
        if not isinstance(s, str):
            raise ValueError(f"CharLSTM learns from strings; got an item of type {type(s).__name__}: {s!r}.")
        if lowercase:
            s = s.lower()
        if max_length is not None:
            s = s[:max_length]
        chars.update(s)
        if s:
            distinct.add(s)
    return sorted(chars), sorted(distinct)


def encode_pairs(strings, index: dict, context_length: int, lowercase: bool, max_length: int | None,
                 unknown="error"):
    """(contexts int64 (n_pairs, context_length), next symbols int64 (n_pairs,)) of ``strings``.

    ``index`` maps characters to codes.  ``unknown="error"`` raises on a
    character outside it, ``"skip"`` drops the strings that have one.
    """
    L = context_length
    ctx_parts, y_parts = [], []
    for s in strings:
        if lowercase:
            s = s.lower()
        if max_length is not None:
            s = s[:max_length]
        try:
            codes = [index[c] for c in s]
        except KeyError as e:
            if unknown == "skip":
                continue
            raise ValueError(f"The character {e.args[0]!r} of {s!r} is not in the vocabulary (classes_).") from None
        full = np.array([PAD] * (L - 1) + [BOS] + codes + [EOS], dtype=np.int64)
        windows = np.lib.stride_tricks.sliding_window_view(full, L + 1)
        ctx_parts.append(windows[:, :L])
        y_parts.append(windows[:, L])
    if not ctx_parts:
        return np.zeros((0, L), dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(ctx_parts), np.concatenate(y_parts)


def prepare_text(shard, vocabulary, context_length: int, lowercase: bool, max_length, seed: int, rank: int) -> dict:
    """Replace this shard's strings by their (context, next symbol) pairs, on its device; returns the counts."""
    strings = [s for s in shard.get("X") if s]
    index = {c: i for i, c in enumerate(vocabulary) if i >= len(SPECIALS)}
    ctx, y = encode_pairs(strings, index, context_length, lowercase, max_length, unknown="skip")
    shard.data.clear()
    shard.n_rows = None
    shard.put("X", ctx)
    shard.put("y", y)
    torch.manual_seed(seed + 7919 * rank)  # dropout draws on this worker
    counts = init_rows(shard, rank)
    counts["n_strings"] = len(strings)
    return counts
