"""Which upstream tests do not apply to our estimators, and which fail today because of our defects.

Each rule is one category with one written reason and the tests it covers,
as regular expressions searched in the pytest test name (function name and
parameter id, e.g. ``test_max_iter[liblinear-...]``), per upstream module.

``SKIPS`` are tests that do not apply (the first matching rule wins); every
other test of one of our estimators is *applicable*.  ``XFAILS`` are
applicable tests that fail because of a defect of ours: they are marked
``xfail(strict=False)`` with the defect as reason, and a rule goes away when
its defect is fixed (the report counts the XPASSes that show it).
"""

from __future__ import annotations

from dataclasses import dataclass

LOGISTIC = "sklearn.linear_model.tests.test_logistic"
MLP = "sklearn.neural_network.tests.test_mlp"
SVM = "sklearn.svm.tests.test_svm"


@dataclass(frozen=True)
class Rule:
    label: str
    reason: str
    patterns: dict  # upstream module -> list of regular expressions

    def matches(self, module: str, name: str) -> bool:
        import re

        return any(re.search(p, name) for p in self.patterns.get(module, ()))


def _any_param(*values):
    """A pattern for a test whose parameter id has one of ``values`` as a whole part."""
    return r"[\[-](" + "|".join(values) + r")[-\]]"


SKIPS = [
    Rule(
        "array API",
        "scikit-learn's array API dispatch (torch, CuPy or array_api_strict input under "
        "array_api_dispatch=True) is not offered: we take NumPy and dask input.",
        {LOGISTIC: [r"array_api"]},
    ),
    Rule(
        "LogisticRegressionCV",
        "LogisticRegressionCV is not offered yet.",
        {LOGISTIC: [r"(?i)regressioncv", r"logistic_cv", r"lr_cv", r"\[LogisticRegressionCV\]"]},
    ),
    Rule(
        "solvers liblinear/sag/saga",
        "The liblinear, sag and saga solvers are not offered, by design (each step of ours is one distributed "
        "round over all the data); tests that run them, compare with them or loop over all of scikit-learn's "
        "solvers cannot run unchanged.",
        {LOGISTIC: [_any_param("liblinear", "sag", "saga"), r"liblinear", r"saga", r"_sag_"]},
    ),
    Rule(
        "deprecated arguments",
        "Arguments scikit-learn deprecates (LogisticRegression's penalty=, n_jobs=, l1_ratio=None) were "
        "never offered here; tests of them or of their warnings do not apply.",
        {LOGISTIC: [r"penalty", r"n_jobs", r"l1_ratio_None"]},
    ),
    Rule(
        "scikit-learn private internals",
        "The test calls scikit-learn private functions or reads private attributes of scikit-learn's "
        "implementation, which are not part of the estimator API.",
        {LOGISTIC: [r"regression_path", r"multinomial_score"]},
    ),
    Rule(
        "sparse input",
        "Sparse input is not supported yet (its own open issue); counted apart so that these tests become "
        "applicable when it lands.",
        {
            LOGISTIC: [r"sparse", _any_param("csr_matrix", "csr_array", "coo_matrix", "coo_array", "lil_matrix", "lil_array")],
            MLP: [r"sparse"],
            SVM: [_any_param("lil_matrix", "lil_array")],
        },
    ),
]

XFAILS: list[Rule] = []
