"""Run the benchmarks that exist so far, in one go (``make bench``, ``make bench-quick``).

    python benchmarks/run.py            # engine (1e5..1e7 parameters) + LogisticRegression 1M and 200k rows
    python benchmarks/run.py --quick    # engine at 1e5 and 1e6, LogisticRegression at 200k rows

The engine tables go to ``benchmarks/results/engine.json``; everything is printed as Markdown.
The full suite of the performance issue (plots, the dask-ml anchor, the cost model) is still to come.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_engine  # noqa: E402
import bench_logistic  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    bench_engine.main(["--quick"] if args.quick else [])
    for n in ([200_000] if args.quick else [1_000_000, 200_000]):
        bench_logistic.main(n)


if __name__ == "__main__":
    main()
