"""A test helper: make every way to densify a sparse matrix or tensor raise (``forbid_densify(True)``).

Shared by the sparse tests (tests/ is on ``sys.path`` under pytest, and the
session cluster's spawned workers inherit that path, so ``client.run`` can
send it to them).

The state lives on the patched classes themselves: a refusal carries the
method it replaced, so "on" and "off" read what is installed, not a registry
beside it.  The targets are every class of the public classes' MROs that
defines the method itself: a subclass's own copy (a test that "restored" an
inherited method by assigning it back made one on a worker once) would
otherwise hide a patch of its base, and "on" checks that a CSR matrix then
refuses.
"""

from __future__ import annotations


def _targets():
    """(class, method) pairs to patch: every class in the MRO of scipy.sparse's public matrix and array classes
    that defines ``toarray`` or ``todense`` itself (found from the live classes, not private module paths),
    and ``torch.Tensor.to_dense``."""
    import scipy.sparse as sp
    import torch

    found = {}
    for fmt in ("csr", "csc", "coo", "bsr", "dia", "dok", "lil"):
        for kind in ("matrix", "array"):
            for owner in getattr(sp, f"{fmt}_{kind}").__mro__:
                for name in ("toarray", "todense"):
                    if name in owner.__dict__:
                        found[(owner, name)] = None
    return [*found, (torch.Tensor, "to_dense")]


def _refusal(name: str, original):
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{name} was called: a sparse matrix was densified")

    refuse.replaced = original  # None: the class had no method of its own (it inherited one)
    return refuse


def forbid_densify(on: bool) -> bool:
    """Make ``toarray``/``todense`` of scipy.sparse and ``torch.Tensor.to_dense`` raise ``AssertionError``
    in this process (``on``), or restore them; returns True (for ``client.run``).

    Idempotent both ways; "on" checks that a CSR matrix then refuses to densify."""
    for owner, name in _targets():
        current = owner.__dict__.get(name)
        installed = current is not None and hasattr(current, "replaced")
        if on and not installed:
            setattr(owner, name, _refusal(name, current))
        elif not on and installed:
            if current.replaced is None:
                delattr(owner, name)
            else:
                setattr(owner, name, current.replaced)
    if on:
        import numpy as np
        import scipy.sparse as sp

        try:
            sp.csr_matrix(np.eye(2)).toarray()
        except AssertionError:
            return True
        where = [f"{c.__module__}.{c.__qualname__} (id {id(c)}): {c.__dict__['toarray']!r}"
                 for c in sp.csr_matrix.__mro__ if "toarray" in c.__dict__]
        raise RuntimeError("forbid_densify(True) did not take effect: csr_matrix.toarray still densifies; "
                           f"toarray is defined by {where}")
    return True
