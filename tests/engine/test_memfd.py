"""The memfd pool shared by the placement and the tree-sum: reuse by size, the byte cap, the idle expiry."""

import os
import time

import pytest

from dask_estimators.engine.data import _memfd

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd")


def _is_open(m):
    """Whether ``m``'s memfd is still open: its descriptor number still names the same file.  (Once closed, the
    number is free, and another thread of this process, such as the test cluster's comms, may open something else
    under it.)"""
    try:
        st = os.fstat(m.fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == m._test_identity


def _track(m):
    st = os.fstat(m.fd)
    m._test_identity = (st.st_dev, st.st_ino)
    return m


def test_reuse_within_slack_only():
    pool = _memfd.Pool("test", max_bytes=1 << 30, idle_seconds=60)
    m = pool.take(10_000)
    assert m.size == 10_000 and os.fstat(m.fd).st_size == 10_000
    pool.give_back(m)
    for n in (20_000, 5_000):  # too small for it; far bigger than asked, with no slack
        other = pool.take(n)
        assert other is not m and other.size == n
        other.close()
    assert pool.take(7_000, slack=1.5) is m  # within 1.5 times
    pool.give_back(m)
    assert pool.take(10_000) is m


def test_another_process_opens_it_through_proc():
    m = _track(_memfd.Memfd(4096))
    m.mapping()[:5] = b"hello"
    with open(m.path, "rb") as f:
        assert f.read(5) == b"hello"
    m.close()
    assert not _is_open(m)


def test_cap_closes_the_oldest_free_ones():
    pool = _memfd.Pool("test", max_bytes=25_000, idle_seconds=60)
    ms = [_track(pool.take(10_000)) for _ in range(3)]
    for m in ms:
        pool.give_back(m)
    assert pool.free_bytes() == 20_000
    assert not _is_open(ms[0]) and _is_open(ms[1]) and _is_open(ms[2])


def test_free_ones_are_closed_after_idle_seconds():
    pool = _memfd.Pool("test", max_bytes=1 << 30, idle_seconds=0.2)
    a, b = _track(pool.take(4096)), _track(pool.take(4096))
    pool.give_back(a)
    assert pool.free_bytes() == 4096
    deadline = time.monotonic() + 5
    while pool.free_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.free_bytes() == 0 and not _is_open(a)
    assert _is_open(b)  # in use: never closed by the pool
    pool.give_back(b)  # the timer is armed again for later frees
    deadline = time.monotonic() + 5
    while pool.free_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _is_open(b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
@pytest.mark.parametrize("when", ["free at the fork", "in use at the fork"])
def test_a_forked_child_never_reuses_its_parents_memfds(when):
    """A forked child's copy of a memfd names the parent's memory: a child whose pool handed it one wrote its own
    data over the parent's (a multiprocessing pool of fits after a fit in the parent gave wrong models in both)."""
    pool = _memfd.Pool("test-fork", max_bytes=1 << 30, idle_seconds=60)
    m = pool.take(4096)
    m.mapping()[:4] = b"mine"
    if when == "free at the fork":
        pool.give_back(m)
    pid = os.fork()
    if pid == 0:  # the child: take memory of that size, as its next placement would, and write into it
        code = 1
        try:
            if when == "in use at the fork":
                pool.give_back(m)  # what the parent was using when it forked, given back here
            got = pool.take(4096)
            got.mapping()[:4] = b"kids"
            code = 0 if got is not m else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child was handed its parent's memfd"
    assert m.mapping()[:4] == b"mine"
    if when == "free at the fork":
        assert pool.take(4096) is m  # the parent's own pool is as it was
    m.close()
