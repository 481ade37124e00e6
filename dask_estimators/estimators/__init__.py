"""Thin scikit-learn classes: validate, call a driver, set fitted attributes."""

from .linear import LinearRegression, LinearSVC, LinearSVR, LogisticRegression
from .neural import MLPClassifier, MLPRegressor

__all__ = ["LinearRegression", "LinearSVC", "LinearSVR", "LogisticRegression", "MLPClassifier", "MLPRegressor"]
