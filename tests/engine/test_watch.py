"""The engine's waits on Dask futures: woken by the futures' done callbacks, bounded in time, never fooled by a
callback that distributed runs late."""

import threading
import time

import pytest

from dask_estimators.engine.cluster import _watch


def _sleep(s):
    time.sleep(s)
    return s


def _fail():
    raise ValueError("this task fails")


def _blocked(name):
    """Runs until the distributed Event ``name`` is set: a future that cannot finish before the test says so."""
    import distributed

    distributed.Event(name).wait(60)
    return name


@pytest.fixture
def gate(client):
    """A distributed Event (set at the end, so that nothing stays blocked) and its name."""
    import uuid

    import distributed

    name = f"test-watch-{uuid.uuid4().hex}"
    event = distributed.Event(name, client=client)
    yield name
    event.set()


def test_done_waits_for_every_future_and_no_longer(client, gate):
    import distributed

    slow = client.submit(_blocked, gate, pure=False)
    quick = client.submit(_sleep, 0.0, pure=False)
    quick.result()
    done = _watch._Done([quick, slow])
    assert not done.wait(0.05)  # the slow one cannot finish: the wait ends at its timeout, not with the future
    assert not slow.done()
    distributed.Event(gate, client=client).set()
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
        # its callback cannot run yet: a slice ends and the futures are looked at (50 slices: a bound, not a timing)
        assert any(done.wait(0.2) for _ in range(50))
    finally:
        release.set()


@pytest.mark.parametrize("fn", [_watch.wait_done, _watch.wait_results])
def test_the_waits_time_out_while_a_future_runs(client, fn, gate):
    f = client.submit(_blocked, gate, pure=False)
    with pytest.raises(TimeoutError):
        fn([f], client, [], timeout=0.3)
    assert not f.done()  # the wait gave up while the future ran: it cannot finish before the gate opens
    f.cancel()


def test_letting_go_on_the_clients_event_loop_releases_without_an_unawaited_cancel(client):
    """Kept data collected on the client's own event-loop thread: ``client.cancel`` there returns a coroutine
    (the client is asynchronous in its loop's thread) that nothing awaited, a RuntimeWarning at collection, and
    the futures stayed held.  They are released instead."""
    import gc
    import warnings

    futs = client.map(lambda i: i + 1, range(3), pure=False)
    client.gather(futs)
    keys = [f.key for f in futs]

    async def on_the_loop(held):
        _watch._cancel(client, held, cancel=True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.sync(on_the_loop, futs)
        del futs
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)], [str(w.message) for w in caught]
    deadline = time.monotonic() + 10
    while any(k in client.refcount and client.refcount[k] for k in keys) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(client.refcount.get(k) for k in keys)
