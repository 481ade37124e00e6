"""Example 6: the three tricks of the engine, each switched on and off, and the ratios printed.

The field report named three things that make distributed training on Dask
fast; each is measured here on the cluster at hand, against its absence:

1. **Scatter** large parameters once (broadcast) instead of sending them
   inside every task.  The engine scatters payloads above
   ``dask_estimators.engine.rounds.evaluator.INLINE_BYTES`` (4 MiB) when it runs on
   plain tasks.
2. **Batching**: one task per worker over its whole shard (the engine's round)
   instead of one task per example.
3. **Tree-summation** of the partial results on the workers instead of
   gathering every part to the client.

Every variant computes the same numbers, and that is checked before any
time is taken.  The measurements are the functions of
``benchmarks/bench_engine.py`` (``bench_scatter``, ``bench_batching``,
``bench_reductions``), run here on the cluster at hand; the results on the
development machine are in docs/performance.md.  Timings on a busy or small machine
vary: read the ratios, not the milliseconds.

    python examples/three_tricks.py           # 8 and 80 MB parameters, 4,000 one-example tasks, 1e6 and 1e7 sums
    python examples/three_tricks.py --quick   # smaller sizes, fewer repeats
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dask_estimators.engine import DistributedEvaluator, place, resolve_client

BENCH_ENGINE = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_engine.py"
sys.path.insert(0, str(BENCH_ENGINE.parent))
import bench_engine  # noqa: E402  (benchmarks/bench_engine.py of this repository)


# ----------------------------------------------------------------- 1. scatter
def _weighted_sum(shard, w):
    """A kernel whose result depends on every parameter: sum(X) * sum(w)."""
    return float(shard.get("X").sum()) * float(w.sum())


def scatter(client, sizes, repeat):
    """Inline against scattered parameters (tasks transport): checked results, then the timings."""
    X = np.arange(200.0).reshape(100, 2)
    agree = []
    with place(client, {"X": X}, transport="tasks") as p:
        for size in sizes:
            w = np.linspace(0.0, 1.0, size)
            inline = DistributedEvaluator(p, inline_bytes=1 << 62)(_weighted_sum, w)
            scattered = DistributedEvaluator(p, inline_bytes=0)(_weighted_sum, w)
            agree.append(abs(inline - scattered) / abs(inline))
    rows = bench_engine.bench_scatter(client, sizes, repeat)
    return rows, max(agree)


# ---------------------------------------------------------------- 2. batching
def batching(client, n_examples, repeat):
    """The engine's round (one task per worker) against one task per example (bench_engine checks they agree)."""
    return bench_engine.bench_batching(client, n_examples, repeat)[0]


# -------------------------------------------------------------------- 3. tree
def tree(client, sizes, repeat):
    """Tree-sum on the workers against gather to the client (bench_engine checks that all sums agree)."""
    with client.as_current():  # bench_reductions waits on the default client
        rows = bench_engine.bench_reductions(client, sizes, 2, repeat)
    return [r for r in rows if r["strategy"] in ("tree", "gather")]


def main(quick: bool = False) -> dict:
    """Measure the three tricks; return the ratios (off / on) and the largest relative disagreement."""
    client = resolve_client()  # your active client, else the embedded LocalCluster
    client.upload_file(str(BENCH_ENGINE))  # the workers import bench_engine's functions too
    n_workers = len(client.nthreads())
    repeat = 3 if quick else 10
    print(f"Cluster: {n_workers} workers\n")

    scatter_rows, scatter_agree = scatter(client, [10**5, 10**6] if quick else [10**6, 10**7], repeat)
    print("1. Scatter: parameters sent inside each task (off) or scattered once (on), tasks transport")
    for r in scatter_rows:
        print(f"   {r['bytes'] / 1e6:7.1f} MB: inline {r['inline_ms']:7.1f} ms, scattered {r['scatter_ms']:7.1f} ms, "
              f"inline / scattered = {r['inline_over_scatter']:.2f}")

    batch_row = batching(client, 500 if quick else 4000, repeat)
    print(f"\n2. Batching: one task per example (off) or one task per worker (on), {batch_row['examples']} examples")
    print(f"   per example {batch_row['per_example_ms']:.0f} ms, per worker {batch_row['per_worker_ms']:.1f} ms: "
          f"ratio {batch_row['speedup']:.0f}")

    tree_rows = tree(client, [10**5, 10**6] if quick else [10**6, 10**7], max(2, repeat // 2))
    print(f"\n3. Tree-summation: gather every part to the client (off) or sum pairwise on the workers (on), "
          f"{2 * n_workers} parts")
    ratios_tree = {}
    for size in sorted({r["parameters"] for r in tree_rows}):
        t = {r["strategy"]: r["seconds"] for r in tree_rows if r["parameters"] == size}
        ratios_tree[size] = t["gather"] / t["tree"]
        print(f"   {size:.0e} parameters: gather {1e3 * t['gather']:.0f} ms, tree {1e3 * t['tree']:.0f} ms, "
              f"gather / tree = {ratios_tree[size]:.2f}")

    print(f"\nAll variants agree (scattered and inline parameters: relative difference {scatter_agree:.1e}; "
          "batched and per-example gradients, tree and gathered sums: to 1e-9, checked by bench_engine)")
    return {
        "scatter": {r["bytes"]: r["inline_over_scatter"] for r in scatter_rows},
        "batching": batch_row["speedup"],
        "tree": ratios_tree,
        "agreement": {"scatter": scatter_agree},
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    main(**vars(ap.parse_args()))
