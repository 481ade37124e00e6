"""On a CUDA machine: ours on the GPU against scikit-learn on the machine's cores and a plain torch loop on the GPU.

    python benchmarks/bench_gpu.py            # needs CUDA; about 3 minutes on one H200 with 16 cores (--repeat 2)
    python benchmarks/bench_gpu.py --quick    # a quarter of the rows
    python benchmarks/bench_gpu.py --device cpu --quick --cores 2   # a dry run of the script without CUDA

``.ci/gpu`` runs it after the GPU tests.

Each part runs its contestants one after the other in this one run, on the same data:

1. ``LogisticRegression`` (L-BFGS, float64, 10 classes) on n x 100: scikit-learn
   on ``--cores`` BLAS threads; ours with ``device="cpu"`` on a LocalCluster of
   ``--cores`` one-thread workers; ours with ``device="cuda"`` on a LocalCluster of
   one worker per GPU (what dask-cuda's ``LocalCUDACluster`` starts).
2. ``MLPClassifier`` (Adam, 5 epochs, batch 200, float32) on n x 784, hidden
   (256, 128): scikit-learn (float32) on ``--cores`` threads; a plain torch loop on
   the GPU (the same network, Adam and batch, one process: the floor of a
   one-GPU fit); ours on the GPU cluster; ours on a LocalCluster of 2 workers that
   share the GPU (they train as one rank, ``workers_per_gpu``).
3. ``CharLSTM`` (ddp) on 40,000 generated names: ours on the GPU cluster against
   ``bench_charlstm.torch_loop`` on the GPU (pairs/s of the steady epochs).

Every fit is timed from the start of ``fit`` (set-up included) after one
untimed fit of the same shape (CUDA's context and kernels, the workers' imports);
the median of ``--repeat`` timed fits is reported beside the first.  Writes
``gpu.json`` and ``gpu.md`` to ``--out``.  Nothing here gates CI (CI has no GPU).
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

sys.path.insert(0, str(Path(__file__).parent))

from bench_engine import RESULTS  # noqa: E402
from bench_mlp import environment  # noqa: E402


def _timed(fit, repeat):
    """(first seconds, median seconds, all) of ``repeat`` calls of ``fit``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fit()
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times), times


def _classification(n, d, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32).astype(dtype, copy=False)
    W = rng.standard_normal((d, k)).astype(dtype) / np.sqrt(d)
    y = np.argmax(X @ W + rng.gumbel(size=(n, k)), axis=1)
    return X, y


def _names(n, seed=0):
    """Pronounceable made-up names: syllables from a fixed table (a stand-in for the pet names offline)."""
    rng = np.random.default_rng(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh", "br"]
    vowels = ["a", "e", "i", "o", "u", "y", "ie", "oo", "ea"]
    codas = ["", "", "", "n", "s", "x", "l", "r", "lla", "tte"]
    return ["".join(onsets[rng.integers(20)] + vowels[rng.integers(9)] for _ in range(rng.integers(1, 4)))
            + codas[rng.integers(10)] for _ in range(n)]


def _clusters(cores):
    from distributed import LocalCluster

    common = dict(processes=True, dashboard_address=None)
    return (LocalCluster(n_workers=1, threads_per_worker=max(1, cores // 2), **common),  # one worker per GPU
            LocalCluster(n_workers=cores, threads_per_worker=1, **common),
            LocalCluster(n_workers=2, threads_per_worker=1, **common))


def logistic(n, cores, repeat, gpu_client, cpu_client, device="cuda"):
    import sklearn.linear_model as sk
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = _classification(n, 100, 10, np.float64)
    rows = []
    with threadpool_limits(cores):
        sk.LogisticRegression(max_iter=100).fit(X[:2000], y[:2000])
        first, med, _ = _timed(lambda: sk.LogisticRegression(max_iter=100).fit(X, y), repeat)
    rows.append(("scikit-learn", f"{cores} threads", first, med))
    for client, on in [(cpu_client, "cpu"), (gpu_client, device)]:
        est = de.LogisticRegression(max_iter=100, device=on, client=client)
        est.fit(X[:2000], y[:2000])
        first, med, _ = _timed(lambda: est.fit(X, y), repeat)
        k = len(client.nthreads())
        where = f"{k} worker{'s' if k > 1 else ''}" + (" (GPU)" if on != "cpu" else "")
        name = f"ours, {on}"
        rows.append((name, where, first, med))
    return {"what": f"LogisticRegression, {n} x 100, 10 classes, float64, lbfgs max_iter=100", "rows": rows}


def mlp(n, cores, repeat, gpu_client, shared_client, epochs=5, batch=200, hidden=(256, 128), device="cuda"):
    import sklearn.neural_network as sknn
    import torch
    from threadpoolctl import threadpool_limits

    import dask_estimators as de

    X, y = _classification(n, 784, 10, np.float32)
    params = dict(hidden_layer_sizes=hidden, max_iter=epochs, batch_size=batch, tol=0.0, n_iter_no_change=10**6,
                  random_state=0)
    rows = []
    warnings.filterwarnings("ignore", message=".*Maximum iterations.*")
    with threadpool_limits(cores):
        sknn.MLPClassifier(**dict(params, max_iter=1)).fit(X[:2000], y[:2000])
        first, med, _ = _timed(lambda: sknn.MLPClassifier(**params).fit(X, y), repeat)
    rows.append(("scikit-learn", f"{cores} threads", first, med))

    def loop():
        torch.manual_seed(0)
        units = (784, *hidden, 10)
        layers = []
        for a, b in zip(units[:-1], units[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        net = torch.nn.Sequential(*layers[:-1]).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=0.0)
        Xt, yt = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
        for _ in range(epochs):
            order = torch.randperm(n, device=device)
            for lo in range(0, n, batch):
                idx = order[lo:lo + batch]
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(net(Xt[idx]), yt[idx]).backward()
                opt.step()
        if device != "cpu":
            torch.cuda.synchronize()

    loop()
    first, med, _ = _timed(loop, repeat)
    rows.append(("plain torch loop", "GPU, one process", first, med))
    for name, client in [("ours", gpu_client), ("ours, 2 workers sharing the GPU", shared_client)]:
        est = de.MLPClassifier(device=device, client=client, **params)
        est.set_params(max_iter=1).fit(X[:2000], y[:2000])
        est.set_params(max_iter=epochs)
        first, med, _ = _timed(lambda: est.fit(X, y), repeat)
        rows.append((name, f"{est.fit_stats_['n_shards']} rank(s) on the GPU", first, med))
    return {"what": f"MLPClassifier {hidden}, {n} x 784, 10 classes, float32, Adam, {epochs} epochs, batch {batch}",
            "rows": rows}


def charlstm(n, repeat, gpu_client, epochs=3, batch=512, device="cuda"):
    import bench_charlstm

    import dask_estimators as de

    names = _names(n)
    est = de.CharLSTM(hidden_size=128, max_epochs=epochs, batch_size=batch, random_state=0, strategy="ddp",
                      device=device, client=gpu_client)
    est.set_params(max_epochs=1).fit(names[:2000])
    est.set_params(max_epochs=epochs)
    first, med, _ = _timed(lambda: est.fit(names), repeat)
    ours = bench_charlstm._steady(est.n_pairs_ / h["seconds"] for h in est.history_)
    loop = bench_charlstm._steady(bench_charlstm.torch_loop(est, names, epochs, 1, device=device))
    rows = [("ours (ddp)", f"{first:.2f} s first, {med:.2f} s median", ours), ("plain torch loop", "GPU", loop)]
    return {"what": f"CharLSTM(hidden 128), {n} names, batch {batch}: pairs/s of the steady epochs", "rows": rows,
            "ours_over_loop": ours / loop}


def _markdown(result):
    lines = [f"GPU: {result['gpu']}; {result['cores']} cores.", ""]
    for part in ("logistic", "mlp"):
        p = result[part]
        base = p["rows"][0][3]
        lines += [f"**{p['what']}** (seconds; ratio: scikit-learn's median / this one's)", "",
                  "| contestant | where | first fit s | median s | vs scikit-learn |", "|---|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c:.2f} | {d:.2f} | {base / d:.2f} |" for a, b, c, d in p["rows"]]
        lines.append("")
    p = result["charlstm"]
    lines += [f"**{p['what']}**", "", "| contestant | fit | pairs/s |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c:,.0f} |" for a, b, c in p["rows"]]
    lines += ["", f"ours / plain torch loop: {p['ours_over_loop']:.2f}"]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the rows")
    ap.add_argument("--cores", type=int, default=None, help="threads for scikit-learn and CPU workers (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="timed fits per contestant (the median is reported)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script on a machine without CUDA")
    args = ap.parse_args(argv)
    import os

    import torch
    from distributed import Client

    if args.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device")
    cores = args.cores or os.cpu_count()
    q = 4 if args.quick else 1
    gpu_cluster, cpu_cluster, shared_cluster = _clusters(cores)
    with gpu_cluster, cpu_cluster, shared_cluster, Client(gpu_cluster, set_as_default=False) as g, \
            Client(cpu_cluster, set_as_default=False) as c, Client(shared_cluster, set_as_default=False) as s:
        result = {"gpu": torch.cuda.get_device_name(0) if args.device != "cpu" else "none (a dry run on CPU)",
                  "cores": cores, "environment": environment(cores),
                  "logistic": logistic(1_000_000 // q, cores, args.repeat, g, c, args.device)}
        print(_markdown_part(result["logistic"]), flush=True)
        result["mlp"] = mlp(60_000 // q, cores, args.repeat, g, s, device=args.device)
        print(_markdown_part(result["mlp"]), flush=True)
        result["charlstm"] = charlstm(40_000 // q, args.repeat, g, device=args.device)
    md = _markdown(result)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "gpu.md").write_text(md + "\n")


def _markdown_part(p):
    return p["what"] + "\n" + "\n".join(f"  {r}" for r in p["rows"])


if __name__ == "__main__":
    main()
