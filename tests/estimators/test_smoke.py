from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

import dask_estimators as de


def test_logistic_fit_predict():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = de.LogisticRegression().fit(X, y)
    assert clf.score(X, y) > 0.95
    assert clf.fit_stats_["n_shards"] == 1 and clf.fit_stats_["solved_on_worker"]  # small: on one worker
