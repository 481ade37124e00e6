"""Every Python example of README.md and docs/*.md runs, so the pages a user copies from cannot rot.

The ```python blocks of each page are run in order, in one fresh Python
process per page (a script of its own, as a user would run them), with a
time limit.  The page's blocks share their names, so a later block may use
the ``X, y`` of an earlier one.  What they need from outside is provided here:

- a scheduler: the pages write ``tcp://10.0.0.5:8786`` for "your scheduler";
  it is replaced by the address of the embedded cluster of the page's own
  process (2 workers here), which the blocks then reach over TCP as they
  would a remote scheduler.  The process depends on nothing of the test
  session's, whose scheduler may be busy serving the tests;
- ``data/``: a small parquet data set in the working directory (X columns and
  a ``"target"`` column), for the pages that read one.

A block that cannot run here (a Kubernetes or SLURM cluster, GPUs) carries an
HTML comment directly before its fence, ``<!-- no-run: the reason -->``;
:data:`NOT_RUN` lists every such reason, so adding one is a visible change.
Blocks of ``docs/examples.md`` that only include a file of ``examples/``
(``--8<--``) are run by ``tests/examples``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_ADDRESS = "tcp://10.0.0.5:8786"
TIMEOUT_S = 300

#: (page, reason) of every block marked ``<!-- no-run: ... -->``.
NOT_RUN = {
    ("docs/clusters.md", "needs a SLURM cluster and dask-jobqueue"),
    ("docs/clusters.md", "needs a Kubernetes cluster and dask-kubernetes"),
    ("docs/clusters.md", "needs NVIDIA GPUs and dask-cuda"),
    ("docs/contributing.md", "an excerpt of an estimator's fit method, not a script"),
}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)\s*$")
_NO_RUN = re.compile(r"^\s*<!--\s*no-run:\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    code: str
    no_run: str | None  # the reason, when marked
    include: bool  # only ``--8<--`` snippet lines (a file of examples/)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The ```python blocks of a Markdown file, with the no-run reason written directly before each."""
    lines = path.read_text().splitlines()
    page = path.relative_to(root).as_posix()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m["lang"]:
            i += 1
            continue
        indent, start = m["indent"], i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        if m["lang"] != "python":
            continue
        marker = _NO_RUN.match(lines[start - 1]) if start > 0 else None
        code = "\n".join(body) + "\n"
        include = all(ln.strip().startswith("--8<--") for ln in body if ln.strip())
        blocks.append(Block(page, start + 1, code, marker["reason"] if marker else None, include))
    return blocks


def _markers(path: Path):
    """Every ``no-run`` marker of a page: (line index, reason)."""
    for k, line in enumerate(path.read_text().splitlines()):
        m = _NO_RUN.match(line)
        if m:
            yield k, m["reason"]


ALL_BLOCKS = [b for p in PAGES for b in python_blocks(p)]
RUNNABLE_PAGES = sorted({b.page for b in ALL_BLOCKS if b.no_run is None and not b.include})

# Run by the subprocess: the blocks of one page, in order, in one namespace whose __name__ is "__main__"
# (so guarded blocks run); the runner's own top level is guarded, since a LocalCluster's spawned workers
# import the main script again.
RUNNER = '''
import json, linecache, sys, time

if __name__ == "__main__":
    blocks = json.load(open(sys.argv[1]))
    address = None
    namespace = {"__name__": "__main__"}
    for b in blocks:
        code = b["code"]
        if b["doc_address"] in code:
            if address is None:
                from dask_estimators.engine import get_embedded_client

                address = get_embedded_client().scheduler.address
            code = code.replace(b["doc_address"], address)
        linecache.cache[b["where"]] = (len(code), None, code.splitlines(True), b["where"])
        print(f"--- {b['where']}", flush=True)
        t0 = time.perf_counter()
        exec(compile(code, b["where"], "exec"), namespace)
        print(f"--- {b['where']}: ran in {time.perf_counter() - t0:.1f} s", flush=True)
'''


def test_the_pages_have_examples():
    by_page = {}
    for b in ALL_BLOCKS:
        by_page.setdefault(b.page, []).append(b)
    assert len(by_page["README.md"]) >= 3
    assert {"README.md", "docs/index.md", "docs/getting-started.md", "docs/clusters.md"} <= set(RUNNABLE_PAGES)
    assert all(b.include for b in by_page["docs/examples.md"])  # the example scripts, run by tests/examples


def test_no_run_markers_are_listed_and_precede_a_fence():
    found = set()
    for path in PAGES:
        lines = path.read_text().splitlines()
        for k, reason in _markers(path):
            page = path.relative_to(ROOT).as_posix()
            assert k + 1 < len(lines) and _FENCE.match(lines[k + 1]), (
                f"{page}:{k + 1}: a no-run marker must be directly before a ```python fence"
            )
            assert reason, f"{page}:{k + 1}: a no-run marker needs a reason"
            found.add((page, reason))
    assert found == NOT_RUN


def test_extraction_reads_markers_indents_and_includes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\na = 1\n```\n<!-- no-run: needs a Kubernetes cluster -->\n```python\nb = 2\n```\n"
        "```bash\nls\n```\n??? example\n    ```python\n    --8<-- \"examples/x.py\"\n    ```\n"
    )
    blocks = python_blocks(page, root=tmp_path)
    assert [(b.line, b.code, b.no_run, b.include) for b in blocks] == [
        (2, "a = 1\n", None, False),
        (6, "b = 2\n", "needs a Kubernetes cluster", False),
        (13, '--8<-- "examples/x.py"\n', None, True),
    ]


@pytest.fixture
def workdir(tmp_path):
    """A working directory holding the ``data/`` parquet data set the pages read."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    for part in range(2):
        X = rng.normal(size=(2000, 5))
        df = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
        df["target"] = (X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=2000) > 0).astype(int)
        df.to_parquet(data / f"part.{part}.parquet")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_examples_run(page, workdir):
    blocks = [dict(where=b.where, code=b.code, doc_address=DOC_ADDRESS)
              for b in ALL_BLOCKS if b.page == page and b.no_run is None and not b.include]
    (workdir / "blocks.json").write_text(json.dumps(blocks))
    (workdir / "run_blocks.py").write_text(RUNNER)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        DASK_ESTIMATORS__EMBEDDED_WORKERS="2",
        OMP_NUM_THREADS="1",
        MPLBACKEND="Agg",
    )
    try:
        proc = subprocess.run(
            [sys.executable, "run_blocks.py", "blocks.json"], cwd=workdir, env=env, capture_output=True,
            text=True, timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{page}: the examples took more than {TIMEOUT_S} s\n{e.stdout or ''}\n{e.stderr or ''}")
    assert proc.returncode == 0, f"{page}: an example failed\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    ran = [ln for ln in proc.stdout.splitlines() if ln.startswith("--- ") and ": ran in " in ln]
    assert len(ran) == len(blocks), proc.stdout
