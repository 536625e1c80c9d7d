"""
The process's signals have one owner, :mod:`pgstatus.signals`: no other
module sets a handler, whatever order the former owners (the log
observer's reopen, the reload, the stop) are set up in the handlers are
the owner's, and the owner stops at once or after
``pg_status__shutdown_delay_ms``.  Here on a fake reactor whose
``callFromThread`` runs at once and whose time is a :class:`Clock`; the
real ``twistd pgstatus`` process is in ``tests/deploy/test_process_signals.py``.
"""

from __future__ import annotations

import ast
import gc
import itertools
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeprobe import FakeProbe
from twisted.application.service import Application
from twisted.internet.error import ReactorNotRunning
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import ILogObserver, LogLevel

from pgstatus import logging as pglog
from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.listening import tcp_candidates
from pgstatus.service import PgStatusService
from pgstatus.signals import OWNED, ProcessSignals
from pgstatus.tap import ProcessService

ROOT = Path(__file__).resolve().parents[1]
P = "pg_status__"
BASE = {P + "hosts": "m,r", P + "http_listen_address": "127.0.0.1", P + "http_port": "8000"}
#: the functions of the signal module that change how a signal is handled
SETTERS = {"signal", "siginterrupt", "set_wakeup_fd", "pthread_sigmask", "setitimer"}


class FakeReactor:
    """
    What :class:`ProcessSignals` uses of a reactor: ``callFromThread`` runs
    at once, time is a :class:`Clock`, ``callWhenRunning`` hooks wait for
    :meth:`run`.
    """

    def __init__(self, running: bool = True) -> None:
        self.clock = Clock()
        self.running = running
        self.stopped = False
        self.hooks: list[Callable[[], object]] = []

    def callWhenRunning(self, f: Callable[[], object]) -> None:  # noqa: N802 - Twisted's
        if self.running:
            f()
        else:
            self.hooks.append(f)

    def run(self) -> None:
        self.running = True
        for f in self.hooks:
            f()

    def callFromThread(self, f: Callable[..., object], *args: object) -> None:  # noqa: N802
        f(*args)

    def callLater(self, delay: float, f: Callable[..., object], *args: object) -> Any:  # noqa: N802
        return self.clock.callLater(delay, f, *args)

    def stop(self) -> None:
        if self.stopped:
            raise ReactorNotRunning()
        self.stopped = True


class Reloader:
    source = "test environment"

    def load(self) -> Config:
        return load_config(BASE)


def in_memory_service() -> PgStatusService:
    """
    The service on a memory reactor, with fake probes and a reloader.
    """
    reactor = MemoryReactorClock()
    return PgStatusService(ConfigProvider(load_config(BASE)), reactor,
                           probe_factory=lambda i: FakeProbe(),
                           http_listen=tcp_candidates(reactor, "127.0.0.1", 8000),
                           reloader=Reloader())


@pytest.fixture
def handlers_kept() -> Iterator[None]:
    """
    Every signal :mod:`pgstatus.signals` may handle has its handler of
    before the test again after it.
    """
    before = {s: signal.getsignal(s) for s in OWNED}
    yield
    for s, h in before.items():
        signal.signal(s, h if h is not None else signal.SIG_DFL)


def _event(text: str) -> dict[str, Any]:
    return {"log_format": text, "log_level": LogLevel.info, "log_namespace": "pgstatus.main",
            "log_time": 0.0}


def _setters(tree: ast.AST) -> list[int]:
    """
    The lines of ``tree`` that change a signal's handling: a call of
    ``signal.<setter>`` or an import of a setter from ``signal``.
    """
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in SETTERS and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "signal"):
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "signal" and any(
                a.name in SETTERS for a in node.names):
            lines.append(node.lineno)
    return lines


def test_only_pgstatus_signals_sets_handlers() -> None:
    """
    No module of pg-status but :mod:`pgstatus.signals` sets a signal
    handler: two owners of one signal would make the handler in force
    depend on the order they were set up in.
    """
    found = {}
    for path in sorted([*ROOT.joinpath("pgstatus").rglob("*.py"),
                        *ROOT.joinpath("twisted").rglob("*.py")]):
        lines = _setters(ast.parse(path.read_text(), str(path)))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert set(found) == {"pgstatus/signals.py"}, found


STEPS = ("observer", "service", "owner")


@pytest.mark.parametrize("order", list(itertools.permutations(STEPS)), ids="-".join)
def test_one_owner_whatever_the_order(order: tuple[str, ...], tmp_path: Path,
                                      handlers_kept: None) -> None:
    """
    The three former owners' set-ups (the log observer for a file, which
    used to set SIGHUP and SIGUSR1; the service with a reloader, which
    chained a reload onto SIGHUP; the stop signals), in every order: each
    signal's handler is then the one owner's, and one SIGHUP both reopens
    the log file and reloads.
    """
    reactor = FakeReactor()
    obs = pglog.make_observer("info", "text", pglog.ReopenableFile(str(tmp_path / "a.log")))
    reloads: list[int] = []
    owner = ProcessSignals(reactor, reload=lambda: reloads.append(1),
                           reopen=pglog.reopener(obs))
    svc = in_memory_service()
    steps = {
        "observer": lambda: pglog.install_observer(
            Application("pgstatus"), {"nodaemon": True, "logfile": str(tmp_path / "b.log")}),
        "service": svc.startService,
        "owner": owner.startService,
    }
    try:
        for step in order:
            steps[step]()
        wanted = owner.handlers()
        assert set(wanted) == set(OWNED)
        for sig in OWNED:
            assert signal.getsignal(sig) == wanted[sig], signal.Signals(sig).name
        obs(_event("before"))
        (tmp_path / "a.log").rename(tmp_path / "a.log.1")
        signal.raise_signal(signal.SIGHUP)
        obs(_event("after"))
        assert reloads == [1]
        assert (tmp_path / "a.log.1").read_text().endswith("before\n")
        assert (tmp_path / "a.log").read_text().endswith("after\n")
    finally:
        owner.uninstall()
        svc.stopService()


def test_under_twistd_the_owner_installs_after_the_reactor_and_keeps_ignored_sigint(
        tmp_path: Path, handlers_kept: None) -> None:
    """
    :class:`ProcessService` as twistd drives it: joined to the application
    (our observer, for a log file), started, then the reactor starts, which
    sets its own SIGTERM and SIGINT handlers before the hooks of
    ``callWhenRunning`` run.  Then every handled signal is the owner's (a
    SIGINT ignored before stays ignored), a reload reconfigures our
    observer, and the start-up's objects were frozen.
    """
    foreign = {s: (lambda signum, frame: None) for s in OWNED}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reactor = FakeReactor(running=False)
    svc = in_memory_service()
    process = ProcessService(svc, reactor, {"nodaemon": True, "logfile": str(tmp_path / "x.log")})
    app = Application("pgstatus")
    try:
        process.setServiceParent(app)
        observer = app.getComponent(ILogObserver)
        assert isinstance(observer, pglog.LevelFilter)
        process.startService()
        assert gc.get_freeze_count() > 0
        assert svc.log_observer is observer
        # what the reactor's start-up does before the hooks of callWhenRunning
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(s, foreign[s])
        reactor.run()
        owner = process.signals
        assert owner is not None
        wanted = owner.handlers()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            assert signal.getsignal(sig) == wanted[sig], signal.Signals(sig).name
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.raise_signal(signal.SIGTERM)
        assert reactor.stopped
    finally:
        gc.unfreeze()
        if process.signals is not None:
            process.signals.uninstall()
        process.stopService()


@pytest.fixture
def owned(handlers_kept: None) -> Iterator[Callable[..., tuple[ProcessSignals, FakeReactor,
                                                                 list[str]]]]:
    """
    ``owned(delay_ms=...)``: a started :class:`ProcessSignals` on a
    :class:`FakeReactor`, its handlers installed, and the list its drain
    appends to.
    """
    made: list[ProcessSignals] = []

    def make(delay_ms: int = 0, reload: Callable[[], object] | None = None,
             ) -> tuple[ProcessSignals, FakeReactor, list[str]]:
        reactor = FakeReactor()
        drained: list[str] = []
        owner = ProcessSignals(reactor, delay_ms=lambda: delay_ms,
                               drain=lambda: drained.append("drain"), reload=reload)
        owner.startService()
        made.append(owner)
        return owner, reactor, drained

    yield make
    for owner in made:
        owner.uninstall()


def _main_lines(log_events: Any) -> list[str]:
    return [line.split(" ", 1)[1] for line in log_events.text() if " main: " in line]


def test_sigterm_without_delay_stops_at_once(owned: Any, log_events: Any) -> None:
    """
    The default (``pg_status__shutdown_delay_ms=0``): SIGTERM logs the
    original's line and stops the reactor at once; nothing drains.
    """
    owner, reactor, drained = owned()
    signal.raise_signal(signal.SIGTERM)
    assert reactor.stopped and drained == []
    assert reactor.clock.getDelayedCalls() == []
    assert _main_lines(log_events) == ["INFO main: received signal=SIGTERM"]


def test_sigterm_with_delay_drains_then_stops(owned: Any, log_events: Any) -> None:
    """
    With a delay, SIGTERM logs the original's line and one line of ours,
    drains, and stops the reactor when the delay is over, not before.
    """
    owner, reactor, drained = owned(delay_ms=2000)
    signal.raise_signal(signal.SIGTERM)
    assert drained == ["drain"] and not reactor.stopped
    reactor.clock.advance(1.999)
    assert not reactor.stopped
    reactor.clock.advance(0.001)
    assert reactor.stopped
    assert _main_lines(log_events) == [
        "INFO main: received signal=SIGTERM",
        "INFO main: shutdown delayed delay_ms=2000: still answering, /ready answers 503"]


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_second_stop_signal_during_the_delay_stops_at_once(owned: Any, log_events: Any,
                                                           second: int) -> None:
    """
    A second SIGTERM, or a SIGINT, during the delay stops at once (logged
    as the original logs a signal), and the delayed stop is cancelled.
    """
    owner, reactor, drained = owned(delay_ms=2000)
    signal.raise_signal(signal.SIGTERM)
    reactor.clock.advance(0.5)
    signal.raise_signal(second)
    assert reactor.stopped
    assert reactor.clock.getDelayedCalls() == []
    name = signal.Signals(second).name
    assert _main_lines(log_events)[-1] == f"INFO main: received signal={name}"
    assert len(_main_lines(log_events)) == 3


def test_sigint_is_never_delayed(owned: Any, log_events: Any) -> None:
    """
    SIGINT (Ctrl-C) stops at once, whatever the delay.
    """
    owner, reactor, drained = owned(delay_ms=2000)
    signal.raise_signal(signal.SIGINT)
    assert reactor.stopped and drained == []
    assert _main_lines(log_events) == ["INFO main: received signal=SIGINT"]


def test_stop_signals_while_shutting_down_only_log(owned: Any, log_events: Any) -> None:
    """
    Once the owner has stopped (the process is shutting down), a SIGTERM is
    logged and stops nothing more, with or without a delay; a SIGHUP no
    longer reloads.
    """
    reloads: list[int] = []
    owner, reactor, drained = owned(delay_ms=2000, reload=lambda: reloads.append(1))
    signal.raise_signal(signal.SIGHUP)
    assert reloads == [1]
    reactor.stopped = True  # the reactor is stopping
    owner.stopService()
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGHUP)
    assert drained == [] and reactor.clock.getDelayedCalls() == []
    assert reloads == [1]
    assert _main_lines(log_events) == ["INFO main: received signal=SIGTERM"]


def test_delay_is_read_when_the_signal_comes(handlers_kept: None) -> None:
    """
    The delay in force when SIGTERM comes counts (a reload may have changed
    it since the start).
    """
    reactor = FakeReactor()
    delay = [0]
    owner = ProcessSignals(reactor, delay_ms=lambda: delay[0])
    owner.startService()
    try:
        delay[0] = 100
        signal.raise_signal(signal.SIGTERM)
        assert not reactor.stopped
        reactor.clock.advance(0.1)
        assert reactor.stopped
    finally:
        owner.uninstall()


def test_nothing_to_do_on_sighup_leaves_it_alone(handlers_kept: None) -> None:
    """
    Without a log output to reopen and without reloads, SIGHUP and SIGUSR1
    keep their handlers (a terminal's hang-up ends a foreground process,
    as before); off the main thread nothing is installed.
    """
    import threading

    before = {s: signal.getsignal(s) for s in OWNED}
    owner = ProcessSignals(FakeReactor())
    assert set(owner.handlers()) == {signal.SIGTERM, signal.SIGINT}
    try:
        owner.install()
        assert signal.getsignal(signal.SIGHUP) == before[signal.SIGHUP]
        assert signal.getsignal(signal.SIGUSR1) == before[signal.SIGUSR1]
    finally:
        owner.uninstall()
    assert {s: signal.getsignal(s) for s in OWNED} == before
    elsewhere = ProcessSignals(FakeReactor())
    t = threading.Thread(target=elsewhere.install)
    t.start()
    t.join()
    assert {s: signal.getsignal(s) for s in OWNED} == before
