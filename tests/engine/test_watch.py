"""The engine's waits on Dask futures: woken by the futures' done callbacks, bounded in time, never fooled by a
callback that distributed runs late."""

import threading
import time

import pytest

from dask_estimators.engine import _watch


def _sleep(s):
    time.sleep(s)
    return s


def _fail():
    raise ValueError("this task fails")


def test_done_waits_for_every_future_and_no_longer(client):
    slow = client.submit(_sleep, 0.5, pure=False)
    quick = client.submit(_sleep, 0.0, pure=False)
    quick.result()
    done = _watch._Done([quick, slow])
    t0 = time.monotonic()
    assert not done.wait(0.05)  # the slow one is running
    assert time.monotonic() - t0 < 0.4
    assert done.wait(30) and slow.done()
    assert _watch._Done([quick, slow]).wait(0)  # every future done already: at once


def test_a_failed_or_cancelled_future_is_done(client):
    failed = client.submit(_fail, pure=False)
    cancelled = client.submit(_sleep, 1.0, pure=False)  # a cancelled task runs on: its worker is busy till then
    done = _watch._Done([failed, cancelled])
    assert not done.wait(0.2)
    cancelled.cancel()
    assert done.wait(30)
    assert failed.status == "error" and cancelled.status == "cancelled"


def test_a_callback_held_up_does_not_hold_the_wait(client):
    """distributed runs the done callbacks of a process in one thread: a user's slow callback delays ours, and
    the wait then finds the futures done by looking at them when its slice ends."""
    release = threading.Event()
    blocker = client.submit(_sleep, 0.0, pure=False)
    blocker.add_done_callback(lambda _f: release.wait(30))  # holds distributed's callback thread
    blocker.result()
    time.sleep(0.2)  # the blocking callback has started
    try:
        f = client.submit(_sleep, 0.0, pure=False)
        f.result()
        done = _watch._Done([client.submit(_sleep, 0.01, pure=False)])
        t0 = time.monotonic()
        while not done.wait(0.2):  # its callback cannot run yet: the slice ends and the futures are looked at
            assert time.monotonic() - t0 < 10
    finally:
        release.set()


@pytest.mark.parametrize("fn", [_watch.wait_done, _watch.wait_results])
def test_the_waits_time_out_while_a_future_runs(client, fn):
    f = client.submit(_sleep, 1.5, pure=False)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        fn([f], client, [], timeout=0.3)
    assert time.monotonic() - t0 < 1.2
    f.cancel()
