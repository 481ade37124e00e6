"""dask-estimators' settings, in Dask's own config system.

Every key is declared once, in ``dask-estimators.yaml`` beside this module,
with its default, its type and what it does.  :func:`register` adds the
defaults under ``dask-estimators`` with ``dask.config.update_defaults`` (as
distributed registers ``distributed.yaml``) when this module is imported
(by the estimators, the engine, or ``dask_estimators.config``; not by a bare
``import dask_estimators``, which stays free of Dask's import), so
that ``dask.config.get("dask-estimators.transport")`` needs no default of its
own, and a user sets a key as any Dask key: ``dask.config.set``, a YAML file
of their Dask config, or an environment variable.  Both
``DASK_ESTIMATORS__SHARED_MEMORY=false`` and Dask's own spelling
``DASK_DASK_ESTIMATORS__SHARED_MEMORY=false`` work.

A ``dask-estimators.*`` key that is not declared (a typo) warns once, when
the next fit starts (:func:`check_keys`).

Three keys (``read: environment`` in the YAML: ``prestart``, ``fork-workers``,
``private-torch``) are read before Dask is, or where it never is: only their
environment variables set them (:mod:`dask_estimators._env`).  The
environment variables of earlier versions (``DASK_ESTIMATORS_N_WORKERS``,
``DASK_ESTIMATORS_THREADS``, ...: :data:`dask_estimators._env.LEGACY`) are still read.

Examples
--------
>>> import dask
>>> from dask_estimators import config
>>> config.get("transport")
'actors'
>>> with dask.config.set({"dask-estimators.transport": "tasks"}):
...     config.get("transport")
'tasks'
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import dask.config
import yaml

from . import _env

__all__ = ["KEYS", "check_keys", "get", "register", "markdown_table"]

#: key -> {"default", "type", "description"[, "enum"]}, as declared in dask-estimators.yaml
KEYS: dict = yaml.safe_load((Path(__file__).with_name("dask-estimators.yaml")).read_text())
#: The environment variables of this package's own prefix (Dask's is DASK_DASK_ESTIMATORS__).
ENV_PREFIX = "DASK_ESTIMATORS__"

_lock = threading.Lock()
_warned: set = set()


def _canonical(key: str) -> str:
    return key.replace("_", "-")


def register() -> None:
    """Add the defaults to Dask's config (a value already set, by a YAML file or an environment variable,
    stays), then the ``DASK_ESTIMATORS__*`` environment variables on top."""
    dask.config.update_defaults({"dask-estimators": {k: v["default"] for k, v in KEYS.items()}})
    ours = {"DASK_DASK_ESTIMATORS__" + k[len(ENV_PREFIX):]: v for k, v in os.environ.items()
            if k.startswith(ENV_PREFIX)}
    for key in _env.LEGACY:  # the variable of an earlier version, where no new one sets the key
        value = _env.from_environment(key)
        if value is not None:
            ours.setdefault(_env.variables(key)[1], value)  # Dask's own spelling of the key's variable
    if ours:
        dask.config.update(dask.config.config, dask.config.collect_env(ours), priority="new")


def check_keys(stacklevel: int = 2) -> None:
    """Warn once for each ``dask-estimators.*`` key that is set but not declared (each fit calls this as it
    starts)."""
    found = dask.config.config.get("dask-estimators") or {}
    unknown = {k for k in found if _canonical(k) not in KEYS} - _warned
    if not unknown:
        return
    with _lock:
        unknown -= _warned
        _warned.update(unknown)
    for key in sorted(unknown):
        warnings.warn(
            f"Unknown dask config key 'dask-estimators.{key}': it has no effect. The keys are "
            f"{', '.join(sorted(KEYS))} (docs/clusters.md).",
            UserWarning,
            stacklevel=stacklevel + 1,
        )


def get(key: str):
    """The value of ``dask-estimators.<key>`` (a declared key: :data:`KEYS`).

    Its declared default where the config has lost it: a ``dask.config.set({"dask-estimators": {...}})``
    replaces the whole section, and code may delete a key it had set.
    """
    spec = KEYS.get(key)
    if spec is None:
        raise KeyError(f"dask-estimators has no setting {key!r}; its settings are {sorted(KEYS)}.")
    if spec.get("read") == "environment":
        return _env.switched_on(key)
    return dask.config.get(f"dask-estimators.{key}", default=spec["default"])


def markdown_table() -> str:
    """The table of the settings for docs/clusters.md."""
    lines = ["| key | default | what it does |", "|---|---|---|"]
    for key, spec in KEYS.items():
        default = spec["default"]
        shown = "null" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        text = " ".join(spec["description"].split())
        if spec.get("read") == "environment":
            text += f" Set by the environment only (read before Dask's config is): `{_env.variables(key)[0]}`."
        lines.append(f"| `{key}` | `{shown}` | {text} |")
    return "\n".join(lines) + "\n"


register()

if __name__ == "__main__":  # python -m dask_estimators.config: the table of docs/clusters.md
    print(markdown_table(), end="")
