"""Optimisation drivers: they see callables on NumPy float64, never Dask."""

from .scipy_driver import SOLVERS, minimize, register

__all__ = ["SOLVERS", "minimize", "register"]
