"""scikit-learn's own ``sklearn.model_selection.tests.test_search``, run against our search classes.

No test code lives here: the installed module is loaded with our ``GridSearchCV`` and ``RandomizedSearchCV``
in place of scikit-learn's (see ``upstream_loader``) and its names are re-exported for pytest to collect.  Its
tests search over scikit-learn's estimators, so they run the search's own path there; which tests are skipped or
expected to fail, and why, is in ``upstream_skips``.
"""

from upstream_loader import load, public_names

globals().update(public_names(load("sklearn.model_selection.tests.test_search")))
