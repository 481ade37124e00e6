"""The settings read where Dask's config is not: from the environment only.

Three settings of ``dask-estimators.yaml`` (those with ``read: environment``)
are read before Dask is imported, or where it never is: ``prestart`` and
``fork-workers`` when the package is imported (the embedded cluster's warm
process starts then, before the client imports distributed), and
``private-torch`` by the kernels, which import no Dask.  They are set by the
environment variable ``DASK_ESTIMATORS__KEY`` (or Dask's spelling,
``DASK_DASK_ESTIMATORS__KEY``), which worker processes inherit from their
nanny; ``dask.config.set`` does not reach them.

This module imports nothing beyond the standard library.
"""

from __future__ import annotations

import os

__all__ = ["LEGACY", "from_environment", "switched_on", "variables"]

#: The environment variables of earlier versions, still read: key -> variable.
LEGACY = {
    "embedded-workers": "DASK_ESTIMATORS_N_WORKERS",
    "fork-workers": "DASK_ESTIMATORS_FORK_WORKERS",
    "prestart": "DASK_ESTIMATORS_PRESTART",
    "private-torch": "DASK_ESTIMATORS_PRIVATE_TORCH",
    "worker-threads": "DASK_ESTIMATORS_THREADS",
}

_OFF = frozenset({"0", "false", "no", "off"})


def variables(key: str) -> tuple:
    """The environment variables that set ``key``, the first set one winning: ours, Dask's spelling, the old one."""
    name = key.upper().replace("-", "_")
    return tuple(v for v in (f"DASK_ESTIMATORS__{name}", f"DASK_DASK_ESTIMATORS__{name}", LEGACY.get(key)) if v)


def from_environment(key: str) -> str | None:
    """The text the environment sets ``key`` to (None where no variable sets it)."""
    for var in variables(key):
        value = os.environ.get(var)
        if value is not None and value.strip():
            return value.strip()
    return None


def switched_on(key: str) -> bool:
    """A boolean setting of default true, read from the environment: on unless set to 0, false, no or off.

    >>> import os
    >>> os.environ["DASK_ESTIMATORS__PRESTART"] = "false"
    >>> switched_on("prestart")
    False
    >>> del os.environ["DASK_ESTIMATORS__PRESTART"]
    """
    value = from_environment(key)
    return value is None or value.lower() not in _OFF
