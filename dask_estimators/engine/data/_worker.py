"""Code that runs on the workers: shards, device choice, threads, the kernel call.

Nothing here talks to the scheduler; every function is a plain task body.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from . import _shared

ALIGN = 64
_setup_lock = threading.Lock()
_setup_done = {"threads": None, "torch": None}


def aligned_copy(a: np.ndarray, align: int = ALIGN) -> np.ndarray:
    """Copy ``a`` into a fresh C-contiguous buffer whose address is ``align``-byte aligned.

    Examples
    --------
    >>> import numpy as np
    >>> b = aligned_copy(np.arange(6.0).reshape(2, 3)[:, ::2])
    >>> b.ctypes.data % 64, b.flags.c_contiguous
    (0, True)
    """
    a = np.asarray(a)
    out = aligned_empty(a.shape, a.dtype, align)
    out[...] = a
    return out


def aligned_empty(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous array whose address is ``align``-byte aligned."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-buf.ctypes.data) % align
    return buf[offset : offset + nbytes].view(dtype).reshape(shape)


def is_aligned(a, align: int = ALIGN) -> bool:
    """True when ``a`` (NumPy array or torch tensor) is C-contiguous and ``align``-byte aligned.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import aligned_copy, is_aligned
    >>> is_aligned(aligned_copy(np.ones((3, 5))))
    True
    >>> is_aligned(np.ones((3, 5))[:, 1:])  # a strided view
    False
    """
    if hasattr(a, "data_ptr"):
        return bool(a.is_contiguous()) and a.data_ptr() % align == 0
    return bool(a.flags.c_contiguous) and a.ctypes.data % align == 0


def n_threads() -> int:
    """Dask threads of the worker running this task (1 outside a worker)."""
    try:
        from distributed import get_worker

        return int(get_worker().nthreads)  # public Worker.nthreads (not worker.state)
    except (ValueError, AttributeError):
        from ... import config

        return int(config.get("worker-threads"))


def _in_worker_task() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ValueError, ImportError):
        return False
    return True


def setup_threads() -> int:
    """Pin BLAS (and torch's threads, where torch is imported) to the worker's Dask threads, once per process.

    torch is not imported here: a linear fit on dense host data never needs
    it on a worker.  Where torch comes in later (a shard's tensor asked for,
    a network's fit), :func:`torch_threads` pins it at that moment.
    """
    n = n_threads()
    if not _in_worker_task():
        # the client evaluating a small problem itself: its fit's own limit holds while it runs (client_context);
        # one set here stayed on the process's BLAS and OpenMP after the fit
        return n
    if _setup_done["threads"] == n:
        if _setup_done["torch"] != n and "torch" in sys.modules:
            torch_threads()
        return n
    with _setup_lock:
        import scipy.linalg.cython_blas  # noqa: F401 - scipy's own BLAS (the numba kernels' np.dot) is limited too
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
        _setup_done["threads"] = n
    if "torch" in sys.modules:
        torch_threads()
    return n


def torch_threads():
    """Import torch with its threads pinned to those :func:`setup_threads` gave BLAS (where it ran); returns it."""
    import torch

    n = _setup_done["threads"]
    if n is not None and _setup_done["torch"] != n:
        with _setup_lock:
            torch.set_num_threads(n)
            _setup_done["torch"] = n
    return torch


#: Device files whose absence on Linux means no CUDA (or ROCm) device can be seen: :func:`choose_device` then
#: answers "cpu" without importing torch.
_GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def _no_gpu_here() -> bool:
    """Whether this process surely sees no GPU, known without importing torch (Linux device files, or
    ``CUDA_VISIBLE_DEVICES`` set to none); False where only torch can tell."""
    if "torch" in sys.modules:
        return False  # asking torch costs nothing now
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return True
    return sys.platform.startswith("linux") and not any(os.path.exists(f) for f in _GPU_DEVICE_FILES)


def choose_device(device: str = "auto") -> str:
    """The torch device for this worker: ``"cuda"`` when asked or available, else ``"cpu"``.

    ``"auto"`` on a machine without GPU device files answers ``"cpu"``
    without importing torch (:func:`_no_gpu_here`).
    """
    if device == "cpu" or (device == "auto" and _no_gpu_here()):
        return "cpu"
    torch = torch_threads()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} was asked for but this worker has no CUDA device.")
    return device


class CSRRows:
    """Rows of a CSR matrix as its three arrays: ``data``, ``indices`` and ``indptr`` (``indptr[0] == 0``).

    The client's parts of sparse input: :meth:`of` takes rows of a canonical
    CSR matrix as views of its ``data`` and ``indices`` (only ``indptr``, one
    entry per row, is new), so splitting ``X`` into parts copies nothing of
    size nnz.  The arrays may also be shared-memory handles (:mod:`._shm`)
    while a part travels.  A shard in host memory keeps its sparse X as one
    (:func:`host_csr`), which the numba kernels read without torch;
    :meth:`Shard.get` gives a torch view of it, and on a GPU the shard holds
    the tensor.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> X = sp.csr_matrix([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    >>> part = CSRRows.of(X, 1, 3)
    >>> part.shape, part.data.tolist(), part.indices.tolist(), part.indptr.tolist()
    ((2, 2), [2.0, 3.0, 4.0], [1, 0, 1], [0, 1, 3])
    >>> (part.to_scipy() != X[1:3]).nnz
    0
    """

    __slots__ = ("data", "indices", "indptr", "shape")
    ndim = 2

    def __init__(self, data, indices, indptr, shape):
        self.data, self.indices, self.indptr = data, indices, indptr
        self.shape = (int(shape[0]), int(shape[1]))

    @classmethod
    def of(cls, X, start: int, stop: int) -> "CSRRows":
        """Rows ``start:stop`` of the canonical scipy CSR matrix (or array) ``X``, without copying its values."""
        indptr = np.asarray(X.indptr)
        a, b = int(indptr[start]), int(indptr[stop])
        return cls(X.data[a:b], X.indices[a:b], indptr[start : stop + 1] - indptr[start], (stop - start, X.shape[1]))

    @classmethod
    def concat(cls, parts, n_cols: int) -> "CSRRows":
        """The rows of ``parts`` (CSRRows or scipy CSR, each with ``indptr[0] == 0``) one after the other."""
        parts = list(parts)
        dtype = np.result_type(*(p.data.dtype for p in parts)) if parts else np.float64
        total = sum(int(p.indptr[-1]) for p in parts)
        itype = index_dtype(total, n_cols)
        indptr = np.zeros(sum(p.shape[0] for p in parts) + 1, dtype=itype)
        row = nnz = 0
        for p in parts:
            n = p.shape[0]
            indptr[row + 1 : row + n + 1] = np.asarray(p.indptr[1:], dtype=np.int64) + nnz
            row, nnz = row + n, nnz + int(p.indptr[-1])
        data = np.empty(nnz, dtype=dtype)
        indices = np.empty(nnz, dtype=itype)
        at = 0
        for p in parts:
            m = int(p.indptr[-1])
            data[at : at + m] = p.data[:m]
            indices[at : at + m] = p.indices[:m]
            at += m
        return cls(data, indices, indptr, (row, n_cols))

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def dtype(self):
        """The values' dtype."""
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        return sum(int(getattr(a, "nbytes", 0)) for a in (self.data, self.indices, self.indptr))

    def to_scipy(self):
        """A scipy ``csr_matrix`` of these rows (scipy may copy the index arrays to its own index dtype)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)

    def __repr__(self) -> str:
        return f"CSRRows(shape={self.shape}, nnz={self.nnz})"


def is_scipy_sparse(a) -> bool:
    """True for scipy.sparse matrices and arrays (scipy is imported only when ``a`` may be one)."""
    return type(a).__module__.startswith("scipy.sparse") and hasattr(a, "tocsr")


def canonical_csr(X):
    """A scipy sparse matrix or array as canonical CSR: sorted column indices, no duplicates, a valid structure.

    Other formats (CSC, COO, ...) are converted once; duplicates are summed and
    indices sorted on a copy, as scikit-learn's ``sum_duplicates`` /
    ``sort_indices`` would, so the caller's matrix is left as it was.  A
    broken structure (``indptr`` not non-decreasing, column indices out of
    range) raises scipy's ``ValueError``.
    """
    if X.format != "csr":
        X = X.tocsr()
        X.check_format(full_check=True)
        if not X.has_canonical_format:
            X.sum_duplicates()  # a fresh matrix: fixed in place
        return X
    X.check_format(full_check=True)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def index_dtype(nnz: int, n_cols: int):
    """The shard contract's index type of a CSR with ``nnz`` stored values and ``n_cols`` columns: int32 where
    both fit (as scipy keeps them), int64 otherwise.

    The row loops stream every index once a pass: 4 bytes less a non-zero, read as uint32, make the
    CSR kernels faster (docs/performance.md, ``benchmarks/bench_sparse_kernels.py``) and the shard a
    quarter smaller.

    Examples
    --------
    >>> from dask_estimators.engine.data._worker import index_dtype
    >>> index_dtype(10**6, 2**20), index_dtype(3 * 10**9, 10)
    (dtype('int32'), dtype('int64'))
    """
    limit = np.iinfo(np.int32).max
    return np.dtype(np.int32) if nnz <= limit and n_cols <= limit else np.dtype(np.int64)


def host_csr(data, indices, indptr, shape) -> "CSRRows":
    """The shard contract's CSR in host memory from the three arrays of a canonical CSR: values float32 or float64
    (other dtypes become float64), indices of :func:`index_dtype`, each array writeable and C-contiguous.  Arrays
    that already are so are used in place (a shared-memory mapping stays one); torch is not imported.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine.data._worker import host_csr
    >>> X = host_csr(np.array([1, 2]), np.array([0, 2], dtype=np.int64), np.array([0, 1, 2]), (2, 3))
    >>> X.data.dtype.name, X.indices.dtype.name, X.indptr.dtype.name, X.shape
    ('float64', 'int32', 'int32', (2, 3))
    """

    def own(a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype or not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a, dtype=dtype, order="C")
        return a

    data = np.asarray(data)
    vdtype = data.dtype if data.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    itype = index_dtype(data.shape[0], int(shape[1]))
    return CSRRows(own(data, vdtype), own(indices, itype), own(indptr, itype), shape)


def csr_tensor(data, indices, indptr, shape, device="cpu"):
    """A torch sparse CSR tensor on ``device`` from the three arrays of a canonical CSR (see the shard contract).

    The values stay float32 or float64 (other dtypes become float64) and the
    indices take :func:`index_dtype`; on the CPU arrays that already are so,
    and are writeable, are used in place (a shared-memory mapping stays one):
    a CPU shard's :class:`CSRRows` (:func:`host_csr`) and its tensor share
    their memory.
    """
    import warnings

    torch = torch_threads()
    a = host_csr(data, indices, indptr, shape)
    with warnings.catch_warnings():  # torch says once per process that its sparse CSR support is in beta
        warnings.simplefilter("ignore", UserWarning)
        t = torch.sparse_csr_tensor(
            torch.from_numpy(a.indptr), torch.from_numpy(a.indices), torch.from_numpy(a.data), size=a.shape,
            check_invariants=False,
        )
    return t if device == "cpu" else t.to(device)


def _torch_csr(t):
    """A torch sparse tensor as the contract's CSR: CSR layout, indices of :func:`index_dtype`."""
    import torch

    if t.layout != torch.sparse_csr:
        if t.layout == torch.sparse_coo:
            t = t.coalesce()
        t = t.to_sparse_csr()
    itype = torch.int32 if index_dtype(t.values().shape[0], t.shape[1]) == np.int32 else torch.int64
    if t.crow_indices().dtype != itype or t.col_indices().dtype != itype:
        t = torch.sparse_csr_tensor(t.crow_indices().to(itype), t.col_indices().to(itype), t.values(),
                                    size=t.shape, check_invariants=False)
    return t


def _is_tensor(a) -> bool:
    """Whether ``a`` is a torch tensor (never importing torch: without it there is none)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _current_worker():
    """The Dask worker running this code, or None outside a worker task."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


class RowSegments:
    """A dense 2-D array kept as the row blocks it was placed from, read where they lie: no copy of them.

    The blocks are the caller's (a dask array persisted on the worker): a
    shard made of them holds the data once, not a second time beside them.
    ``parts`` are C-contiguous arrays of one dtype and width, in row order,
    never written.  Kernels that walk rows read the parts
    (:meth:`Shard.row_parts`); anything else gets one aligned array joined
    from them, made on first use and kept (:meth:`joined`: the copy the
    parts avoid, paid only by the kernels that need it).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine.data._worker import RowSegments
    >>> r = RowSegments([np.ones((2, 3)), np.zeros((1, 3))])
    >>> r.shape, r.starts, r.joined().sum()
    ((3, 3), (0, 2), np.float64(6.0))
    """

    def __init__(self, parts):
        self.parts = tuple(parts)
        first = self.parts[0]
        if any(p.ndim != 2 or p.dtype != first.dtype or p.shape[1] != first.shape[1] or not p.flags.c_contiguous
               for p in self.parts):
            raise ValueError("row segments must be C-contiguous 2-D arrays of one dtype and width")
        self.dtype = first.dtype
        lengths = [int(p.shape[0]) for p in self.parts]
        self.starts = tuple(int(v) for v in np.cumsum([0] + lengths[:-1]))
        self.shape = (sum(lengths), int(first.shape[1]))
        self._joined = None

    @property
    def owned_bytes(self) -> int:
        """The bytes this object holds beyond the parts (which Dask counts where it keeps them): its joined copy."""
        j = self._joined
        return 0 if j is None or any(j is p for p in self.parts) else int(j.nbytes)

    def joined(self) -> np.ndarray:
        """The rows as one writeable C-contiguous array: the one part where it is one (and writeable), else the
        parts copied into one aligned array, once, then kept."""
        if self._joined is None and len(self.parts) == 1 and self.parts[0].flags.writeable:
            self._joined = self.parts[0]
        if self._joined is None:
            out = aligned_empty(self.shape, self.dtype)
            for at, p in zip(self.starts, self.parts):
                out[at : at + p.shape[0]] = p
            self._joined = out
        return self._joined

    def __getstate__(self):  # spilled or moved: the parts travel, the joined copy is made again where needed
        return dict(self.__dict__, _joined=None)


class Shard:
    """One worker's rows: named arrays, aligned, on the worker's device, kept for the whole fit.

    ``data`` maps names (``"X"``, ``"y"``, ``"sample_weight"``...) to the
    stored arrays: NumPy for dense numeric arrays on the CPU (aligned; read
    as such by the numba kernels through :meth:`host`, as torch tensors
    through :meth:`get`, made on first use without a copy) and for labels
    such as strings; a sparse X on the CPU as :class:`CSRRows` (read by the
    numba kernels through :meth:`host_csr`, as a torch sparse CSR tensor
    through :meth:`get`, again without a copy); torch tensors on a GPU.  A
    linear fit therefore never imports torch on its worker.  ``cache``
    holds per-worker state between evaluations, such as the curvature of the
    last gradient, so a Hessian-vector product only needs the direction.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.engine import Shard
    >>> shard = Shard({"X": np.ones((4, 2)), "y": np.array(["a", "b", "a", "b"])}, device="cpu")
    >>> shard.n_rows, tuple(shard.get("X").shape), shard.get("y")[0]
    (4, (4, 2), np.str_('a'))
    >>> type(shard.host("X")).__name__, shard.host("X") is shard.host("X")
    ('ndarray', True)
    """

    def __init__(self, arrays: dict, device: str = "auto", info: dict | None = None):
        self.device = choose_device(device)
        self.data: dict = {}
        self.dtypes: dict = {}  # each array's dtype as placed (labels keep theirs)
        self.cache: dict = {}
        self.info: dict = dict(info or {})
        self.n_rows = None
        self._tensors: dict = {}  # name -> (the NumPy array stored, its torch view): get()'s, made once
        self.worker = _current_worker()  # for events sent while a long task runs (see collective.py)
        for name, a in arrays.items():
            self.put(name, a)

    def __getstate__(self):  # a shard spilled or moved by Dask travels without its worker, and without the views
        return dict(self.__dict__, worker=None, _tensors={})

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_tensors", {})
        self.worker = _current_worker()

    def put(self, name: str, a) -> None:
        """Store array ``a`` under ``name``: aligned NumPy on the CPU, a tensor on a GPU.

        Sparse ``a`` (a scipy.sparse matrix or array of any format, a torch
        sparse tensor, or :class:`CSRRows`) is stored canonical, with indices
        of :func:`index_dtype`, never densified: as :class:`CSRRows` on the
        CPU (:func:`host_csr`), as a torch sparse CSR tensor on a GPU.
        """
        if a is None:
            self.data.pop(name, None)
            return
        if isinstance(a, RowSegments):
            if self.device == "cpu":
                self.dtypes[name] = a.dtype
                self.data[name] = a
                self._set_rows(name, a)
                return
            a = a.joined()
        if _is_tensor(a):
            torch = torch_threads()
            if a.layout != torch.strided:
                a = _torch_csr(a)
            if a.layout == torch.strided or self.device != "cpu":
                t = a.to(self.device)
            else:  # kept as NumPy, as a scipy matrix is: over the tensor's memory, not a copy
                a = a.cpu()
                t = host_csr(a.values().numpy(), a.col_indices().numpy(), a.crow_indices().numpy(), a.shape)
                self.dtypes[name] = t.dtype
        elif isinstance(a, CSRRows) or is_scipy_sparse(a):
            if not isinstance(a, CSRRows):
                a = canonical_csr(a)
            self.dtypes[name] = np.dtype(a.dtype if hasattr(a, "dtype") else a.data.dtype)
            # in host memory the three NumPy arrays, read by the numba kernels without torch; a tensor on a GPU
            t = (host_csr(a.data, a.indices, a.indptr, a.shape) if self.device == "cpu"
                 else csr_tensor(a.data, a.indices, a.indptr, a.shape, self.device))
        else:
            a = np.asarray(a)
            self.dtypes[name] = a.dtype
            if a.dtype.kind not in "iuf":  # labels such as strings or booleans stay NumPy
                self.data[name] = a
                self._set_rows(name, a)
                return
            if a.dtype.kind in "iu":
                a = a.astype(np.int64, copy=False)
            t = a if is_aligned(a) and a.flags.writeable else aligned_copy(a)
            if self.device != "cpu":
                t = torch_threads().from_numpy(t).to(self.device)
        self.data[name] = t
        self._set_rows(name, t)

    def _set_rows(self, name, a) -> None:
        n = int(a.shape[0])
        if self.n_rows is None:
            self.n_rows = n
        elif n != self.n_rows:
            raise ValueError(
                f"Inconsistent numbers of samples in a shard: {name!r} has {n} rows, other arrays have {self.n_rows}."
            )

    def get(self, name: str, default=None):
        """The array stored under ``name`` as a tensor on the device (NumPy for labels), else ``default``.

        A dense array stored on the CPU comes as a torch view of its NumPy
        memory, a sparse one as a torch sparse CSR tensor over its three
        arrays, made once (torch is imported then).
        """
        a = self.data.get(name)
        if a is None:
            return default
        if isinstance(a, RowSegments):
            a = a.joined()
        if isinstance(a, CSRRows) or (isinstance(a, np.ndarray) and a.dtype.kind in "iuf"):
            made = self._tensors.get(name)
            if made is None or made[0] is not a:
                t = (csr_tensor(a.data, a.indices, a.indptr, a.shape) if isinstance(a, CSRRows)
                     else torch_threads().from_numpy(a))
                made = self._tensors[name] = (a, t)
            return made[1]
        return a

    @property
    def threads(self) -> int:
        """The threads a kernel on this shard may use: its worker's Dask threads (:func:`setup_threads`)."""
        return _setup_done["threads"] or n_threads()

    def host(self, name: str, default=None):
        """The dense array stored under ``name`` as NumPy without torch, where it is one in host memory: a dense
        CPU array (also a CPU tensor's memory), or labels; None for a sparse or GPU array; ``default`` if absent."""
        a = self.data.get(name)
        if a is None:
            return default
        if isinstance(a, RowSegments):
            return a.parts[0] if len(a.parts) == 1 else a.joined()
        if isinstance(a, np.ndarray):
            return a
        if _is_tensor(a) and a.layout == sys.modules["torch"].strided and a.device.type == "cpu":
            return a.numpy()
        return None

    def host_csr(self, name: str):
        """The sparse array stored under ``name`` as :class:`CSRRows` (NumPy, without torch) where it is kept so in
        host memory (a CPU shard's sparse X); None otherwise (dense, on a GPU, or absent)."""
        a = self.data.get(name)
        return a if isinstance(a, CSRRows) else None

    def row_parts(self, name: str):
        """The dense host array ``name`` as ``[(first row, rows), ...]``: the parts of :class:`RowSegments` as
        they lie (none joined), one part for an array in one piece; None where :meth:`host` gives None."""
        a = self.data.get(name)
        if isinstance(a, RowSegments):
            return list(zip(a.starts, a.parts))
        a = self.host(name)
        return None if a is None else [(0, a)]

    def pin(self) -> None:
        """Remember the shard as it is now (its arrays, their dtypes, its info): :meth:`restore` comes back here.

        For data kept between fits: a fit replaces arrays (``put``: the
        targets encoded, the weights multiplied by the class weights, X cast
        for a network) and fills ``cache``; it never writes into a stored
        array, so keeping the references is keeping the data.
        """
        self._pinned = (dict(self.data), dict(self.dtypes), dict(self.info), self.n_rows)

    def restore(self) -> None:
        """The shard as :meth:`pin` left it: what was put since is dropped, and ``cache`` emptied."""
        data, dtypes, info, n_rows = self._pinned
        self.data, self.dtypes, self.info, self.n_rows = dict(data), dict(dtypes), dict(info), n_rows
        self.cache = {}

    def nbytes(self) -> int:
        """The bytes of the arrays the shard holds now, and of those it keeps for :meth:`restore` (of rows read
        where they lie, :class:`RowSegments`, only what it copied)."""
        seen, total = set(), 0
        for arrays in (self.data, getattr(self, "_pinned", ({},))[0]):
            for a in arrays.values():
                if id(a) not in seen:
                    seen.add(id(a))
                    total += _array_bytes(a)
        return total

    def __sizeof__(self) -> int:  # dask uses sizeof for memory accounting
        return self.nbytes() + 200

    def __repr__(self) -> str:
        shapes = {
            k: (tuple(v.shape) + (f"csr nnz={v.nnz}",) if isinstance(v, CSRRows)
                else tuple(v.shape) + (f"csr nnz={v.values().shape[0]}",) if _is_sparse_tensor(v) else tuple(v.shape))
            for k, v in self.data.items()
        }
        return f"Shard(n_rows={self.n_rows}, device={self.device!r}, arrays={shapes})"


class ShardBuild:
    """A shard's dense arrays being filled on its worker, one piece of rows at a time.

    The client sends a large part as several messages (see
    ``placement._send_in_pieces``); each piece is copied into the shard's
    aligned memory while the next one is still on the wire, instead of one
    copy of the whole part after its last byte arrived.  ``spec`` maps each
    name to ``(shape, dtype)`` as the client holds it; integers are stored as
    int64, as :meth:`Shard.put` stores them.

    A build in progress is never pickled: it stays in its worker's memory
    (a copy would receive no further pieces).

    Examples
    --------
    >>> import numpy as np
    >>> b = ShardBuild({"X": ((4, 2), "float64"), "y": ((4,), "int32")})
    >>> b.fill(0, {"X": np.ones((3, 2)), "y": np.arange(3, dtype=np.int32)})
    3
    >>> b.fill(3, {"X": np.zeros((1, 2)), "y": np.array([7], dtype=np.int32)})
    1
    >>> s = b.shard("cpu")
    >>> s.get("y").tolist(), s.dtypes["y"].name
    ([0, 1, 2, 7], 'int32')
    """

    def __init__(self, spec: dict):
        self.dtypes = {k: np.dtype(dt) for k, (_, dt) in spec.items()}
        self.arrays = {
            k: aligned_empty(shape, np.int64 if self.dtypes[k].kind in "iu" else self.dtypes[k])
            for k, (shape, _) in spec.items()
        }
        self.n_rows = {int(a.shape[0]) for a in self.arrays.values()}.pop()
        self.filled = 0

    def fill(self, start: int, piece: dict) -> int:
        """Copy ``piece``'s rows into rows ``start:`` of the arrays; the number of rows copied."""
        n = {int(np.shape(a)[0]) for a in piece.values()}.pop()
        for k, a in piece.items():
            self.arrays[k][start : start + n] = a
        self.filled += n
        return n

    def shard(self, device: str = "auto") -> "Shard":
        """The finished :class:`Shard` (its arrays are used as they are, not copied)."""
        if self.filled != self.n_rows:
            raise RuntimeError(f"a shard build received {self.filled} of its {self.n_rows} rows")
        s = Shard(self.arrays, device=device)
        s.dtypes.update(self.dtypes)
        self.arrays = {}
        return s

    def __sizeof__(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def __reduce__(self):
        raise TypeError("a shard still being filled stays on its worker: it is not spilled or moved")


def _array_bytes(a) -> int:
    """The bytes a shard's array stores (a sparse tensor's three arrays, not n x p; of :class:`RowSegments`, its
    own copy, not the blocks it reads, which Dask counts where it keeps them)."""
    if isinstance(a, RowSegments):
        return a.owned_bytes
    if isinstance(a, CSRRows):
        return a.nbytes
    if _is_sparse_tensor(a):
        return sum(p.element_size() * p.nelement() for p in (a.values(), a.crow_indices(), a.col_indices()))
    return a.element_size() * a.nelement() if hasattr(a, "element_size") else a.nbytes


def _is_sparse_tensor(a) -> bool:
    layout = getattr(a, "layout", None)
    return layout is not None and "sparse" in str(layout)


def to_host(out):
    """Results to NumPy float64 (tensors) or float (scalars), recursively over tuples/lists/dicts."""
    if _is_tensor(out):
        out = out.detach()
        if out.ndim == 0:
            return float(out.item())
        return out.to("cpu", sys.modules["torch"].float64).numpy()
    if isinstance(out, tuple):
        return tuple(to_host(o) for o in out)
    if isinstance(out, list):
        return [to_host(o) for o in out]
    if isinstance(out, dict):
        return {k: to_host(v) for k, v in out.items()}
    if isinstance(out, np.ndarray) and out.dtype.kind in "biuf":
        return out.astype(np.float64, copy=False)
    return out


def to_device(shard: Shard, a):
    """A float64 NumPy argument to a tensor on the shard's device; other values unchanged."""
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return torch_threads().as_tensor(a, device=shard.device)
    if isinstance(a, tuple):
        return tuple(to_device(shard, x) for x in a)
    return a


def resolve(shard):
    """The :class:`Shard` (or :class:`ShardBuild`) a task got as its argument: itself, or the one its worker holds
    for a handle (:mod:`._held`)."""
    if isinstance(shard, Shard):
        return shard
    from ._held import held

    return held(shard)


def run_kernel(fn, shard: Shard, *args):
    """Task body of one evaluation: ``fn(shard, *args)`` with its results as NumPy float64.

    The float arguments reach ``fn`` as tensors on the shard's device, or as
    they are (NumPy) where ``fn.host_args`` is true: a kernel that reads host
    shards with numba and makes tensors only on its torch path.
    """
    setup_threads()
    shard = resolve(shard)
    if not getattr(fn, "host_args", False):
        args = tuple(to_device(shard, a) for a in args)
    return to_host(fn(shard, *args))


def add(*parts, share=None):
    """Elementwise sum of nested results (tuples, lists, dicts of arrays and floats).

    ``share`` (the tree-sum's adds, see :mod:`._shared`): ``"map"`` or
    ``"copy"`` returns the sum with its large arrays in shared memory, for a
    consumer on this host that maps them (another worker's add) or copies them
    out (the client).  Parts that are such sums made in this process are read
    in place.
    """
    parts = tuple(_shared.unwrap(p) for p in parts)
    if share:
        return _shared.shared_sum(parts, share == "copy", _add)
    return _add(*parts)


def _add(*parts):
    first = parts[0]
    if isinstance(first, tuple):
        return tuple(_add(*items) for items in zip(*parts))
    if isinstance(first, list):
        return [_add(*items) for items in zip(*parts)]
    if isinstance(first, dict):
        return {k: _add(*(p[k] for p in parts)) for k in first}
    if first is None:
        return None
    if len(parts) == 1:
        return first
    total = first + parts[1]  # a new array: the parts are left as they are
    return _accumulate(total, parts[2:])


def add_into(*parts, share=None):
    """:func:`add`, written into the first part's arrays where possible; that part must be owned by the caller.

    The tree's adds above its first level get as first operand a sum that an
    earlier add of the same tree made, which nothing else reads: adding into
    it saves allocating a new array of the result's size at every level (at
    10M parameters, 80 MB that are page-faulted in each time).  A first part in
    shared memory stays there: the sum is returned in its segments.
    """
    first, rest = parts[0], tuple(_shared.unwrap(p) for p in parts[1:])
    total = _add_into(_shared.unwrap(first), *rest)
    if not share:
        return total
    if isinstance(first, _shared.Shared):
        return first.update(total, share == "copy")
    return _shared.shared_sum((total,), share == "copy", _add)


def _add_into(*parts):
    first = parts[0]
    if isinstance(first, tuple):
        return tuple(_add_into(*items) for items in zip(*parts))
    if isinstance(first, list):
        return [_add_into(*items) for items in zip(*parts)]
    if isinstance(first, dict):
        return {k: _add_into(*(p[k] for p in parts)) for k in first}
    if first is None:
        return None
    return _accumulate(first, parts[1:])


def _accumulate(total, rest):
    """``total`` plus each of ``rest``, in place when ``total`` is a writeable NumPy array that can hold the sum."""
    for p in rest:
        if (isinstance(total, np.ndarray) and isinstance(p, (np.ndarray, np.generic)) and total.flags.writeable
                and p.shape == total.shape and np.result_type(total, p) == total.dtype):
            np.add(total, p, out=total)
        else:
            total = total + p
    return total


def _host_exact(out):
    """Torch tensors to NumPy with their own dtype; everything else unchanged."""
    if hasattr(out, "detach") and hasattr(out, "cpu"):
        return out.detach().cpu().numpy()
    if isinstance(out, (tuple, list)):
        return type(out)(_host_exact(o) for o in out)
    if isinstance(out, dict):
        return {k: _host_exact(v) for k, v in out.items()}
    return out


def apply(fn, shard: Shard, *args):
    """Task body of a per-shard map: ``fn(shard, *args)``, results kept in their own dtype (labels)."""
    setup_threads()
    shard = resolve(shard)
    return _host_exact(fn(shard, *args))
