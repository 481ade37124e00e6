"""Prefetch hints for the numba kernels: ask the memory system for data a loop reads a little later.

A kernel that walks its rows in an order the hardware prefetchers cannot
follow (several streams at once in the linear kernels, a random permutation
in the SVMs' dual passes) waits on each row's loads; asking for the rows a
few steps ahead overlaps those waits with the work on the rows at hand.  A
prefetch reads nothing into the program and cannot fault, so asking past an
array's end is harmless; the helpers here still ask only within it.

Imports numba: the kernels that are compiled lazily (:func:`.._jit.lazy_njit`)
name these through :func:`.._jit.lazy_global`.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .._jit import njit  # numba's njit, cached on disk

__all__ = ["prefetch", "prefetch_row", "prefetch_rows", "prefetch_span"]


def _ask(context, builder, sig, args):
    """Emit ``llvm.prefetch`` (read, keep in every cache level, data) of the element ``args[1:]`` of ``args[0]``."""
    from llvmlite import ir

    aryty = sig.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    index = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], sig.args[1:])]
    ptr = cgutils.get_item_pointer(context, builder, aryty, ary, index, wraparound=False)
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    name = "llvm.prefetch.p0" if str(i8p) == "ptr" else "llvm.prefetch.p0i8"  # opaque or typed pointers
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), name)
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
    return context.get_dummy_value()


@intrinsic
def prefetch(typingctx, a, i):  # pragma: no cover - numba
    """Ask for the cache line of ``a[i]`` (a 1-D array; ``i`` in range)."""
    if not isinstance(a, types.Array) or a.ndim != 1 or not isinstance(i, types.Integer):
        return None
    return types.void(a, i), _ask


@intrinsic
def _prefetch2(typingctx, a, i, j):  # pragma: no cover - numba
    """Ask for the cache line of ``a[i, j]`` (a 2-D array; the indices in range)."""
    if not isinstance(a, types.Array) or a.ndim != 2 or not isinstance(i, types.Integer):
        return None
    return types.void(a, i, j), _ask


_inline = njit(nogil=True, boundscheck=False, inline="always")


@_inline
def prefetch_row(A, i):  # pragma: no cover - numba
    """Ask for every cache line of row ``i`` of the C-contiguous 2-D ``A`` (``i`` in range)."""
    step = max(1, 64 // A.itemsize)
    for j in range(0, A.shape[1], step):
        _prefetch2(A, i, j)


@_inline
def prefetch_rows(A, i, i2):  # pragma: no cover - numba
    """Ask for every cache line of rows ``i`` and ``i2`` of the C-contiguous 2-D ``A``, where ``i2`` is a row of
    it (``i < i2``); nothing for an empty ``A`` or past its last row."""
    if i2 < A.shape[0]:
        step = max(1, 64 // A.itemsize)
        for j in range(0, A.shape[1], step):
            _prefetch2(A, i, j)
            _prefetch2(A, i2, j)


@_inline
def prefetch_span(a, lo, hi):  # pragma: no cover - numba
    """Ask for every cache line of ``a[lo:hi]`` (1-D; ``0 <= lo <= hi <= a.shape[0]``)."""
    step = max(1, 64 // a.itemsize)
    for j in range(lo, hi, step):
        prefetch(a, j)
    if hi > lo:
        prefetch(a, hi - 1)  # the last line, where the steps from lo skip past it
