"""scikit-learn's own ``sklearn.model_selection.tests.test_validation``, run against our estimators.

No test code lives here: the installed module is loaded with our estimators
in place of scikit-learn's (see ``upstream_loader``) and its names are
re-exported for pytest to collect.  Which tests are skipped or expected to
fail, and why, is in ``upstream_skips``.
"""

from upstream_loader import load, public_names

globals().update(public_names(load("sklearn.model_selection.tests.test_validation")))
