"""First contact: what a new user waits for, against scikit-learn, in one run.

    python benchmarks/bench_first_contact.py                 # 5 imports, 3 fits and scripts of each
    python benchmarks/bench_first_contact.py --repeat 1 --import-repeat 1   # once each (a smoke run)

Every measurement runs in a fresh ``python`` process, as a user's would:

1. ``import dask_estimators`` against ``import sklearn.linear_model``: wall
   time of ``python -c "import ..."`` (median of ``--import-repeat``), the
   same less a bare ``python -c pass``, and the modules each imports
   (``python -X importtime``);
2. the first fit in a fresh process: ``LogisticRegression().fit(X, y)`` on
   5,000 x 20, timed inside the process after the imports and the data
   (ours starts the embedded cluster in it), against scikit-learn's;
3. the README's three-line script (imports, data, fit, score, exit with the
   cluster's shutdown) run as ``python script.py``, against the same script
   with scikit-learn's ``LogisticRegression``.

Each row has the ratio ours / scikit-learn.  ``--workers`` sets the embedded
cluster's workers (``DASK_ESTIMATORS__EMBEDDED_WORKERS``; default: as a user gets).
Writes ``first_contact.json`` and ``first_contact.md`` to ``--out``
(default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

THREE_LINES = {
    "ours": (
        "import numpy as np, dask_estimators as de\n"
        "rng = np.random.default_rng(0); X = rng.normal(size=(5000, 20)); y = (X[:, 0] > 0).astype(int)\n"
        "print(de.LogisticRegression().fit(X, y).score(X, y))\n"
    ),
    "sklearn": (
        "import numpy as np, sklearn.linear_model as lm\n"
        "rng = np.random.default_rng(0); X = rng.normal(size=(5000, 20)); y = (X[:, 0] > 0).astype(int)\n"
        "print(lm.LogisticRegression().fit(X, y).score(X, y))\n"
    ),
}

FIRST_FIT = """\
import json, time
import numpy as np
from {module} import LogisticRegression
rng = np.random.default_rng(0); X = rng.normal(size=(5000, 20)); y = (X[:, 0] > 0).astype(int)
t0 = time.perf_counter()
model = LogisticRegression().fit(X, y)
t1 = time.perf_counter()
model.fit(X, y)
t2 = time.perf_counter()
print("RESULT " + json.dumps({{"first_fit_s": t1 - t0, "second_fit_s": t2 - t1, "score": model.score(X, y)}}))
"""

MODULES = {"ours": "dask_estimators", "sklearn": "sklearn.linear_model"}


def _env(workers):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    if workers:
        env["DASK_ESTIMATORS__EMBEDDED_WORKERS"] = str(workers)
    return env


def _wall(cmd, env, cwd=None, timeout=600):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc


def imports(env, repeat):
    """Wall time of ``python -c "import M"`` and the modules it imports, for ours and scikit-learn."""
    bare = statistics.median(_wall([sys.executable, "-c", "pass"], env)[0] for _ in range(repeat))
    out = {"python_bare_s": bare}
    for who, module in MODULES.items():
        times = [_wall([sys.executable, "-c", f"import {module}"], env)[0] for _ in range(repeat)]
        _, proc = _wall([sys.executable, "-X", "importtime", "-c", f"import {module}"], env)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")][1:]
        out[who] = {
            "module": module,
            "seconds": statistics.median(times),
            "seconds_less_python": statistics.median(times) - bare,
            "modules": len(lines),
            "importtime_cumulative_us": int(lines[-1].split("|")[1]) if lines else 0,
        }
    return out


def first_fits(env, repeat):
    """The first (and second) fit of a fresh process, timed inside it, for ours and scikit-learn."""
    out = {}
    for who, module in MODULES.items():
        runs = []
        for _ in range(repeat):
            _, proc = _wall([sys.executable, "-c", FIRST_FIT.format(module=module)], env)
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
            runs.append(json.loads(line[len("RESULT "):]))
        out[who] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return out


def scripts(env, repeat):
    """Wall time of the three-line script, ``python script.py``, for ours and scikit-learn."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for who, text in THREE_LINES.items():
            path = Path(tmp) / f"three_lines_{who}.py"  # not sklearn.py: it would shadow the package
            path.write_text(text)
            times = []
            for _ in range(repeat):
                seconds, proc = _wall([sys.executable, str(path)], env, cwd=tmp)
                times.append(seconds)
            out[who] = {"seconds": statistics.median(times), "score": float(proc.stdout.split()[-1])}
    return out


def rows(result):
    imp, fit, script = result["imports"], result["first_fit"], result["script"]

    def row(what, ours, anchor):
        return {"benchmark": what, "ours": ours, "scikit-learn": anchor, "ours / scikit-learn": ours / anchor}

    return [
        row("import, python -c, s", imp["ours"]["seconds"], imp["sklearn"]["seconds"]),
        row("import less a bare python, s", imp["ours"]["seconds_less_python"], imp["sklearn"]["seconds_less_python"]),
        row("import, modules", imp["ours"]["modules"], imp["sklearn"]["modules"]),
        row("first fit in a fresh process (5000x20), s", fit["ours"]["first_fit_s"], fit["sklearn"]["first_fit_s"]),
        row("second fit in that process, s", fit["ours"]["second_fit_s"], fit["sklearn"]["second_fit_s"]),
        row("three-line script, python script.py, s", script["ours"]["seconds"], script["sklearn"]["seconds"]),
    ]


def markdown(result):
    head = (
        "# First contact\n\n"
        f"`python benchmarks/bench_first_contact.py {' '.join(result['argv'])}`; "
        f"{os.cpu_count()} cores, embedded cluster workers: {result['workers'] or 'default'}.\n\n"
        "| benchmark | ours | scikit-learn | ours / scikit-learn |\n|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['benchmark']} | {r['ours']:.4g} | {r['scikit-learn']:.4g} | {r['ours / scikit-learn']:.3g} |\n"
        for r in rows(result)
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per fit and per script (median)")
    ap.add_argument("--import-repeat", type=int, default=5, help="fresh processes per import (median)")
    ap.add_argument("--workers", type=int, default=None, help="embedded cluster workers (default: a user's default)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for the json and md files")
    args = ap.parse_args(argv)
    env = _env(args.workers)
    result = {"argv": sys.argv[1:] if argv is None else list(argv), "workers": args.workers}
    print("imports...", file=sys.stderr, flush=True)
    result["imports"] = imports(env, args.import_repeat)
    print("first fits...", file=sys.stderr, flush=True)
    result["first_fit"] = first_fits(env, args.repeat)
    print("scripts...", file=sys.stderr, flush=True)
    result["script"] = scripts(env, args.repeat)
    result["rows"] = rows(result)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_contact.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (out / "first_contact.md").write_text(md)
    print(md)
    return result


def summary_rows(result):
    """The suite's summary rows: ours / scikit-learn for the import, the first fit and the script."""
    keep = ("import, python -c, s", "first fit in a fresh process (5000x20), s", "three-line script, python script.py, s")
    return [{"benchmark": r["benchmark"], "ours": r["ours"], "anchor": f"scikit-learn {r['scikit-learn']:.3g}",
             "ours / anchor": r["ours / scikit-learn"]} for r in result["rows"] if r["benchmark"] in keep]


if __name__ == "__main__":
    main()
