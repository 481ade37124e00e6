"""Hyperparameter searches whose fits of our linear models share their placements on the workers.

:class:`GridSearchCV` and :class:`RandomizedSearchCV` are scikit-learn's,
with the same parameters and results; see :mod:`._search` for what they do
differently when the candidates are our linear models.
"""

from __future__ import annotations

from ._search import GridSearchCV, RandomizedSearchCV

__all__ = ["GridSearchCV", "RandomizedSearchCV"]
