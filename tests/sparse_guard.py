"""A test helper: make every way to densify a sparse matrix or tensor raise (``forbid_densify(True)``).

Shared by the sparse tests (tests/ is on ``sys.path`` under pytest, and the
session cluster's spawned workers inherit that path, so ``client.run`` can
send it to them).
"""

from __future__ import annotations

#: The patched methods' originals, per (owner, name), while the patch is on.
_SAVED: dict = {}


def forbid_densify(on: bool) -> bool:
    """Make ``toarray``/``todense`` of scipy.sparse and ``torch.Tensor.to_dense`` raise ``AssertionError``
    in this process (``on``), or restore them; returns True (for ``client.run``)."""
    import scipy.sparse._base as base
    import scipy.sparse._compressed as compressed
    import scipy.sparse._coo as coo
    import torch

    targets = [(base._spbase, "toarray"), (base._spbase, "todense"), (compressed._cs_matrix, "toarray"),
               (coo._coo_base, "toarray"), (torch.Tensor, "to_dense")]
    for owner, name in targets:
        key = (owner, name)
        if on and key not in _SAVED:
            _SAVED[key] = owner.__dict__.get(name)

            def refuse(self, *args, _name=name, **kwargs):
                raise AssertionError(f"{_name} was called: a sparse matrix was densified")

            setattr(owner, name, refuse)
        elif not on and key in _SAVED:
            original = _SAVED.pop(key)
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    return True
