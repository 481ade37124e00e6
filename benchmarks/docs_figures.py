"""Write the figures of the user docs from the recorded benchmark runs in ``benchmarks/results/``.

    python benchmarks/docs_figures.py           # rewrite the generated blocks and copy the plots
    python benchmarks/docs_figures.py --check   # exit 1 when a page or a plot differs from what it would write

A generated block sits between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` on lines of their
own, in ``docs/performance.md``, ``docs/search.md``, the cost model's section of
``docs/design-measurements.md`` or the performance section of ``README.md``; :data:`BLOCKS` says what
writes each NAME.  Every figure comes from one results file of one run, formatted as the benchmark that
wrote the file formats it in its own
Markdown (``.3g`` for seconds and ratios unless said), so two pages that show a figure show the same
digits.  The plots of ``docs/img/`` that stand for a results plot are byte copies of it (:data:`PLOTS`).

Only the standard library: the check runs in the test suite (``tests/test_docs_content.py``).  After a
new run writes its results, run this script and commit the pages with the results.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

#: The pages whose generated blocks this script writes.
PAGES = ["docs/performance.md", "docs/design-measurements.md", "docs/sizing.md", "docs/search.md", "docs/getting-started.md",
         "README.md"]
#: docs/img plot -> the results plot it stands for.
PLOTS = {
    "docs/img/scaling.png": "benchmarks/results/scaling.png",
    "docs/img/reductions.png": "benchmarks/results/reductions.png",
    "docs/img/mlp_matrix.png": "benchmarks/results/mlp_matrix.png",
    "docs/img/memory.png": "benchmarks/results/memory.png",
    "docs/img/rows.png": "benchmarks/results/rows.png",
}

_BLOCK = re.compile(r"(?P<open><!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- /figures:(?P=name) -->)",
                    re.DOTALL)
_MARKER = re.compile(r"<!-- /?figures:([\w-]+) -->")


def load(name: str):
    return json.loads((RESULTS / name).read_text())


def g3(v: float) -> str:
    return f"{v:.3g}"


def rate(v: float) -> str:
    return f"{v:,.0f}"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def md_table(path: Path, title: str) -> list[dict]:
    """The rows of the first Markdown table after the heading ``title`` in a results file, as dicts."""
    text = path.read_text()
    start = text.index(title)
    lines = [ln for ln in text[start:].splitlines()[1:]]
    while not lines[0].startswith("|"):
        lines.pop(0)
    rows = []
    for ln in lines:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    header, body = rows[0], rows[2:]
    return [dict(zip(header, r)) for r in body]


# ---- where each figure comes from --------------------------------------------------------------------

def _machine(env: dict | None, fallback: str) -> str:
    """The machine as the results file records it (its environment), else as the run's text says."""
    if not env:
        return fallback
    return f"{env['cpu_count']} cores, {env['processor']} Linux, torch {env['versions']['torch']}"


def _command(recorded: str) -> str:
    """A recorded command less its ``--out DIR``, which says only where the files went."""
    return re.sub(r"\s--out\s+\S+", "", recorded)


DEV = "2 cores, x86_64 Linux"


def sources() -> list[tuple[str, str, str, str]]:
    """(what, file, command, machine) of every results file the pages take figures from."""
    suite = load("suite.json")
    matrix = load("mlp_matrix.json")
    gpu = load("gpu.json")
    first = load("first_contact.json")
    return [
        ("large data, networks' throughput, the cost model", "suite.json",
         "make bench", _machine(suite["environment"], DEV)),
        ("small data, small searches", "small_fits.json", "python benchmarks/bench_small_fits.py --repeat 3",
         DEV),
        ("GLMs", "restructure-before-after.md", "python benchmarks/bench_glm_families.py", DEV),
        ("later fits on kept data", "kept.json", _command(load("kept.json")["command"]).strip(), DEV),
        ("the first fit", "first_contact.json",
         _command("python benchmarks/bench_first_contact.py " + " ".join(first["argv"])), DEV),
        ("the first fit on a cluster you started", "user_cluster.json",
         _command(load("user_cluster.json")["command"]).strip(), DEV),
        ("cross-validated searches", "cv.json", "python benchmarks/bench_cv.py --repeat 3", DEV),
        ("scikit-learn's GridSearchCV around ours", "search.json", _command(load("search.json")["command"]).strip(),
         DEV),
        ("sparse input", "sparse.json", "python benchmarks/bench_sparse.py", DEV),
        ("float32 input", "float32.json", _command(load("float32.json")["command"]).strip(), DEV),
        ("networks across shapes", "mlp_matrix.json", _command(matrix["command"]),
         _machine(matrix["environment"], DEV)),
        ("small networks", "small_mlp.json", "python benchmarks/bench_small_mlp.py",
         _machine(load("small_mlp.json")["env"], DEV)),
        ("CharLSTM", "charlstm-quick.json", "python benchmarks/bench_charlstm.py --quick --strategies ddp", DEV),
        ("GPU", "gpu.json", "python benchmarks/bench_gpu.py --repeat 2",
         f"{gpu['gpu']}, {gpu['cores']} cores, torch {gpu['environment']['versions']['torch']}"),
        ("several hosts", "hosts.json", "sudo python benchmarks/bench_hosts.py",
         "simulated hosts on " + DEV),
    ]


def block_sources() -> str:
    rows = [[what, f"`benchmarks/results/{f}`", f"`{cmd}`", machine] for what, f, cmd, machine in sources()]
    return table(["figures", "file", "command", "machine"], rows)


# ---- linear models: large and small data -------------------------------------------------------------

def block_large_data() -> str:
    suite = load("suite.json")
    logistic = {(r["n"], r["what"]): r["seconds"] for r in suite["logistic"]}
    dask = {(r["n"], r["what"]): r["seconds"] for r in suite["dask_input"]["logistic"]}
    parquet = {r["what"]: r["seconds"] for r in suite["dask_input"]["parquet"]}
    rows = []
    for n in (200_000, 1_000_000):
        ours, sk = logistic[(n, "ours")], logistic[(n, "sklearn")]
        rows.append([f"{n:,} x 100", "NumPy", g3(ours), g3(sk), g3(ours / sk)])
    for n in (200_000, 1_000_000):
        ours, sk = dask[(n, "ours-dask")], dask[(n, "sklearn")]
        rows.append([f"{n:,} x 100", "dask array, persisted (8 blocks)", g3(ours), g3(sk), g3(ours / sk)])
    ours, sk = parquet["ours+dask"], parquet["sklearn+pandas"]
    rows.append(["1,000,000 x 100", "8 parquet files, read + fit", g3(ours), f"{g3(sk)} (pandas + scikit-learn)",
                 g3(ours / sk)])
    ours, ml = logistic[(1_000_000, "ours")], logistic[(1_000_000, "dask-ml")]
    rows.append(["1,000,000 x 100", "NumPy, against dask-ml", g3(ours), f"{g3(ml)} (dask-ml)", g3(ours / ml)])
    return table(["rows x features", "input", "ours, s", "scikit-learn lbfgs, s", "ours / scikit-learn"], rows)


_SEARCHES = ("GridSearchCV", "dask_estimators' GridSearchCV", "LogisticRegressionCV")


def _small(workloads: list[dict]) -> list[list]:
    return [[w["workload"], g3(w["sklearn s"]), g3(w["ours s"]), g3(w["ours / sklearn"]), g3(w["ours-rounds s"])]
            for w in workloads]


_SMALL_HEADER = ["workload", "scikit-learn, s", "ours, s", "ours / scikit-learn",
                 "ours, one distributed round per evaluation, s"]


def block_small_data() -> str:
    rows = [w for w in load("small_fits.json")["workloads"] if not w["workload"].startswith(_SEARCHES)]
    return table(_SMALL_HEADER, _small(rows))


def block_glm() -> str:
    rows = md_table(RESULTS / "restructure-before-after.md", "## The GLM families")
    return table(["family", "ours, s", "scikit-learn, s", "ours / scikit-learn"],
                 [[r["family"], r["after: ours s"], r["after: scikit-learn s"], r["after: ratio"]] for r in rows])


def block_sparse() -> str:
    labels = {"sklearn": "scikit-learn, the CSR", "ours": "ours, the CSR", "ours, dask": "ours, a dask array of CSR blocks"}
    rows = [[labels[r["what"]], r["solver"], g3(r["seconds"]), g3(r["ratio_vs_sklearn_lbfgs"]), r["n_iter"]]
            for r in load("sparse.json")["fit"] if r["what"] in labels]
    return table(["what", "solver", "s", "/ scikit-learn's lbfgs", "iterations"], rows)


# ---- the first fit -----------------------------------------------------------------------------------

def block_first_fit() -> str:
    fc = load("first_contact.json")
    labels = {
        "import, python -c, s": "`import dask_estimators` (against `import sklearn.linear_model`), `python -c`, s",
        "first fit in a fresh process (5000x20), s": "the first fit in a fresh process, 5,000 x 20, s",
        "second fit in that process, s": "the second fit in that process, s",
        "three-line script, python script.py, s": "the three-line script of the README, `python script.py`, s",
    }
    rows = [[labels[r["benchmark"]], f"{r['ours']:.4g}", f"{r['scikit-learn']:.4g}", g3(r["ours / scikit-learn"])]
            for r in fc["rows"] if r["benchmark"] in labels]
    return table(["what", "ours", "scikit-learn", "ours / scikit-learn"], rows)


def _user_cluster_rows():
    """(label, ours, anchor, its figure) of the first fit on a fresh ``Client(LocalCluster())``."""
    uc = load("user_cluster.json")
    by = {r["way"]: r for r in uc["results"]}
    what = f"first fit, fresh `Client(LocalCluster())`, LogisticRegression {uc['rows']:,} x {uc['cols']} dask"
    usual, late = by["imported before the client"], by["imported at the fit"]
    return [
        (f"{what}, imported before the client, s", usual["first_fit"], "our warm fit", usual["warm_fit"]),
        (f"{what}, imported before the client, s", usual["first_fit"], "scikit-learn", usual["sklearn"]),
        (f"{what}, imported at the fit, s", late["first_fit"], "scikit-learn", late["sklearn"]),
    ]


def block_user_cluster() -> str:
    uc = load("user_cluster.json")
    rows = [[r["way"], g3(r["first_fit"]), g3(r["warm_fit"]), g3(r["first_minus_warm"]), g3(r["sklearn"]),
             g3(r["first_over_sklearn"])] for r in uc["results"]]
    return table(["the package met", "first fit, s", "warm fit, s", "first - warm, s",
                  "scikit-learn, s", "first / scikit-learn"], rows)


_MEMORY_RUNS = {  # results file -> the input, as the sizing page names it
    "memory.json": "a dask array made on the workers (`da.random`)",
    "memory_parquet.json": "parquet files (`dd.read_parquet`)",
    "memory_persisted.json": "a dask array the user persisted (its blocks stay)",
}


def block_memory() -> str:
    rows = []
    for name, label in _MEMORY_RUNS.items():
        m = load(name)
        ws = m["workers"].values()
        shard = max(w["shard_MB"] for w in ws)
        place = max(w["placement_peak_growth_MB"] for w in ws)
        rounds = max(w["optimization_peak_growth_MB"] for w in ws)
        rows.append([label, f"{m['X_GB']:.1f}", f"{shard:,.0f}", f"{place:,.0f}", f"{place / shard:.2f}",
                     f"{rounds / shard:.2f}"])
    return table(["input", "X, GB", "shard per worker, MB", "peak while placing, MB over the worker's start", "/ shard",
                  "peak during the rounds / shard"], rows)


def block_memory_limit() -> str:
    m = load("memory_parquet_limit.json")
    per_worker = m["X_GB"] * 1e3 / m["n_workers"]
    if "failed" in m:
        outcome = f"the fit fails ({m['failed'].split(':')[0]})"
    else:
        ws = m["workers"].values()
        peak = max(w["placement_peak_growth_MB"] / w["shard_MB"] for w in ws)
        outcome = (f"the fit succeeds in {m['fit_seconds']:.1f} s, each worker's peak while placing "
                   f"{peak:.2f} times its shard over its start")
    return (f"With `memory_limit` at twice the data each worker holds ({m['memory_limit_MB']:.0f} MB for about "
            f"{per_worker:.0f} MB of parquet data each, two workers, `{m['command']}`), {outcome}.")


def block_parquet_filesystem() -> str:
    dflt, arrow = load("memory_parquet.json"), load("memory_parquet_arrow.json")
    return (f"With `filesystem=\"arrow\"`, the parquet fit of {dflt['X_GB']:.1f} GB on {dflt['n_workers']} workers "
            f"(reading included) took {arrow['fit_seconds']:.1f} s, against {dflt['fit_seconds']:.1f} s with "
            f"dask's default for local files (`{arrow['command']}`, then without `--filesystem`), the peak "
            f"memory the same.")


def block_kept() -> str:
    k = load("kept.json")
    sk = k["results"]["scikit-learn, NumPy"]
    labels = {"placed": "placed and released", "kept": "placed and kept", "reused": "the next fit, on the kept data"}
    rows = []
    for form in ("persisted dask array", "parquet, not persisted", "NumPy, a copy for each fit"):
        if form not in k["results"]:  # recorded before NumPy input was kept
            continue
        for key, label in labels.items():
            r = k["results"][form][key]
            rows.append([form, label, f"{r['wall']:.3f}", f"{r['outside_rounds']:.3f}", f"{r['wall'] / sk:.2f}"])
    return table([f"input ({k['rows']:,} x {k['cols']})", "fit", "s", "s outside the rounds", "/ scikit-learn"], rows)


# ---- float32 ------------------------------------------------------------------------------------------

def _float32_rows():
    """(label, ours, anchor label, anchor, ratio) of bench_float32.py's linear fits, in one run."""
    f = load("float32.json")
    sec, st = f["linear_seconds"], f["linear_stats"]
    ours, f64, sk = sec["dask float32"], sec["dask float64"], sec["scikit-learn NumPy float32"]
    shape = f"{f['rows']:,} x {f['cols']}"
    fit = f"LogisticRegression {shape}, persisted dask array, float32, fit s"
    mb32, mb64 = (st[k]["x_bytes_per_pass"] / 1e6 for k in ("dask float32", "dask float64"))
    return [(fit, ours, "ours on float64", f64), (fit, ours, "scikit-learn on float32", sk),
            (f"X on the workers, {shape} float32, MB", mb32, "float64", mb64)]


def block_float32() -> str:
    f = load("float32.json")
    rows = [[label, g3(ours), f"{anchor} {g3(a)}", g3(ours / a)] for label, ours, anchor, a in _float32_rows()]
    rows.append(["NumPy float32 input, fit s", g3(f["linear_seconds"]["NumPy float32"]),
                 f"scikit-learn {g3(f['linear_seconds']['scikit-learn NumPy float32'])}",
                 g3(f["linear_seconds"]["NumPy float32"] / f["linear_seconds"]["scikit-learn NumPy float32"])])
    for cell, r in f["mlp_samples_per_s"].items():
        rows.append([f"MLPClassifier {cell}, float32, samples/s", rate(r["float32"]), f"float64 {rate(r['float64'])}",
                     f"{r['float32'] / r['float64']:.2f}"])
    return table(["benchmark", "ours", "anchor", "ours / anchor"], rows)


# ---- searches ----------------------------------------------------------------------------------------

def _search_table(s, anchor, label, header, digits=2) -> str:
    """A search benchmark's seconds (``s["seconds"]``) as rows ``label[k]``, each against the ``anchor`` row's."""
    rows = [[label[k], f"{v:.{digits}f}", f"{v / s['seconds'][anchor]:.2f}"] for k, v in s["seconds"].items()]
    return table([header, "s", "/ scikit-learn"], rows)


_OURS = "ours: dask_estimators.model_selection.GridSearchCV"


def block_search() -> str:
    s = load("search.json")
    label = {"scikit-learn": "scikit-learn, `n_jobs=-1`", "scikit-learn, n_jobs=None": "scikit-learn, `n_jobs=None`",
             _OURS: "`dask_estimators.model_selection.GridSearchCV` over ours: placed once, the fits in lockstep",
             "ours, data kept": "scikit-learn's over ours, folds sent once (the default)",
             "ours, placed for every fit": "scikit-learn's over ours, `keep-placed` 0 (each fit sends its fold)",
             "scikit-learn's own work, around DummyClassifier":
                 "scikit-learn's over `DummyClassifier`: its own work alone (cutting, scaling, scoring)"}
    return _search_table(s, "scikit-learn", label, f"`GridSearchCV(Pipeline(StandardScaler, LogisticRegression))`, "
                         f"{len(s['Cs'])} C x {s['folds']} folds, {s['rows']:,} x {s['cols']}: search, over", digits=1)


def block_search_regression() -> str:
    s = load("search_regression.json")
    label = {"scikit-learn (Ridge)": "scikit-learn's over its `Ridge` (the same penalties), `n_jobs=-1`",
             _OURS: "`dask_estimators.model_selection.GridSearchCV` over our `LinearRegression`"}
    return _search_table(s, "scikit-learn (Ridge)", label,
                         f"`GridSearchCV(Pipeline(MinMaxScaler, LinearRegression))`, {len(s['alphas'])} alpha x "
                         f"{s['folds']} folds, {s['rows']:,} x {s['cols']}: search")


def block_search_mlp() -> str:
    s = load("search_mlp.json")
    label = {"scikit-learn": "scikit-learn's over its `MLPClassifier`, `n_jobs=-1`",
             _OURS: "`dask_estimators.model_selection.GridSearchCV` over ours: X placed once per worker, each "
                    "split's candidates in lockstep on one worker",
             "scikit-learn's GridSearchCV over ours": "scikit-learn's over ours: each fit on its own, on both workers"}
    grid = s["grid"]
    return _search_table(s, "scikit-learn", label,
                         f"`GridSearchCV(MLPClassifier(max_iter={s['epochs']}))`, hidden sizes "
                         f"{' and '.join(grid['hidden_layer_sizes'])} x alpha {' and '.join(grid['alpha'])} x "
                         f"{s['folds']} folds, {s['mlp_rows']:,} x 100: search")


def block_cv() -> str:
    cv = load("cv.json")
    names = {"sklearn": "scikit-learn `LogisticRegressionCV`",
             "ours-batched": '`LogisticRegressionCV`, `path_method="batched"` (the default here)',
             "ours-sequential": '`LogisticRegressionCV`, `path_method="sequential"`',
             "sklearn-ElasticNetCV": "scikit-learn `ElasticNetCV`",
             "ours-LinearRegressionCV": '`LinearRegressionCV` (`solver="cd"`, the default here)',
             "ours-LinearRegressionCV-lbfgs-paths": '`LinearRegressionCV(solver="lbfgs")`'}
    rows = []
    for part in ("logistic", "elastic_net"):
        by = {}
        for r in cv[part]:
            by.setdefault(r["what"], {})[r["n"]] = r
        for what, sizes in by.items():
            a, b = sizes[200_000], sizes[1_000_000]
            rows.append([names[what], g3(a["seconds"]), g3(a["ratio_to_sklearn"]), g3(b["seconds"]),
                         g3(b["ratio_to_sklearn"])])
    return table(["what", "200,000 x 100, s", "/ scikit-learn", "1,000,000 x 100, s", "/ scikit-learn"], rows)


def block_small_searches() -> str:
    rows = [w for w in load("small_fits.json")["workloads"] if w["workload"].startswith(_SEARCHES)]
    return table(_SMALL_HEADER, _small(rows))


# ---- networks ----------------------------------------------------------------------------------------

_MLP = {"sklearn": "scikit-learn `MLPClassifier`", "skorch-float64": "skorch",
        "ours-ddp": 'ours, `strategy="ddp"` (the default)', "ours-tree": 'ours, `strategy="rounds"`',
        "ours-rounds": 'ours, `strategy="rounds"`'}


def block_mlp_throughput() -> str:
    results = load("suite.json")["mlp"]["results"]
    by = {r["key"]: r for r in results}
    sk = by["sklearn"]["samples_per_s"]
    rows = [[label, rate(by[k]["samples_per_s"]), f"{by[k]['samples_per_s'] / sk:.2f}"]
            for k, label in _MLP.items() if k in by]
    return table(["what", "samples/s", "/ scikit-learn"], rows)


def block_mlp_matrix_summary() -> str:
    cells = load("mlp_matrix.json")["cells"]
    ok = [c["ratio"] for c in cells]
    return (f"Ours / scikit-learn over the {len(cells)} cells: lowest {min(ok):.2f}, median "
            f"{statistics.median(ok):.2f}, highest {max(ok):.2f}; {sum(r >= 1.5 for r in ok)} of {len(ok)} "
            f"cells at 1.5 or more.")


def block_small_mlp() -> str:
    rows = [[r["data set"], f"{r['rows']:,}", r["epochs"], r["tol"], g3(r["scikit-learn s"]), g3(r["ours s"]),
             f"{r['ratio']:.2f}"] for r in load("small_mlp.json")["rows"]]
    return table(["data set", "rows", "epochs", "tol", "scikit-learn, s", "ours, s", "scikit-learn / ours"], rows)


def block_charlstm() -> str:
    d = load("charlstm-quick.json")
    r = d["rows"][0]
    return table(["what", "pairs/s", "/ the torch loop"],
                 [["a plain torch loop, one process, 2 threads", rate(d["torch_loop"]["torch_loop_pairs_per_s"]), "1"],
                  ['`CharLSTM`, `strategy="ddp"`, 2 workers', rate(r["steady_pairs_per_s"]),
                   f"{r['vs_torch_loop']:.2f}"]])


# ---- GPU and several hosts ---------------------------------------------------------------------------

def block_gpu() -> str:
    gpu = load("gpu.json")
    fits = {part: {name: median for name, _where, _first, median in gpu[part]["rows"]} for part in ("logistic", "mlp")}
    base = {part: next(iter(rows.values())) for part, rows in fits.items()}

    def cell(part, name):
        m = fits[part].get(name)
        return ("", "") if m is None else (f"{m:.2f}", f"{base[part] / m:.2f}")

    rows = [[label, *cell("logistic", lr), *cell("mlp", mlp)] for label, lr, mlp in (
        ("scikit-learn, 16 threads", "scikit-learn", "scikit-learn"),
        ("ours, 16 CPU workers", "ours, cpu", None),
        ("ours, one worker on the GPU", "ours, cuda", "ours"),
        ("ours, 2 workers sharing the GPU (one rank)", None, "ours, 2 workers sharing the GPU"),
        ("a plain torch loop on the GPU, one process", None, "plain torch loop"),
    )]
    return table(["contestant", "`LogisticRegression`, s", "scikit-learn / this",
                  "`MLPClassifier`, s", "scikit-learn / this"], rows)


def block_gpu_charlstm() -> str:
    c = load("gpu.json")["charlstm"]
    return table(["CharLSTM, hidden 128, 40,000 names, batch 512", "pairs/s"],
                 [[name, rate(v)] for name, _fit, v in c["rows"]]
                 + [["ours / the torch loop", f"{c['ours_over_loop']:.2f}"]])


_RATES = {"none": "no limit", "1gbit": "1 Gbit/s", "10gbit": "10 Gbit/s"}


def block_hosts() -> str:
    rows = []
    for r in load("hosts.json")["rows"]:
        limited = r["rate"] != "none"
        nominal = {"1gbit": 1e9, "10gbit": 1e10}.get(r["rate"])
        rows.append([r["hosts"], _RATES[r["rate"]],
                     f"{r['tcp_goodput_Bps'] * 8 / nominal:.2f}" if limited else "-",
                     f"{r['place_s']:.2f}", f"{r['link_rate_achieved']:.2f}" if limited else "-",
                     f"{r['numpy_fit_s']:.2f}", f"{r['dask_fit_s']:.2f}", f"{r['tree_sum_1e+06_s']:.3f}",
                     f"{r['tree_sum_1e+07_s']:.3f}", f"{r['mlp_ddp_step_ms']:.2f}"])
    return table(["hosts", "links", "TCP goodput / link", "placing 800 MB, s", "placement / link rate",
                  "NumPy fit, s", "dask fit, s", "tree-sum 1e6, s", "tree-sum 1e7, s", "MLP ddp step, ms"], rows)


# ---- the engine and the cost model -------------------------------------------------------------------

def block_engine() -> str:
    eng = load("suite.json")["engine"]
    over = {(r["transport"], r["reduction"]): r for r in eng["overhead"]}
    tree = over[("actors", "tree")]
    red = {r["strategy"]: r for r in eng["reductions"] if r["parameters"] == 10_000_000}
    b = eng["batching"][0]
    rows = [
        ["one round, 1000 x 10 on 2 workers (the actors, no scheduler in the loop), ms", g3(tree["ms_per_eval"]),
         f"a scheduler round trip {g3(tree['round_trip_ms'])}"],
        ["the same round through tasks (`dask-estimators.transport: tasks`), ms",
         g3(over[("tasks", "tree")]["ms_per_eval"]), f"a scheduler round trip {g3(tree['round_trip_ms'])}"],
        [f"{b['examples']} examples on 2 workers, one task per worker, ms", g3(b["per_worker_ms"]),
         f"one task per example {g3(b['per_example_ms'])}"],
        ["the tree-sum of 1e7 parameters, 16 parts on 8 workers, s", g3(red["tree"]["seconds"]),
         (f"`client.gather` {g3(red['gather']['seconds'])}, `gather(direct=True)` "
          f"{g3(red['gather-direct']['seconds'])}, the tree over TCP {g3(red['tree-tcp']['seconds'])}")],
    ]
    return table(["what", "ours", "against"], rows)


def block_cost_model() -> str:
    m = load("suite.json")["scaling"]["model"]
    return (f"Each term measured on its own in the same run (`benchmarks/bench_scaling.py`: the binomial "
            f"kernel on {m['n']:,} x {m['d']}, the bandwidths by a NumPy sum, the latency fitted over the "
            f"workers):\n\n"
            + table(["term", "value"], [
                ["`t_elem`, the fused kernel's time per element of X, one core", f"{m['t_elem_ns']:.3f} ns"],
                ["`B1`, the streaming bandwidth of one process", f"{m['bandwidth_one_gbs']:.1f} GB/s"],
                [f"`Bmax`, of all {m['cores']} cores together", f"{m['bandwidth_all_gbs']:.1f} GB/s"],
                ["`a`, the round latency of a tiny problem", f"{m['latency_a_ms']:.2f} ms"],
                ["`b`, per tree level", f"{m['latency_b_ms_per_level']:.2f} ms"],
            ]))


def block_cost_model_predict() -> str:
    m = load("suite.json")["scaling"]["model"]
    return (f"The plot has the model against the measured time on 1-8 workers. On 100 workers with a core each "
            f"it predicts {m['predict_100_workers_same_total_ms']:.1f} ms per iteration for the same "
            f"{m['n']:,} rows, and {m['predict_100_workers_same_n_per_worker_ms']:.1f} ms for {m['n'] // 2:,} rows "
            f"per worker ({m['n'] // 2 * 100:,} rows in all).")


# ---- README ------------------------------------------------------------------------------------------

def block_readme() -> str:
    suite = load("suite.json")
    logistic = {(r["n"], r["what"]): r["seconds"] for r in suite["logistic"]}
    dask = {(r["n"], r["what"]): r["seconds"] for r in suite["dask_input"]["logistic"]}
    parquet = {r["what"]: r["seconds"] for r in suite["dask_input"]["parquet"]}
    mem = max(suite["dask_input"]["memory"], key=lambda r: r["optimization_peak_over_shard"])
    eng = suite["engine"]
    tree = next(r for r in eng["overhead"] if (r["transport"], r["reduction"]) == ("actors", "tree"))
    red = {r["strategy"]: r for r in eng["reductions"] if r["parameters"] == 10_000_000}
    mlp = {r["key"]: r["samples_per_s"] for r in suite["mlp"]["results"]}
    rows = []
    for n in (1_000_000, 200_000):
        for anchor, label in (("sklearn", "scikit-learn"), ("dask-ml", "dask-ml")):
            ours, a = logistic[(n, "ours")], logistic[(n, anchor)]
            rows.append([f"LogisticRegression {n:,} x 100, NumPy, fit s", g3(ours), f"{label} {g3(a)}", g3(ours / a)])
    for n in (1_000_000, 200_000):
        ours, a = dask[(n, "ours-dask")], dask[(n, "sklearn")]
        rows.append([f"LogisticRegression {n:,} x 100, persisted dask array, fit s", g3(ours),
                     f"scikit-learn {g3(a)}", g3(ours / a)])
    ours, a = parquet["ours+dask"], parquet["sklearn+pandas"]
    rows.append(["1,000,000 x 100 in 8 parquet files, read + fit, s", g3(ours), f"pandas + scikit-learn {g3(a)}",
                 g3(ours / a)])
    pq = load("memory_parquet.json")
    w = max(pq["workers"].values(), key=lambda r: r["placement_peak_growth_MB"] / r["shard_MB"])
    rows.append([f"worker memory while placing {pq['X_GB']:.1f} GB of parquet, MB over its start",
                 f"{w['placement_peak_growth_MB']:,.0f}", f"its shard {w['shard_MB']:,.0f}",
                 g3(w["placement_peak_growth_MB"] / w["shard_MB"])])
    ps = load("memory_persisted.json")
    w = max(ps["workers"].values(), key=lambda r: r["placement_peak_growth_MB"] / r["shard_MB"])
    rows.append([f"worker memory while placing a persisted {ps['X_GB']:.1f} GB dask array, MB over its start "
                 "(which holds the blocks)", f"{w['placement_peak_growth_MB']:,.0f}",
                 f"its share of X {w['shard_MB']:,.0f}", g3(w["placement_peak_growth_MB"] / w["shard_MB"])])
    rows.append(["worker memory during a fit's rounds, MB", g3(mem["optimization_peak_MB"]),
                 f"its shard {g3(mem['shard_MB'])}", g3(mem["optimization_peak_over_shard"])])
    rows.append(["one round (1000 x 10, 2 workers), ms", g3(tree["ms_per_eval"]),
                 f"scheduler round trip {g3(tree['round_trip_ms'])}", g3(tree["ms_per_eval"] / tree["round_trip_ms"])])
    for anchor, label in (("gather", "`client.gather`"), ("gather-direct", "`client.gather(direct=True)`")):
        rows.append(["tree-sum of 1e7 parameters, 16 parts on 8 workers, s", g3(red["tree"]["seconds"]),
                     f"{label} {g3(red[anchor]['seconds'])}", g3(red["tree"]["seconds"] / red[anchor]["seconds"])])
    for anchor, label in (("sklearn", "scikit-learn"), ("skorch-float64", "skorch")):
        rows.append(['MLP (200k x 100, Adam, batch 256), `strategy="ddp"`, samples/s', rate(mlp["ours-ddp"]),
                     f"{label} {rate(mlp[anchor])}", f"{mlp['ours-ddp'] / mlp[anchor]:.2f}"])
    for label, ours, anchor, a in _float32_rows() + _user_cluster_rows():
        rows.append([label, g3(ours), f"{anchor} {g3(a)}", g3(ours / a)])
    search = load("search.json")
    ours, a = (search["seconds"][k] for k in ("ours: dask_estimators.model_selection.GridSearchCV", "scikit-learn"))
    rows.append([f"GridSearchCV(Pipeline(StandardScaler, LogisticRegression)), {len(search['Cs'])} C x "
                 f"{search['folds']} folds, {search['rows']:,} x {search['cols']}, s", g3(ours),
                 f"scikit-learn, `n_jobs=-1` {g3(a)}", g3(ours / a)])
    return table(["benchmark", "ours", "anchor", "ours / anchor"], rows)


#: NAME -> what writes the block.
BLOCKS = {
    "sources": block_sources,
    "large-data": block_large_data,
    "small-data": block_small_data,
    "glm": block_glm,
    "sparse": block_sparse,
    "first-fit": block_first_fit,
    "user-cluster": block_user_cluster,
    "kept": block_kept,
    "memory": block_memory,
    "memory-limit": block_memory_limit,
    "parquet-filesystem": block_parquet_filesystem,
    "cv": block_cv,
    "small-searches": block_small_searches,
    "search": block_search,
    "search-mlp": block_search_mlp,
    "search-regression": block_search_regression,
    "float32": block_float32,
    "mlp-throughput": block_mlp_throughput,
    "mlp-matrix-summary": block_mlp_matrix_summary,
    "small-mlp": block_small_mlp,
    "charlstm": block_charlstm,
    "gpu": block_gpu,
    "gpu-charlstm": block_gpu_charlstm,
    "hosts": block_hosts,
    "engine": block_engine,
    "cost-model": block_cost_model,
    "cost-model-predict": block_cost_model_predict,
    "readme": block_readme,
}


def render(text: str, page: str) -> tuple[str, list[str]]:
    """The page with every generated block written again, and the problems found (unknown or unclosed)."""
    problems = []
    names = _MARKER.findall(text)
    for name in sorted(set(names)):
        if name not in BLOCKS:
            problems.append(f"{page}: unknown block {name!r}")
        elif names.count(name) != 2:
            problems.append(f"{page}: block {name!r} is not opened and closed once")

    def write(m: re.Match) -> str:
        fn = BLOCKS.get(m["name"])
        return m.group() if fn is None else f"{m['open']}{fn()}\n{m['close']}"

    return _BLOCK.sub(write, text), problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a page or plot differs")
    args = ap.parse_args(argv)
    problems, stale, used = [], [], set()
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new, found = render(text, page)
        problems += found
        used |= set(_MARKER.findall(text))
        if new != text:
            stale.append(page)
            if not args.check:
                path.write_text(new)
    problems += [f"block {name!r} is on no page" for name in BLOCKS if name not in used]
    for img, src in PLOTS.items():
        if not (ROOT / img).exists() or (ROOT / img).read_bytes() != (ROOT / src).read_bytes():
            stale.append(img)
            if not args.check:
                shutil.copyfile(ROOT / src, ROOT / img)
    for p in problems:
        print(p, file=sys.stderr)
    if args.check:
        for s in stale:
            print(f"{s}: differs from what benchmarks/docs_figures.py writes from benchmarks/results/; run it",
                  file=sys.stderr)
        return 1 if stale or problems else 0
    for s in stale:
        print(f"wrote {s}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
