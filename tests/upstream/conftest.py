"""Run scikit-learn's own test modules against our estimators (see docs/fidelity.md).

The test files here re-export the installed upstream modules, loaded by
``upstream_loader`` with our estimators in place of scikit-learn's.  This
conftest

- registers the markers and the ``global_random_seed`` parametrization those
  modules expect from scikit-learn's own conftest (reused, not copied);
- keeps the tests that exercise one of our estimators, skips the ones that do
  not apply and marks the ones that fail because of our defects
  (``upstream_skips``);
- prints the per-module counts at the end of the run (and writes them as JSON
  to ``$UPSTREAM_REPORT_JSON`` when set).  Under pytest-xdist the workers
  collect and run, and ``tests/conftest.py`` loads this file into the
  controller too, which merges the workers' parts and prints them.

The tests run on the session's LocalCluster of ``tests/conftest.py``.
"""

from __future__ import annotations

import collections
import inspect
import json
import os
import re
import types
from pathlib import Path

import pytest
from sklearn.base import BaseEstimator
from sklearn.conftest import pytest_generate_tests  # noqa: F401  (global_random_seed, as upstream)

from upstream_loader import TARGETS
from upstream_skips import SKIPS, UPSTREAM_XFAILS_OURS_PASS, XFAILS

HERE = Path(__file__).parent
NOT_OURS = "other estimators"


def pytest_configure(config):
    # markers scikit-learn's conftest registers when pytest-run-parallel is absent
    for line in [
        "thread_unsafe: (scikit-learn) run the test single-threaded",
        "parallel_threads(n): (scikit-learn) run the test in n threads",
        "iterations(n): (scikit-learn) run the test n times per thread",
    ]:
        config.addinivalue_line("markers", line)


def _upstream_module(item) -> str | None:
    if not isinstance(item, pytest.Function) or HERE not in item.path.parents:
        return None
    module = getattr(item.function, "__module__", None)
    return module if module in TARGETS else None


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _estimator_name(value):
    """The class name of an estimator class or instance among a parameter's values, else None."""
    if isinstance(value, type) and issubclass(value, BaseEstimator):
        return value.__name__
    if isinstance(value, BaseEstimator):
        return type(value).__name__
    return None


def _uses_ours(item, names) -> bool:
    """Whether the test exercises one of ``names``: through its parameters, else through its code."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    found = []
    for value in params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            name = _estimator_name(v)
            if name is not None:
                found.append(name)
    if found:  # parametrized over estimators: ours only if one of them is ours
        return any(n in names for n in found)
    function = inspect.unwrap(item.function)  # the test body, under its decorators
    defaults = function.__defaults__ or ()  # e.g. ``def test_x(classifier=svm.LinearSVC)``
    if any(_estimator_name(v) in names for v in defaults):
        return True
    return bool(_code_names(function.__code__) & names)


def _classify(module, item):
    """("deselect" | "skip" | "xfail" | "run", label, reason) of one upstream test."""
    for rule in SKIPS:  # first: a skip rule also names tests of scikit-learn internals that use no estimator
        if rule.matches(module, item.name):
            return "skip", rule.label, rule.reason
    if not _uses_ours(item, TARGETS[module].names):
        return "deselect", NOT_OURS, None
    for rule in XFAILS:
        if rule.matches(module, item.name):
            return "xfail", rule.label, rule.reason
    return "run", None, None


_CLASSES: dict = {}  # nodeid -> (module, kind, label)
_UNUSED: set = set()  # (module, label, pattern) of the rules that matched no collected test


def _unused_patterns(names_by_module: dict) -> set:
    """Rule patterns that match none of the tests of a fully collected module (stale after an upgrade)."""
    unused = set()
    for rule in SKIPS + XFAILS + UPSTREAM_XFAILS_OURS_PASS:
        for module, patterns in rule.patterns.items():
            names = names_by_module.get(module)
            if names is None:
                continue
            unused |= {(module, rule.label, p) for p in patterns if not any(re.search(p, n) for n in names)}
    return unused


def pytest_collection_modifyitems(config, items):
    kept, deselected = [], []
    names_by_module: dict = {}
    for item in items:
        module = _upstream_module(item)
        if module is None:
            kept.append(item)
            continue
        names_by_module.setdefault(module, []).append(item.name)
        kind, label, reason = _classify(module, item)
        _CLASSES[item.nodeid] = (module, kind, label)
        if kind == "deselect":
            deselected.append(item)
            continue
        if kind == "skip":
            item.add_marker(pytest.mark.skip(reason=f"not applicable ({label}): {reason}"))
        else:
            _strict_upstream_xfails(module, item)
            if kind == "xfail":
                item.add_marker(pytest.mark.xfail(reason=f"defect: {label}", strict=True))  # why: upstream_skips
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    whole = not config.option.keyword and not config.option.markexpr and not any("::" in a for a in config.args)
    _WHOLE[0] = whole
    if whole:  # every test of the collected modules is here
        _UNUSED.update(_unused_patterns(names_by_module))


def _strict_upstream_xfails(module, item) -> None:
    """scikit-learn's own xfail marks on an applicable test: off where ours passes the test
    (``UPSTREAM_XFAILS_OURS_PASS``), else strict, with scikit-learn's reason."""
    marks = [m for m in item.own_markers if m.name == "xfail"]
    if not marks:
        return
    item.own_markers[:] = [m for m in item.own_markers if m.name != "xfail"]
    if any(rule.matches(module, item.name) for rule in UPSTREAM_XFAILS_OURS_PASS):
        return
    for m in marks:
        kwargs = {**m.kwargs, "strict": True}
        kwargs.setdefault("reason", "scikit-learn's own expected failure")
        item.add_marker(pytest.mark.xfail(*m.args, **kwargs))


_OUTCOMES: dict = {}


def pytest_runtest_logreport(report):
    if report.nodeid not in _CLASSES:
        return
    if report.when == "call" or report.outcome != "passed":  # a setup error or skip has no call phase
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        elif report.skipped:  # a skip of an applicable test: the upstream test's own pytest.skip
            outcome = "skipped by the test itself"
        else:
            outcome = report.outcome
        _OUTCOMES.setdefault(report.nodeid, outcome)


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its part goes to the controller, which prints
        workeroutput["upstream"] = json.dumps({"classes": _CLASSES, "outcomes": _OUTCOMES, "unused": sorted(_UNUSED),
                                               "whole": _WHOLE[0]})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The xdist controller (which collects nothing) merges each worker's classes and outcomes."""
    part = getattr(node, "workeroutput", {}).get("upstream")
    if part is None:
        return
    part = json.loads(part)
    _CLASSES.update({nodeid: tuple(c) for nodeid, c in part["classes"].items()})
    _OUTCOMES.update(part["outcomes"])
    _UNUSED.update(tuple(u) for u in part["unused"])
    _WHOLE[0] = bool(part.get("whole"))


def upstream_counts() -> dict:
    """Per upstream module: applicable tests and their outcomes, skips per category, xfails per defect."""
    counts: dict = {}
    for nodeid, (module, kind, label) in _CLASSES.items():
        c = counts.setdefault(
            module,
            {"applicable": 0, "outcomes": collections.Counter(), "skipped": collections.Counter(),
             "xfail": {}, NOT_OURS: 0},
        )
        if kind == "deselect":
            c[NOT_OURS] += 1
        elif kind == "skip":
            c["skipped"][label] += 1
        else:
            c["applicable"] += 1
            outcome = _OUTCOMES.get(nodeid, "not run")  # -k, -x, --collect-only, interrupted
            c["outcomes"][outcome] += 1
            if kind == "xfail":
                c["xfail"].setdefault(label, collections.Counter())[outcome] += 1
    return counts


#: Whether the run collected every test of its upstream modules (no -k, -m or node ids): only such a run's
#: counts may go into docs/fidelity.md.
_WHOLE: list = [False]
BEGIN, END = "<!-- counts: written by tests/upstream/conftest.py; do not edit -->", "<!-- counts end -->"


def _short(module: str) -> str:
    name = module.rsplit(".", 1)[1]
    return f"{name} (svm)" if module == "sklearn.svm.tests.test_sparse" else name


def fidelity_tables(counts: dict) -> str:
    """The Markdown tables of docs/fidelity.md from one run's ``counts`` (:func:`upstream_counts`)."""
    import sklearn

    lines = [
        f"scikit-learn {sklearn.__version__}; written by the run itself "
        "(`UPSTREAM_FIDELITY_MD=docs/fidelity.md`, which `make test-upstream` sets).",
        "",
        "| module | applicable | passed | failed | xfailed | skipped by the test | not applicable | "
        "other estimators (deselected) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    labels: dict = {}
    for module in sorted(counts, key=_short):
        c = counts[module]
        o = c["outcomes"]
        passed = o.get("passed", 0)
        share = f" ({100 * passed / c['applicable']:.0f}%)" if c["applicable"] else ""
        lines.append(
            f"| `{_short(module)}` | {c['applicable']} | {passed}{share} | {o.get('failed', 0)} | "
            f"{o.get('xfailed', 0)} | {o.get('skipped by the test itself', 0)} | {sum(c['skipped'].values())} | "
            f"{c[NOT_OURS]} |"
        )
        for label, n in c["skipped"].items():
            labels.setdefault(label, {})[module] = n
    lines += ["", "Not applicable, per category (the reasons are in the next section):", "",
              "| category | " + " | ".join(f"`{_short(m)}`" for m in sorted(counts, key=_short)) + " |",
              "|---|" + "---|" * len(counts)]
    for label in sorted(labels):
        lines.append(f"| {label} | " + " | ".join(str(labels[label].get(m, "")) for m in sorted(counts, key=_short))
                     + " |")
    lines += ["", "Why each category does not apply (`tests/upstream/upstream_skips.py`):", "",
              "| category | why |", "|---|---|"]
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731 - a pipe inside a table cell
    lines += [f"| {rule.label} | {cell(rule.reason)} |" for rule in SKIPS]
    xfails = [f"| {rule.label} | {cell(rule.reason)} |" for rule in XFAILS]
    lines += ["", "The xfailed column counts scikit-learn's own expected failures (its marks on tests of behaviour "
              "its estimators lack as ours do), made strict; where ours passes such a test, the mark is taken off "
              "(`UPSTREAM_XFAILS_OURS_PASS`).", "",
              "Expected failures that are defects of ours (`xfail(strict=True)`): " + ("none." if not xfails else ""),
              ""]
    if xfails:
        lines += ["| defect | what fails |", "|---|---|", *xfails]
    return "\n".join(lines).rstrip() + "\n"


def write_fidelity_tables(path: Path, counts: dict) -> None:
    """Replace what stands between the markers of ``path`` with :func:`fidelity_tables`."""
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + fidelity_tables(counts) + END + tail)


def _counter_text(counter) -> str:
    return ", ".join(f"{key} {n}" for key, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def pytest_terminal_summary(terminalreporter):
    counts = upstream_counts()
    if not counts:
        return
    tr = terminalreporter
    tr.section("scikit-learn's own tests against dask-estimators (tests/upstream)")
    for module, c in counts.items():
        tr.write_line(module)
        tr.write_line(f"  applicable {c['applicable']}: {_counter_text(c['outcomes'])}")
        tr.write_line(f"  skipped, not applicable {sum(c['skipped'].values())}: {_counter_text(c['skipped'])}")
        if c[NOT_OURS]:
            tr.write_line(f"  deselected, {NOT_OURS} {c[NOT_OURS]}")
        for label, outcomes in sorted(c["xfail"].items(), key=lambda kv: -sum(kv[1].values())):
            tr.write_line(f"  xfail {sum(outcomes.values()):3d}  {label} ({_counter_text(outcomes)})")
    for module, label, pattern in sorted(_UNUSED):
        tr.write_line(f"  stale rule in upstream_skips.py: {label!r} pattern {pattern!r} matches no test of {module}")
    doc = os.environ.get("UPSTREAM_FIDELITY_MD")
    if doc and _WHOLE[0]:
        write_fidelity_tables(Path(doc), counts)
        tr.write_line(f"  the tables of {doc} are this run's counts")
    path = os.environ.get("UPSTREAM_REPORT_JSON")
    if path:
        tests = {nodeid: [kind, label, _OUTCOMES.get(nodeid)] for nodeid, (_, kind, label) in _CLASSES.items()}
        Path(path).write_text(json.dumps({"counts": counts, "tests": tests}, indent=1, sort_keys=True) + "\n")
