"""Time of the fused one-pass kernels on one shard, one thread, next to the memory stream they read.

    python benchmarks/bench_kernels.py              # 500k x 100 float64 (a 1M-row fit's shard on 2 workers)
    python benchmarks/bench_kernels.py --rows 200000 --features 50 --repeat 9

Each kernel is timed ``--repeat`` times in this process after one warm-up
call (which compiles it); the minimum is reported, in milliseconds:

* ``sum``: a plain sum of X's bytes (numba), the memory floor of one pass;
* ``value_grad`` for the squared, binomial and multinomial (3 classes) losses;
* ``hessp`` at the binomial and multinomial curvature.

``--processes 2`` runs the same timings in two processes at once, each over
its own X, as two workers do in a fit: then the kernels share the memory
bandwidth.  Each process prints its own line.

``--prefetch`` times the kernels that ask for rows ahead of their loops
(``objectives/_fused.py``) against the same kernels compiled without asking,
in this process, alternating: the binomial value and gradient, the squared
loss's with sample weights, and the binomial Hessian product, for X of
10 to 1,000 columns in float64 and float32 (40 million values each), at the
distance the kernels choose for that row length and at 4 row pairs ahead
for every length.  Then the SVMs' dual passes (``objectives/dual.py``,
hinge loss, C=0.1, one pass over a random permutation of the rows, from
the same dual point), which ask for the row 8 steps on in their order, against
the same passes compiled without asking, on dense shards of 3 to 400 MB and
CSR shards of 18 to 240 MB (values and indices).  Medians of ``--repeat``;
``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np


def _timings(rows, features, repeat, barrier=None):
    import numba

    from dask_estimators.objectives import _fused as F

    @numba.njit(fastmath=True, nogil=True)
    def plain_sum(a):
        t = 0.0
        for i in range(a.shape[0]):
            t += a[i]
        return t

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, features))
    y = (rng.random(rows) > 0.5).astype(float)[:, None].copy()
    W, b, curv = rng.normal(size=(1, features)) * 0.05, np.array([0.1]), np.empty((rows, 1))
    W3, b3, curv3 = rng.normal(size=(3, features)) * 0.05, np.zeros(3), np.empty((rows, 3))
    codes = rng.integers(0, 3, rows)
    kernels = {
        "sum": lambda: plain_sum(X.reshape(-1)),
        "value_grad squared": lambda: F.value_grad(X, y, None, W, b, "squared", 0.0, curv),
        "value_grad binomial": lambda: F.value_grad(X, y, None, W, b, "binomial", 0.0, curv),
        "value_grad multinomial": lambda: F.value_grad(X, codes, None, W3, b3, "multinomial", 0.0, curv3),
        "hessp binomial": lambda: F.hessp(X, None, curv, W, b, "binomial"),
        "hessp multinomial": lambda: F.hessp(X, None, curv3, W3, b3, "multinomial"),
    }
    out = {}
    for name, f in kernels.items():
        f()
        ts = []
        for _ in range(repeat):
            if barrier is not None:
                barrier.wait()
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        out[name] = round(1e3 * min(ts), 2)
    return out


PREFETCH_WIDTHS = (10, 20, 30, 50, 100, 200, 500, 1000)
PREFETCH_VALUES = 40_000_000


def _prefetch_timings(repeat):
    """{width dtype kernel: {"none", "chosen", "4 pairs": ms, "ahead": the chosen distance}} (see ``--prefetch``)."""
    import statistics

    from dask_estimators.objectives import _fused as F

    rng = np.random.default_rng(0)
    out = {}
    for d in PREFETCH_WIDTHS:
        n = PREFETCH_VALUES // d
        X64 = rng.standard_normal((n, d))
        for dtype in (np.float64, np.float32):
            X = X64 if dtype == np.float64 else X64.astype(np.float32)
            y = (rng.random((n, 1)) < 0.5).astype(float)
            S = rng.random((n, 1))
            W, b, curv = rng.standard_normal((1, d)) * 0.01, np.zeros(1), np.empty((n, 1))
            none_s = np.empty((0, 0))
            no_codes = np.empty(0, dtype=np.int64)

            def kernels(X, ahead):
                return {
                    "value_grad binomial": lambda: F._value_grad(X, y, no_codes, none_s, W, b, 1, 0.0, np.zeros((1, d)),
                                                                 np.zeros(1), curv, np.zeros(1), ahead),
                    "value_grad squared, weights": lambda: F._value_grad(X, y, no_codes, S, W, b, 0, 0.0,
                                                                         np.zeros((1, d)), np.zeros(1), curv,
                                                                         np.zeros(1), ahead),
                    "hessp binomial": lambda: F._hessp(X, none_s, curv, W, b, False, np.zeros((1, d)), np.zeros(1),
                                                       ahead),
                }

            chosen = F._ahead(X)
            ways = {"none": kernels(X, None), "chosen": kernels(X, chosen), "4 pairs": kernels(X, 4)}
            for name in ways["none"]:
                times = {way: [] for way in ways}
                for f in ways.values():
                    f[name]()  # compiles, and fills curv
                for _ in range(repeat):
                    for way, f in ways.items():
                        t0 = time.perf_counter()
                        f[name]()
                        times[way].append(time.perf_counter() - t0)
                row = {way: round(1e3 * statistics.median(ts), 2) for way, ts in times.items()}
                out[f"{d} {np.dtype(dtype).name} {name}"] = dict(row, ahead=chosen)
            del X, ways
    return out


DUAL_SHAPES = ((20_000, 20), (200_000, 20), (1_000_000, 20), (500_000, 100), (50_000, 1000))
#: CSR shards of the dual passes: rows, columns, values a row
DUAL_CSR_SHAPES = ((50_000, 50_000, 30), (300_000, 100_000, 30), (100_000, 100_000, 200))


def _dual_timings(repeat):
    """{rows x columns: {"none", "asked": ms, "MB": X's size}} of one hinge dual pass (see ``--prefetch``)."""
    import statistics

    from dask_estimators.objectives import dual

    import scipy.sparse as sp

    from dask_estimators.objectives._sparse import index_array

    rng = np.random.default_rng(1)
    out = {}
    shards = [(f"{n:,} x {d}", lambda n=n, d=d: rng.standard_normal((n, d))) for n, d in DUAL_SHAPES]
    shards += [(f"CSR {n:,} x {d:,}, {k} a row", lambda n=n, d=d, k=k: sp.csr_matrix(
        (rng.random(n * k), np.sort(rng.integers(0, d, (n, k)), axis=1).ravel(), np.arange(n + 1) * k), shape=(n, d)))
        for n, d, k in DUAL_CSR_SHAPES]
    for name, make in shards:
        X = make()
        n, d = X.shape
        dense = isinstance(X, np.ndarray)
        y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
        c = np.full(n, 0.1)
        sqnorm = np.einsum("ij,ij->i", X, X) if dense else np.asarray(X.multiply(X).sum(axis=1)).ravel()
        xargs = (X,) if dense else (X.data, index_array(X.indices), index_array(X.indptr))
        kernel = dual._svc_pass if dense else dual._svc_pass_csr
        times = {"none": [], "asked": []}
        for _ in range(repeat + 1):
            perm = rng.permutation(n).astype(np.int64)
            for way, ahead in (("none", None), ("asked", dual._DUAL_AHEAD)):
                alpha, w, u = np.zeros(n), np.zeros(d + 1), np.zeros(d + 1)
                t0 = time.perf_counter()
                kernel(*xargs, y, c, alpha, sqnorm, w, u, 1.0, 1.0, False, perm, ahead)
                times[way].append(time.perf_counter() - t0)
        out[name] = {way: round(1e3 * statistics.median(ts[1:]), 2) for way, ts in times.items()}
        out[name]["MB"] = round((X.nbytes if dense else X.data.nbytes + X.indices.nbytes) / 1e6)
        del X, xargs
    return out


def _child(rows, features, repeat, barrier, queue):
    queue.put(_timings(rows, features, repeat, barrier))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--prefetch", action="store_true", help="rows asked for ahead against not (see above)")
    ap.add_argument("--json", help="with --prefetch: write the timings here")
    args = ap.parse_args(argv)
    if args.prefetch:
        res = _prefetch_timings(args.repeat)
        print(f"{PREFETCH_VALUES:,} values, one thread; medians of {args.repeat}, ms (ratios to 'none')")
        print(f"{'columns dtype kernel':42s} {'ahead':>5s} {'none':>7s} {'chosen':>7s} {'ratio':>6s} {'4 pairs':>7s} "
              f"{'ratio':>6s}")
        for k, r in res.items():
            print(f"{k:42s} {str(r['ahead']):>5s} {r['none']:7.2f} {r['chosen']:7.2f} {r['chosen'] / r['none']:6.2f} "
                  f"{r['4 pairs']:7.2f} {r['4 pairs'] / r['none']:6.2f}")
        duals = _dual_timings(args.repeat)
        print(f"\nthe SVMs' dual pass, hinge, one random order; medians of {args.repeat}, ms")
        print(f"{'rows x columns':36s} {'MB':>5s} {'none':>8s} {'asked':>8s} {'ratio':>6s}")
        for k, r in duals.items():
            print(f"{k:36s} {r['MB']:5d} {r['none']:8.2f} {r['asked']:8.2f} {r['asked'] / r['none']:6.2f}")
        res = {"fused": res, "dual": duals}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return res
    print(f"{args.rows} x {args.features} float64 ({args.rows * args.features * 8 / 1e6:.0f} MB), one thread per "
          f"process, {args.processes} process(es) at once; minimum of {args.repeat}, ms")
    if args.processes == 1:
        results = [_timings(args.rows, args.features, args.repeat)]
    else:
        ctx = mp.get_context("spawn")
        barrier, queue = ctx.Barrier(args.processes), ctx.Queue()
        procs = [ctx.Process(target=_child, args=(args.rows, args.features, args.repeat, barrier, queue))
                 for _ in range(args.processes)]
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        for p in procs:
            p.join()
    for r in results:
        print(json.dumps(r))
    return results


if __name__ == "__main__":
    main()
