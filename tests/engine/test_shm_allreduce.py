"""The shared-memory allreduce of the ddp strategy: gloo's sums on a real cluster, and errors, never hangs.

The cluster tests run one rank per worker process of the session's LocalCluster and compare every sum with
gloo's ``all_reduce`` of the same tensors in the same group.  The failure tests drive one rank by hand
over an anonymous mapping, with the other rank dead, a zombie, or silent.
"""

import contextlib
import mmap
import os
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import torch

from dask_estimators.engine.data import _shm
from dask_estimators.engine.ddp import _shm_allreduce as A
from dask_estimators.engine.ddp.collective import process_group, run_collective

pytestmark = pytest.mark.skipif(not _shm._memfd_available() or A.platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="needs memfd and /proc on x86-64")

# sizes of successive calls: odd and even call numbers use the two slot sets; the largest fills the slots
SIZES = [10_302, 1, 5_000, 10_302, 3, 7_777, 10_302, 2, 10_302, 64, 999]


def _tensor(rank, k, n):
    return torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(1000 * k + rank))


def _rank_body(shard, comm, sizes, shared_memory):
    import torch.distributed as dist

    with process_group(comm) as store:
        with dask.config.set({"dask-estimators.shared-memory": shared_memory}):
            ar = A.create(comm.rank, comm.world_size, 8 * max(sizes), comm.timeout, store=store)
        if ar is None:
            return None
        try:
            out = []
            for k, n in enumerate(sizes):
                t = _tensor(comm.rank, k, n)
                ref = t.clone()
                dist.all_reduce(ref)
                got = ar.allreduce_(t)
                assert got is t  # in place
                out.append((t.numpy().copy(), ref.numpy()))
            return out
        finally:
            ar.close()


def test_sums_equal_gloos_and_every_rank_gets_the_same_bits(two_ranks):
    outs = run_collective(two_ranks, _rank_body, SIZES, True)
    assert all(o is not None for o in outs)  # both workers of the LocalCluster share this host
    for k, n in enumerate(SIZES):
        expected = sum(_tensor(r, k, n).numpy() for r in range(2))
        for rank_out in outs:
            got, gloo = rank_out[k]
            np.testing.assert_array_equal(got, gloo)  # two ranks: a + b, the same as gloo's
            np.testing.assert_allclose(got, expected, rtol=0, atol=0)
        assert outs[0][k][0].tobytes() == outs[1][k][0].tobytes()


def test_switched_off_every_rank_keeps_gloo(two_ranks):
    assert run_collective(two_ranks, _rank_body, [8], False) == [None, None]


# ---------------------------------------------------------------- failures, one rank driven by hand
def _one_rank(pids, timeout, capacity=64):
    world = len(pids)
    mm = mmap.mmap(-1, world * A._LINE + 2 * world * capacity)
    return A.SharedMemoryAllreduce(mm, 0, world, capacity, pids, timeout)


def _exited_child(reap):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    if reap:
        p.wait()
        return p
    deadline = time.monotonic() + 10
    while A._alive(p.pid):  # exited but not reaped: a zombie
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.01)
    return p


@pytest.mark.parametrize("reap", [True, False], ids=["gone", "zombie"])
def test_a_dead_rank_is_an_error_before_the_timeout(reap):
    child = _exited_child(reap)
    try:
        # the error names the exit, not the timeout: the dead rank was seen, not waited out (the 600 s
        # timeout is only a hang guard, far above any load)
        ar = _one_rank([os.getpid(), child.pid], timeout=600)
        with pytest.raises(RuntimeError, match=r"Rank\(s\) \[1\] of the process group exited") as info:
            ar.allreduce_(torch.ones(8, dtype=torch.float64))
        assert "did not arrive" not in str(info.value)
        ar.close()
    finally:
        child.wait()


def test_a_silent_rank_is_an_error_after_the_timeout():
    ar = _one_rank([os.getpid(), os.getpid()], timeout=0.5)  # alive, but never publishes
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[1\] did not arrive within 0.5 s"):
        ar.allreduce_(torch.ones(8, dtype=torch.float64))
    assert time.monotonic() - t0 >= 0.5  # it waited the timeout out (a lower bound: load cannot break it)
    ar.close()


def test_a_rank_that_aborted_is_an_error_at_once():
    """A rank that failed with its process alive marks itself aborted: the others' next sum raises at once, not
    after the timeout (600 s here), and names it; a barrier too."""
    ar = _one_rank([os.getpid(), os.getpid()], timeout=600)
    peer = A.SharedMemoryAllreduce(ar._mm, 1, 2, 64, ar.pids, 600)  # rank 1's view of the same mapping
    peer.abort()
    with pytest.raises(A.PeerAborted, match=r"Rank\(s\) \[1\] of the process group failed"):
        ar.allreduce_(torch.ones(8, dtype=torch.float64))
    with pytest.raises(A.PeerAborted):
        ar.barrier()
    peer.close()
    ar.close()


def test_one_rank_alone_sums_nothing_and_a_tensor_over_capacity_is_refused():
    ar = _one_rank([os.getpid()], timeout=1.0)
    t = torch.arange(8, dtype=torch.float64)
    assert ar.allreduce_(t) is t and t.tolist() == list(range(8))
    with pytest.raises(ValueError, match="72 bytes over slots of 64"):
        ar.allreduce_(torch.zeros(9, dtype=torch.float64))
    ar.close()


# ---------------------------------------------------------------- the shared region and the barrier
def _shared_body(shard, comm, n):
    """Each rank fills its half of the shared region between allreduces, then reads the whole after a barrier."""
    with process_group(comm) as store:
        ar = A.create(comm.rank, comm.world_size, 64, comm.timeout, shared_bytes=8 * n, store=store)
        if ar is None:
            return None
        try:
            region = ar.shared.view(np.float64)
            lo, hi = comm.rank * n // 2, (comm.rank + 1) * n // 2
            out = []
            for k in range(5):
                region[lo:hi] = np.arange(lo, hi) + 1000.0 * k
                ar.barrier()
                out.append(region.copy())
                t = torch.full((3,), float(comm.rank + k), dtype=torch.float64)
                ar.allreduce_(t)  # the barrier and the allreduce share one sequence
                out.append(t.numpy().copy())
                ar.barrier()  # no rank writes the next k before every rank has read this one
            return out
        finally:
            ar.close()


def test_every_rank_sees_the_shared_region_whole_after_a_barrier(two_ranks):
    n = 10_001
    outs = run_collective(two_ranks, _shared_body, n)
    assert all(o is not None for o in outs)
    for out in outs:
        for k in range(5):
            np.testing.assert_array_equal(out[2 * k], np.arange(n) + 1000.0 * k)
            np.testing.assert_array_equal(out[2 * k + 1], np.full(3, 2.0 * k + 1))


def _fds():
    """The memfds this process has open (other descriptors come and go with the worker's own comms)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:"):
                out.add(fd)
        except OSError:
            pass
    return out


def _no_memfd_body(shard, comm):
    from unittest import mock

    def none(*a, **k):
        raise OSError(24, "Too many open files")

    with process_group(comm) as store:
        patch = mock.patch.object(A._POOL, "take", none) if comm.rank == 0 else contextlib.nullcontext()
        before = _fds()
        with patch:
            ar = A.create(comm.rank, comm.world_size, 64, comm.timeout, shared_bytes=1 << 20, store=store)
        return ar is None, sorted(_fds() - before)


def test_no_memfd_for_the_mapping_means_gloo_on_every_rank(two_ranks):
    """Rank 0 cannot make the mapping (no descriptor left): every rank keeps gloo, and no descriptor is left open."""
    assert run_collective(two_ranks, _no_memfd_body) == [(True, []), (True, [])]


def _reuse_body(shard, comm, fail_first):
    """Two groups' mappings in turn: the sums of the second are right whether it reuses the first's memfd."""
    with process_group(comm) as store:
        first = A.create(comm.rank, comm.world_size, 64, comm.timeout, shared_bytes=4096, store=store)
        t = torch.full((5,), float(comm.rank + 1), dtype=torch.float64)
        first.allreduce_(t)
        first.allreduce_(t)  # a sequence number left at 2 in the first mapping
        memfd = first._memfd  # rank 0's (None on the others)
        first.shared[:] = 7  # bytes left behind
        first.barrier()
        first.close(reuse=not fail_first)
        second = A.create(comm.rank, comm.world_size, 64, comm.timeout, shared_bytes=4000, store=store)
        try:
            u = torch.full((5,), 10.0 * (comm.rank + 1), dtype=torch.float64)
            second.allreduce_(u)
            same = second._memfd is memfd if comm.rank == 0 else None
            return t.tolist(), u.tolist(), same, int(second._seqs.max())
        finally:
            second.close(reuse=True)


@pytest.mark.parametrize("fail_first", [False, True], ids=["closed-for-reuse", "closed-after-a-failure"])
def test_a_mapping_given_back_serves_the_next_group_from_a_clean_start(two_ranks, fail_first):
    """Rank 0's memfd goes back to its pool when the run closes it for reuse, and the next group (a smaller
    one: within the pool's slack) takes it: its sequence numbers start again at 0, so its first sum waits for
    both ranks' new tensors.  A mapping closed after a failure is not reused."""
    outs = run_collective(two_ranks, _reuse_body, fail_first)
    assert [o[:2] for o in outs] == [([6.0] * 5, [30.0] * 5)] * 2
    assert outs[0][2] is (not fail_first)
    assert [o[3] for o in outs] == [1, 1]


def test_a_silent_rank_at_a_barrier_is_an_error_after_the_timeout():
    ar = _one_rank([os.getpid(), os.getpid()], timeout=0.3)
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[1\] did not arrive within 0.3 s"):
        ar.barrier()
    ar.close()
