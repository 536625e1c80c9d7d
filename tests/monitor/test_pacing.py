"""
Check starts paced over reactor turns (:class:`StartPacer`): checks that fall
due together start for a bounded time per turn, the rest in the next turns,
in order; a monitor stopped meanwhile does not start, nor starts twice once
started again.  A test clock's time stands still while callbacks run, so
the starts here move it on by hand: each takes 0.4 ms, more than a third of
the 1 ms budget.
"""

from __future__ import annotations

from fakeprobe import FakeProbe
from twisted.internet.task import Clock

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.service import MonitorService
from pgstatus.monitor.turns import START_BUDGET, StartPacer

#: the time one start takes here
START = 0.0004


class TurnClock:
    """
    A reactor's time and timers, one turn at a time: what is called later
    runs at the next :meth:`turn` (as a reactor runs a ``callLater(0)`` made
    in one turn in the next, after polling for I/O), and time moves only as
    the test says.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[Clock] = []

    def seconds(self) -> float:
        return self.now

    def callLater(self, delay, f, *args):
        call = Clock().callLater(0, f, *args)  # a DelayedCall: active(), cancel()
        self.calls.append(call)
        return call

    def turn(self) -> None:
        calls, self.calls = self.calls, []
        for call in calls:
            if call.active():
                call.called = 1
                call.func(*call.args)


def test_starts_beyond_the_budget_wait_for_the_next_turns_in_order():
    clock = TurnClock()
    pacer = StartPacer(clock)
    ran: list[int] = []

    def start(i: int):
        def run() -> None:
            ran.append(i)
            clock.now += START
        return run

    for i in range(8):
        pacer.admit(start(i))
    # 0, 0.4 and 0.8 ms into the turn: within the budget; the fourth waits
    assert ran == [0, 1, 2] and pacer.waiting == 5
    turns = [3]
    while pacer.waiting:
        n = len(ran)
        clock.turn()
        turns.append(len(ran) - n)
    assert turns == [3, 3, 2]
    assert ran == list(range(8))
    assert START * 3 > START_BUDGET > START * 2
    # the turn after the last start ends that turn; a later start runs at once
    clock.turn()
    assert clock.calls == []
    pacer.admit(start(8))
    assert ran[-1] == 8


def test_a_standing_clock_never_defers():
    """
    Starts that take no time on the clock (a test clock) all run at once.
    """
    clock = Clock()
    pacer = StartPacer(clock)
    ran: list[int] = []
    for i in range(500):
        pacer.admit(lambda i=i: ran.append(i))
    assert ran == list(range(500)) and pacer.waiting == 0


class SlowProbe(FakeProbe):
    """
    A probe whose check start takes :data:`START` on the clock.
    """

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def check(self, started, deadline):
        d = super().check(started, deadline)
        self.clock.rightNow += START
        return d


def _service(n: int) -> tuple[Clock, MonitorService, list[SlowProbe]]:
    clock = Clock()
    probes = [SlowProbe(clock) for _ in range(n)]
    config = load_config({"pg_status__hosts": ",".join(f"h{i}" for i in range(n))})
    svc = MonitorService(ConfigProvider(config), clock, probe_factory=lambda i: probes[i])
    return clock, svc, probes


def test_many_hosts_start_over_several_turns_each_once():
    clock, svc, probes = _service(10)
    svc.startService()
    assert [len(p.starts) for p in probes] == [1, 1, 1] + [0] * 7
    # (a Clock runs the next turns in one advance, its time having moved)
    clock.advance(0)
    assert all(len(p.starts) == 1 for p in probes)
    # started in host order, each a start's time after the one before
    starts = [p.starts[0] for p in probes]
    assert starts == sorted(starts) and starts[-1] - starts[0] < 0.005
    for p in probes:
        p.fail()
    # every host's next check is due a period after its own start
    clock.advance(0.99 - (clock.seconds() - starts[0]))
    assert all(len(p.starts) == 1 for p in probes)
    clock.advance(0.02)
    assert all(len(p.starts) == 2 for p in probes)
    assert all(1.0 <= p.starts[1] - p.starts[0] < 1.03 for p in probes)


def test_a_monitor_stopped_while_waiting_does_not_start():
    clock, svc, probes = _service(5)
    svc.startService()
    waiting = svc.monitors[4]
    assert probes[4].starts == []
    waiting.stop()
    for _ in range(3):
        clock.advance(0)
    assert probes[4].starts == [] and all(len(p.starts) == 1 for p in probes[:4])


def test_a_monitor_stopped_and_started_while_waiting_starts_once():
    clock, svc, probes = _service(5)
    svc.startService()
    again = svc.monitors[4]
    again.stop()
    again.start()  # waits again, behind its own earlier place
    for _ in range(3):
        clock.advance(0)
    assert again.checks == 1 and len(probes[4].starts) == 1


def test_stopping_polling_drops_the_waiting_starts_and_the_turn():
    clock, svc, probes = _service(6)
    svc.startService()
    svc.stopService()
    assert [c for c in clock.getDelayedCalls() if c.active()] == []
    clock.advance(5)
    assert [len(p.starts) for p in probes] == [1, 1, 1, 0, 0, 0]
