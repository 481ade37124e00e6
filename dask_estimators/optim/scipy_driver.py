"""scipy.optimize drivers.  They see only callables on NumPy float64.

A solver is registered with :func:`register` and called as
``solver(objective, x0, tol=, max_iter=, callback=)`` where ``objective`` offers
``fun_and_grad(w)``, ``hessp(w, p)``, ``hess(w)``, and the attributes ``l1``
(strength of an L1 term not included in ``fun_and_grad``), ``penalized``
(boolean mask of the entries the L1 term applies to) and, optionally,
``positive`` (true: those entries must stay non-negative; "lbfgs" only).  ``callback`` is None or
is called once per iteration with an :class:`~scipy.optimize.OptimizeResult`
of ``x``, ``fun``, ``nit``, ``grad_max`` (largest entry of the projected
gradient) and ``time`` (``time.perf_counter()``); the values come from the
evaluations the solver made, so it costs no distributed round.

Registered solvers
------------------
``"lbfgs"``
    L-BFGS-B with ``jac=True``: one distributed round per evaluation.  With
    ``l1 > 0`` it solves the split-variable problem ``w = u - v``,
    ``u, v >= 0``, whose L1 term is linear, so L-BFGS-B's bounds give exact
    zeros.  With ``positive``, ``w = u >= 0`` alone (the L1 term, if any,
    then ``l1 * sum(u)``).
``"newton-cg"``
    scipy's trust-region Newton-CG (``trust-ncg``) with distributed
    Hessian-vector products: per CG step only the direction travels.
``"newton-cholesky"``
    Newton's method with the dense Hessian, tree-summed on the workers and
    factorised (Cholesky, scipy.linalg) on the client, with an Armijo line
    search.  For up to a few thousand parameters.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import linalg, optimize

__all__ = ["SOLVERS", "register", "minimize"]


@dataclass(frozen=True)
class SolverInfo:
    fn: Callable
    supports_l1: bool
    max_params: int | None = None


SOLVERS: dict[str, SolverInfo] = {}


def register(name: str, *, supports_l1: bool = False, max_params: int | None = None):
    """Decorator: add a solver to the registry under ``name``."""

    def deco(fn):
        SOLVERS[name] = SolverInfo(fn, supports_l1, max_params)
        return fn

    return deco


class _Evaluations:
    """``fun_and_grad`` remembering its last few evaluations, so that a per-iteration callback finds the
    objective and gradient at the solver's iterate without another distributed round."""

    def __init__(self, fun_and_grad, keep=4):
        self._fun, self._last = fun_and_grad, deque(maxlen=keep)

    def __call__(self, x):
        f, g = self._fun(x)
        self._last.append((np.array(x, dtype=np.float64, copy=True), f, g))
        return f, g

    def at(self, x):
        for i in range(len(self._last) - 1, -1, -1):
            if np.array_equal(self._last[i][0], x):
                item = self._last[i]
                del self._last[i]
                self._last.append(item)  # kept longest: trust-ncg reports the same iterate after rejected steps
                return item[1], item[2]
        return self._fun(x)  # not reached by scipy's L-BFGS-B and trust-ncg: the iterate was just evaluated


def _iteration(x, f, nit, grad_max):
    return optimize.OptimizeResult(
        x=np.array(x, dtype=np.float64, copy=True), fun=float(f), nit=nit, grad_max=float(grad_max),
        time=time.perf_counter(),
    )  # x copied: L-BFGS-B updates its iterate in place


def _tracked(fun_and_grad, callback, grad_max, params=None, stop=None):
    """``(fun, scipy_callback)`` for ``scipy.optimize.minimize``: with a ``callback``, ``fun`` remembers its last
    evaluations and scipy's per-iteration ``callback(intermediate_result)`` calls ours with the iterate's
    gradient; without one, ``fun_and_grad`` itself and None (nothing kept).  With ``stop``, the scipy
    callback also ends the solve (``StopIteration``) once ``grad_max`` at the iterate is at most ``stop``."""
    if callback is None and stop is None:
        return fun_and_grad, None
    evals = _Evaluations(fun_and_grad)
    count = [0]

    def cb(intermediate_result):
        count[0] += 1
        x = intermediate_result.x
        f, g = evals.at(x)
        gmax = grad_max(x, g)
        if callback is not None:
            callback(_iteration(x if params is None else params(x), f, count[0], gmax))
        if stop is not None and gmax <= stop:
            cb.stopped = True
            raise StopIteration

    cb.stopped = False
    return evals, cb


def _max_abs(x, g):
    return np.max(np.abs(g), initial=0.0)


@register("lbfgs", supports_l1=True)
def _lbfgs(objective, x0, *, tol, max_iter, callback=None):
    # ftol=0: stop on the gradient (``tol``), not on a tiny relative decrease of the objective,
    # which L-BFGS-B otherwise reaches first and stops silently short of ``tol``.
    options = {"maxiter": max_iter, "maxls": 50, "gtol": tol, "ftol": 0.0}
    positive = bool(getattr(objective, "positive", False))
    if objective.l1 == 0.0 and not positive:
        seen = _Finite(objective.fun_and_grad)
        fun, cb = _tracked(seen, callback, _max_abs)
        res = optimize.minimize(fun, x0, method="L-BFGS-B", jac=True, options=options, callback=cb)
        return _newton_polish(objective, res, tol=tol, max_iter=max_iter, callback=callback,
                              budget=None if seen.finite else max_iter)
    pen = objective.penalized
    n_pen = int(pen.sum())
    n_bound = n_pen if positive else 2 * n_pen  # u (and v), each >= 0
    lam = objective.l1

    def split(theta):
        w = np.empty(pen.size)
        w[pen] = theta[:n_pen] if positive else theta[:n_pen] - theta[n_pen:n_bound]
        w[~pen] = theta[n_bound:]
        return w

    def fun(theta):
        f, g = objective.fun_and_grad(split(theta))
        gp = g[pen]
        f = f + lam * float(theta[:n_bound].sum())
        return f, np.concatenate([gp + lam, g[~pen]] if positive else [gp + lam, -gp + lam, g[~pen]])

    x0 = np.asarray(x0, dtype=np.float64)
    u0 = np.maximum(x0[pen], 0)
    theta0 = np.concatenate([u0, x0[~pen]] if positive else [u0, np.maximum(-x0[pen], 0), x0[~pen]])
    bounds = [(0, None)] * n_bound + [(None, None)] * int((~pen).sum())

    def projected_max(theta, g):  # L-BFGS-B's own stopping quantity: the gradient projected on the bounds
        lower = np.concatenate([np.zeros(n_bound), np.full(theta.size - n_bound, -np.inf)])
        return np.max(np.abs(np.maximum(theta - g, lower) - theta), initial=0.0)

    fun, cb = _tracked(fun, callback, projected_max, params=split)
    res = optimize.minimize(fun, theta0, method="L-BFGS-B", jac=True, bounds=bounds, options=options, callback=cb)
    res = _restarted(fun, res, bounds, options, cb, tol=tol, max_iter=max_iter, grad_max=projected_max)
    jac = res.jac  # at res.x: in the split variables, the L1 term's lam included
    res.grad_max = projected_max(res.x, jac)  # the split problem's stopping quantity, for minimize's warning
    res.x = split(res.x)
    res.jac = None
    if positive and getattr(objective, "quadratic", False) and res.x.size <= SOLVERS["newton-cholesky"].max_params:
        g = np.empty(pen.size)
        g[pen], g[~pen] = jac[:n_pen], jac[n_bound:]
        res = _bounded_newton_polish(objective, res, g, pen, lam)
    return res


class _Finite:
    """``fun_and_grad`` that remembers whether every objective it returned was finite (``finite``)."""

    def __init__(self, fun_and_grad):
        self._fun, self.finite = fun_and_grad, True

    def __call__(self, x):
        f, g = self._fun(x)
        if not np.isfinite(f):
            self.finite = False
        return f, g


#: Newton steps of a polish (:func:`_newton_polish`) after L-BFGS-B stopped at the rounding floor.
_POLISH_STEPS = 20

#: Fresh starts of L-BFGS-B on a bounded (L1) problem where it stalled short of ``tol`` (:func:`_restarted`).
_RESTARTS = 10


def _restarted(fun, res, bounds, options, cb, *, tol, max_iter, grad_max):
    """L-BFGS-B started again from where it stopped, with no memory, while it stopped short of ``tol`` (its line
    search found no lower objective along its direction, which its curvature pairs, gathered across the kinks
    of a bounded problem, can point badly) and each start lowers the objective, at most :data:`_RESTARTS` times
    and ``max_iter`` iterations in all."""
    for _ in range(_RESTARTS):
        if getattr(cb, "stopped", False) or grad_max(res.x, res.jac) <= tol or res.nit >= max_iter:
            break
        again = optimize.minimize(fun, res.x, method="L-BFGS-B", jac=True, bounds=bounds,
                                  options=dict(options, maxiter=max_iter - res.nit), callback=cb)
        if not again.fun < res.fun:
            break
        again.nit += res.nit
        again.nfev += res.nfev
        res = again
    return res


def _bounded_newton_polish(objective, res, g, pen, lam):
    """One exact Newton step on the entries L-BFGS-B left off their bound, for a quadratic with ``w[pen] >= 0``.

    L-BFGS-B ends where its projected gradient is under ``tol``, which on a
    quadratic leaves the coefficients ``tol / curvature`` from the solution,
    and two fits of one problem (say one target, and the same target twice
    in a 2-D y) at different such points.  With the bounds that hold at its
    end (the entries at 0 whose gradient pushes outward) the rest of the
    problem is a quadratic without bounds, solved exactly by one Newton step
    (:func:`_least_squares_step` if its Hessian is singular), as
    scikit-learn's ``nnls`` solves it.  The step is kept where it keeps every
    bound and lowers the largest projected gradient (one more distributed
    round for the Hessian and one for the check).  ``g``: the gradient at
    ``res.x`` with the L1 term's ``lam`` on ``pen`` (L-BFGS-B's own, so not
    evaluated again).
    """
    x = res.x
    held = pen & (x <= 0) & (g >= 0)
    free = ~held
    H = objective.hess(x)
    step = np.zeros_like(x)
    Hf, gf = H[np.ix_(free, free)], g[free]
    try:
        step[free] = _cholesky_solve(Hf, -gf)
    except _SINGULAR:
        step[free] = _least_squares_step(Hf, gf, pen[free])
    x_new = np.where(pen, np.maximum(x + step, 0.0), x + step)
    if np.any(pen & (x + step < -1e-12 * np.maximum(1.0, np.abs(x)))):
        return res  # the bounds that hold changed: L-BFGS-B's point stays
    f_new, g_new = objective.fun_and_grad(x_new)
    g_new = g_new + lam * pen

    def projected(x, g):
        return np.max(np.abs(np.where(pen, np.maximum(x - g, 0.0), x - g) - x), initial=0.0)

    if not projected(x_new, g_new) < projected(x, g):
        return res
    res.x, res.fun = x_new, f_new + lam * float(x_new[pen].sum())
    res.nfev = res.get("nfev", 0) + 2
    res.message = f"{res.message}; then one exact Newton step on the entries off their bound"
    return res


def _newton_polish(objective, res, *, tol, max_iter, callback=None, budget=None):
    """Finish with Newton steps where a solver stopped short of ``tol`` on a problem small enough for a dense Hessian.

    The result is kept only when it has a smaller gradient.  L-BFGS-B (and
    trust-ncg's model) need to see the objective decrease, which float64 stops
    resolving at max |gradient| of roughly ``sqrt(eps * |f| * curvature)``
    (about 1e-9 to 1e-10 on standardised data).  Newton's step uses the
    gradient and the Hessian, so it converges past that point: two fits of the
    same objective (say weighted and repeated data) then agree to rounding
    instead of to the solver's stopping point.  The polish's iterations reach
    ``callback`` (numbered on from the solver's) only when its result is kept.

    It takes at most :data:`_POLISH_STEPS` steps, or ``budget`` (the rest of ``max_iter``) where L-BFGS-B met a
    non-finite objective: its line search gives up at a trial point outside the objective's domain (an identity
    link's mean at or below zero) and stops there reporting convergence, possibly at its first iterate, while
    Newton's line search backtracks into the domain.
    """
    g = res.get("jac")
    info = SOLVERS["newton-cholesky"]
    if g is None or np.max(np.abs(g), initial=0.0) <= tol or res.nit >= max_iter or res.x.size > info.max_params:
        return res
    steps = []
    # Newton's steps do not depend on the variables (affine invariance): on a centred objective they are taken
    # in the wrapped one's, whose Hessian the kernels form directly; J^T H J formed from it on the client lost
    # the digits a column of mean 1e6 cancels, and the steps went round for max_iter
    centred = _centred_wrapper(objective)
    inner = objective if centred is None else centred.objective
    x = res.x if centred is None else centred.to_inner(res.x)
    polish = info.fn(inner, x, tol=tol, max_iter=min(budget or _POLISH_STEPS, max_iter - res.nit),
                     callback=None if callback is None else steps.append, fallback=False)
    if centred is not None:
        polish.x, polish.jac = centred.from_inner(polish.x), centred._pull_back(polish.jac)
        for step in steps:
            step.x = centred.from_inner(step.x)
    if not np.max(np.abs(polish.jac), initial=0.0) < np.max(np.abs(g)):
        return res
    for step in steps:
        step.nit += res.nit
        callback(step)
    polish.nit += res.nit
    polish.nfev += res.nfev
    polish.message = f"{res.message}; then {polish.message.lower()} (Newton polish)"
    return polish


def _centred_wrapper(objective):
    """The :class:`~dask_estimators.objectives.centred.CentredObjective` ``objective`` is (printed or not), or
    None."""
    from ..objectives.centred import CentredObjective

    objective = getattr(objective, "_objective", objective) if isinstance(objective, _Printing) else objective
    return objective if isinstance(objective, CentredObjective) else None


#: trust-ncg's initial and largest trust radius (see _newton_cg).
_TRUST0, _TRUST_MAX = 1e3, 1e8


class _CGBreakdown(Exception):
    """The conjugate-gradient inner loop of trust-ncg met a non-finite product or ran past its budget."""


@register("newton-cg")
def _newton_cg(objective, x0, *, tol, max_iter, callback=None):
    """scipy's trust-ncg, guarded: its inner CG loop has no iteration limit and, on a badly scaled problem,
    can loop forever once a Hessian-vector product overflows.  A non-finite product, a non-finite CG iterate
    (which scipy's norm refuses), or more products than ``max_iter * (2 * n_params + 10)``, ends the solve at
    the best point seen (status 2).

    It stops, as scikit-learn's newton-cg and L-BFGS-B do, once the largest absolute entry of the gradient
    is at most ``tol``, tested at the start too; trust-ncg's own ``gtol`` bounds the gradient's Euclidean
    norm, which over 2^20 parameters is about a thousand times the largest entry.  The trust region starts
    at radius ``_TRUST0``, not scipy's 1: from 1 it grew by one doubling an iteration, which took most of
    the iterations on a large sparse problem (docs/design-measurements.md; ``benchmarks/bench_sparse.py``).  A
    rejected step shrinks it fourfold."""
    best = {"f": np.inf, "x": np.asarray(x0, dtype=np.float64).copy(), "g": None, "nfev": 0}
    budget = max_iter * (2 * np.size(x0) + 10)
    n_hessp = [0]

    def fun_and_grad(w):
        f, g = objective.fun_and_grad(w)
        best["nfev"] += 1
        if np.isfinite(f) and f < best["f"]:
            best.update(f=f, x=np.array(w, dtype=np.float64), g=np.array(g))
        return f, g

    def hessp(w, p):
        n_hessp[0] += 1
        hp = objective.hessp(w, p)
        if n_hessp[0] > budget or not np.all(np.isfinite(hp)):
            raise _CGBreakdown
        return hp

    # The test at the start, as scikit-learn's: a warm start at a solution takes no step.  The evaluation
    # is kept for trust-ncg's own first call at x0 (no second round).
    x0 = np.asarray(x0, dtype=np.float64)
    f0, g0 = fun_and_grad(x0)
    if _max_abs(x0, g0) <= tol:
        return optimize.OptimizeResult(x=x0.copy(), fun=f0, jac=g0, nit=0, nfev=1, status=0, success=True,
                                       message="The largest absolute gradient entry is at most tol at the start.")
    start = [(x0.copy(), f0, g0)]

    def first_from_start(w):
        if start:
            x, f, g = start.pop()
            if np.array_equal(w, x):
                return f, g
        return fun_and_grad(w)

    try:
        fun, cb = _tracked(first_from_start, callback, _max_abs, stop=tol)
        res = optimize.minimize(
            fun, x0, method="trust-ncg", jac=True, hessp=hessp,
            options={"maxiter": max_iter, "gtol": tol, "initial_trust_radius": _TRUST0, "max_trust_radius": _TRUST_MAX},
            callback=cb,
        )
        if cb.stopped:  # our stop (see above), which scipy reports as a callback's request (status 99)
            res.update(success=True, status=0,
                       message="Optimization terminated successfully (largest absolute gradient entry at most tol).")
    except (_CGBreakdown, ValueError) as e:
        # scipy's own finiteness check inside the CG loop (its norm of an iterate that overflowed, after r.r
        # did) is the same breakdown, met before any product was non-finite; any other ValueError is not
        if isinstance(e, ValueError) and "must not contain infs or NaNs" not in str(e):
            raise
        res = optimize.OptimizeResult(
            x=best["x"], fun=best["f"], jac=best["g"], nit=0, nfev=best["nfev"], status=2, success=False,
            message="The conjugate-gradient steps broke down (a non-finite or endless Hessian product).",
        )
    return _newton_polish(objective, res, tol=tol, max_iter=max_iter, callback=callback)


@register("newton-cholesky", max_params=5000)
def _newton_cholesky(objective, x0, *, tol, max_iter, callback=None, fallback=True):
    """Newton's method: dense Hessian (one distributed round), Cholesky solve on the client, Armijo backtracking.

    As scikit-learn's ``NewtonCholeskySolver``, and stopping where it stops:
    max |gradient| under ``tol`` and half the last Newton decrement
    (``step @ H @ step / 2``, the full step at the last Hessian) under ``tol``
    too (the start, and a quadratic, on the gradient alone); a quadratic
    (least squares) converges in one step.  Entries of ``objective.newton_fixed`` (a mask,
    when the objective has one) are a known null direction of the Hessian,
    such as one class's intercept of a multinomial model, and are not
    moved.  A singular or very ill-conditioned Hessian
    (collinear features, more features than samples, no penalty) takes the
    least-squares Newton step on a quadratic (``objective.quadratic``); on
    any other objective it warns (``LinAlgWarning``) and goes on with L-BFGS
    from where it is, as scikit-learn does, with the iterations that remain
    less one, and the result then carries ``solver="lbfgs"``.
    """
    x = np.asarray(x0, dtype=np.float64).copy()
    # entries the objective does not depend on (a known null space of its Hessian) stay where they are
    fixed = getattr(objective, "newton_fixed", None)
    free = np.ones(x.size, dtype=bool) if fixed is None else ~np.asarray(fixed, dtype=bool)
    f, g = objective.fun_and_grad(x)
    # steps in a row at float64's floor that neither decreased f nor brought max |gradient| below its best
    stalled, best_g = 0, np.max(np.abs(g), initial=0.0)
    nit, nfev, status, message = 0, 1, 1, "Maximum number of iterations reached."
    decrement = 0.0  # half the last Newton decrement, step @ H @ step / 2 (scikit-learn's second test)
    while True:
        if np.max(np.abs(g), initial=0.0) <= tol and decrement <= tol:
            status, message = 0, "Gradient below tol."
            break
        if nit >= max_iter:
            break
        if nit >= _QUADRATIC_STEPS and getattr(objective, "quadratic", False) and fallback:
            # a quadratic's Newton step lands on its minimum: still short of tol after these, its Hessian is
            # too ill-conditioned for float64 (a column of mean 1e6 and spread 1e-3: the centred Gram lost to
            # rounding in the Schur complement), and more Newton steps only go round
            return _fallback_lbfgs(objective, x, f"{nit} Newton steps on the least-squares problem ended "
                                   f"{np.max(np.abs(g), initial=0.0):.3g} from its minimum (max |gradient|)",
                                   nit=nit, nfev=nfev, tol=tol, max_iter=max_iter, callback=callback)
        H = objective.hess(x)
        if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
            raise FloatingPointError(
                "Solver 'newton-cholesky' met a non-finite objective, gradient or Hessian; "
                "check the scale of the data and the penalty."
            )
        try:
            step = np.zeros_like(g)
            step[free] = _cholesky_solve(H[np.ix_(free, free)], -g[free])
        except _SINGULAR as e:
            if not getattr(objective, "quadratic", False):
                if not fallback:  # a polish (see _newton_polish) just stops here
                    status, message = 2, f"Singular Hessian: {e}"
                    break
                return _fallback_lbfgs(objective, x, e, nit=nit, nfev=nfev, tol=tol, max_iter=max_iter,
                                       callback=callback)
            step = _least_squares_step(H, g, getattr(objective, "penalized", None))
        slope = float(g @ step)
        if not slope < 0:  # not a descent direction: use the gradient
            step, slope = -g, -float(g @ g)
        if not getattr(objective, "quadratic", False):  # a quadratic's Newton step lands on its minimum
            decrement = 0.5 * float(step @ H @ step)
        t = 1.0
        g_l1 = np.abs(g).sum()
        for _ in range(40):
            f_new, g_new = objective.fun_and_grad(x + t * step)
            nfev += 1
            if f_new <= f + 1e-4 * t * slope:
                break
            # At the rounding floor of f the Armijo test cannot pass; accept a step
            # that keeps f within rounding and shrinks the gradient (as scikit-learn does).
            if abs(f_new - f) <= 1e2 * np.finfo(float).eps * abs(f) and np.abs(g_new).sum() < g_l1:
                break
            t *= 0.5
        else:
            status, message = 2, "Line search failed to decrease the objective."
            break
        nit += 1
        small_change = f - f_new <= 64 * np.finfo(float).eps * max(1.0, abs(f))
        g_new_max = np.max(np.abs(g_new), initial=0.0)
        # a full step that changes nothing, or a step cut back to no change of f at all, is the floor; a step cut
        # back that still lowers f (a domain's edge) is slow headway
        stalled = stalled + 1 if small_change and (t == 1.0 or f_new == f) and g_new_max >= best_g else 0
        best_g = min(best_g, g_new_max)
        x, f, g = x + t * step, f_new, g_new
        if callback is not None:
            callback(_iteration(x, f, nit, np.max(np.abs(g), initial=0.0)))
        if small_change and np.max(np.abs(g), initial=0.0) <= max(tol, 1e-10):
            status, message = 0, "Objective stopped decreasing."
            break
        if stalled >= _STALLED_STEPS and not (getattr(objective, "quadratic", False) and fallback):
            # at float64's floor short of tol (a tol of 1e-9 on counts in the thousands): more steps go round
            # for max_iter; the caller warns that it stopped short of tol
            status, message = 2, "Objective and gradient stopped decreasing (float64's rounding floor)."
            break
    return optimize.OptimizeResult(
        x=x, fun=f, jac=g, nit=nit, nfev=nfev, status=status, success=status == 0, message=message
    )


#: Newton steps on a quadratic before an ill-conditioned one goes on with L-BFGS (one lands on the minimum, a
#: second takes up rounding)
_QUADRATIC_STEPS = 3

#: Newton steps in a row at float64's floor, neither decreasing f nor bringing max |gradient| below its best
#: (a slow but steady descent, a step cut back at a domain's edge, goes on), that end a solve
_STALLED_STEPS = 5

#: What :func:`_cholesky_solve` raises for a singular or very ill-conditioned matrix.
_SINGULAR = (linalg.LinAlgError, linalg.LinAlgWarning, ValueError)


def _cholesky_solve(H, rhs):
    """``H^-1 rhs`` for a symmetric positive definite ``H`` (Cholesky); one of :data:`_SINGULAR` where ``H`` is
    singular or so ill-conditioned that scipy warns (its ``LinAlgWarning``, raised here).

    ``H`` is first scaled to a unit diagonal (``D^-1/2 H D^-1/2``): columns of very different scales (one in
    units of 1e8 beside unit ones) made a well-posed ridge's Hessian look singular to LAPACK's condition
    estimate (1e-17), and the least-squares step then cut the small columns' directions as a null space.
    Scaled, the estimate is of the columns' collinearity alone.
    """
    d = np.sqrt(np.diag(H))
    if np.all(np.isfinite(d)) and np.all(d > 0):
        return _cholesky_solve_unscaled(H / d[:, None] / d[None, :], rhs / d) / d
    return _cholesky_solve_unscaled(H, rhs)


def _cholesky_solve_unscaled(H, rhs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", linalg.LinAlgWarning)
        return linalg.solve(H, rhs, assume_a="pos", check_finite=False)


def _least_squares_step(H, g, coef=None):
    """The Newton step of a quadratic with a singular Hessian ``H``: of the steps to its minimum, the one that
    changes the coefficients (entries where ``coef`` is true) least, the others (the intercepts) free.

    From zero coefficients that is scikit-learn's least-squares solution, the minimum-norm coefficients of
    the problem centred on the (weighted) means.  The intercepts are eliminated first (``H``'s Schur
    complement on the coefficients: the centred Gram matrix); without a mask, the minimum-norm step.
    Eigenvalues under ``n * eps`` of the largest count as zero (numpy's rank rule): a Gram matrix made in
    float64 holds rounding of about ``eps`` times its largest entry where the data has a null direction,
    which LAPACK's own cut (``eps``) kept, giving steps of any size along it.  The cut is on the symmetric
    eigenvalues (``eigh``): ``lstsq``'s, on its own singular values, fell on either side of it for two
    Hessians equal to rounding.
    """
    if coef is None or coef.all() or not coef.any():
        return -_pinv_solve(H, g)
    c, b = np.asarray(coef, dtype=bool), ~np.asarray(coef, dtype=bool)
    H_cb = H[np.ix_(c, b)]
    # s_b = -H_bb^-1 (g_b + H_bc s_c): H_bb holds the weights' sums, positive
    bb_inv = linalg.solve(H[np.ix_(b, b)], np.column_stack([g[b], H_cb.T]), assume_a="pos", check_finite=False)
    step = np.empty_like(g)
    step[c] = -_pinv_solve(H[np.ix_(c, c)] - H_cb @ bb_inv[:, 1:], g[c] - H_cb @ bb_inv[:, 0])
    step[b] = -(bb_inv[:, 0] + bb_inv[:, 1:] @ step[c])
    return step


def _pinv_solve(A, r):
    """The minimum-norm solution of ``A x = r`` for a symmetric positive semi-definite ``A``: eigenvalues under
    ``n * eps`` of the largest taken as zero."""
    w, V = linalg.eigh((A + A.T) / 2, check_finite=False)
    keep = w > max(A.shape) * np.finfo(np.float64).eps * max(float(w[-1]), 0.0)
    Vk = V[:, keep]
    return Vk @ ((Vk.T @ r) / w[keep])


def _fallback_lbfgs(objective, x, error, *, nit, nfev, tol, max_iter, callback):
    """Newton-Cholesky met a singular Hessian at iteration ``nit + 1``: warn, and finish with L-BFGS from ``x``."""
    warnings.warn(
        # scikit-learn's opening words (users match on them): its Newton-Cholesky solver's class name
        f"The inner solver of NewtonCholeskySolver stumbled upon a singular or very ill-conditioned Hessian "
        f"matrix at iteration {nit + 1}. It will now resort to lbfgs instead (newton-cholesky goes on with "
        "lbfgs). Remove collinear features, or increase the penalty (smaller C, larger alpha), to keep Newton's "
        f"steps. The linear algebra said: {error}",
        linalg.LinAlgWarning,
        stacklevel=4,
    )
    # the iteration that met the singular Hessian counts against max_iter, as in scikit-learn
    budget = max(max_iter - nit - 1, 0)
    def shifted(it):  # the iterations L-BFGS counts follow the Newton ones
        it.nit += nit
        callback(it)

    callback = None if callback is None else shifted
    # in centred variables, as "lbfgs" itself runs (see minimize)
    printing = isinstance(objective, _Printing)
    centred = _centred(objective._objective if printing else objective, "lbfgs", x)
    if centred is None:
        res = SOLVERS["lbfgs"].fn(objective, x, tol=tol, max_iter=budget, callback=callback)
    else:
        res = _solve_centred(centred, SOLVERS["lbfgs"].fn, x, callback, printing, tol=tol, max_iter=budget)
    res.used_all_iterations = not res.success and res.nit >= budget
    res.nit += nit
    res.nfev = res.get("nfev", 0) + nfev
    res.solver = "lbfgs"
    return res


class _Printing:
    """``objective`` with each evaluation printed (``verbose``): its number, value and largest gradient entry."""

    def __init__(self, objective):
        self._objective, self._n = objective, 0

    def __getattr__(self, name):
        return getattr(self._objective, name)

    def fun_and_grad(self, w):
        f, g = self._objective.fun_and_grad(w)
        self._n += 1
        print(f"evaluation {self._n}: objective {f:.10g}, max |gradient| {np.max(np.abs(g), initial=0.0):.3g}",
              flush=True)
        return f, g


def _no_iteration(objective, x0):
    """The result of ``max_iter=0``: the starting point, evaluated once, not converged."""
    f, g = objective.fun_and_grad(x0)
    if objective.l1:
        f = f + objective.l1 * float(np.abs(x0[objective.penalized]).sum())
        g = None  # the L1 term has no gradient at zero
    return optimize.OptimizeResult(
        x=x0.copy(), fun=float(f), jac=g, nit=0, nfev=1, status=1, success=False,
        message="max_iter=0: no iteration taken.",
    )


def check_solver(solver: str, *, l1: float, n_params: int, positive: bool = False) -> SolverInfo:
    """Return the registry entry for ``solver`` or raise a clear ``ValueError``."""
    try:
        info = SOLVERS[solver]
    except KeyError:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {solver!r}.") from None
    if positive and solver != "lbfgs":
        raise ValueError(f"Solver {solver!r} does not support positive=True; use solver='lbfgs' (or 'auto').")
    if l1 > 0 and not info.supports_l1:
        supported = sorted(k for k, v in SOLVERS.items() if v.supports_l1)
        raise ValueError(
            f"Solver {solver!r} supports only the L2 penalty (l1_ratio=0); use one of {supported} for "
            "L1 or elastic-net penalties."
        )
    if info.max_params is not None and n_params > info.max_params:
        raise ValueError(
            f"Solver {solver!r} forms a dense Hessian and supports at most {info.max_params} parameters; "
            f"this problem has {n_params}. Use 'lbfgs' or 'newton-cg'."
        )
    return info


class ConvergenceNote(UserWarning):
    """The solvers' ``ConvergenceWarning`` in a process that has not imported scikit-learn (a worker running a
    small fit's or search's solver): the client raises it again as scikit-learn's (``solve_on_shard``'s
    callers, :func:`dask_estimators.session.warn_again`)."""


def _convergence_warning():
    """scikit-learn's ``ConvergenceWarning`` where scikit-learn is imported, else :class:`ConvergenceNote`.

    This module also runs on workers (a small fit's solver, a small search's
    paths, and engine.ddp.train through optim), which do not import scikit-learn:
    importing it for a warning would weigh on a worker's first unconverged
    fit (benchmarks/results/history/small-linear-fits.md).
    """
    import sys

    if "sklearn" not in sys.modules:
        return ConvergenceNote
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning


def _grad_max(res) -> float:
    """The solver's own stopping quantity at its end: max |gradient|, or the bounded problem's projected gradient
    (``grad_max``, an L1 fit's); 0 where the result carries neither."""
    if res.get("grad_max") is not None:
        return float(res.grad_max)
    jac = res.get("jac")
    return 0.0 if jac is None else float(np.max(np.abs(jac), initial=0.0))


#: The solvers whose path a linear model's uncentred columns slow down: they run in centred variables
CENTRED_SOLVERS = frozenset({"lbfgs", "newton-cg"})


def _centred(objective, solver, x0):
    """``objective`` in centred variables (:mod:`~dask_estimators.objectives.centred`), or None.

    For a linear objective that asks for it (``centre_intercepts``, set by an estimator's own fit and by a
    search's splits, :class:`~dask_estimators.optim.cv_paths.FoldProblem`; a lockstep run's stand-in passes
    its objective's on), with (unpenalised) intercepts and a solver of :data:`CENTRED_SOLVERS`.  The mean rows
    are found once per objective (one more round, two where ``x0`` was not its last point) and kept on it; a
    search's split gives its own finder (``_row_means_from``: every split's from one round).
    """
    from ..objectives.centred import CentredObjective, row_means

    spec = getattr(objective, "spec", None)
    if (solver not in CENTRED_SOLVERS or spec is None or not getattr(objective, "centre_intercepts", False)
            or not spec.fit_intercept):
        return None
    first = None
    if "_row_means" not in objective.__dict__:
        found = getattr(objective, "_row_means_from", None)
        if found is not None:
            objective._row_means = found(objective)
        else:
            objective._row_means, first = row_means(objective, x0)
    if objective._row_means is None:
        return None
    # a start with zero coefficients is the point the mean rows were found at: its evaluation is not made again
    return CentredObjective(objective, objective._row_means, first=first)


def _solve_centred(centred, fn, x, callback, printing, **kw):
    """A registered solver's ``fn`` run on ``centred`` (printed where ``printing``) from ``x``, both in the
    wrapped objective's variables: the callback gets each iteration's ``x`` in them, and the result's ``x``
    comes back in them (its gradient stays the solver's)."""
    res = fn(_Printing(centred) if printing else centred, centred.from_inner(x),
             callback=_inner_callback(callback, centred), **kw)
    res.x = centred.to_inner(res.x)
    return res


def _inner_callback(callback, centred):
    """``callback`` given each iteration's ``x`` in the wrapped objective's variables."""
    if callback is None:
        return None

    def inner(iteration):
        iteration = copy.copy(iteration)
        iteration.x = centred.to_inner(iteration.x)
        return callback(iteration)

    return inner


def minimize(objective, x0, *, solver="lbfgs", tol=1e-4, max_iter=100, warn=True, verbose=0, callback=None):
    """Minimise ``objective`` from ``x0`` with a registered solver.

    Returns the :class:`scipy.optimize.OptimizeResult`.  ``max_iter=0`` takes
    no step: the result is ``x0`` (one evaluation, for the objective value)
    with ``nit == 0``, as scikit-learn's solvers return their starting point.
    ``callback``, when given, is called after each iteration (``nit`` times in
    all) with an :class:`~scipy.optimize.OptimizeResult` of ``x``, ``fun``,
    ``nit``, ``grad_max`` and ``time``, for example an
    :class:`~dask_estimators._progress.IterationLog`.  ``verbose``
    prints a line when the solver ends, and with ``verbose >= 2`` each
    evaluation of the objective (one distributed round) as well.  A ``ConvergenceWarning``
    is raised when the solver stops at ``max_iter`` (``max_iter=0`` included), or stops short of ``tol``
    (max |gradient|) because the objective no longer decreases in floating
    point (``warn`` False: none; a list: its ``(category, message)`` appended
    there instead); a non-finite objective
    raises ``FloatingPointError``.

    Examples
    --------
    >>> res = minimize(objective, np.zeros(objective.n_params), solver="lbfgs")  # doctest: +SKIP
    >>> res.x, res.nit  # doctest: +SKIP
    """
    x0 = np.asarray(x0, dtype=np.float64)
    positive = bool(getattr(objective, "positive", False))
    info = check_solver(solver, l1=objective.l1, n_params=x0.size, positive=positive)
    centred = _centred(objective, solver, x0) if max_iter else None
    printed = _Printing(objective) if verbose >= 2 else objective
    with np.errstate(invalid="ignore", over="ignore"):
        if max_iter == 0:
            res = _no_iteration(printed, x0)
        elif centred is not None:
            res = _solve_centred(centred, info.fn, x0, callback, verbose >= 2, tol=tol, max_iter=max_iter)
        else:
            res = info.fn(printed, x0, tol=tol, max_iter=max_iter, callback=callback)
    if verbose:
        print(f"{solver}: {res.nit} iteration(s), {res.get('nfev', 0)} evaluation(s), objective {res.fun:.10g}: "
              f"{res.message}", flush=True)
    if not np.all(np.isfinite(res.x)) or not np.isfinite(res.fun):
        raise FloatingPointError(
            f"Solver {solver!r} produced a non-finite objective or parameters; "
            "check the scale of the data and the penalty."
        )
    keep = isinstance(warn, list)  # an empty list is falsy, and still asks for the warnings
    message = None
    if (keep or warn) and not res.success and (res.nit >= max_iter or res.get("used_all_iterations", False)):
        # scikit-learn's wording for each solver (code and users match on it)
        used = res.get("solver", solver)  # newton-cholesky may have gone on with lbfgs
        head = (f"Newton solver did not converge after {res.nit} iterations" if used == "newton-cholesky"
                else f"{used} failed to converge after {res.nit} iteration(s)")
        message = f"{head} (max_iter={max_iter}). Increase the number of iterations (max_iter) or scale the data."
    elif (keep or warn) and _grad_max(res) > tol:
        # the solver ended where it could no longer decrease the objective in float64, short of tol
        message = (f"{res.get('solver', solver)} stopped after {res.nit} iteration(s) short of tol = {tol:g}: max |gradient| = "
                   f"{_grad_max(res):.3g} where the objective no longer decreased in floating point "
                   f"({res.message}). Increase tol, or scale the data.")
    if message is not None:
        if keep:  # for the caller to raise (a run in a thread of its own)
            warn.append((_convergence_warning(), message))
        else:
            warnings.warn(message, _convergence_warning(), stacklevel=3)
    return res
