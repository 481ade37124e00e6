"""Streaming ``partial_fit``: seconds per call, ours against scikit-learn, in one run.

    python benchmarks/bench_partial_fit.py                  # 200, 2,000 and 20,000 rows a call
    python benchmarks/bench_partial_fit.py --rows 200 --calls 3   # a smoke run (no timing claims)

A stream of ``make_classification(rows * calls, 50, n_classes=5)`` is fed in
chunks of ``rows`` to ``MLPClassifier(hidden_layer_sizes=(100,))``, one
``partial_fit`` a chunk (each call is one epoch over its chunk, in batches of
200), after one untimed first call with ``classes=``:

* ``sklearn``: ``sklearn.neural_network.MLPClassifier.partial_fit``, ``--cores``
  BLAS threads;
* ``ours``: ``dask_estimators.MLPClassifier.partial_fit`` on a
  ``LocalCluster(n_workers=--cores, threads_per_worker=1)``.  Each call places
  its chunk on the workers, trains the epoch there ("auto" strategy) and
  brings the weights back, so a call has a fixed cost beside its epoch: the
  ``fixed`` column is our median call on ``--rows`` rows less the epoch that
  call's ranks timed (``fit_stats_["seconds"]``).

The two are repeated ``--repeat`` times, alternating; medians of the per-call
times.  Writes ``partial_fit.json`` and ``partial_fit.md`` to ``--out``
(default ``benchmarks/results``).  Nothing here gates CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HIDDEN = (100,)
N_FEATURES, N_CLASSES = 50, 5


def _stream(rows, calls):
    from sklearn.datasets import make_classification

    X, y = make_classification(rows * (calls + 1), N_FEATURES, n_informative=20, n_classes=N_CLASSES,
                               random_state=0)
    return [(X[i * rows:(i + 1) * rows], y[i * rows:(i + 1) * rows]) for i in range(calls + 1)]


def _per_call(est, chunks):
    """Seconds of each timed call (all but the first, which passes ``classes``), and the epochs' seconds."""
    classes = np.arange(N_CLASSES)
    est.partial_fit(*chunks[0], classes=classes)
    times, epochs = [], []
    for X, y in chunks[1:]:
        t0 = time.perf_counter()
        est.partial_fit(X, y)
        times.append(time.perf_counter() - t0)
        epochs.append(getattr(est, "fit_stats_", {}).get("seconds"))
    return times, epochs


def run(client, rows, calls, cores, repeat):
    from sklearn.neural_network import MLPClassifier as SkMLP
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    chunks = _stream(rows, calls)
    sk_times, our_times, our_epochs = [], [], []
    strategy = None
    for _ in range(repeat):
        with threadpool_limits(cores), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, _ = _per_call(SkMLP(hidden_layer_sizes=HIDDEN, random_state=0), chunks)
        sk_times += t
        ours = de.MLPClassifier(hidden_layer_sizes=HIDDEN, random_state=0, client=client)
        t, e = _per_call(ours, chunks)
        our_times += t
        our_epochs += e
        strategy = ours.fit_stats_["strategy"]
    sk, us = statistics.median(sk_times), statistics.median(our_times)
    return {"rows_per_call": rows, "calls": calls * repeat, "sklearn_s": sk, "ours_s": us,
            "speedup": sk / us, "ours_fixed_s": us - statistics.median(our_epochs), "strategy": strategy}


COLUMNS = ["rows_per_call", "calls", "sklearn_s", "ours_s", "speedup", "ours_fixed_s", "strategy"]


def markdown(rows, env) -> str:
    lines = ["# Streaming partial_fit: seconds per call", "",
             f"MLPClassifier{HIDDEN}, {N_FEATURES} features, {N_CLASSES} classes; {env}; speedup = scikit-learn's "
             "seconds / ours; fixed = our call less its epoch.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[200, 2000, 20000])
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=args.cores, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        run(client, 200, 2, args.cores, 1)  # warm-up: the workers' first fit (imports, numba) is not a call's cost
        rows = [run(client, n, args.calls, args.cores, args.repeat) for n in args.rows]
    env = f"{args.cores} workers of 1 thread against {args.cores} BLAS threads"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "partial_fit.json").write_text(json.dumps({"rows": rows, "env": env}, indent=2))
    md = markdown(rows, env)
    (out / "partial_fit.md").write_text(md)
    sys.stdout.write(md)
    return rows


if __name__ == "__main__":
    main()
