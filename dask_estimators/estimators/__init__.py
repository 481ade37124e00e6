"""Thin scikit-learn classes: validate, call a driver, set fitted attributes.

Each class is imported on first use: the linear models need neither torch nor
the network code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .linear import LinearRegression, LinearSVC, LinearSVR, LogisticRegression
    from .neural import MLPClassifier, MLPRegressor
    from .text import CharLSTM

__all__ = [
    "CharLSTM", "LinearRegression", "LinearSVC", "LinearSVR", "LogisticRegression", "MLPClassifier", "MLPRegressor",
]

_LAZY = {
    "LinearRegression": ".linear",
    "LinearSVC": ".linear",
    "LinearSVR": ".linear",
    "LogisticRegression": ".linear",
    "MLPClassifier": ".neural",
    "MLPRegressor": ".neural",
    "CharLSTM": ".text",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
