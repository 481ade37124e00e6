"""Thin scikit-learn classes: validate, call a driver, set fitted attributes.

Each class is imported on first use: the linear models need neither torch nor
the network code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from .cv import LinearRegressionCV, LogisticRegressionCV
    from .glm import GammaRegressor, PoissonRegressor, TweedieRegressor
    from .linear import LinearRegression, LinearSVC, LinearSVR, LogisticRegression
    from .neural import MLPClassifier, MLPRegressor
    from .text import CharLSTM

__all__ = [
    "CharLSTM", "GammaRegressor", "LinearRegression", "LinearRegressionCV", "LinearSVC", "LinearSVR",
    "LogisticRegression", "LogisticRegressionCV", "MLPClassifier", "MLPRegressor", "PoissonRegressor",
    "TweedieRegressor",
]

_LAZY = {
    "LinearRegression": ".linear",
    "LinearSVC": ".linear",
    "LinearSVR": ".linear",
    "LogisticRegression": ".linear",
    "LogisticRegressionCV": ".cv",
    "LinearRegressionCV": ".cv",
    "MLPClassifier": ".neural",
    "MLPRegressor": ".neural",
    "CharLSTM": ".text",
    "PoissonRegressor": ".glm",
    "GammaRegressor": ".glm",
    "TweedieRegressor": ".glm",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
