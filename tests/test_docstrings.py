"""Every public class and function has a numpydoc docstring with an ``Examples`` section.

The public API is what ``dask_estimators``, ``dask_estimators.datasets`` and
``dask_estimators.engine`` export in ``__all__`` (the API reference of the
docs shows the same objects).  Their public methods defined in this package
need a docstring too.
"""

import inspect
import re

import pytest

import dask_estimators
import dask_estimators.datasets
import dask_estimators.engine

MODULES = [dask_estimators, dask_estimators.datasets, dask_estimators.engine]
EXAMPLES = re.compile(r"^Examples\n-{8,}\n(.+)", re.MULTILINE | re.DOTALL)


def _public():
    out = []
    for module in MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                out.append(pytest.param(obj, id=f"{module.__name__}.{name}"))
    return out


def _own_methods(cls):
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if isinstance(attr, property):
            attr = attr.fget
        if inspect.isfunction(attr):
            yield name, attr


def test_public_api_is_found():
    names = {p.values[0].__name__ for p in _public()}
    assert {"LogisticRegression", "CharLSTM", "load_pet_names", "place", "DistributedEvaluator"} <= names


@pytest.mark.parametrize("obj", _public())
def test_docstring_has_an_example(obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{obj.__qualname__} has no docstring"
    match = EXAMPLES.search(doc)
    assert match, f"{obj.__qualname__}'s docstring has no numpydoc 'Examples' section"
    assert ">>>" in match.group(1), f"{obj.__qualname__}'s Examples section has no '>>>' example"


@pytest.mark.parametrize("obj", [p for p in _public() if inspect.isclass(p.values[0])])
def test_public_methods_have_docstrings(obj):
    missing = [name for name, fn in _own_methods(obj) if not inspect.getdoc(fn)]
    assert not missing, f"{obj.__qualname__}: public methods without a docstring: {missing}"


def test_api_reference_lists_the_public_api():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    listed = set(re.findall(r"^::: ([\w.]+)$", page, re.MULTILINE))
    wanted = {f"{m.__name__}.{name}" for m in MODULES for name in m.__all__ if name != "__version__"}
    assert not wanted - listed, f"missing from docs/api.md: {sorted(wanted - listed)}"
