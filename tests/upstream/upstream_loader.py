"""Load scikit-learn's own test modules so that their bodies exercise our estimators.

A module is executed from the installed scikit-learn, unchanged, with one
difference: the ``__import__`` its code sees (at import time and inside the
test bodies) hands back *views* of a few scikit-learn modules in which the
names of the estimators we offer are bound to ours.  So

- ``from sklearn.linear_model import LogisticRegression`` binds ours,
- ``from sklearn import svm`` binds a view whose ``svm.LinearSVC`` is ours,
- ``pytest.mark.parametrize("Estimator", [MLPClassifier, ...])`` carries ours,

and every other name (``SVC``, ``SGDClassifier``,
``PoissonRegressor``, private helpers) stays scikit-learn's own.  Nothing in
scikit-learn itself is patched: other code importing ``sklearn.svm`` sees the
real module.
"""

from __future__ import annotations

import builtins
import importlib.util
import sys
import types
from dataclasses import dataclass, field

import dask_estimators
import dask_estimators.model_selection


@dataclass(frozen=True)
class Target:
    """One upstream test module and the estimators of ours it is run against."""

    module: str
    #: (scikit-learn module, name) -> our estimator that replaces it in the test module
    redirect: dict
    #: further scikit-learn names whose tests count as ours (offered later, skipped meanwhile)
    also_ours: frozenset = field(default_factory=frozenset)

    @property
    def names(self) -> frozenset:
        return frozenset(name for _, name in self.redirect) | self.also_ours


TARGETS = {
    t.module: t
    for t in [
        Target(
            "sklearn.linear_model.tests.test_logistic",
            {("sklearn.linear_model", "LogisticRegression"): dask_estimators.LogisticRegression,
             ("sklearn.linear_model", "LogisticRegressionCV"): dask_estimators.LogisticRegressionCV},
        ),
        Target(
            "sklearn.neural_network.tests.test_mlp",
            {
                ("sklearn.neural_network", "MLPClassifier"): dask_estimators.MLPClassifier,
                ("sklearn.neural_network", "MLPRegressor"): dask_estimators.MLPRegressor,
            },
        ),
        Target(
            "sklearn.linear_model.tests.test_base",
            {("sklearn.linear_model", "LinearRegression"): dask_estimators.LinearRegression},
        ),
        Target(
            "sklearn.linear_model.tests.test_common",
            {("sklearn.linear_model", n): getattr(dask_estimators, n) for n in (
                "LinearRegression", "LogisticRegression", "LogisticRegressionCV", "PoissonRegressor",
                "GammaRegressor", "TweedieRegressor")},
        ),
        Target(
            "sklearn.linear_model._glm.tests.test_glm",
            {
                ("sklearn.linear_model", "PoissonRegressor"): dask_estimators.PoissonRegressor,
                ("sklearn.linear_model", "GammaRegressor"): dask_estimators.GammaRegressor,
                ("sklearn.linear_model", "TweedieRegressor"): dask_estimators.TweedieRegressor,
            },
        ),
        Target(
            "sklearn.model_selection.tests.test_validation",
            {("sklearn.linear_model", "LogisticRegression"): dask_estimators.LogisticRegression,
             ("sklearn.svm", "LinearSVC"): dask_estimators.LinearSVC,
             ("sklearn.neural_network", "MLPRegressor"): dask_estimators.MLPRegressor,
             ("sklearn.neural_network", "MLPClassifier"): dask_estimators.MLPClassifier},
        ),
        Target(
            "sklearn.model_selection.tests.test_search",
            {("sklearn.model_selection", "GridSearchCV"): dask_estimators.model_selection.GridSearchCV,
             ("sklearn.model_selection", "RandomizedSearchCV"): dask_estimators.model_selection.RandomizedSearchCV,
             # the searches over these take the placed path
             ("sklearn.linear_model", "LogisticRegression"): dask_estimators.LogisticRegression,
             ("sklearn.linear_model", "LinearRegression"): dask_estimators.LinearRegression},
        ),
        Target(
            "sklearn.svm.tests.test_sparse",
            {("sklearn.svm", "LinearSVC"): dask_estimators.LinearSVC,
             ("sklearn.svm", "LinearSVR"): dask_estimators.LinearSVR},
        ),
        Target(
            "sklearn.svm.tests.test_svm",
            {
                ("sklearn.svm", "LinearSVC"): dask_estimators.LinearSVC,
                ("sklearn.svm", "LinearSVR"): dask_estimators.LinearSVR,
            },
        ),
    ]
}


class ModuleView:
    """A read-only stand-in for a module: a few attributes replaced, the rest looked up on the module."""

    def __init__(self, module: types.ModuleType, overrides: dict):
        self._module = module
        self._overrides = overrides

    def __getattr__(self, name):
        try:
            return self._overrides[name]
        except KeyError:
            return getattr(self._module, name)

    def __repr__(self):
        return f"<view of {self._module.__name__}: {sorted(self._overrides)} replaced>"


def _views(redirect: dict) -> dict:
    """``{dotted module name: ModuleView}`` for the redirected modules and their parent packages."""
    overrides: dict[str, dict] = {}
    for (modname, name), obj in redirect.items():
        overrides.setdefault(modname, {})[name] = obj
        parts = modname.split(".")
        for i in range(1, len(parts)):
            overrides.setdefault(".".join(parts[:i]), {})
    views: dict[str, ModuleView] = {}
    for modname in sorted(overrides, key=lambda m: -m.count(".")):  # children first
        importlib.import_module(modname)
        children = {m.rpartition(".")[2]: v for m, v in views.items() if m.rpartition(".")[0] == modname}
        views[modname] = ModuleView(sys.modules[modname], {**children, **overrides[modname]})
    return views


def _redirecting_import(views: dict):
    real_import = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        module = real_import(name, globals, locals, fromlist, level)
        if level == 0:
            # `from a.b import c` gets a.b back; `import a.b` gets a back
            return views.get(name if fromlist else name.partition(".")[0], module)
        return module

    return __import__


def load(modname: str) -> types.ModuleType:
    """Execute the installed upstream test module ``modname`` with our estimators in place of scikit-learn's.

    The module keeps its real name in ``sys.modules`` (functions pickled by
    reference to the workers still resolve).  It is loaded once per process.
    """
    module = sys.modules.get(modname)
    if module is not None and getattr(module, "__dask_estimators_target__", None) is not None:
        return module
    target = TARGETS[modname]
    spec = importlib.util.find_spec(modname)  # through pytest's assertion rewriter when it runs
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = {**builtins.__dict__, "__import__": _redirecting_import(_views(target.redirect))}
    module.__dask_estimators_target__ = target
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[modname]
        raise
    return module


def public_names(module: types.ModuleType) -> dict:
    """What ``from module import *`` would bind: the names a test file re-exports for pytest to collect."""
    return {k: v for k, v in vars(module).items() if not k.startswith("_")}
