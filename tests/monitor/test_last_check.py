"""
When each host's last check ended (``pgstatus_host_last_check_completed_seconds``
in ``/metrics``): set by every check that ends, successful, failed or cut
by its deadline; left alone by a check that never ends, so that a stalled
schedule shows as an old time; forgotten while the schedule is stopped.
Driven by ``twisted.internet.task.Clock``: no I/O, no real time.
"""

from __future__ import annotations

from fakeprobe import master_obs, replica_obs
from test_scheduling import make


def last(svc) -> list[float | None]:
    """Each host's last completed check, as ``/metrics`` reads it (to the µs)."""
    return [None if c.last_completed is None else round(c.last_completed, 6)
            for c in svc.host_counters()]


def test_every_ended_check_counts() -> None:
    """
    None before the first check ends; then the end of the latest check,
    whether it succeeded, failed, or was cut at query_timeout_ms.
    """
    clock, svc, (p, q) = make(2, sleep_ms="1000", query_timeout_ms="300")
    svc.startService()
    assert last(svc) == [None, None]
    clock.advance(0.1)
    p.answer(master_obs(clock))
    assert last(svc) == [0.1, None]
    clock.advance(0.05)
    q.fail()
    assert last(svc) == [0.1, 0.15]
    clock.advance(0.85)  # both check again at 1.0; q's check gets no answer
    p.answer(master_obs(clock))
    assert last(svc) == [1.0, 0.15]
    clock.advance(0.3)  # q's deadline
    assert q.aborts == 1
    assert last(svc) == [1.0, 1.3]


def test_a_check_that_never_ends_leaves_the_time_behind() -> None:
    """
    A check whose probe ignores the abort at its deadline (a stuck
    connection, a bug) ends nothing: the host's time stays at its previous
    check while the clock runs on, which is what the stalled-checks alert
    watches; the other host's time keeps up.
    """
    clock, svc, (p, q) = make(2, sleep_ms="1000", query_timeout_ms="300")
    q.abort = lambda: None  # type: ignore[method-assign]
    svc.startService()
    p.answer(master_obs(clock))
    q.answer(replica_obs(clock))
    for _ in range(30):
        clock.advance(1.0)
        if p.pending is not None:
            p.answer(master_obs(clock))
    assert last(svc) == [30.0, 0.0]
    assert q.pending is not None


def test_forgotten_while_not_polling() -> None:
    """
    A follower that mirrors a hub checks nothing: stopped polling, the times
    are gone (not left to age); polling again, each comes back with the
    host's first check of the new schedule.
    """
    clock, svc, (p,) = make(1, sleep_ms="1000", query_timeout_ms="300")
    svc.startService()
    clock.advance(0.2)
    p.answer(master_obs(clock))
    assert last(svc) == [0.2]
    svc.stop_polling()
    clock.advance(60)
    assert last(svc) == [None]
    svc.start_polling()
    assert last(svc) == [None]
    clock.advance(0.1)
    p.answer(master_obs(clock))
    assert last(svc) == [60.3]


def test_not_set_by_a_check_ended_by_the_stop() -> None:
    """
    A check in progress when polling stops is aborted; that end is not a
    completed check of the host.
    """
    clock, svc, (p,) = make(1, sleep_ms="1000", query_timeout_ms="300")
    svc.startService()
    clock.advance(0.1)
    svc.stop_polling()
    assert p.aborts == 1
    assert last(svc) == [None]
