"""Same-host hand-over of NumPy arrays through files in /dev/shm.

The client writes each array into a fresh file (``posix_fallocate`` first, so
a full /dev/shm is a clean ``OSError`` and not a SIGBUS later); the worker maps
it read-write and uses the mapping as its array: page-aligned, C-contiguous,
never pickled.  The client unlinks the files once the workers have mapped
them, so nothing is left behind even if a worker dies later.
"""

from __future__ import annotations

import mmap
import os
import uuid
from dataclasses import dataclass

import numpy as np

SHM_DIR = "/dev/shm"
#: Arrays below this size are not worth a file: they travel with the task.
MIN_BYTES = 1 << 16


class NotShared(RuntimeError):
    """The worker cannot open the client's file: it runs on another host or in another container."""


@dataclass(frozen=True)
class Handle:
    path: str
    shape: tuple
    dtype: str


def _available() -> bool:
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) and hasattr(os, "posix_fallocate")


def write(a: np.ndarray) -> Handle | None:
    """Copy ``a`` into a new /dev/shm file; None when that is not possible here."""
    a = np.ascontiguousarray(a)
    path = os.path.join(SHM_DIR, f"dask-estimators-{uuid.uuid4().hex}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, a.nbytes)
        with mmap.mmap(fd, a.nbytes) as mm:
            view = np.frombuffer(mm, dtype=a.dtype, count=a.size).reshape(a.shape)
            view[...] = a
            del view
    except OSError:
        os.close(fd)
        _unlink_path(path)
        return None
    os.close(fd)
    return Handle(path, tuple(a.shape), a.dtype.str)


def read(h: Handle) -> np.ndarray:
    """Map a client's file as a writable array (worker side)."""
    try:
        fd = os.open(h.path, os.O_RDWR)
    except OSError as e:
        raise NotShared(str(e)) from None
    try:
        dtype = np.dtype(h.dtype)
        nbytes = int(np.prod(h.shape, dtype=np.int64)) * dtype.itemsize
        mm = mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype=dtype).reshape(h.shape)


def write_parts(part: dict) -> dict | None:
    """Write every large numeric array of ``part``; small or non-numeric ones are kept inline."""
    if not _available():
        return None
    out = {}
    for k, a in part.items():
        if isinstance(a, np.ndarray) and a.dtype.kind in "iuf" and a.nbytes >= MIN_BYTES:
            h = write(a)
            if h is None:
                for v in out.values():
                    unlink(v)
                return None
            out[k] = h
        else:
            out[k] = a
    return out


def read_parts(handles: dict) -> dict:
    return {k: read(v) if isinstance(v, Handle) else v for k, v in handles.items()}


def _unlink_path(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def unlink(h) -> None:
    """Remove the file(s) behind a handle or a dict of handles; mappings already made stay valid."""
    if isinstance(h, dict):
        for v in h.values():
            unlink(v)
    elif isinstance(h, Handle):
        _unlink_path(h.path)
