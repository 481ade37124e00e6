"""Plot ours / scikit-learn against rows for ``LogisticRegression`` on NumPy input, from recorded runs.

Reads ``benchmarks/results/small_fits.json`` (the small data sets, ``python benchmarks/bench_small_fits.py
--repeat 3``) and ``benchmarks/results/suite.json`` (200,000 and 1,000,000 rows of 100 features, ``make bench``),
and draws one point per workload into ``benchmarks/results/rows.png``; nothing is measured here.

Usage::

    python benchmarks/plot_rows.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def points() -> list[tuple[int, float, str]]:
    """(rows, ours / scikit-learn, label) of each recorded LogisticRegression fit on NumPy input."""
    out = []
    for w in json.loads((RESULTS / "small_fits.json").read_text())["workloads"]:
        m = re.fullmatch(r"LogisticRegression, (.*?)(\d+)x(\d+)(, .*)?", w["workload"])
        if m:
            rows, cols = int(m[2]), int(m[3])
            out.append((rows, w["ours / sklearn"], f"{rows:,} x {cols}"))
    seconds = {(r["n"], r["what"]): r["seconds"] for r in json.loads((RESULTS / "suite.json").read_text())["logistic"]}
    for n in sorted({n for n, _ in seconds}):
        out.append((n, seconds[(n, "ours")] / seconds[(n, "sklearn")], f"{n:,} x 100"))
    return sorted(out)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.ticker
    import matplotlib.pyplot as plt

    pts = points()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="tab:blue")
    for rows, ratio, label in pts:
        ax.annotate(label, (rows, ratio), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(pts[0][0] / 2, pts[-1][0] * 5)  # room for the last point's label
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("rows (features as labelled)")
    ax.set_ylabel("ours / scikit-learn, fit time")
    ax.set_title("LogisticRegression on NumPy input: below the line, ours is faster", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "rows.png", metadata={"Software": None})
    print(f"wrote {RESULTS / 'rows.png'}")


if __name__ == "__main__":
    main()
