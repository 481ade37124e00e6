"""Load an example script of ``examples/`` as a module, so its tests can call ``main(quick=True)``.

The session fixture of tests/conftest.py makes a 2-worker process-based
LocalCluster the default client, so the examples run on it (they resolve the
active client before they would start the embedded cluster).
"""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example():
    def load(name):
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
