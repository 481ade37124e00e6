"""The package's settings: declared once in dask-estimators.yaml, registered with Dask's config, read without
inline defaults, set by dask.config, environment variables or YAML, a misspelt key warned about, and the table
in docs/clusters.md the one the YAML gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import dask
import pytest

from dask_estimators import config

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dask_estimators"


def test_every_default_is_registered_with_dask():
    set_by_the_session = {"min-step-flops-per-worker"}  # tests/conftest.py
    for key, spec in config.KEYS.items():
        if key not in set_by_the_session:
            assert dask.config.get(f"dask-estimators.{key}") == spec["default"], key
        assert spec["description"].strip() and spec["type"], key


def test_the_code_reads_declared_keys_without_defaults_of_its_own():
    """No ``dask.config.get("dask-estimators.…", default)`` is left, and every key read is declared."""
    read, inline = set(), []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "config.py":  # its docstring shows the call a user makes
            continue
        text = path.read_text()
        read |= set(re.findall(r'(?:config\.get|_env\.switched_on)\("([a-z-]+)"\)', text))
        inline += [f"{path.name}: {m}" for m in re.findall(r'dask\.config\.get\(\s*"dask-estimators\.[^)]*\)', text)]
    assert not inline, inline
    assert read and read <= set(config.KEYS), read - set(config.KEYS)
    assert set(config.KEYS) <= read | {"max-class-share"}, set(config.KEYS) - read  # each declared key is used


def test_set_with_dask_config_and_underscores():
    with dask.config.set({"dask-estimators.transport": "tasks"}):
        assert config.get("transport") == "tasks"
    with dask.config.set({"dask_estimators.worker_solve_below": 7}):  # Dask treats - and _ alike
        assert config.get("worker-solve-below") == 7
    assert config.get("transport") == "actors"
    with pytest.raises(KeyError, match="no setting 'transprt'"):
        config.get("transprt")


def test_a_key_the_config_lost_reads_its_declared_default():
    """``dask.config.set`` of the whole section replaces it; a key deleted by other code: the declared default."""
    with dask.config.set({"dask-estimators": {"transport": "tasks"}}):
        assert config.get("transport") == "tasks"
        assert config.get("max-recoveries") == config.KEYS["max-recoveries"]["default"]


def test_a_misspelt_key_warns_once_when_a_fit_starts(monkeypatch, rng):
    from dask_estimators import LinearRegression

    monkeypatch.setattr(config, "_warned", set())
    X = rng.normal(size=(40, 3))
    with dask.config.set({"dask-estimators.shared-memroy": False}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert config.get("shared-memory") is True  # a read is silent (it runs in every round)
        with pytest.warns(UserWarning, match="Unknown dask config key 'dask-estimators.shared-memroy'"):
            LinearRegression().fit(X, X[:, 0])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            LinearRegression().fit(X, X[:, 0])  # once: the second fit is silent


@pytest.mark.parametrize("variable", ["DASK_ESTIMATORS__SHARED_MEMORY", "DASK_DASK_ESTIMATORS__SHARED_MEMORY"])
def test_environment_variables_set_keys(variable):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({variable: "False", "DASK_ESTIMATORS__WORKER_SOLVE_BELOW": "5", "PYTHONPATH": str(ROOT)})
    out = subprocess.run(
        [sys.executable, "-c", "from dask_estimators import config; "
         "print(config.get('shared-memory'), config.get('worker-solve-below'), config.get('transport'))"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.split()
    assert out == ["False", "5", "actors"]


def test_the_variables_of_earlier_versions_still_set_their_keys():
    """DASK_ESTIMATORS_N_WORKERS and DASK_ESTIMATORS_THREADS (before the settings were keys) set
    embedded-workers and worker-threads; the new variable wins where both are set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({"DASK_ESTIMATORS_N_WORKERS": "3", "DASK_ESTIMATORS_THREADS": "2",
                "DASK_ESTIMATORS__WORKER_THREADS": "4", "PYTHONPATH": str(ROOT)})
    out = subprocess.run(
        [sys.executable, "-c", "from dask_estimators import config; "
         "print(config.get('embedded-workers'), config.get('worker-threads'))"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.split()
    assert out == ["3", "4"]


@pytest.mark.parametrize("key", ["prestart", "fork-workers", "private-torch"])
@pytest.mark.parametrize("spelling", ["DASK_ESTIMATORS__{}", "DASK_DASK_ESTIMATORS__{}", "legacy"])
def test_the_keys_read_before_dask_come_from_the_environment(monkeypatch, key, spelling):
    from dask_estimators import _env, _torch_api
    from dask_estimators.engine.cluster import _zygote

    assert config.KEYS[key]["read"] == "environment" and config.KEYS[key]["default"] is True
    for variable in _env.variables(key):
        monkeypatch.delenv(variable, raising=False)
    assert config.get(key) is True
    variable = _env.LEGACY[key] if spelling == "legacy" else spelling.format(key.upper().replace("-", "_"))
    monkeypatch.setenv(variable, "off")
    with dask.config.set({f"dask-estimators.{key}": True}):  # Dask's config does not reach them
        assert config.get(key) is False
    readers = {"fork-workers": _zygote.enabled, "private-torch": _torch_api.enabled}
    if key in readers:
        assert readers[key]() is False


def test_a_yaml_file_sets_keys(tmp_path):
    (tmp_path / "mine.yaml").write_text("dask-estimators:\n  max-recoveries: 9\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({"DASK_CONFIG": str(tmp_path), "PYTHONPATH": str(ROOT)})
    out = subprocess.run([sys.executable, "-c", "from dask_estimators import config; print(config.get('max-recoveries'))"],
                         env=env, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out == ["9"]


def test_the_docs_table_is_the_yamls():
    text = (ROOT / "docs" / "clusters.md").read_text()
    table = text.split("<!-- settings: python -m dask_estimators.config -->\n", 1)[1].split("<!-- settings end -->")[0]
    assert table == config.markdown_table(), "docs/clusters.md: paste `python -m dask_estimators.config` again"
