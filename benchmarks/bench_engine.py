"""Engine benchmarks: per-evaluation overhead, and the reduction strategies by parameter count.

    python benchmarks/bench_engine.py            # full: 1e5, 1e6, 1e7 parameters
    python benchmarks/bench_engine.py --quick    # 1e5 and 1e6 only, fewer repeats

Writes ``benchmarks/results/engine.json`` and prints Markdown tables.  Every
figure is the median of repeated runs, taken in this one run next to its
anchor (one scheduler round trip; in-process evaluation; client gather).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _median_seconds(fn, repeat, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _noop(x=None):
    return x


def _tiny_kernel(shard, w):
    X = shard.get("X")
    return (X @ w).sum(), X.T @ (X @ w)


def bench_overhead(client, repeat):
    """Seconds per evaluation of a tiny problem (n=1000, d=10) against one scheduler round trip."""
    from dask_estimators.engine import DistributedEvaluator, LocalEvaluator, Shard, place

    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 10))
    w = rng.normal(size=10)
    rows = []
    rt = _median_seconds(lambda: client.submit(_noop, 1, pure=False).result(), repeat)
    local = LocalEvaluator([Shard({"X": X}, device="cpu")])
    t_local = _median_seconds(lambda: local(_tiny_kernel, w), repeat)
    for transport in ("actors", "tasks"):
        with place(client, {"X": X}, transport=transport) as p:
            for reduction in ("tree", "gather", "single"):
                ev = DistributedEvaluator(p, reduction=reduction)
                t = _median_seconds(lambda: ev(_tiny_kernel, w), repeat)
                rows.append(
                    dict(transport=transport, reduction=reduction, ms_per_eval=1e3 * t,
                         round_trip_ms=1e3 * rt, in_process_ms=1e3 * t_local,
                         excess_over_round_trip_ms=1e3 * (t - rt))
                )
    return rows


def _param_kernel(shard, w):
    return float(w[:1].sum())


def bench_scatter(client, sizes, repeat):
    """Tasks transport: a round with the parameters inline in the task against scattered first."""
    from dask_estimators.engine import DistributedEvaluator, place

    X = np.ones((100, 2))
    rows = []
    with place(client, {"X": X}, transport="tasks") as p:
        for size in sizes:
            w = np.ones(size)
            t = {}
            for mode, threshold in (("inline", 1 << 62), ("scatter", 0)):
                ev = DistributedEvaluator(p, inline_bytes=threshold)
                t[mode] = _median_seconds(lambda: ev(_param_kernel, w), repeat)
            rows.append(dict(bytes=8 * size, inline_ms=1e3 * t["inline"], scatter_ms=1e3 * t["scatter"],
                             inline_over_scatter=t["inline"] / t["scatter"]))
    return rows


def _example_grad(x, y, w):
    """Loss and gradient of one example (squared error), the unit of work of a per-example task."""
    r = float(x @ w) - y
    return 0.5 * r * r, r * x


def _shard_grad(shard, w):
    X, y = shard.get("X"), shard.get("y")
    r = X @ w - y
    return 0.5 * (r * r).sum(), X.T @ r


def bench_batching(client, n_examples, repeat):
    """One task per worker over its whole shard against one task per example, both summed to the same result."""
    from dask_estimators.engine import DistributedEvaluator, place

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_examples, 10))
    y = rng.normal(size=n_examples)
    w = rng.normal(size=10)
    workers = sorted(client.nthreads())
    # the examples live on the workers, as the shards do: only w and the results travel
    xs = [client.scatter(X[i], workers=[workers[i % len(workers)]]) for i in range(n_examples)]

    def per_example():
        parts = [client.submit(_example_grad, x, y[i], w, pure=False) for i, x in enumerate(xs)]
        total = client.submit(_sum_pairs, *parts, pure=False).result()
        client.cancel(parts)
        return total

    with place(client, {"X": X, "y": y}) as p:
        ev = DistributedEvaluator(p)
        batched = ev(_shard_grad, w)
        unbatched = per_example()
        np.testing.assert_allclose(batched[1], unbatched[1], rtol=1e-9)
        np.testing.assert_allclose(batched[0], unbatched[0], rtol=1e-9)
        t_b = _median_seconds(lambda: ev(_shard_grad, w), repeat * 4)
        t_e = _median_seconds(per_example, max(1, repeat // 4), warmup=0)  # about 10 s a run: once in quick mode
    client.cancel(xs)
    return [dict(examples=n_examples, workers=len(workers), per_worker_ms=1e3 * t_b, per_example_ms=1e3 * t_e,
                 speedup=t_e / t_b)]


def _sum_pairs(*parts):
    return (sum(p[0] for p in parts), np.sum([p[1] for p in parts], axis=0))


def _part(size, seed):
    return np.random.default_rng(seed).random(size)


def _sum_all(*parts):
    total = parts[0].copy()
    for p in parts[1:]:
        total += p
    return total


#: The reductions compared, in the table's order.  "tree" is the engine's (shared memory between the
#: workers of one host); "tree-tcp" the same tree with that off; "gather" is a plain ``client.gather`` (through
#: the scheduler, as Dask does by default), the anchor; "gather-direct" fetches from the workers directly.
REDUCTION_STRATEGIES = ("tree", "tree-tcp", "gather", "gather-direct", "as_completed", "single")


def bench_reductions(client, sizes, parts_per_worker, repeat):
    """Time to sum ``parts_per_worker`` partial results per worker held on the workers, by strategy and size.

    Every repeat sums fresh parts, made and finished before the clock starts:
    summing the same futures again would find copies of them already on the
    workers that fetched them the last time (Dask keeps replicas), and time
    less transfer than a real round has.
    """
    import dask
    from distributed import as_completed, wait

    from dask_estimators.engine.rounds.reduce import tree_sum

    workers = sorted(client.nthreads())

    def tree(futs, where):
        return tree_sum(client, futs, where, fan_in=2).result()

    def tree_tcp(futs, where):
        with dask.config.set({"dask-estimators.shared-memory": False}):
            return tree(futs, where)

    def completed(futs, where):
        total = None
        for f in as_completed(futs):
            r = f.result()
            total = r.copy() if total is None else total + r
        return total

    fns = {
        "tree": tree,
        "tree-tcp": tree_tcp,
        "gather": lambda futs, where: _sum_all(*client.gather(futs)),
        "gather-direct": lambda futs, where: _sum_all(*client.gather(futs, direct=True)),
        "as_completed": completed,
        "single": lambda futs, where: client.submit(_sum_all, *futs, workers=[where[0]], pure=False).result(),
    }
    rows = []
    for size in sizes:
        expected = None
        for name in REDUCTION_STRATEGIES:
            times = []
            for r in range(repeat + 1):  # the first is a warm-up, and checked
                placed = [(w, client.submit(_part, size, 1000 * i + j + 17 * r, workers=[w], pure=False))
                          for i, w in enumerate(workers) for j in range(parts_per_worker)]
                futs, where = [f for _, f in placed], [w for w, _ in placed]
                wait(futs)
                t0 = time.perf_counter()
                out = fns[name](futs, where)
                times.append(time.perf_counter() - t0)
                if r == 0:
                    if expected is None:
                        expected = _sum_all(*client.gather(futs, direct=True))
                    np.testing.assert_allclose(out, expected, rtol=1e-10)
                del placed, futs, out
            rows.append(dict(parameters=size, parts=len(workers) * parts_per_worker, workers=len(workers),
                             strategy=name, seconds=statistics.median(times[1:])))
    for size in sizes:
        base = next(r["seconds"] for r in rows if r["parameters"] == size and r["strategy"] == "gather")
        for r in rows:
            if r["parameters"] == size:
                r["speedup_vs_gather"] = base / r["seconds"]
    return rows


def run_record(script: str, **fields) -> dict:
    """What every results file starts with: the commit, the machine and the command that wrote it, then
    ``fields``.  ``script`` is the benchmark's file name; the command is it with this run's arguments."""
    import os
    import platform
    import subprocess
    import sys

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent.parent, capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "command": f"python benchmarks/{script} " + " ".join(sys.argv[1:]),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"), **fields}


def write_results(out_dir: Path, stem: str, record: dict, lines=None) -> None:
    """``record`` as ``<stem>.json`` in ``out_dir``, and the Markdown ``lines`` (when given) as ``<stem>.md``,
    printed too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=2))
    if lines is not None:
        (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


def shape_main(run, doc: str, rows: int, cols: int = 100, repeat: int = 3, argv=None):
    """The command line of a benchmark on ``rows`` x ``cols`` data: ``--rows/--cols/--repeat/--out`` (default
    ``benchmarks/results``), then ``run(rows, cols, repeat, out_dir)``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rows", type=int, default=rows)
    ap.add_argument("--cols", type=int, default=cols)
    ap.add_argument("--repeat", type=int, default=repeat)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    run(args.rows, args.cols, args.repeat, args.out)


def _table(rows, cols):
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = ""
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)  # a column that does not apply to a row is left empty
            cells.append(f"{v:.3g}" if isinstance(v, float) else "" if v is None else str(v))
        body += "| " + " | ".join(cells) + " |\n"
    return head + body


TABLES = {
    "overhead": ("Per-evaluation overhead (n=1000, d=10, 2 workers)",
                 ["transport", "reduction", "ms_per_eval", "round_trip_ms", "in_process_ms"]),
    "scatter": ("Parameters inline in the task against scattered first (tasks transport, 2 workers)",
                ["bytes", "inline_ms", "scatter_ms", "inline_over_scatter"]),
    "batching": ("One task per worker against one task per example (2 workers)",
                 ["examples", "per_worker_ms", "per_example_ms", "speedup"]),
    "reductions": ("Reductions ({workers} workers, 2 parts each)",
                   ["parameters", "parts", "strategy", "seconds", "speedup_vs_gather"]),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workers", type=int, default=8, help="workers for the reduction benchmark")
    ap.add_argument("--only", choices=sorted(TABLES), help="run one part")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    wanted = [args.only] if args.only else list(TABLES)
    repeat = 5 if args.quick else 20
    sizes = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7]
    param_sizes = [10**2, 10**3, 10**4, 10**5, 10**6] + ([] if args.quick else [10**7])
    out = {}
    if {"overhead", "scatter", "batching"} & set(wanted):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            if "overhead" in wanted:
                out["overhead"] = bench_overhead(client, repeat * 5)
            if "scatter" in wanted:
                out["scatter"] = bench_scatter(client, param_sizes, repeat)
            if "batching" in wanted:
                out["batching"] = bench_batching(client, 4000, repeat)
    if "reductions" in wanted:
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          memory_limit=None) as cluster, Client(cluster) as client:
            # every repeat makes 16 fresh parts first: quick mode times one sum of each (after a checked warm-up)
            out["reductions"] = bench_reductions(client, sizes, 2, 1 if args.quick else max(3, repeat // 4))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / ("engine.json" if not args.only else f"engine-{args.only}.json")
    path.write_text(json.dumps(out, indent=2))
    for key, rows in out.items():
        title, cols = TABLES[key]
        print(f"## {title.format(workers=args.workers)}\n")
        print(_table(rows, cols))
    return out


if __name__ == "__main__":
    main()
