"""Which upstream tests do not apply to our estimators, and which fail today because of our defects.

Each rule is one category with one written reason and the tests it covers,
as regular expressions searched in the pytest test name (function name and
parameter id, e.g. ``test_max_iter[liblinear-...]``), per upstream module.

``SKIPS`` are tests that do not apply (the first matching rule wins); every
other test of one of our estimators is *applicable*.  ``XFAILS`` are
applicable tests that fail because of a defect of ours: they are marked
``xfail(strict=True)`` with the defect as reason, so a rule must go when its
defect is fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOGISTIC = "sklearn.linear_model.tests.test_logistic"
GLM = "sklearn.linear_model._glm.tests.test_glm"
BASE = "sklearn.linear_model.tests.test_base"
VALIDATION = "sklearn.model_selection.tests.test_validation"
MLP = "sklearn.neural_network.tests.test_mlp"
SVM = "sklearn.svm.tests.test_svm"


@dataclass(frozen=True)
class Rule:
    label: str
    reason: str
    patterns: dict  # upstream module -> list of regular expressions

    def matches(self, module: str, name: str) -> bool:
        return any(re.search(p, name) for p in self.patterns.get(module, ()))


def _any_param(*values):
    """A pattern for a test whose parameter id has one of ``values`` as a whole part."""
    return r"[\[-](" + "|".join(values) + r")[-\]]"


SKIPS = [
    Rule(
        "array API",
        "scikit-learn's array API dispatch (torch, CuPy or array_api_strict input under "
        "array_api_dispatch=True) is not offered: we take NumPy and dask input.",
        {LOGISTIC: [r"array_api"], GLM: [r"array_api"], BASE: [r"array_api"]},
    ),
    Rule(
        "deprecated arguments",
        "Arguments scikit-learn deprecates (LogisticRegression's penalty=, n_jobs=, l1_ratio=None) were "
        "never offered here; tests of them or of their warnings do not apply (nor of the FutureWarning of "
        "LogisticRegressionCV's use_legacy_attributes and scoring defaults: True and accuracy here, without a "
        "warning).",
        {
            LOGISTIC: [
                r"penalty", r"n_jobs", r"l1_ratio_None", r"elasticnet_l1_ratio_err_helpful",
                r"l1_ratio_non_elasticnet", r"elastic_net_l1_l2_equivalence",
                r"warns_with_use_legacy_attributes", r"lr_scoring_warns",
            ]
        },
    ),
    Rule(
        "data on the workers",
        "X is placed on the workers as copies and never changed on the client, so copy_X=False has nothing to "
        "allow (LinearRegression accepts it for scikit-learn's signature); the test asserts that X was "
        "changed in place.",
        {BASE: [r"^test_inplace_data_preprocessing"]},
    ),
    Rule(
        "scikit-learn's own limits",
        "The test asserts an error for input scikit-learn cannot fit and ours fits: sparse X with "
        "positive=True (L-BFGS-B's bounds take any X; tests/estimators/test_linear_parity.py checks it against "
        "the dense fit).",
        {BASE: [r"^test_raises_value_error_if_positive_and_sparse"]},
    ),
    Rule(
        "solvers liblinear/sag/saga",
        "The liblinear, sag and saga solvers are not offered, by design (each step of ours is one distributed "
        "round over all the data); tests that run them, compare with them or loop over all of scikit-learn's "
        "solvers cannot run unchanged.",
        {
            LOGISTIC: [
                _any_param("liblinear", "sag", "saga"), r"liblinear", r"saga", r"check_solver_option",
                r"^test_logistic_regression_solvers", r"^test_logistic_regression_class_weights",
                r"warm_start_converge_LR", r"elastic_net_coeffs", r"elastic_net_vs_l1_l2",
                r"LogisticRegression_elastic_net_objective", r"elastic_net_versus_sgd",
                r"callback_support_warning", r"^test_logreg_l1\[",  # liblinear against saga, dense and sparse
                # LogisticRegressionCV tests whose bodies run saga, sag or liblinear (or loop over them)
                r"^test_logistic_cv\[", r"^test_multinomial_cv_iris", r"^test_logistic_regressioncv_class_weights",
                r"^test_logistic_regression_cv_refit", r"LogisticRegressionCV_GridSearchCV_elastic_net",
                r"^test_LogisticRegressionCV_no_refit", r"LogisticRegressionCV_elasticnet_attribute_shapes",
                r"^test_scores_attribute_layout_elasticnet",
            ],
            # LogisticRegression(solver="liblinear") inside cross_val_predict
            VALIDATION: [r"^test_cross_val_predict\[", r"^test_cross_val_predict_with_method_multilabel_ovr"],
        },
    ),
    Rule(
        "scikit-learn private internals",
        "The test calls scikit-learn private functions or reads private attributes of scikit-learn's "
        "implementation (_logistic_regression_path, _predict_proba_lr, the MLP's _optimizer, _coef_grads, "
        "_loss_grad_lbfgs, _no_improvement_count, a fitted GLM's _base_loss), which are not part of the "
        "estimator API.",
        {
            LOGISTIC: [r"regression_path", r"consistency_path", r"predict_proba_multinomial", r"multinomial_score"],
            MLP: [
                r"^test_fit$", r"^test_gradient$", r"learning_rate_warmstart", r"adaptive_learning_rate",
                r"^test_n_iter_no_change",
            ],
            GLM: [r"^test_tweedie_link_argument", r"^test_tweedie_link_auto"],
        },
    ),
    # rules of ours that differ from scikit-learn's on purpose (they were xfails; each is a decision, not a defect)
    Rule(
        "LinearSVC's primal converges",
        "LinearSVC's default (squared hinge, dual='auto', n_samples >= n_features) is the primal, solved by "
        "trust-region Newton-CG, which converges on this test's six rows within max_iter=2, so liblinear's "
        "ConvergenceWarning, which the test expects, is not raised. The test's LinearSVR half (the dual method, "
        "liblinear's warning and n_iter_) runs in tests/estimators/test_svm_dual.py "
        "(test_linear_svr_convergence_warning_as_liblinear).",
        {SVM: [r"linear_svm_convergence_warnings"]},
    ),
    Rule(
        "a ConvergenceWarning where lbfgs stops short of tol",
        "Where L-BFGS ends because the objective no longer decreases in float64 while max |gradient| is still "
        "above tol (scipy's success), ours warns (ConvergenceWarning: the fit did not reach the tol asked for) "
        "and scikit-learn's is silent; the test fits with every warning an error.",
        {GLM: [r"^test_linalg_warning_with_newton"]},
    ),
    Rule(
        "the early-stopping split names the class by its label",
        "A class with one member: the stratified early-stopping split raises scikit-learn's message, naming the "
        "class by its label (1), where scikit-learn names its binarised indicator ('True'), which the test "
        "matches.",
        {MLP: [r"early_stopping_stratified"]},
    ),
]

#: Applicable tests that fail because of a defect of ours: none today.  A rule added here is marked
#: ``xfail(strict=True)``: the day its defect is fixed the run fails until the rule goes.
XFAILS: list = []


#: scikit-learn's own xfail marks (its estimators' known failures) on tests that ours passes: the marks are
#: taken off and the tests run as plain tests.  Every other upstream xfail mark on an applicable test is made
#: strict, with scikit-learn's reason (tests/upstream/conftest.py).
UPSTREAM_XFAILS_OURS_PASS = [
    Rule(
        "scikit-learn's LinearRegression on CSR",
        "scikit-learn marks these xfail for its own LinearRegression (weighted and repeated rows differ on CSR X, "
        "its issue 30131); ours passes them.",
        {BASE: [r"^test_linear_regression_sample_weight_consistency\[.*csr_"]},
    ),
]
