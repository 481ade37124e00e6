"""Time per iteration against workers (1 to 8), and the cost model checked against it.

    python benchmarks/bench_scaling.py              # 400_000 x 100, workers 1 2 4 8
    python benchmarks/bench_scaling.py --quick      # 100_000 x 100, workers 1 2 4

One "iteration" is one distributed ``value_grad`` round of the binomial loss
(what an L-BFGS iteration costs), through the engine's default path: one
actor per worker, tree-sum, parameters in the call.

The cost model (docs/how-it-works.md) predicts the time per iteration as

    T(W) = latency(W) + n * d * t_elem / min(W, cores) * contention(W)

* ``t_elem``: seconds per element of X of the fused kernel on one core
  (measured in this process, one thread, on the same data);
* ``latency(W) = a + b * ceil(log2(W))``: a round on a tiny problem (the same
  path, 1000 rows), fitted on the measured W;
* ``contention(W)``: memory bandwidth shared by ``min(W, cores)`` streams,
  ``max(1, min(W, cores) * B1 / Bmax)`` with ``B1`` one process's and ``Bmax``
  all cores' streaming bandwidth, both measured here with a NumPy sum.

The model is fitted on nothing but those three measurements; the table
compares its prediction with the measured time for each W, and the script
prints what it predicts for 100 workers (at the same n per worker and at the
same total n).
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from bench_engine import _median_seconds


def _stream(nbytes):
    a = np.ones(nbytes // 8)
    a.sum()
    t0 = time.perf_counter()
    for _ in range(5):
        a.sum()
    return 5 * a.nbytes / (time.perf_counter() - t0)


def bandwidth(cores, nbytes=400 << 20):
    """Streaming read bandwidth (bytes/s) of one process, and of ``cores`` processes together."""
    one = _stream(nbytes)
    with ProcessPoolExecutor(cores) as ex:
        list(ex.map(_stream, [8 << 20] * cores))  # start the processes
        per = list(ex.map(_stream, [nbytes] * cores))
    return one, sum(per)


def kernel_seconds_per_element(X, y):
    """Fused binomial value_grad on one thread, seconds per element of X."""
    import torch

    from dask_estimators.engine.data._worker import Shard
    from dask_estimators.objectives import linear as lin

    torch.set_num_threads(1)
    shard = Shard({"X": X, "y": y.reshape(-1, 1).astype(np.float64)}, device="cpu")
    spec = lin.LinearSpec("binomial", X.shape[1])
    w = torch.zeros(spec.n_params, dtype=torch.float64)
    t = _median_seconds(lambda: lin.value_grad(shard, w, spec), 5)
    return t / X.size


def round_seconds(client, X, y, repeat):
    from dask_estimators.engine import DistributedEvaluator, place
    from dask_estimators.objectives import linear as lin

    spec = lin.LinearSpec("binomial", X.shape[1])
    w = np.zeros(spec.n_params)
    with place(client, {"X": X, "y": y.reshape(-1, 1).astype(np.float64)}) as p:
        ev = DistributedEvaluator(p)
        return _median_seconds(lambda: ev(lin.value_grad, w, spec), repeat)


def run(n, d, worker_counts, cores=2, repeat=10):
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 0.5).astype(np.float64)
    tiny_X, tiny_y = X[:1000].copy(), y[:1000].copy()
    t_elem = kernel_seconds_per_element(X[: n // 2], y[: n // 2])
    b1, bmax = bandwidth(cores)
    rows = []
    for W in worker_counts:
        with LocalCluster(n_workers=W, threads_per_worker=1, processes=True, dashboard_address=None,
                          memory_limit=None) as cluster, Client(cluster) as client:
            client.wait_for_workers(W)
            lat = round_seconds(client, tiny_X, tiny_y, repeat * 3)
            t = round_seconds(client, X, y, repeat)
        rows.append(dict(workers=W, measured_ms=1e3 * t, latency_ms=1e3 * lat))
    # latency(W) = a + b * depth, least squares on the measured points
    depth = np.array([math.ceil(math.log2(r["workers"])) if r["workers"] > 1 else 0 for r in rows], dtype=float)
    lat = np.array([r["latency_ms"] for r in rows])
    A = np.column_stack([np.ones_like(depth), depth])
    (a, b), *_ = np.linalg.lstsq(A, lat, rcond=None)

    def predict(W, n_total, use_cores=cores):
        streams = min(W, use_cores)
        contention = max(1.0, streams * b1 / bmax)
        dep = math.ceil(math.log2(W)) if W > 1 else 0
        return a + b * dep + 1e3 * n_total * d * t_elem / streams * contention

    for r in rows:
        r["model_ms"] = predict(r["workers"], n)
        r["model_error"] = r["model_ms"] / r["measured_ms"] - 1.0
    model = dict(t_elem_ns=1e9 * t_elem, bandwidth_one_gbs=b1 / 1e9, bandwidth_all_gbs=bmax / 1e9,
                 latency_a_ms=float(a), latency_b_ms_per_level=float(b), cores=cores, n=n, d=d)
    # 100 workers on 100 cores (each its own memory channel share as here for one process)
    n_per_worker = n // 2
    model["predict_100_workers_same_total_ms"] = a + b * 7 + 1e3 * n * d * t_elem / 100
    model["predict_100_workers_same_n_per_worker_ms"] = a + b * 7 + 1e3 * n_per_worker * d * t_elem
    model["predict_2_workers_same_n_per_worker_ms"] = a + b * 1 + 1e3 * n_per_worker * d * t_elem * max(
        1.0, 2 * b1 / bmax)
    return rows, model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)
    n = args.rows or (100_000 if args.quick else 400_000)
    counts = [1, 2, 4] if args.quick else [1, 2, 4, 8]
    rows, model = run(n, 100, counts, cores=args.cores, repeat=5 if args.quick else 10)
    for r in rows:
        print(f"W={r['workers']}: measured {r['measured_ms']:.1f} ms, model {r['model_ms']:.1f} ms "
              f"({100 * r['model_error']:+.0f}%), tiny-round latency {r['latency_ms']:.1f} ms")
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in model.items()})
    return rows, model


if __name__ == "__main__":
    main()
