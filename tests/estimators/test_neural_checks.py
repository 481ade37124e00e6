"""scikit-learn's own estimator checks for the perceptrons, on the real process-based cluster.

Every check runs twice per estimator: with the default ``strategy="auto"``,
which on this session's cluster (two worker processes, see conftest.py) is
"ddp" for the default adam solver (``test_default_strategy_is_ddp`` makes
sure), and with ``strategy="rounds"``.  Running all of them for both strategies
takes about 3 minutes here, so there is no subset.
"""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

import dask_estimators as de

# The fitting checks stop at max_iter (ConvergenceWarning); that is expected.
# "slow": setup.cfg lists the estimator checks as longer tests.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

# For speed: almost all the time goes to epochs (about 10-20 ms each on 15-200 rows in either strategy, measured), and
# most checks test the API rather than how good the fit is, so 20 epochs are enough.  The hidden layer
# stays at the default (100,): a smaller one costs about the same here, and with (10,) even
# scikit-learn's own MLPRegressor scores R^2 = 0.06 on check_regressors_train after 100 epochs.
FAST = dict(max_iter=20)

ESTIMATORS = [
    de.MLPClassifier(**FAST),
    de.MLPRegressor(**FAST),
    de.MLPClassifier(**FAST, strategy="rounds"),
    de.MLPRegressor(**FAST, strategy="rounds"),
]

# These checks require a good training score (accuracy > 0.83, R^2 > 0.5).  They get the max_iter
# scikit-learn uses for its own perceptrons in these checks (PER_ESTIMATOR_CHECK_PARAMS in
# sklearn/utils/_test_common/instance_generator.py).
TRAINED = {
    "check_classifiers_train": dict(max_iter=100),
    "check_regressors_train": dict(max_iter=100),
}


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    name = getattr(getattr(check, "func", check), "__name__", "")
    if name in TRAINED:  # a copy: every check gets the same instance, and the others keep max_iter=20
        estimator = clone(estimator).set_params(**TRAINED[name])
    check(estimator)


@pytest.mark.parametrize("Estimator", [de.MLPClassifier, de.MLPRegressor])
def test_default_strategy_is_ddp(Estimator):
    """The default-strategy half of the checks above covers "ddp" only if "auto" picks it on this cluster."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    y = (X[:, 0] > 0).astype(int)
    est = Estimator(**FAST, random_state=0).fit(X, y)
    assert est.fit_stats_["strategy"] == "ddp"
