"""Peak memory of the client and of the workers during a fit on large dask input (issue 8, "Memory").

The input is a dask array made on the workers (``da.random``), so the client
never holds it: the client's memory should grow by a small constant plus a few
copies of the parameter vector, whatever the data size.  Each worker should
hold its shard once during the optimization (the aligned copy replaces the
blocks it was built from), and return to its starting memory after the fit.

A thread samples the resident memory (RSS) of the client and of every worker
process every 20 ms.  Phases: ``placement`` (until the first distributed
round), ``optimization`` (the rounds), ``kept`` (the fit returned; its shards
stay placed for the next fit on the same input, ``dask-estimators.keep-placed``),
``after`` (the kept shards released).  ``--plot`` draws each worker's memory
over its starting memory through the phases, against the size of its shard.

Usage::

    python benchmarks/bench_memory.py                 # 2 GB of X on 2 workers
    python benchmarks/bench_memory.py --gb 0.2 --workers 2 --json out.json
    python benchmarks/bench_memory.py --gb 0.8 --json benchmarks/results/memory.json \
        --plot benchmarks/results/memory.png
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time

import numpy as np

MB = 1 << 20


class Sampler(threading.Thread):
    def __init__(self, pids: dict, interval=0.02):
        super().__init__(daemon=True)
        import psutil

        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.interval = interval
        self.phase = "before"
        self.peaks: dict = {}
        self.series: list = []  # (seconds, phase, {process: rss})
        self.t0 = time.perf_counter()
        self.stop = threading.Event()

    def sample(self):
        now = {}
        for name, p in self.procs.items():
            try:
                rss = p.memory_info().rss
            except Exception:
                continue
            now[name] = rss
            key = (self.phase, name)
            self.peaks[key] = max(self.peaks.get(key, 0), rss)
        self.series.append((time.perf_counter() - self.t0, self.phase, now))

    def run(self):
        while not self.stop.is_set():
            self.sample()
            time.sleep(self.interval)


def _plot(sampler, pids, out, path):
    """Each worker's RSS over its starting memory against time, the phases shaded, its shard's size dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    t = [s[0] for s in sampler.series]
    workers = [n for n in pids if n != "client"]
    for i, name in enumerate(workers):
        b = out["workers"][name]["before_MB"] * MB
        ax.plot(t, [(s[2].get(name, b) - b) / MB for s in sampler.series], label=name, color=f"C{i}")
        ax.axhline(out["workers"][name]["shard_MB"], color=f"C{i}", ls="--", lw=0.8)
    shades = {"placement": "#f2d7d5", "optimization": "#d5e8f2", "kept": "#e0f2d5", "after": "#eeeeee"}
    for phase, colour in shades.items():
        ts = [s[0] for s in sampler.series if s[1] == phase]
        if ts:
            ax.axvspan(min(ts), max(ts), color=colour, lw=0)
            ax.text((min(ts) + max(ts)) / 2, ax.get_ylim()[1] * 0.97, phase, ha="center", va="top", fontsize=8)
    ax.set_xlabel("seconds")
    ax.set_ylabel("worker memory over its start, MB")
    ax.set_title(f"LinearRegression on {out['X_GB']:.1f} GB of dask input, {out['n_workers']} workers "
                 "(dashed: each worker's shard)", fontsize=9)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0, help="size of X in GB (float64)")
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunk-mb", type=float, default=64.0, help="size of a row block of X")
    ap.add_argument("--max-iter", type=int, default=5)
    ap.add_argument("--source", choices=("random", "parquet", "persisted"), default="random",
                    help="X and y as a dask graph of random blocks, read from parquet files written first, or "
                         "persisted by the user before the fit (their blocks stay on the workers)")
    ap.add_argument("--filesystem", default=None,
                    help="dask.dataframe.read_parquet's filesystem= for --source parquet (default: dask's own "
                         "choice, fsspec for local files; 'arrow': pyarrow's)")
    ap.add_argument("--memory-limit", type=float, default=0.0,
                    help="each worker's memory_limit as a multiple of the data it holds (0: no limit; Dask's "
                         "default thresholds then apply: spill at 60%%, pause at 80%%, terminate at 95%%)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--plot", help="draw the workers' memory over the fit into this PNG (needs matplotlib)")
    args = ap.parse_args(argv)

    import dask.array as da
    import distributed

    import dask_estimators as de
    from dask_estimators.engine.rounds import evaluator as ev_mod

    d = args.features
    n = int(args.gb * 1e9 / (8 * d))
    rows = max(1, int(args.chunk_mb * MB / (8 * d)))
    per_worker = n * (d + 1) * 8 / args.workers
    cluster = distributed.LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
        # 0: no spilling or pausing, we measure what the engine holds
        memory_limit=int(args.memory_limit * per_worker),
    )
    client = distributed.Client(cluster, set_as_default=False)
    tmp = None
    try:
        client.run(__import__, "dask_estimators.engine.data._worker")
        X = da.random.default_rng(0).standard_normal((n, d), chunks=(rows, d))
        w = np.linspace(-1, 1, d)
        y = X @ w + 0.5
        if args.source == "parquet":
            import tempfile

            import dask.dataframe as dd

            tmp = tempfile.TemporaryDirectory(prefix="bench-memory-")
            cols = [f"x{j}" for j in range(d)]
            frame = dd.from_dask_array(da.concatenate([X, y[:, None]], axis=1), columns=cols + ["y"])
            frame.to_parquet(tmp.name, write_index=False, compute_kwargs={"scheduler": client})
            ddf = dd.read_parquet(tmp.name, **({"filesystem": args.filesystem} if args.filesystem else {}))
            X, y = ddf[cols], ddf["y"]
        elif args.source == "persisted":
            X, y = client.persist([X, y])
            while any(f.status == "pending" for f in distributed.futures_of([X, y])):  # no default client to wait
                time.sleep(0.05)
        # warm up: imports and allocator pools on the client and the workers, outside the measurement
        if args.source == "random":
            de.LinearRegression(solver="lbfgs", max_iter=2, client=client).fit(X[: rows * args.workers],
                                                                                y[: rows * args.workers])
        else:
            de.LinearRegression(solver="lbfgs", max_iter=2, client=client).fit(np.ones((100, d)), np.ones(100))
        gc.collect()
        # workers named in address order: the placement gives its shards to the workers in that order
        by_address = sorted(client.run(os.getpid).items())
        pids = {"client": os.getpid(), **{f"worker-{i}": pid for i, (_, pid) in enumerate(by_address)}}
        sampler = Sampler(pids)
        sampler.sample()
        sampler.start()
        time.sleep(0.2)
        original = ev_mod.DistributedEvaluator._round

        def _round(ev, fn, a):  # the first round ends the placement phase
            sampler.phase = "optimization"
            return original(ev, fn, a)

        ev_mod.DistributedEvaluator._round = _round
        sampler.phase = "placement"
        t0 = time.perf_counter()
        command = "python benchmarks/bench_memory.py " + " ".join(argv if argv is not None else sys.argv[1:])
        try:
            est = de.LinearRegression(solver="lbfgs", max_iter=args.max_iter, tol=0.0, client=client).fit(X, y)
        except Exception as e:  # a worker over its memory limit: the fit fails, and that is the figure
            sampler.stop.set()
            sampler.join()
            out = {"X_GB": n * d * 8 / 1e9, "rows": n, "features": d, "n_workers": args.workers,
                   "source": args.source, "memory_limit_MB": args.memory_limit * per_worker / MB,
                   "failed": f"{type(e).__name__}: {str(e).splitlines()[0]}", "command": command,
                   "workers": {name: {"before_MB": sampler.peaks[("before", name)] / MB,
                                      "shard_MB": per_worker / MB,
                                      "placement_peak_growth_MB": (sampler.peaks.get(("placement", name), 0)
                                                                   - sampler.peaks[("before", name)]) / MB,
                                      "optimization_peak_growth_MB": (sampler.peaks.get(("optimization", name), 0)
                                                                      - sampler.peaks[("before", name)]) / MB}
                               for name in pids if name != "client"}}
            print(json.dumps(out, indent=2))
            if args.plot:
                _plot(sampler, pids, out, args.plot)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=2)
            return out
        seconds = time.perf_counter() - t0
        ev_mod.DistributedEvaluator._round = original
        sampler.phase = "kept"
        time.sleep(1.0)
        from dask_estimators.session import release_kept

        kept = est.fit_stats_["placement"] == "kept"
        release_kept()
        sampler.phase = "after"
        time.sleep(2.0)  # the workers drop the released shards
        client.run(gc.collect)
        time.sleep(0.5)
        sampler.stop.set()
        sampler.join()
        final = {name: p.memory_info().rss for name, p in sampler.procs.items()}
        # the engine keeps freed shard and transfer memory pooled for the next fit (closed after 30 s idle):
        # close it now to see what else stays
        from dask_estimators.engine.data import _memfd

        client.run(_memfd.close_free_pools)
        _memfd.close_free_pools()
        client.run(gc.collect)
        time.sleep(0.5)
        closed = {name: p.memory_info().rss for name, p in sampler.procs.items()}
        peaks = sampler.peaks
        n_params = d + 1
        x_bytes = n * d * 8
        shard = x_bytes / args.workers + n * 8 / args.workers
        out = {
            "X_GB": x_bytes / 1e9,
            "rows": n,
            "features": d,
            "n_workers": args.workers,
            "source": args.source,
            "memory_limit_MB": args.memory_limit * per_worker / MB,
            "shard_MB_per_worker": shard / MB,
            "fit_seconds": seconds,
            "rounds": est.fit_stats_["rounds"],
            "placement": est.fit_stats_["placement"],
            "param_vector_bytes": n_params * 8,
            "client": {
                "before_MB": peaks[("before", "client")] / MB,
                "peak_growth_MB": (max(peaks.get((ph, "client"), 0) for ph in ("placement", "optimization"))
                                   - peaks[("before", "client")]) / MB,
                "after_growth_MB": (final["client"] - peaks[("before", "client")]) / MB,
            },
            "workers": {},
        }
        shard_rows = list(est.fit_stats_["rows_per_shard"]) + [0] * args.workers
        for i, name in enumerate(n for n in pids if n != "client"):
            b = peaks[("before", name)]
            out["workers"][name] = {
                "shard_MB": shard_rows[i] * (d + 1) * 8 / MB,
                "before_MB": b / MB,
                "placement_peak_growth_MB": (peaks.get(("placement", name), b) - b) / MB,
                "optimization_peak_growth_MB": (peaks.get(("optimization", name), b) - b) / MB,
                "kept_peak_growth_MB": (peaks.get(("kept", name), b) - b) / MB if kept else None,
                "after_growth_MB": (final[name] - b) / MB,
                "after_pools_closed_growth_MB": (closed[name] - b) / MB,
            }
        out["command"] = command
        print(json.dumps(out, indent=2))
        if args.plot:
            _plot(sampler, pids, out, args.plot)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
        return out
    finally:
        client.close()
        cluster.close()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
