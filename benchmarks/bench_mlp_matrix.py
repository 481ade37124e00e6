"""MLP throughput over a matrix of network shapes: ours (``strategy="auto"``) against scikit-learn, cell by cell.

    python benchmarks/bench_mlp_matrix.py             # every cell, medians of 3
    python benchmarks/bench_mlp_matrix.py --quick     # every cell, a quarter of the rows, 1 timed fit
    python benchmarks/bench_mlp_matrix.py --cells 0 5 --repeat 5

Each cell is one network and one data set (``make_classification`` or
``make_regression``): input width, hidden layers, activation, global batch,
classes (0: regression), dtype.  The cells cover every level the issue names
(d 20-1000; 1-3 hidden layers of 32-1024 units; relu, tanh, logistic; batch
64-2048; 2-20 classes and regression; float64 and float32), each level in
several combinations; they are not a full product (thousands of fits).

Rows per cell: as many as make scikit-learn's 5 epochs about ``--seconds``
long by a flop count (``rows_for``), clipped to 4k-200k, so every cell times
real work and no cell takes minutes.

Per cell, in this one process, alternating:

1. a fresh embedded cluster (``engine.get_embedded_client(--cores)``: the
   cluster a fit without a client starts, ``--cores`` worker processes of one
   thread; its start is not timed), or with ``--plain``, a plain
   ``LocalCluster(n_workers=--cores, threads_per_worker=1)`` as ``Client()`` makes;
2. ours' **first fit** on it (the shape's first use on the workers: their
   imports, compilation, placement, all inside ``fit``);
3. ``--repeat`` times: scikit-learn's fit (``--cores`` BLAS threads), then
   ours' fit (placement again every time: each fit is a fresh ``fit``).

5 epochs of Adam (``tol=0``, every epoch run), ``learning_rate_init=1e-3``,
``random_state=0``.  samples/s = rows x epochs / wall time of ``fit``.  The
ratio is ours / scikit-learn in samples/s, medians against medians; the
first-fit ratio is ours' first fit against scikit-learn's median.

Writes ``mlp_matrix.json``, ``mlp_matrix.md`` and ``mlp_matrix.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_engine import RESULTS, _table  # noqa: E402
from bench_mlp import _jsonable, environment  # noqa: E402

EPOCHS = 5
LR = 1e-3

# (d, hidden, activation, batch, classes (0: regression), dtype)
CELLS = [
    (20, (32,), "relu", 64, 2, "float64"),
    (20, (1024,), "tanh", 2048, 20, "float32"),
    (20, (256, 256, 256), "logistic", 512, 3, "float64"),
    (50, (128,), "tanh", 64, 0, "float64"),
    (50, (32,), "logistic", 2048, 2, "float32"),
    (100, (100,), "relu", 256, 2, "float64"),
    (100, (64, 64), "tanh", 128, 5, "float64"),
    (100, (256, 128, 64), "logistic", 512, 10, "float32"),
    (300, (512,), "relu", 128, 10, "float64"),
    (300, (256, 256), "relu", 512, 0, "float32"),
    (784, (100,), "relu", 200, 10, "float64"),
    (784, (256, 128), "relu", 200, 10, "float32"),
    (500, (1024, 1024), "tanh", 256, 20, "float32"),
    (1000, (1024,), "logistic", 1024, 20, "float64"),
    (1000, (32, 32, 32), "relu", 64, 2, "float32"),
    (1000, (64,), "tanh", 64, 0, "float64"),
]


def name(cell):
    d, hidden, act, batch, k, dtype = cell
    task = "regression" if k == 0 else f"{k} classes"
    return f"d={d} {'-'.join(map(str, hidden))} {act} b={batch} {task} f{dtype[5:]}"


def rows_for(cell, seconds, flops_per_s=2.5e10):
    """Rows that make scikit-learn's 5 epochs about ``seconds`` by a flop count (forward + backward = 3x forward)."""
    d, hidden, _, _, k, _ = cell
    widths = [d, *hidden, max(k, 1)]
    per_row = 2 * sum(a * b for a, b in zip(widths, widths[1:])) * 3
    n = int(seconds * flops_per_s / (per_row * EPOCHS))
    return int(np.clip(n, 4_000, 200_000))


def data(cell, n):
    from sklearn.datasets import make_classification, make_regression

    d, _, _, _, k, dtype = cell
    if k == 0:
        X, y = make_regression(n, d, n_informative=min(d, 20), noise=1.0, random_state=0)
        y = (y - y.mean()) / y.std()
    else:
        X, y = make_classification(n, d, n_informative=min(d, 10), n_redundant=0, n_classes=k,
                                   n_clusters_per_class=1, random_state=0)
    X = (X - X.mean(0)) / X.std(0)
    return X.astype(dtype), y.astype(dtype) if k == 0 else y


def _params(cell):
    _, hidden, act, batch, _, _ = cell
    return dict(hidden_layer_sizes=hidden, activation=act, solver="adam", batch_size=batch, learning_rate_init=LR,
                max_iter=EPOCHS, tol=0.0, n_iter_no_change=10**9, shuffle=True, random_state=0)


def gemm_floor(cell, n, cores, reps=15):
    """Seconds the matrix products of 5 epochs take alone: a bound on any implementation's time on these cores.

    Per global batch, the products every implementation of this network's
    forward and backward does (scikit-learn's and ours): each layer's
    ``A @ W``, its weight gradient ``A.T @ dZ``, and the gradient to the
    layer below ``dZ @ W.T`` (all layers but the first), in the cell's dtype,
    by NumPy's BLAS; the median of ``reps`` batches times the batches of 5
    epochs.  The faster of two ways to use the cores:

    - the global batch on ``cores`` BLAS threads (scikit-learn's way);
    - ``1 / cores`` of the batch on one thread, as each of ``cores``
      data-parallel ranks does at once (ours); timed alone, so it counts
      no contention between the ranks.

    Nothing else (activations, loss, optimizer, data movement) is counted,
    so ``scikit-learn's time / this`` is more than any implementation can
    reach against scikit-learn here.  Returns ``(seconds, per way)``.
    """
    from threadpoolctl import threadpool_limits

    d, hidden, _, batch, k, dtype = cell
    widths = [d, *hidden, max(k, 1)]
    b_global = min(batch, n)
    steps = math.ceil(n / b_global) * EPOCHS
    ways = {}
    for way, b, threads in (("threads", b_global, cores), ("ranks", -(-b_global // cores), 1)):
        rng = np.random.default_rng(0)
        acts = [rng.standard_normal((b, w)).astype(dtype) for w in widths]
        Ws = [rng.standard_normal((fi, fo)).astype(dtype) for fi, fo in zip(widths, widths[1:])]

        def one_batch():
            for i, W in enumerate(Ws):
                acts[i] @ W
            for i in range(len(Ws) - 1, -1, -1):
                acts[i].T @ acts[i + 1]
                if i:
                    acts[i + 1] @ Ws[i].T

        with threadpool_limits(threads):
            one_batch()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                one_batch()
                times.append(time.perf_counter() - t0)
        ways[way] = statistics.median(times) * steps
    return min(ways.values()), ways


def fit_sklearn(cell, X, y):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    est = (MLPRegressor if cell[4] == 0 else MLPClassifier)(**_params(cell))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    assert est.n_iter_ == EPOCHS, est.n_iter_
    return dict(wall_s=wall, loss=float(est.loss_))


def fit_ours(cell, X, y, client):
    from sklearn.exceptions import ConvergenceWarning

    import dask_estimators as de

    est = (de.MLPRegressor if cell[4] == 0 else de.MLPClassifier)(**_params(cell), client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    st = est.fit_stats_
    epochs = sum(h["seconds"] for h in est.history_)
    out = dict(wall_s=wall, loss=float(est.loss_), strategy=st.get("strategy"), epochs_s=epochs,
               outside_epochs_s=wall - epochs, kernel=st.get("kernel"))
    if st.get("step_seconds"):  # ddp: rank 0's time in each part of a step, in us per step
        steps = est.n_iter_ * st["steps_per_epoch"]
        out["step_us"] = {k: None if v is None else 1e6 * v / steps for k, v in st["step_seconds"].items()}
        out["step_us"]["epochs"] = 1e6 * epochs / steps
    return out


@contextlib.contextmanager
def fresh_cluster(cores, plain):
    """A client of a fresh cluster: the embedded one (closed at the end), or with ``plain`` a LocalCluster."""
    from distributed import Client, LocalCluster

    if plain:
        with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            yield client
        return
    from dask_estimators.engine.cluster import client as embedded

    try:
        yield embedded.get_embedded_client(cores)
    finally:
        embedded.close_embedded_cluster()


def run_cell(cell, n, cores, repeat, plain=False):
    X, y = data(cell, n)
    rec = dict(cell=name(cell), d=cell[0], hidden=list(cell[1]), activation=cell[2], batch=cell[3],
               classes=cell[4], dtype=cell[5], rows=n, epochs=EPOCHS)
    with fresh_cluster(cores, plain) as client:
        rec["first"] = fit_ours(cell, X, y, client)
        sk, ours = [], []
        for _ in range(repeat):  # alternating, so a slow spell of the machine hits both
            sk.append(fit_sklearn(cell, X, y))
            ours.append(fit_ours(cell, X, y, client))
    med = lambda runs: statistics.median(r["wall_s"] for r in runs)  # noqa: E731
    rec.update(sklearn=sk, ours=ours, sklearn_s=med(sk), ours_s=med(ours))
    rec["ratio"] = rec["sklearn_s"] / rec["ours_s"]  # samples/s ours / samples/s scikit-learn
    rec["gemm_floor_s"], rec["gemm_floor_ways_s"] = gemm_floor(cell, n, cores)
    rec["ceiling"] = rec["sklearn_s"] / rec["gemm_floor_s"]  # the most any implementation can reach here
    rec["first_ratio"] = rec["sklearn_s"] / rec["first"]["wall_s"]
    rec["samples_per_s"] = {"sklearn": n * EPOCHS / rec["sklearn_s"], "ours": n * EPOCHS / rec["ours_s"]}
    return rec


def _git(out):
    g = out["environment"].get("git") or {}
    return f"{(g.get('commit') or '?')[:10]}{' (dirty)' if g.get('dirty') else ''}"


def markdown(out):
    lines = ["# MLP throughput matrix: ours (strategy='auto') / scikit-learn\n\n",
             f"{out['epochs']} epochs of Adam from the start of `fit` (set-up included), {out['cores']} worker "
             f"processes of 1 thread against scikit-learn on {out['cores']} BLAS threads; medians of "
             f"{out['repeat']} alternating fits per cell, plus ours' first fit on a fresh cluster. "
             f"Ratios are samples/s ours / scikit-learn (above 1: ours faster). "
             f"*Matrix products alone*: the time the forward and backward matrix products of these 5 epochs take "
             f"by themselves, the faster of the global batch on {out['cores']} BLAS threads and "
             f"1/{out['cores']} of it on one thread, as each data-parallel rank does (`gemm_floor`); *ceiling* = "
             f"scikit-learn's time / that, more than any implementation of this network can reach against "
             f"scikit-learn on these cores. "
             f"`{out['command']}`, {out['cluster']} cluster, git {_git(out)}, load {out['load_start']} at the start, "
             f"{out['load_end']} at the end; {out['seconds']:.0f} s.\n\n"]
    rows = []
    for r in out["cells"]:
        if "error" in r:
            rows.append([r["cell"], "", "", "", "", "", r["error"][:60]])
            continue
        rows.append([r["cell"], f"{r['rows']:,}", f"{r['sklearn_s']:.2f}", f"{r['ours_s']:.2f}",
                     f"**{r['ratio']:.2f}**", f"{r['first_ratio']:.2f}",
                     f"{statistics.median(o['outside_epochs_s'] for o in r['ours']):.2f}",
                     f"{r['gemm_floor_s']:.2f}", f"{r['ceiling']:.2f}"])
    cols = ["cell", "rows", "scikit-learn s", "ours s", "ratio", "first fit ratio", "ours outside epochs s",
            "matrix products alone s", "ceiling"]
    lines.append(_table([dict(zip(cols, r)) for r in rows], cols))
    ok = [r["ratio"] for r in out["cells"] if "error" not in r]
    under = [r for r in out["cells"] if "error" not in r and r["ceiling"] < 1.5]
    if under:
        lines.append(f"\n{len(under)} cell(s) have a ceiling under 1.5: there scikit-learn spends less than 1.5x "
                     "the time of the matrix products alone, so no implementation on these cores reaches 1.5x.\n")
    if ok:
        lines.append(f"\nLowest ratio {min(ok):.2f}, median {statistics.median(ok):.2f}, highest {max(ok):.2f}; "
                     f"{sum(v >= 1.5 for v in ok)} of {len(ok)} cells at 1.5x or more.\n")
    parts = ["batch", "gradient", "allreduce", "l2", "optimizer"]
    steps = [(r, [o["step_us"] for o in r["ours"] if o.get("step_us")]) for r in out["cells"] if "error" not in r]
    steps = [(r, s) for r, s in steps if s]
    if steps:
        lines.append("\nWhere ours' steps spend their time: rank 0's microseconds per step in each part "
                     "(`fit_stats_['step_seconds']`; medians over the timed fits), and the epochs' time per step; "
                     "the rest of a step is the loop's own.\n\n")
        cols = ["cell", "kernel", *parts, "epochs / step"]
        med = lambda runs, k: statistics.median(x[k] for x in runs) if runs[0][k] is not None else None  # noqa
        fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        rows = [[r["cell"], r["ours"][0].get("kernel"), *(fmt(med(s, k)) for k in parts), fmt(med(s, "epochs"))]
                for r, s in steps]
        lines.append(_table([dict(zip(cols, x)) for x in rows], cols))
    return "".join(lines)


def plot(out, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [r for r in out["cells"] if "error" not in r]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(cells) + 1.2))
    ys = np.arange(len(cells))[::-1]
    ax.barh(ys, [r["ratio"] for r in cells], color="#3b7dd8", label=f"median of {out['repeat']}")
    ax.plot([r["first_ratio"] for r in cells], ys, "k|", markersize=12, label="first fit on a fresh cluster")
    right = max(3.0, 1.15 * max(r["ratio"] for r in cells))
    ceil = np.array([r["ceiling"] for r in cells])
    inside = ceil <= right
    ax.plot(ceil[inside], ys[inside], "r.", label="ceiling: scikit-learn / its matrix products alone")
    ax.plot(np.full((~inside).sum(), right * 0.98), ys[~inside], "r>", label="ceiling beyond the axis")
    ax.set_xlim(0, right)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.axvline(1.5, color="#d83b3b", lw=0.8, ls="--", label="1.5x")
    ax.set_yticks(ys, [r["cell"] for r in cells], fontsize=7)
    ax.set_xlabel("samples/s, ours / scikit-learn (5 epochs, set-up included)")
    # below the axes: inside them it covered the lowest cells' bars
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the rows, 1 timed fit per cell")
    ap.add_argument("--cells", type=int, nargs="*", help="indices into CELLS (default: all)")
    ap.add_argument("--repeat", type=int, help="timed fits per contestant per cell (default 3, quick 1)")
    ap.add_argument("--seconds", type=float, default=4.0, help="scikit-learn's target time per fit")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--plain", action="store_true", help="a plain LocalCluster per cell, not the embedded cluster")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    repeat = args.repeat or (1 if args.quick else 3)
    seconds = args.seconds / (4 if args.quick else 1)
    command = "python benchmarks/bench_mlp_matrix.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = dict(command=command.strip(), epochs=EPOCHS, cores=args.cores, repeat=repeat,
               cluster="LocalCluster" if args.plain else "embedded", environment=environment(args.cores),
               load_start=", ".join(f"{v:.2f}" for v in os.getloadavg()), cells=[])
    t0 = time.perf_counter()
    picked = args.cells if args.cells else range(len(CELLS))
    with threadpool_limits(args.cores):
        for i in picked:
            cell = CELLS[i]
            try:
                rec = run_cell(cell, rows_for(cell, seconds), args.cores, repeat, args.plain)
            except Exception as e:  # one failing cell must not lose the others
                rec = dict(cell=name(cell), error=f"{type(e).__name__}: {e}")
            rec["index"] = i
            out["cells"].append(rec)
            print(f"[{i}] {rec['cell']}: " + (rec.get("error") or
                  f"ratio {rec['ratio']:.2f} (first {rec['first_ratio']:.2f}), {rec['rows']} rows, "
                  f"sklearn {rec['sklearn_s']:.2f} s, ours {rec['ours_s']:.2f} s"), flush=True)
    out["seconds"] = time.perf_counter() - t0
    out["load_end"] = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "mlp_matrix-quick" if args.quick else "mlp_matrix"
    (args.out / f"{stem}.json").write_text(json.dumps(out, indent=2, default=_jsonable))
    md = markdown(out)
    (args.out / f"{stem}.md").write_text(md)
    plot(out, args.out / f"{stem}.png")
    print(md)
    return out


if __name__ == "__main__":
    main()
