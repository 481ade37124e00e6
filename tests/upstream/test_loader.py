"""The loader binds our estimators in the upstream modules and leaves scikit-learn itself alone."""

import sklearn.linear_model
import sklearn.neural_network
import sklearn.svm

import dask_estimators
from upstream_loader import TARGETS, load


def test_upstream_modules_see_our_estimators():
    logistic = load("sklearn.linear_model.tests.test_logistic")
    assert logistic.LogisticRegression is dask_estimators.LogisticRegression
    assert logistic.LogisticRegressionCV is dask_estimators.LogisticRegressionCV
    assert logistic.SGDClassifier is sklearn.linear_model.SGDClassifier  # not ours: stays scikit-learn's

    mlp = load("sklearn.neural_network.tests.test_mlp")
    assert mlp.MLPClassifier is dask_estimators.MLPClassifier
    assert mlp.MLPRegressor is dask_estimators.MLPRegressor
    assert mlp.PoissonRegressor is sklearn.linear_model.PoissonRegressor  # a reference, stays scikit-learn's

    svm_tests = load("sklearn.svm.tests.test_svm")
    assert svm_tests.LinearSVC is dask_estimators.LinearSVC
    assert svm_tests.svm.LinearSVC is dask_estimators.LinearSVC  # `from sklearn import svm`, then svm.LinearSVC
    assert svm_tests.svm.LinearSVR is dask_estimators.LinearSVR
    assert svm_tests.svm.SVC is sklearn.svm.SVC
    assert svm_tests.SVR is sklearn.svm.SVR


def test_scikit_learn_itself_is_not_patched():
    for name in TARGETS:
        load(name)
    assert sklearn.linear_model.LogisticRegression.__module__.startswith("sklearn.")
    assert sklearn.neural_network.MLPClassifier.__module__.startswith("sklearn.")
    assert sklearn.svm.LinearSVC.__module__.startswith("sklearn.")
    assert sklearn.svm.LinearSVR.__module__.startswith("sklearn.")
