""":class:`DataSession` and :class:`PlacedData`: a fit's data on the cluster, and the ways its problem runs there."""

from __future__ import annotations

import itertools
import warnings

import numpy as np

from .. import config as _config
from ..engine.cluster import client as _cluster
from ..engine.data import placement as _placement
from ..engine.data._worker import canonical_csr
from ..engine.cluster.client import adopt_sender, prestart, sender_address
from ..engine.rounds.evaluator import DistributedEvaluator, solve_on_shard
from ..engine.data.placement import check_lengths, is_dask_collection
from ..engine.rounds.reduce import REDUCTIONS
from . import _kept

__all__ = [
    "REDUCTIONS",
    "DataSession",
    "PlacedData",
    "ReplicasWontFit",
    "adopt_sender",
    "canonical_csr",
    "check_lengths",
    "is_dask_collection",
    "prestart",
    "release_kept",
    "sender_address",
    "small_problem",
    "stored_values",
    "warn_again",
    "worker_solve_below",
]


class ReplicasWontFit(Exception):
    """Arrays placed whole on every worker (:meth:`DataSession.replicas`) would take more than the dask config
    ``dask-estimators.search-replica-share`` of a worker's memory."""


class DataSession:
    """The cluster a fit runs on, the data it placed there, and the release of that data.

    A context manager: entered, it resolves the client (the ``client`` given,
    the active one, or the embedded cluster, as
    :func:`~dask_estimators.engine.client_context`); closed, it releases every
    shard it placed, after an error too.  In between, :meth:`data` places
    arrays, one shard per worker, and returns a :class:`PlacedData` that runs
    the fit's problem on them.

    Parameters
    ----------
    client : distributed.Client, str or None
        The cluster: a client, a scheduler address, or None for the active
        client or the embedded cluster.
    device : {"auto", "cpu", "cuda"}, default="auto"
        Where each worker keeps its shards ("auto": its GPU where it has one).
    timeout : float or None
        Seconds each call on the shards may take.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_estimators.session import DataSession
    >>> with DataSession() as session:  # doctest: +SKIP
    ...     data = session.data(X=np.ones((100, 3)), y=np.zeros(100))
    ...     data.n_samples, data.map(lambda shard: shard.get("X").shape[0])
    (100, [50, 50])
    """

    def __init__(self, client=None, *, device: str = "auto", timeout: float | None = None):
        self._client_arg, self.device, self.timeout = client, device, timeout
        self._context = None
        self.client = None
        self._placed: list[PlacedData] = []

    def __enter__(self) -> DataSession:
        self._context = _cluster.client_context(self._client_arg)
        self.client = self._context.__enter__()
        # a cluster the user started: its workers import the engine while this fit validates and sends its data
        _cluster.warm_ahead(self.client)
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            context, self._context, self.client = self._context, None, None
            if context is not None:
                context.__exit__(*exc)

    def close(self) -> None:
        """Release every shard this session placed (it stays open for more); kept ones (:attr:`PlacedData.kept`)
        are restored to their state as placed, for the next fit."""
        placed, self._placed = self._placed, []
        errors = []
        for data in placed:
            try:
                if data._kept_key is not None:
                    _kept.give_back(data._kept_key, data._placement)
                else:
                    data._placement.release()
            except Exception as e:  # release the others too; the first error is raised
                errors.append(e)
        if errors:
            raise errors[0]

    def _need_open(self):
        if self.client is None:
            raise RuntimeError("This DataSession is not open: use it as a context manager (with DataSession(...)).")

    # ------------------------------------------------------------------ workers
    def workers(self) -> list[str]:
        """The addresses of the cluster's workers, sorted (waiting for one where it has none yet)."""
        self._need_open()
        return _placement._workers(self.client)

    def one_worker(self) -> list[str]:
        """One worker for a small problem, the workers in turn (fits at once, as a parallel search runs them,
        share the workers); the worker after it warms up meanwhile."""
        self._need_open()
        workers = self.workers()
        turn = next(_TURNS)
        mine = workers[turn % len(workers)]
        _cluster.warm_ahead(self.client, [workers[(turn + 1) % len(workers)]] if len(workers) > 1 else [],
                            using=[mine])
        return [mine]

    def workers_per_gpu(self) -> list | None:
        """One worker per GPU on a cluster with GPUs (for this session's ``device``); None: every worker."""
        self._need_open()
        return _placement.workers_per_gpu(self.client, self.device)

    def workers_worth(self, flops_per_step: float, nbytes: int = 0, workers=None) -> list | None:
        """The workers a fit of minibatch steps of ``flops_per_step`` is worth, from ``workers`` (None: all);
        None: every worker."""
        self._need_open()
        return _placement.workers_worth(self.client, flops_per_step, nbytes, workers=workers)

    # --------------------------------------------------------------------- data
    def data(self, *, check=None, workers=None, hosted: bool = False, outputs: int | None = None,
             same_layout: bool = False, **arrays) -> PlacedData:
        """Place ``arrays`` (X, y, sample_weight, ...: NumPy, scipy.sparse or dask collections; None ones are
        left out) on the workers, one shard per worker, row-aligned.

        ``check`` runs on the workers on each row block of dask input (validation, casting).  ``workers``: the
        workers to use (a list, or a callable of the row count; None: all).  ``hosted``: the shards' actors are
        held by each worker's long-lived host, for the many small fits of a search.  The shards are released
        when the session closes.

        ``outputs``: the model's outputs (the classes of a multi-class model, the targets of a multi-output
        one), given when its problem may run in one task on one worker (its caller needs nothing on the client
        at each iteration); None: it runs in rounds from the client.  The session then chooses how it runs
        (:attr:`PlacedData.on_worker`): a small problem (:func:`small_problem`), without a ``timeout`` (which
        bounds each round), is placed on one worker, its actors hosted, and its solver runs there
        (:meth:`PlacedData.minimize`, :meth:`PlacedData.run_on_worker`); ``workers`` and ``hosted`` are then
        the session's.

        Input placed on all the workers is kept after the session closes, for the next fit on the same
        collections or on NumPy input with the same content (the dask config ``dask-estimators.keep-placed``);
        such a fit reuses the shards and places nothing (:attr:`PlacedData.reused`).  ``same_layout``: the
        fit's result depends on the shards (a network's seeded batches are drawn per shard), so kept shards
        serve it only where they are one on each of the workers it would be placed on now; after workers came
        or went it is placed anew, as a fresh fit would be.
        """
        self._need_open()
        X = arrays.get("X")
        small = (outputs is not None and self.timeout is None and X is not None and small_problem(X, outputs))
        if small:
            workers, hosted = self.one_worker(), True
        present = {k: v for k, v in arrays.items() if v is not None}
        key = None
        if workers is not None and not callable(workers) and set(workers) >= set(self.workers()):
            workers = None  # every worker: as placed without a choice
        if not hosted and not callable(workers):  # the shards on these workers (None: all) may be kept
            key = _kept.key_of(self.client, present, check, self.device, _config.get("transport"),
                               None if workers is None else tuple(sorted(workers)))
        placement = _kept.take(key, present)
        if placement is not None and same_layout and sorted(placement.workers) != sorted(
                workers if workers is not None else self.workers()):
            # kept for another shape of the cluster: dropped first, so that giving it back releases it without
            # restoring it; the data is placed anew below, and kept in its place
            _kept.drop(key)
            _kept.give_back(key, placement)
            placement = None
        reused = placement is not None
        if reused:
            placement.timeout = self.timeout
        else:
            if not hosted:  # kept data of earlier fits goes first where this data would not fit beside it
                _kept.make_room(self.client, present)
            placement = _placement.place(self.client, arrays, check=check, device=self.device, workers=workers,
                                         timeout=self.timeout, hosted=hosted)
            try:
                # dask X's garbage collection releases them (y and the weights may be made anew by each fit); NumPy
                # input is known by its content, and a copy of it finds them: the budget and the client bound it
                owners = [present["X"]] if is_dask_collection(present.get("X")) else []
                if not _kept.keep(key, placement, owners=owners):
                    key = None
            except BaseException:
                placement.release()
                raise
        data = PlacedData(self, placement, on_worker=small and len(placement.shards) == 1)
        data._kept_key, data.reused = key, reused
        self._placed.append(data)
        return data

    def replicas(self, *, check=None, **arrays) -> list[PlacedData]:
        """``arrays`` placed whole on every worker: one :class:`PlacedData` of one shard per worker, for the many
        small fits of a search on the same rows (:meth:`PlacedData.train_lockstep`).  Each is placed, kept
        and released as :meth:`data`'s with ``workers=[worker]``."""
        self._need_open()
        workers = self.workers()
        need = sum(_kept._shard_bytes(a) or 0 for a in arrays.values() if a is not None)
        room = float(_config.get("search-replica-share")) * min(_kept._limits(self.client, [w]) for w in workers)
        if 2 * need > room:  # the replica, and a split's rows copied from it
            raise ReplicasWontFit(f"Arrays of {need} bytes placed whole on every worker would take more than the "
                                  f"dask config dask-estimators.search-replica-share of a worker's memory.")
        return [self.data(check=check, workers=[w], **arrays) for w in workers]

    @staticmethod
    def spread(replicas: list[PlacedData], tasks: list, on_done=None) -> list:
        """Run ``tasks`` over the ``replicas`` (:meth:`replicas`), each on one of them, a replica taking the next
        task as it frees up: ``tasks`` are ``(cost, method name, args)``, the costliest first, each run as
        ``getattr(replica, name)(*args)``.  Returns the results in the tasks' order; ``on_done(i, result)``
        is called as task ``i`` ends.  The first error stops the tasks not yet started and is raised.
        """
        import threading
        from concurrent.futures import ThreadPoolExecutor

        order = sorted(range(len(tasks)), key=lambda i: -tasks[i][0])
        out, lock, failed = [None] * len(tasks), threading.Lock(), []

        def serve(replica):
            while True:
                with lock:
                    if failed or not order:
                        return
                    i = order.pop(0)
                try:
                    out[i] = getattr(replica, tasks[i][1])(*tasks[i][2])
                except BaseException as e:
                    with lock:
                        failed.append(e)
                    return
                if on_done is not None:
                    on_done(i, out[i])

        ex = ThreadPoolExecutor(max_workers=max(1, len(replicas)), thread_name_prefix="dask-estimators-spread")
        try:
            for f in [ex.submit(serve, r) for r in replicas]:
                f.result()
        except BaseException:  # an interrupt: no task starts any more; those running end with the session
            with lock:
                failed.append(None)
            raise
        finally:
            ex.shutdown(wait=False)
        if failed:
            raise failed[0]
        return out


_TURNS = itertools.count()


class PlacedData:
    """Arrays placed by a :class:`DataSession`, one shard per worker, and the problems that run on them.

    Per-shard calls (:meth:`map`, :meth:`map_each`) run on the shard's own
    worker; a worker lost meanwhile is recovered (the shard placed again, the
    calls made so far replayed on it).  A problem runs either in rounds from
    the client (:meth:`evaluator`, given to an objective or a driver) or in
    one task on the worker of a small problem's one shard (:meth:`run_on_worker`,
    :meth:`minimize`), as the session chose (:attr:`on_worker`).
    """

    def __init__(self, session: DataSession, placement, on_worker: bool = False):
        self.session, self._placement = session, placement
        #: Whether the problem on this data runs in one task on its one shard's worker (the session's choice:
        #: :meth:`DataSession.data`); else in rounds from the client.
        self.on_worker = bool(on_worker)
        #: Whether the shards were placed by an earlier fit and kept (:meth:`DataSession.data`)
        self.reused = False
        self._kept_key = None

    @property
    def kept(self) -> bool:
        """Whether the shards stay on the workers after the session closes, for the next fit on the same input."""
        return self._kept_key is not None

    @property
    def n_samples(self) -> int:
        """Rows over all shards."""
        return self._placement.n_samples

    @property
    def n_rows(self) -> list:
        """Rows in each shard."""
        return list(self._placement.n_rows)

    @property
    def n_shards(self) -> int:
        return len(self._placement.shards)

    @property
    def row_ranges(self):
        """The global rows (``[start, stop)`` of the input) each shard holds (see the engine's ``Placement``)."""
        return self._placement.row_ranges

    @property
    def workers(self) -> list[str]:
        """The worker of each shard."""
        return list(self._placement.workers)

    def map(self, fn, *args) -> list:
        """``fn(shard, *args)`` on every shard, on its worker: the results in shard order."""
        return self._placement.map(fn, *args)

    def map_each(self, fn, per_shard_args) -> list:
        """``fn(shard, *per_shard_args[i])`` on shard ``i``, on its worker: the results in shard order."""
        return self._placement.map_each(fn, per_shard_args)

    def evaluator(self, reduction: str = "tree"):
        """The evaluator of rounds on these shards (parameters scattered, one task per shard, the results summed
        by ``reduction``), for an objective or a driver that runs on the client."""
        return DistributedEvaluator(self._placement, reduction=reduction)

    def stats(self, evaluator=None) -> dict:
        """The fit statistics every estimator reports: the shards, their rows, and ``evaluator``'s round counters."""
        out = evaluator.stats.as_dict() if evaluator is not None else {}
        out.update(n_shards=self.n_shards, rows_per_shard=self.n_rows,
                   placement="reused" if self.reused else "kept" if self.kept else "placed")
        return out

    def run_on_worker(self, driver, problem, args=(), kwargs=None, stacklevel=2):
        """``driver(problem, *args, **kwargs)`` in one task on the worker of the one shard, ``problem`` (an object
        with ``with_evaluator``) evaluating that shard there: the driver's result, and the evaluations' counters.

        The warnings the driver raised there that it raises on the client when it runs here (scikit-learn's
        ``ConvergenceWarning`` and the others of ``UserWarning``, scipy's ``LinAlgWarning``) are raised here,
        ``stacklevel`` as :func:`warnings.warn`'s from the caller.
        """
        from scipy.linalg import LinAlgWarning

        if self.n_shards != 1:
            raise ValueError(f"run_on_worker needs data on one shard; it has {self.n_shards}.")
        out, stats, caught = self._placement.map(
            solve_on_shard, driver, problem.with_evaluator(None), tuple(args), kwargs, (UserWarning, LinAlgWarning),
        )[0]
        warn_again(caught, stacklevel=stacklevel + 1)
        return out, stats

    def minimize(self, objective, w0, *, solver, tol, max_iter, verbose=0, callback=None, stacklevel=2):
        """Minimise ``objective`` (built on :meth:`evaluator`) from ``w0`` with the solver named: the result, and
        the counters of the evaluations made on the worker (None when they ran in rounds from the client).

        Where the session chose so (:attr:`on_worker`: a small problem on one shard), the solver runs in one
        task on the shard's worker, not one round per evaluation; ``verbose`` and ``callback`` (per iteration,
        on the client) need the rounds, and get them.
        """
        from scipy.optimize import OptimizeResult

        from ..optim import minimize

        if self.on_worker and not verbose and callback is None:
            res, stats = self.run_on_worker(minimize, objective, (w0,),
                                            {"solver": solver, "tol": tol, "max_iter": max_iter},
                                            stacklevel=stacklevel + 1)
            return OptimizeResult(res), stats  # the task's result came back as a plain dict
        res = minimize(objective, w0, solver=solver, tol=tol, max_iter=max_iter, verbose=verbose, callback=callback)
        return res, None

    def train(self, strategy, spec, w0, cfg, monitor, opt_state=None, progress=None, callbacks=()):
        """Train the network ``spec`` on these shards: ``"ddp"`` (one rank per shard's worker, the optimizer on
        every rank; a lost worker resumed from the last epoch's state) or ``"rounds"`` (the optimizer on the
        client, one round per batch).  Returns (the training result, the round statistics).

        ``callbacks`` are the loop's; ``progress`` takes the epochs' records on the client.
        """
        callbacks = list(callbacks)
        if strategy == "ddp":
            from ..engine.ddp.train import train_ddp
            from ..optim.torch_driver import TRAINING

            on_resume = None if progress is None else progress.keep
            # rank 0 sends each epoch's record only where a client callback takes it (an event is as long as a
            # small network's epoch); the fitted history comes with the result
            on_event = progress if progress is not None and progress.listening else None
            out = train_ddp(self._placement, spec, w0, cfg, monitor, opt_state, callbacks, on_event=on_event,
                            on_resume=on_resume, training=TRAINING)
            return out, dict(out.info)
        from ..optim.torch_driver import train_rounds

        evaluator = self.evaluator()
        res = train_rounds(evaluator, spec, w0, cfg, monitor, opt_state, report=progress, callbacks=callbacks)
        return res, evaluator.stats.as_dict()

    def train_lockstep(self, rows, y, sample_weight, members, through=None) -> list:
        """Train the networks ``members`` (the optimizer layer's ``LockstepMember``) in lockstep on the rows
        ``rows`` of this one shard's X (:meth:`DataSession.replicas`), ``y`` and ``sample_weight`` (None:
        unweighted) being those rows': one task on its worker, each step's batch read once for every member.  Returns
        each member's training result (the optimizer layer's ``TrainResult``), in order.  ``through``: a fitted
        transformer whose ``transform`` makes the rows what the members see (a pipeline's scaler), or None.

        The task does not change the shard, and is not replayed on a shard rebuilt after a worker loss: a
        worker lost while it runs has the shard placed again on a survivor, and the task runs again there.
        """
        from ..engine.cluster._watch import WorkerLostError
        from ..engine.ddp.lockstep import train_lockstep
        from ..optim.torch_driver import TRAINING

        if self.n_shards != 1:
            raise ValueError(f"train_lockstep needs data on one shard; it has {self.n_shards}.")
        p = self._placement
        args = (np.asarray(rows, dtype=np.int64), y, sample_weight, list(members), TRAINING, self.session.device,
                through)
        for attempt in itertools.count():
            try:
                return p.wait(p.submit_each(train_lockstep, [args]), timeout=self.session.timeout)[0]
            except WorkerLostError as e:
                if attempt >= int(_config.get("max-recoveries")):
                    raise
                p.recover(e.workers)

    def warm_others(self, networks: bool = False) -> None:
        """Ask the cluster's other workers to load the engine (and, with ``networks``, the networks' first use)
        now, without waiting: the next fit that lands there starts warm."""
        _cluster.warm_ahead(self.session.client, using=self.workers, networks=networks)

    def __repr__(self) -> str:
        return f"PlacedData(n_shards={self.n_shards}, n_rows={self.n_rows})"


def release_kept(client=None) -> None:
    """Release the dask input kept on the workers after fits (of ``client`` only, when given: a ``Client``, or a
    scheduler address, for the placements of every client of that scheduler): see
    :meth:`DataSession.data` and the dask config ``dask-estimators.keep-placed``.  A placement in use by a fit is
    released when that fit ends."""
    _kept.release_all(client)


# ------------------------------------------------------------------------- how a problem runs
def worker_solve_below() -> int:
    """The problem size under which a linear fit runs its solver on one worker, in one task: the dask config value
    ``dask-estimators.worker-solve-below`` (stored values times outputs; 0 never).

    On one worker an evaluation then takes about as long as a distributed round's latency or less, so
    spreading it over W workers (``c / W + latency`` against ``c``) gains nothing for any W; the SVMs' dual
    method puts data on one worker below the same size (benchmarks/results/history/small-linear-fits.md has the
    measurements).
    """
    return int(_config.get("worker-solve-below"))


def stored_values(X) -> int | None:
    """The values ``X`` stores (rows x features, or a sparse matrix's non-zeros); None for a dask collection of
    unknown length, which is placed as it lies."""
    n, d = X.shape
    if not (isinstance(n, (int, np.integer)) and isinstance(d, (int, np.integer))):
        return None
    return int(X.nnz) if hasattr(X, "nnz") else int(n) * int(d)


def small_problem(X, outputs: int) -> bool:
    """Whether a fit of ``X`` with ``outputs`` outputs is small enough to run on one worker: under
    :func:`worker_solve_below` stored values times outputs (never for a dask collection of unknown length)."""
    values = stored_values(X)
    return values is not None and values * max(outputs, 1) < worker_solve_below()


def warn_again(caught, stacklevel=2) -> None:
    """Raise here the ``(category, message)`` warnings a task caught on a worker, a
    :class:`~dask_estimators.optim.scipy_driver.ConvergenceNote` (raised where scikit-learn was not imported)
    as scikit-learn's ``ConvergenceWarning``."""
    from sklearn.exceptions import ConvergenceWarning

    from ..optim.scipy_driver import ConvergenceNote

    for category, message in caught:
        warnings.warn(message, ConvergenceWarning if category is ConvergenceNote else category,
                      stacklevel=stacklevel + 1)
