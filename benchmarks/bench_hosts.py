"""LogisticRegression and the tree-sum across simulated hosts with rate-limited links (issue 25).

    sudo python benchmarks/bench_hosts.py                      # 1M x 100; 2 and 4 hosts; 1 and 10 Gbit/s
    sudo python benchmarks/bench_hosts.py --rows 20000 --hosts 2 --rates 1gbit --params 1e5 --repeat 1  # smoke

Each host is a network + pid namespace with one single-threaded worker
(``tests/hosts.py``), its link to the bridge limited by ``tc ... tbf`` in both
directions.  The scheduler and the client sit on the bridge, whose own port is
not limited: the client reaches the ``H`` hosts through ``H`` links at once, as
a client with an ``H`` times faster link would.  One cluster per number of
hosts; each measurement is taken at every rate in turn (the links' limit
changed between them, ``SimulatedHosts.set_rate``), so the unlimited runs
that give the cost model its CPU term are paired in time with the limited
ones.  Measured, per (hosts, rate):

* NumPy input: the placement alone (each worker's rows are scattered to it
  once), its achieved rate per link against the link rate; then the whole fit;
* dask input (a dask array made on the workers and persisted there): the fit;
* the step of an MLP (``--mlp-hidden`` units) trained with ``strategy="ddp"`` (gloo's allreduce);
* the tree-sum of one float64 vector of ``P`` parameters per host, for each ``--params``.

It needs root and ``ip``/``tc``; it is not part of ``run.py`` (it builds its
own network and takes minutes at full size).  Writes ``hosts.json`` and
``hosts.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hosts import SimulatedHosts, unavailable  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _bits_per_s(rate: str) -> float:
    """A tc rate in bits/s; "none" (an unlimited link) is infinite."""
    if rate == "none":
        return float("inf")
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, f in units.items():
        if rate.lower().endswith(u):
            return float(rate[: -len(u)]) * f
    raise ValueError(f"rate {rate!r}: use kbit, mbit or gbit")


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) + rng.standard_normal(n) > 0).astype(np.int64)
    return X, y


_RECEIVER = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(1); print("ready", flush=True)
conn, _ = srv.accept(); buf = bytearray(1 << 20); n = 0
while True:
    k = conn.recv_into(buf)
    if not k:
        break
    n += k
conn.sendall(b"1"); conn.close()
"""


def tcp_goodput(h, nbytes=256 << 20):
    """Bytes/s of one plain TCP stream from the client's namespace to host 0 (the link's real rate under tbf)."""
    import socket
    import subprocess

    port = 41000 + (hash(h.netns[0]) % 1000)
    rx = subprocess.Popen(["ip", "netns", "exec", h.netns[0], sys.executable, "-c", _RECEIVER, h.host_ip(0),
                           str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        chunk = bytes(1 << 20)
        with socket.create_connection((h.host_ip(0), port), timeout=120) as s:
            t0 = time.perf_counter()
            for _ in range(nbytes >> 20):
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
            return nbytes / (time.perf_counter() - t0)
    finally:
        rx.wait(timeout=60)


def _tree_sum_time(c, ws, p, seed):
    """Seconds of one tree-sum of new parts (random doubles, made untimed): each worker's part of ``p`` doubles.

    New parts each time, as each round's are: a tree-sum of the same parts again finds the copies its first
    run moved still on the receiving workers, and times only the hop to the client.
    """
    from distributed import wait

    from dask_estimators.engine.rounds.reduce import tree_sum

    parts = [c.submit(np.random.default_rng([seed, i]).standard_normal, p, workers=[w], pure=False)
             for i, w in enumerate(ws)]
    wait(parts)
    t0 = time.perf_counter()
    tree_sum(c, parts, ws).result()
    return time.perf_counter() - t0


def _paired(h, rates, fn, repeat):
    """``{rate: [fn() of each repetition]}``, every repetition taking each rate in turn on the same hosts.

    The order of the rates turns with each repetition, so no rate is always first after a change.  Paired
    this way, a measurement and the unlimited one the model takes its CPU term from come from the same
    processes at nearly the same time.
    """
    times = {r: [] for r in rates}
    for k in range(repeat):
        for rate in rates[k % len(rates):] + rates[:k % len(rates)]:
            h.set_rate(None if rate == "none" else rate)
            times[rate].append(fn())
    return times


def _timed(fn):
    def run():
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run


def run_hosts(n_hosts, rates, X, y, params, repeat, max_iter, mlp_hidden, tree_repeat):
    """One row per rate for ``n_hosts`` hosts: one cluster, each measurement taken at every rate in turn."""
    import dask.array as da
    from distributed import futures_of, wait

    import dask_estimators as de
    from dask_estimators.engine import place

    rows = {r: {"hosts": n_hosts, "rate": r} for r in rates}

    def put(key, by_rate):
        for r, v in by_rate.items():
            rows[r][key] = v

    def measure(key, fn, repeat, scale=1.0):
        """Each rate's median of ``fn()`` (times ``scale``) as ``key``; every sample under "samples"."""
        for r, t in _paired(h, rates, fn, repeat).items():
            rows[r][key] = scale * statistics.median(t)
            rows[r].setdefault("samples", {})[key] = [scale * v for v in t]

    with SimulatedHosts(n_hosts) as h, h.client.as_current():
        c = h.client
        ws = h.workers()
        measure("tcp_goodput_Bps", lambda: tcp_goodput(h), repeat)

        # warm-up, untimed: the workers import the engine, torch and the kernels on their first task
        de.LogisticRegression(client=c, max_iter=1).fit(X[:1000], y[:1000])

        def _place():
            with place(c, {"X": X, "y": y}):
                pass

        # the first full-size placement also grows the workers' memory and the connections' windows (it took
        # 2.9 s against 2.0 s for the next on 2 hosts at 1 Gbit/s): untimed, as the warm-up fit above
        _place()
        measure("place_s", _timed(_place), repeat)
        for r in rates:
            per_link = (X.nbytes + y.nbytes) / n_hosts * 8 / rows[r]["place_s"]
            rows[r]["link_rate_achieved"] = per_link / _bits_per_s(r)
        est = de.LogisticRegression(client=c, max_iter=max_iter, tol=0.0)
        measure("numpy_fit_s", _timed(lambda: est.fit(X, y)), repeat)
        put("numpy_rounds", {r: est.fit_stats_["rounds"] for r in rates})

        chunks = (-(-X.shape[0] // n_hosts), X.shape[1])
        Xd = da.random.default_rng(0).standard_normal(X.shape, chunks=chunks)
        yd = (Xd[:, 0] > 0).astype(np.int64)
        Xd, yd = c.persist([Xd, yd])
        wait(futures_of(Xd) + futures_of(yd))
        measure("dask_fit_s", _timed(lambda: est.fit(Xd, yd)), repeat)
        put("dask_rounds", {r: est.fit_stats_["rounds"] for r in rates})

        mlp = de.MLPClassifier(hidden_layer_sizes=(mlp_hidden,), strategy="ddp", max_iter=2, batch_size=4096,
                               tol=0.0, n_iter_no_change=100, random_state=0, client=c)
        n_mlp = min(len(X), 200_000)

        def mlp_step_s():  # the epochs' seconds per step (the fit's placement is not in them)
            mlp.fit(X[:n_mlp], y[:n_mlp])
            return mlp.fit_stats_["seconds"] / (mlp.n_iter_ * mlp.fit_stats_["steps_per_epoch"])

        measure("mlp_ddp_step_ms", mlp_step_s, 1, scale=1e3)
        put("mlp_params", {r: int(sum(w.size for w in mlp.coefs_ + mlp.intercepts_)) for r in rates})
        put("mlp_allreduce", {r: mlp.fit_stats_.get("allreduce") for r in rates})

        for p in params:
            seeds = itertools.count()
            measure(f"tree_sum_{int(p):.0e}_s", lambda: _tree_sum_time(c, ws, int(p), next(seeds)), tree_repeat)
    return [rows[r] for r in rates]


def _table(rows, params):
    head = ["hosts", "rate", "TCP goodput / link", "place s", "rate achieved / link", "NumPy fit s", "dask fit s",
            *(f"tree-sum {int(p):.0e} s" for p in params), "MLP ddp step ms (params, allreduce)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        achieved = "-" if r["rate"] == "none" else f"{r['link_rate_achieved']:.2f}"
        goodput = "-" if r["rate"] == "none" else f"{r['tcp_goodput_Bps'] * 8 / _bits_per_s(r['rate']):.2f}"
        cells = [r["hosts"], r["rate"], goodput, f"{r['place_s']:.2f}", achieved,
                 f"{r['numpy_fit_s']:.2f} ({r['numpy_rounds']} rounds)",
                 f"{r['dask_fit_s']:.2f} ({r['dask_rounds']} rounds)",
                 *(f"{r[f'tree_sum_{int(p):.0e}_s']:.3f}" for p in params),
                 f"{r['mlp_ddp_step_ms']:.2f} ({r['mlp_params']}, {r['mlp_allreduce']})"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _pieces(part_bytes):
    """How many messages placement sends one worker's part of ``part_bytes`` in (``placement._in_pieces``)."""
    from dask_estimators.engine.data.placement import PIECE_BYTES

    return math.ceil(part_bytes / PIECE_BYTES) if part_bytes > 2 * PIECE_BYTES else 1


def model(rows, params, nbytes):
    """The cost model's predictions for the rate-limited runs, against the measurements.

    ``R`` is the link's rate as one TCP stream achieves it (a plain socket
    through the same link; under ``tbf`` a little below the nominal rate),
    ``R0`` the same through an unlimited link, and the ``"none"`` rows (the
    same hosts, links unlimited) give the CPU's own time for each transfer:

    * placement is a pipeline of two stages, the wire and the CPU (every
      link at once; each worker copies a piece in while the next is on the
      wire), over ``K`` pieces per worker (``placement.PIECE_BYTES`` each,
      one piece for parts up to twice that): the slower stage over all the
      pieces plus the faster one over one piece, the pipeline's fill and
      drain, ``max(L, C) + min(L, C) / K`` with ``L = bytes / (W * R)`` and
      ``C = t_none``;
    * a tree-sum of P doubles is ``hops = ceil(log2 W) + 1`` messages in
      turn (one per tree level, one to the client), each received whole
      before it is added or returned, so the wire and the CPU's own work
      add up: ``hops * 8P / R + (t_none - hops * 8P / R0)``, the second
      term being the unlimited run's time less its time on the wire.
    """
    out = []
    cpu = {r["hosts"]: r for r in rows if r["rate"] == "none"}
    for r in rows:
        base = cpu.get(r["hosts"])
        if r["rate"] == "none" or base is None:
            continue
        W = r["hosts"]
        R = min(_bits_per_s(r["rate"]) / 8, r["tcp_goodput_Bps"])  # what TCP gets through the link
        R0 = base["tcp_goodput_Bps"]
        hops = math.ceil(math.log2(W)) + 1
        L, C = nbytes / (W * R), base["place_s"]
        pred = {"place_s": max(L, C) + min(L, C) / _pieces(nbytes / W)}
        for p in params:
            key = f"tree_sum_{int(p):.0e}_s"
            wire = hops * 8 * p
            pred[key] = wire / R + max(base[key] - wire / R0, 0.0)
        out.append({"hosts": W, "rate": r["rate"],
                    **{k: {"model": v, "measured": r[k], "error": r[k] / v - 1} for k, v in pred.items()}})
    return out


def _model_table(mrows):
    if not mrows:
        return ""
    keys = [k for k in mrows[0] if k not in ("hosts", "rate")]
    head = ["hosts", "rate", *(f"{k[:-2]}: measured / model s (error)" for k in keys)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in mrows:
        cells = [m["hosts"], m["rate"], *(f"{m[k]['measured']:.3g} / {m[k]['model']:.3g} ({m[k]['error']:+.0%})"
                                          for k in keys)]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--hosts", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rates", nargs="+", default=["none", "1gbit", "10gbit"],
                    help='tc rates; "none": links without a limit, which measures the CPU\'s own rates (the model\'s)')
    ap.add_argument("--params", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--max-iter", type=int, default=20, help="L-BFGS iterations per fit (tol=0: exactly these)")
    ap.add_argument("--mlp-hidden", type=int, default=256, help="hidden units of the MLP whose ddp step is timed")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tree-repeat", type=int, default=7,
                    help="tree-sums timed per size (they take a second at most; the CPU-bound ones vary most)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    reason = unavailable()
    if reason:
        sys.exit(reason)
    X, y = _data(args.rows, args.features)
    warnings.filterwarnings("ignore", message="lbfgs failed to converge")  # fixed iteration counts
    warnings.filterwarnings("ignore", message="Stochastic Optimizer")
    rows = []
    for n_hosts in args.hosts:
        for row in run_hosts(n_hosts, args.rates, X, y, args.params, args.repeat, args.max_iter,
                             args.mlp_hidden, args.tree_repeat):
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "samples"}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"rows": args.rows, "features": args.features, "max_iter": args.max_iter, "repeat": args.repeat,
            "tree_repeat": args.tree_repeat}
    mrows = model(rows, args.params, X.nbytes + y.nbytes)
    (args.out / "hosts.json").write_text(json.dumps({"args": meta, "rows": rows, "model": mrows}, indent=1))
    title = "The cost model (placement: a two-stage pipeline of links and CPU; tree-sum: wire plus CPU; see model()):"
    md = _table(rows, args.params) + f"\n\n{title}\n\n" + _model_table(mrows)
    (args.out / "hosts.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
