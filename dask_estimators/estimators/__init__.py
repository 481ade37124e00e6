"""Thin scikit-learn classes: validate, call a driver, set fitted attributes."""

from .linear import LinearRegression, LinearSVC, LinearSVR, LogisticRegression
from .neural import MLPClassifier, MLPRegressor
from .text import CharLSTM

__all__ = ["CharLSTM", "LinearRegression", "LinearSVC", "LinearSVR", "LogisticRegression", "MLPClassifier", "MLPRegressor"]
