"""The user pages say what a user can act on, and their figures come from the recorded benchmark runs.

- No user page (README.md and docs/*.md, less the developer pages) names a commit, a numbered benchmark
  run or the workshop the figures were made in: that history lives in ``benchmarks/results/history/``.
- Every figure of the pages' generated tables is what ``benchmarks/docs_figures.py`` writes from
  ``benchmarks/results/`` (``--check`` exits non-zero otherwise), so two pages cannot disagree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Pages for the project's developers, where commits and runs may be named.
DEVELOPER_PAGES = {"docs/contributing.md", "docs/private-apis.md", "docs/design-measurements.md"}
USER_PAGES = sorted(
    p.relative_to(ROOT).as_posix()
    for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    if p.relative_to(ROOT).as_posix() not in DEVELOPER_PAGES
)

#: A commit: a word of 7-40 hex digits with at least one digit and one letter.  Not part of a longer name
#: (``libscipy_openblas64_-61654e39.so``, ``x1a2b3c4d``) or of a URL (URLs are taken out first).
COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])")
#: Hex words that are not commits (none today; add one with the reason).
NOT_COMMITS: set[str] = set()
URL = re.compile(r"https?://\S+")

#: A numbered benchmark run ("run 21", "runs 1-18", "in runs 16 and 17", "run B").  "run 2 workers" is a verb.
_COUNTED = r"workers?|processes|threads|times|fits|epochs|rows|cores|folds|tasks|iterations|rounds|jobs|steps"
RUN_NUMBER = re.compile(
    rf"\b[Rr]uns?\s+\d+(?:\s*(?:-|–|to|and|,|/)\s*\d+)+\b"  # runs 1-18, runs 16 and 17, runs 15 / 16
    rf"|\b[Rr]un\s+\d+\b(?!\s+(?:{_COUNTED})\b)"  # run 21 (not: run 2 workers)
    rf"|\b[Rr]un\s+[A-H]\b(?=[\s:,.;)])"  # run A, run B
)

#: Words of the workshop, not of the product: (pattern, what it is).  "session" alone is a product word
#: (a DataSession, pytest's or Dask's session), so only a work session's phrases are listed.
WORKSHOP = [
    (r"\bsandbox", "the machine the work ran in"),
    (r"\bfield report\b", "a work ticket's source"),
    (r"\bthis (?:VM|virtual machine)\b", "the machine the work ran in"),
    (r"\bthe issue(?:'s)?\b(?! tracker)", "the work ticket"),
    (r"\bissue #?\d+\b", "a work ticket's number"),
    (r"\b(?:this|a later|the previous|an earlier|the same|same|another) session\b", "a work session"),
    (r"\b(?:this|the) session's (?:start|changes|time|\d+ minutes)", "a work session"),
    (r"\bGPU time\b", "a work session's budget"),
    (r"\blent\b", "a machine lent to a work session"),
    (r"\bticket\b", "a work ticket"),
    (r"\bworkshop\b", "the workshop"),
    (r"\bfarm-\w+", "the workshop's tools"),
]
WORKSHOP_RE = [(re.compile(p.replace(" ", r"\s+"), re.IGNORECASE), why) for p, why in WORKSHOP]


def findings(text: str) -> list[str]:
    """What a user page must not carry, one line each: ``line N: 'match' (what)``.  A phrase may break
    across lines (the patterns' spaces match any whitespace)."""
    bare = URL.sub(lambda m: " " * len(m.group()), text)  # the same offsets, so the same line numbers
    found = [(m, "a commit") for m in COMMIT.finditer(bare) if m.group() not in NOT_COMMITS]
    found += [(m, "a benchmark run's number") for m in RUN_NUMBER.finditer(bare)]
    for pattern, why in WORKSHOP_RE:
        found += [(m, why) for m in pattern.finditer(bare)]
    found.sort(key=lambda f: f[0].start())
    return [f"line {bare.count(chr(10), 0, m.start()) + 1}: {' '.join(m.group().split())!r} ({why})"
            for m, why in found]


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_page_names_no_commit_run_or_workshop(page):
    found = findings((ROOT / page).read_text())
    assert not found, f"{page} carries development history (move it to benchmarks/results/history/):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    "text",
    [
        "at a79521e on a Zen 4 machine",
        "(git 20c636d9f7; load 0.23)",
        "In the run plotted (run 21)",
        "runs 1-18 took the first only",
        "in runs 16 and 17",
        "Run 15's note",
        "against this run (run B)",
        "this sandbox's resolver drops some queries",
        "the anchor the field report names",
        "This VM's two cores",
        "The issue's target, 1.5x in every cell, is not met.",
        "the session's 15 minutes of GPU time went to the tests",
        "The first session lent a GPU",
        "A later session took those on",
    ],
)
def test_the_checks_catch_history(text):
    assert findings(text)


@pytest.mark.parametrize(
    "text",
    [
        "A `DataSession` is the estimators' one way into the engine; the session releases every shard.",
        "on the session's process-based `LocalCluster` of `tests/conftest.py`",
        "The first fit of a session starts the embedded cluster.",
        "users run 2 workers per host; a fit runs 20 rounds",
        "1e7 parameters, 2**21 stored values, 1e-8, b=2048, d=1000 1024 logistic f64",
        "`libscipy_openblas64_-61654e39.so`, https://github.com/dask/distributed/commit/0d14756abc",
        "each task runs on its worker; one task per worker over its whole shard",
    ],
)
def test_the_checks_pass_product_words(text):
    assert not findings(text)


def test_generated_figures_are_current():
    """``benchmarks/docs_figures.py --check``: every generated table and copied plot is what the results give."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "docs_figures.py"), "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_mention_of_a_renamed_strategys_end_names_the_version_the_code_removes_it_in():
    """The pages and docstrings said ``"tree"`` works until 0.3.0; the code and the changelog say 0.4.0."""
    from dask_estimators.estimators._torch import RENAMED_STRATEGIES

    texts = {p: (ROOT / p).read_text() for p in USER_PAGES}
    texts.update({p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "dask_estimators").rglob("*.py")})
    for old, (_, _, removed) in RENAMED_STRATEGIES.items():
        found = []
        for path, text in texts.items():
            for m in re.finditer(rf'"{old}".{{0,200}}?(?:until|removed in)\s+(\d+\.\d+\.\d+)', text, flags=re.S):
                found.append((path, m.group(1)))
        assert found  # the check reads the pages' wording
        assert all(version == removed for _, version in found), found
