"""What a fit shows while it runs: one line per iteration (``verbose``), a tqdm bar (``progress=True``).

Both are client-side only and need neither torch nor the cluster.  tqdm is
optional (the ``progress`` extra); asking for a bar without it is an
``ImportError`` that says what to install.
"""

from __future__ import annotations

import sys
import time

__all__ = ["IterationLog", "check_progress", "progress_bar"]

_NO_TQDM = (
    "progress=True shows a tqdm progress bar, but tqdm is not installed. Install it with "
    "`pip install tqdm` (or `pip install dask-estimators[progress]`), or leave progress=False."
)


def check_progress(progress) -> None:
    """Raise the ``ImportError`` of a missing tqdm when ``progress`` is true; do nothing otherwise.

    Called at the start of a fit, before any cluster starts.

    Parameters
    ----------
    progress : bool
        The estimator's ``progress`` parameter.

    Examples
    --------
    >>> check_progress(False)  # never needs tqdm
    """
    if progress:
        try:
            import tqdm  # noqa: F401
        except ImportError as e:
            raise ImportError(_NO_TQDM) from e


def progress_bar(total, desc, unit):
    """A tqdm bar on stderr (``tqdm.auto``: a widget in notebooks).

    Parameters
    ----------
    total : int
        The number of steps it counts to (``max_iter``, ``max_epochs``).
    desc : str
        Its label, for example the estimator's class name.
    unit : str
        What one step is: ``"it"`` (solver iteration) or ``"epoch"``.

    Returns
    -------
    tqdm.tqdm

    Raises
    ------
    ImportError
        When tqdm is not installed, with the command that installs it.
    """
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError(_NO_TQDM) from e
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=True, dynamic_ncols=True)


class IterationLog:
    """A solver callback: each iteration printed (``verbose``) and counted on a bar (``progress``).

    It is called by :func:`~dask_estimators.optim.minimize` once per solver
    iteration with an :class:`~scipy.optimize.OptimizeResult` holding ``nit``
    (the iteration number), ``fun`` (the objective), ``grad_max`` (the
    largest entry of the projected gradient, the quantity ``tol`` bounds) and
    ``time`` (``time.perf_counter()`` when the iteration ended).  Each line
    reads::

        Iteration 3, objective = 0.3012843711, max |gradient| = 1.204e-03, 0.081 s

    with the seconds counted from ``t0`` (the start of the fit).

    Parameters
    ----------
    verbose : int or bool
        Print one line per iteration when true.
    progress : bool
        Show a tqdm bar of ``total`` iterations when true.
    total : int
        The bar's length (``max_iter``).
    desc : str
        The bar's label.
    t0 : float, optional
        ``time.perf_counter()`` at the start of the fit; now when omitted.

    Examples
    --------
    >>> from scipy.optimize import OptimizeResult
    >>> log = IterationLog(verbose=1, progress=False, total=10, desc="demo", t0=0.0)
    >>> log(OptimizeResult(nit=1, fun=0.5, grad_max=0.01, time=0.25))
    Iteration 1, objective = 0.5, max |gradient| = 1.000e-02, 0.250 s
    >>> log.close()
    """

    def __init__(self, verbose, progress, total, desc, t0=None):
        self.verbose = verbose
        self.t0 = time.perf_counter() if t0 is None else t0
        self.bar = progress_bar(total, desc, "it") if progress else None

    def __call__(self, intermediate_result):
        r = intermediate_result
        seconds = r.get("time", time.perf_counter()) - self.t0
        if self.bar is not None:
            self.bar.update(max(int(r.nit) - self.bar.n, 1) if "nit" in r else 1)  # a call may cover several
            self.bar.set_postfix(objective=f"{r.fun:.6g}", refresh=False)
        if self.verbose:
            line = (
                f"Iteration {r.nit}, objective = {r.fun:.10g}, max |gradient| = {r.grad_max:.3e}, {seconds:.3f} s"
            )
            if self.bar is not None:
                self.bar.write(line, file=sys.stdout)
            else:
                print(line, flush=True)

    def close(self):
        """Close the bar (if any)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
