"""MLP training throughput: ours (rounds and ddp) against scikit-learn, plain torch and skorch.

    python benchmarks/bench_mlp.py                  # make_classification(200_000, 100), 10 epochs
    python benchmarks/bench_mlp.py --quick          # 20_000 rows, 2 epochs
    python benchmarks/bench_mlp.py --rows 50000 --epochs 3 --out /tmp/mlp

One hidden layer of 100 ReLU units, Adam with ``learning_rate_init=1e-3``,
global batch 256, every epoch run (``tol=0`` and an unreachable
``n_iter_no_change``).  Every contestant runs in this one process, one after
the other, on the same data:

1. scikit-learn's ``MLPClassifier`` (float64), BLAS limited to ``--cores`` threads;
2. plain torch: ``nn.Sequential(Linear, ReLU, Linear)``, ``CrossEntropyLoss``,
   a manual loop over a shuffled index each epoch (no DataLoader),
   ``torch.set_num_threads(--cores)``; float64 (scikit-learn's dtype) and float32;
3. plain torch ``DistributedDataParallel`` on ``--cores`` processes (gloo),
   each with its half of the rows and ``batch // cores`` rows per step, no
   Dask: the floor of synchronous data parallelism on this machine (its wall
   time includes starting the processes);
4. skorch's ``NeuralNetClassifier`` with the same module (float64 and float32);
5. a bound, not a contestant: ours' ddp rank alone in a group of one (no
   other rank to wait for), ``batch // cores`` rows a step; ``batch`` / its
   time is the most samples/s the ddp strategy can reach here, however fast
   its allreduce (:func:`step_floor`);
6. ours, ``dask_estimators.MLPClassifier(strategy="rounds")`` and ``"ddp"`` on a
   ``LocalCluster(n_workers=--cores, threads_per_worker=1)`` started after the
   anchors and before ours is timed, closed at the end.

samples/s is training rows x epochs / wall time of ``fit`` (for ours that
includes validation, placement on the workers and the collection of the
result).  The per-epoch columns are steady state: the median over the epochs
after the first of the per-epoch rate (``history_[i]["samples_per_s"]`` for
ours, skorch's ``dur``, our own clock around each epoch of the torch loop).
Each contestant first fits a small slice once, untimed (imports, worker
start-up, the first process group).

Writes ``mlp.json`` (configuration, environment, every measurement) and
``mlp.md`` (the tables) to ``--out``, and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_engine import RESULTS, _table  # noqa: E402

HIDDEN = 100
LR = 1e-3


# ----------------------------------------------------------------- helpers
def _steady(rates):
    """Median per-epoch rate over the epochs after the first (the only one when there is one)."""
    rates = list(rates)
    return statistics.median(rates[1:] if len(rates) > 1 else rates) if rates else None


def _record(what, rows, epochs, batch, wall, epoch_seconds=None, **extra):
    steps = math.ceil(rows / batch)
    rec = dict(what=what, wall_s=wall, samples_per_s=rows * epochs / wall, epochs=epochs, steps_per_epoch=steps)
    if epoch_seconds:
        rec["epoch_seconds"] = list(epoch_seconds)
        rec["steady_samples_per_s"] = _steady(rows / s for s in epoch_seconds)
        rec["seconds_per_step"] = _steady(epoch_seconds) / steps
        rec["overhead_s"] = wall - sum(epoch_seconds)
    else:
        rec["steady_samples_per_s"] = None
        rec["seconds_per_step"] = wall / (steps * epochs)
    rec.update(extra)
    return rec


def _git():
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True).stdout.strip())
        return {"commit": commit or None, "dirty": dirty}
    except OSError:
        return {"commit": None, "dirty": None}


def environment(cores):
    """Machine, versions and thread pools of this process (call inside the thread limits)."""
    import dask
    import distributed
    import sklearn
    import threadpoolctl
    import torch

    import dask_estimators

    versions = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                "scikit-learn": sklearn.__version__, "dask": dask.__version__,
                "distributed": distributed.__version__, "threadpoolctl": threadpoolctl.__version__,
                "dask_estimators": getattr(dask_estimators, "__version__", None)}
    try:
        import skorch

        versions["skorch"] = skorch.__version__
    except ImportError:
        versions["skorch"] = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cores_given": cores,
        "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "threadpoolctl": threadpoolctl.threadpool_info(),
        "versions": versions,
        "git": _git(),
    }


def _worker_threads():
    import threadpoolctl
    import torch

    return {"torch_num_threads": torch.get_num_threads(),
            "threadpoolctl": [{k: d.get(k) for k in ("user_api", "internal_api", "num_threads")}
                              for d in threadpoolctl.threadpool_info()]}


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


# ------------------------------------------------------------- contestants
def fit_sklearn(X, y, epochs, batch):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier((HIDDEN,), solver="adam", batch_size=batch, learning_rate_init=LR, max_iter=epochs,
                        tol=0.0, n_iter_no_change=10**9, shuffle=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        clf.fit(X, y)
        wall = time.perf_counter() - t0
    assert clf.n_iter_ == epochs, clf.n_iter_
    return _record("scikit-learn MLPClassifier (float64)", len(X), epochs, batch, wall,
                   final_loss=float(clf.loss_curve_[-1]))


def _torch_module(n_features, n_classes, dtype):
    from torch import nn

    return nn.Sequential(nn.Linear(n_features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, n_classes)).to(dtype)


def fit_torch(X, y, epochs, batch, dtype_name):
    import torch
    from torch import nn

    dtype = getattr(torch, dtype_name)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.dtype(dtype_name)))
    yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
    n = len(Xt)
    model = _torch_module(X.shape[1], int(yt.max()) + 1, dtype)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    epoch_seconds, loss = [], None
    for _ in range(epochs):
        te = time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        acc = 0.0
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            xb, yb = Xt[idx], yt[idx]
            opt.zero_grad(set_to_none=True)
            out = loss_fn(model(xb), yb)
            out.backward()
            opt.step()
            acc += float(out.detach()) * len(idx)
        loss = acc / n
        epoch_seconds.append(time.perf_counter() - te)
    wall = time.perf_counter() - t0
    return _record(f"plain torch loop ({dtype_name})", n, epochs, batch, wall, epoch_seconds, final_loss=loss)


def _ddp_rank(rank, world, port, X, y, epochs, batch, queue):
    """One process of the plain DDP anchor: its half of the rows, batch // world rows per step."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        Xt = torch.from_numpy(X[rank::world].copy())
        yt = torch.from_numpy(y[rank::world].astype(np.int64))
        model = DistributedDataParallel(_torch_module(X.shape[1], int(y.max()) + 1, torch.float64))
        opt = torch.optim.Adam(model.parameters(), lr=LR)
        loss_fn = nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(rank)
        local, seconds, loss = batch // world, [], None
        for _ in range(epochs):
            te = time.perf_counter()
            perm = torch.randperm(len(Xt), generator=gen)
            acc = torch.zeros(1, dtype=torch.float64)
            for i in range(0, len(Xt), local):
                idx = perm[i:i + local]
                opt.zero_grad(set_to_none=True)
                out = loss_fn(model(Xt[idx]), yt[idx])
                out.backward()
                opt.step()
                acc += float(out.detach()) * len(idx)
            dist.all_reduce(acc)
            loss = float(acc) / len(X)
            seconds.append(time.perf_counter() - te)
        if rank == 0:
            queue.put((seconds, loss))
    finally:
        dist.destroy_process_group()


def fit_torch_ddp(X, y, epochs, batch, world):
    """Plain torch DistributedDataParallel on ``world`` processes (gloo), no Dask: the floor of synchronous DDP."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    t0 = time.perf_counter()
    mp.spawn(_ddp_rank, args=(world, port, X, y, epochs, batch, queue), nprocs=world)
    wall = time.perf_counter() - t0
    seconds, loss = queue.get()
    return _record(f"plain torch DDP ({world} processes, gloo, float64)", len(X), epochs, batch, wall, seconds,
                   final_loss=loss)


def _floor_proc(rank, port, X, y, local, epochs, queue):
    """Ours' ddp rank itself (``ddp_rank``) alone in a group of one, all rows, ``local`` rows a step (step_floor)."""
    import torch

    from dask_estimators.engine.data._worker import Shard
    from dask_estimators.engine.ddp.collective import Comm
    from dask_estimators.engine.ddp.train import ddp_rank
    from dask_estimators.objectives import module as M
    from dask_estimators.optim import torch_driver as T

    torch.set_num_threads(1)
    spec = M.MLPSpec(X.shape[1], (HIDDEN,), 1, activation="relu", out="logistic")  # binary, as ours fits it
    shard = Shard({"X": X, "y": y}, device="cpu")
    M.prepare(shard, spec, 0)
    steps = len(X) // local
    cfg = T.TrainConfig(learning_rate_init=LR, max_iter=epochs, tol=0.0, n_iter_no_change=10**9,
                        n_steps=steps, n_train=len(X))
    w0 = M.glorot_init(spec, np.random.RandomState(0))
    out = ddp_rank(shard, Comm(0, 1, "127.0.0.1", port), spec, w0, cfg, T.Monitor(0.0, 10**9, False),
                   training=T.TRAINING)
    queue.put((min(h["seconds"] for h in out.history) / steps, out.info["gradient"]))


def step_floor(X, y, batch, world, epochs=3):
    """The least time one ddp step of ours can take here: one rank's step with no other rank to wait for.

    One process runs ours' ddp rank (:func:`~dask_estimators.engine.ddp.train.ddp_rank`,
    the very code of the fit) in a group of one: ``batch // world`` rows a
    step, the gradient, the allreduce (a copy, with no other rank), the L2
    term and the optimizer, on one thread, with the allocator setting of a
    Dask worker (``MALLOC_TRIM_THRESHOLD_``); the fastest of ``epochs``
    epochs over all rows.  The ranks run in parallel, so a step of ours
    cannot take less than this, and ``batch / floor`` bounds ours'
    samples/s from above on this machine.
    """
    import socket

    from unittest import mock

    import dask.config
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    environ = {k: str(v) for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()}
    t0 = time.perf_counter()
    with mock.patch.dict(os.environ, environ):  # the child starts with a worker's environment
        mp.spawn(_floor_proc, args=(port, X, y, batch // world, epochs, queue), nprocs=1)
    wall = time.perf_counter() - t0
    floor, gradient = queue.get()
    return dict(what=f"bound: one ddp rank's step of ours, no other rank ({batch // world} rows, 1 thread)",
                wall_s=wall, samples_per_s=batch / floor, steady_samples_per_s=None, seconds_per_step=floor,
                final_loss=float("nan"), epochs=None, steps_measured=epochs * (len(X) // (batch // world)),
                gradient=gradient)


def fit_skorch(X, y, epochs, batch, dtype_name):
    import torch
    from skorch import NeuralNetClassifier

    class Net(torch.nn.Sequential):
        def __init__(self, n_features=2, n_classes=2, dtype=torch.float32):
            super().__init__(*_torch_module(n_features, n_classes, dtype))

    Xd = np.ascontiguousarray(X, dtype=np.dtype(dtype_name))
    yd = np.asarray(y, dtype=np.int64)
    torch.manual_seed(0)
    net = NeuralNetClassifier(
        Net, module__n_features=X.shape[1], module__n_classes=int(yd.max()) + 1,
        module__dtype=getattr(torch, dtype_name), criterion=torch.nn.CrossEntropyLoss, optimizer=torch.optim.Adam,
        lr=LR, batch_size=batch, max_epochs=epochs, iterator_train__shuffle=True, train_split=None, verbose=0,
    )
    t0 = time.perf_counter()
    net.fit(Xd, yd)
    wall = time.perf_counter() - t0
    durs = list(net.history[:, "dur"])
    assert len(durs) == epochs, len(durs)
    return _record(f"skorch NeuralNetClassifier ({dtype_name})", len(X), epochs, batch, wall, durs,
                   final_loss=float(net.history[-1, "train_loss"]))


def fit_ours(client, X, y, epochs, batch, strategy):
    from sklearn.exceptions import ConvergenceWarning

    import dask_estimators as de

    clf = de.MLPClassifier((HIDDEN,), solver="adam", batch_size=batch, learning_rate_init=LR, max_iter=epochs,
                           tol=0.0, n_iter_no_change=10**9, shuffle=True, random_state=0, strategy=strategy,
                           client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        clf.fit(X, y)
        wall = time.perf_counter() - t0
    hist = clf.history_
    assert len(hist) == epochs, len(hist)
    st = dict(clf.fit_stats_)
    rec = _record(f"ours, strategy={strategy!r} (float64, {len(client.nthreads())} workers)",
                  len(X), epochs, batch, wall, [h["seconds"] for h in hist], final_loss=float(clf.loss_),
                  fit_stats=st)
    # our own per-epoch figures, straight from history_ (excludes placement and set-up)
    rec["steady_samples_per_s"] = _steady(h["samples_per_s"] for h in hist)
    steps = st.get("steps_per_epoch", rec["steps_per_epoch"])
    if "seconds_per_round" in st:  # rounds: one engine round per global batch
        rec["seconds_per_step"] = st["seconds_per_round"]
        rec["seconds_per_step_source"] = "fit_stats_['seconds_per_round']"
    else:
        rec["seconds_per_step"] = st["seconds"] / (steps * len(hist))
        rec["seconds_per_step_source"] = "fit_stats_['seconds'] / steps"
    return rec


# -------------------------------------------------------------------- main
def _median_run(fn, repeat):
    """The median (by wall time) of ``repeat`` runs; every run kept under ``runs``."""
    runs = [fn() for _ in range(repeat)]
    rec = dict(sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2])
    if repeat > 1:
        rec["runs"] = [{k: r[k] for k in ("wall_s", "samples_per_s", "steady_samples_per_s")} for r in runs]
    return rec


def _fmt_rate(v):
    return "n/a" if v is None else f"{v:,.0f}"


def _ratio(v, ref):
    return "n/a" if v is None or not ref else f"{v / ref:.2f}"


def markdown(out):
    cfg = out["config"]
    rows = out["results"]
    sk = next((r for r in rows if r["key"] == "sklearn"), {}).get("samples_per_s")
    skorch = next((r for r in rows if r["key"] == "skorch-float64"), {}).get("samples_per_s")
    if not any("error" not in r for r in rows):
        return "All contestants failed; see mlp.json.\n"
    main_rows, detail_rows = [], []
    for r in rows:
        if "error" in r:
            main_rows.append({"what": r["what"], "samples/s": "failed: " + r["error"].splitlines()[0][:80],
                              "ratio vs scikit-learn": "n/a", "ratio vs skorch": "n/a"})
            continue
        main_rows.append({"what": r["what"], "samples/s": _fmt_rate(r["samples_per_s"]),
                          "ratio vs scikit-learn": _ratio(r["samples_per_s"], sk),
                          "ratio vs skorch": _ratio(r["samples_per_s"], skorch)})
        if r["key"].startswith("ours"):
            main_rows.append({"what": r["what"] + ", steady-state epochs",
                              "samples/s": _fmt_rate(r["steady_samples_per_s"]),
                              "ratio vs scikit-learn": _ratio(r["steady_samples_per_s"], sk),
                              "ratio vs skorch": _ratio(r["steady_samples_per_s"], skorch)})
        detail_rows.append({"what": r["what"], "fit wall s": f"{r['wall_s']:.2f}",
                            "outside epochs s": "n/a" if r.get("overhead_s") is None else f"{r['overhead_s']:.2f}",
                            "steady samples/s": _fmt_rate(r["steady_samples_per_s"]),
                            "ms/step": f"{1e3 * r['seconds_per_step']:.3f}",
                            "final loss": "n/a" if math.isnan(r["final_loss"]) else f"{r['final_loss']:.4f}"})
    env = out["environment"]
    head = (f"# MLP training throughput\n\n"
            f"make_classification({cfg['rows']:,}, {cfg['features']}, random_state=0); one hidden layer of "
            f"{cfg['hidden']} ReLU units, Adam lr={cfg['learning_rate_init']}, global batch {cfg['batch_size']}, "
            f"{cfg['epochs']} epochs; {cfg['cores']} cores (threads for the in-process contestants, 1-thread "
            f"worker processes for ours){'; quick mode' if cfg['quick'] else ''}.\n"
            f"torch {env['versions']['torch']}, scikit-learn {env['versions']['scikit-learn']}, skorch "
            f"{env['versions']['skorch']}; {env['cpus_available']} CPUs available, load average "
            f"{', '.join(f'{v:.2f}' for v in env['load_average_start'] or [])} at start, "
            f"{', '.join(f'{v:.2f}' for v in out.get('load_average_end') or [])} at the end.\n\n"
            "samples/s = training rows x epochs / wall time of fit (ours: including validation, placement and "
            "collection); the steady-state rows are the median per-epoch rate of `history_` after the first "
            "epoch.  Ratios are samples/s over the anchor's wall-time samples/s (scikit-learn; skorch float64).\n\n")
    return (head + _table(main_rows, list(main_rows[0])) + "\n## Details\n\n"
            + (_table(detail_rows, list(detail_rows[0])) if detail_rows else ""))


def main(argv=None, raise_on_failure=True):
    """Run the contestants; a failed one is kept as an error row, and raises at the end if ``raise_on_failure``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20_000 rows, 2 epochs (unless --rows/--epochs)")
    ap.add_argument("--rows", type=int, help="training rows (default 200_000, quick 20_000)")
    ap.add_argument("--epochs", type=int, help="epochs (default 10, quick 2)")
    ap.add_argument("--batch", type=int, default=256, help="global batch size")
    ap.add_argument("--cores", type=int, default=2,
                    help="threads of the in-process contestants = 1-thread workers of ours (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="fits per contestant; the median is reported")
    ap.add_argument("--skip", nargs="*", default=[], choices=["sklearn", "torch", "skorch", "floor", "rounds", "ddp"],
                    help="contestants to leave out")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for mlp.json and mlp.md")
    args = ap.parse_args(argv)
    rows = args.rows or (20_000 if args.quick else 200_000)
    epochs = args.epochs or (2 if args.quick else 10)
    batch, cores, repeat = args.batch, args.cores, max(1, args.repeat)

    import torch
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification
    from threadpoolctl import threadpool_limits

    X, y = make_classification(rows, 100, random_state=0)
    small = slice(0, min(2_000, rows))
    torch.set_num_threads(cores)
    results = []
    with threadpool_limits(cores):
        env = environment(cores)
        config = dict(rows=rows, features=X.shape[1], hidden=HIDDEN, epochs=epochs, batch_size=batch,
                      learning_rate_init=LR, solver="adam", cores=cores, n_workers=cores, threads_per_worker=1,
                      repeat=repeat, quick=args.quick, dtype_X=str(X.dtype))
        print(f"MLP benchmark: {rows:,} x {X.shape[1]}, {epochs} epochs, batch {batch}, {cores} cores",
              file=sys.stderr, flush=True)

        def run(key, fn, warm):
            try:
                warm()
                rec = _median_run(fn, repeat)
            except Exception as exc:  # keep the other contestants' numbers; fail at the end
                rec = {"what": key, "error": f"{type(exc).__name__}: {exc}"}
                print(f"  {key} FAILED: {rec['error']}", file=sys.stderr, flush=True)
            else:
                print(f"  {rec['what']}: {rec['samples_per_s']:,.0f} samples/s ({rec['wall_s']:.2f} s)",
                      file=sys.stderr, flush=True)
            rec["key"] = key
            results.append(rec)

        if "sklearn" not in args.skip:
            run("sklearn", lambda: fit_sklearn(X, y, epochs, batch), lambda: fit_sklearn(X[small], y[small], 1, batch))
        for dt in ("float64", "float32"):
            if "torch" not in args.skip:
                run(f"torch-{dt}", lambda dt=dt: fit_torch(X, y, epochs, batch, dt),
                    lambda dt=dt: fit_torch(X[small], y[small], 1, batch, dt))
        if "torch" not in args.skip:
            run("torch-ddp", lambda: fit_torch_ddp(X, y, epochs, batch, cores),
                lambda: fit_torch_ddp(X[small], y[small], 1, batch, cores))
        for dt in ("float64", "float32"):
            if "skorch" not in args.skip:
                run(f"skorch-{dt}", lambda dt=dt: fit_skorch(X, y, epochs, batch, dt),
                    lambda dt=dt: fit_skorch(X[small], y[small], 1, batch, dt))
        if "floor" not in args.skip:
            run("ddp-floor", lambda: step_floor(X, y, batch, cores, epochs=2 if args.quick else 3), lambda: None)
        worker_env = None
        if {"rounds", "ddp"} - set(args.skip):
            with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None) \
                    as cluster, Client(cluster) as client:
                for strategy in ("rounds", "ddp"):
                    if strategy not in args.skip:
                        run(f"ours-{strategy}", lambda s=strategy: fit_ours(client, X, y, epochs, batch, s),
                            lambda s=strategy: fit_ours(client, X[small], y[small], 1, batch, s))
                worker_env = client.run(_worker_threads)
        env["workers"] = worker_env
    out = {"config": config, "environment": env, "results": results,
           "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    md = markdown(out) if results else ""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mlp.json").write_text(json.dumps(out, indent=2, default=_jsonable))
    (args.out / "mlp.md").write_text(md)
    print(md)
    failed = [r["key"] for r in results if "error" in r]
    if failed and raise_on_failure:
        raise RuntimeError(f"MLP benchmark: {', '.join(failed)} failed (see {args.out / 'mlp.json'})")
    return out


if __name__ == "__main__":
    main()
