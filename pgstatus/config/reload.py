"""
Reloading the configuration on SIGHUP (an addition of ours).

The signal handler does no work: it chains to the handler that was there
before (the log observer's reopen, see
:func:`pgstatus.logging.twistd.reopen_on_sighup`) and schedules the reload on the
reactor thread with ``reactor.callFromThread``.  What a reload changes is
decided here (:func:`plan_reload`); :class:`pgstatus.tap.PgStatusService`
applies it.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from pgstatus.config.settings import Config

#: settings a running service cannot change: a reload keeps the old values
RESTART_SETTINGS = (
    "http_listen_address",
    "http_port",
    "http_listen",
    "agent_port",
    "http_max_connections",
    "http_idle_timeout_ms",
    "http_header_timeout_ms",
    "follow",
    "follow_timeout_ms",
    # the store's watch is set up at start
    "patroni_etcd",
    "patroni_namespace",
    "patroni_scope",
    "patroni_ttl",
    "patroni_unreadable",
    "patroni_cacert",
    "patroni_cert",
    "patroni_key",
    "patroni_username",
    "patroni_password",
)


@dataclasses.dataclass(frozen=True)
class ReloadPlan:
    """
    What a reload does.

    :ivar config: the configuration to apply (the new one, with the
        settings that need a restart kept at their running values).
    :ivar changed: ``name=value`` of every applied change, in
        :meth:`Config.public_items` order; the password shows as
        ``pg_password=(changed)``.
    :ivar needs_restart: ``name=new_value`` of every change not applied.
    """

    config: Config
    changed: tuple[str, ...]
    needs_restart: tuple[str, ...]


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """
    Compare the running configuration with a newly loaded one.
    """
    before = dict(old.public_items())
    changed = []
    restart = []
    for name, value in new.public_items():
        if before.get(name) == value:
            continue
        if name in RESTART_SETTINGS:
            restart.append(f"{name}={value}")
        else:
            changed.append(f"{name}={value}")
    if old.pg_password != new.pg_password:
        changed.append("pg_password=(changed)")
    if old.patroni_password != new.patroni_password:
        restart.append("patroni_password=(changed)")
    keep = {name: getattr(old, name) for name in RESTART_SETTINGS}
    return ReloadPlan(dataclasses.replace(new, **keep), tuple(changed), tuple(restart))


def install_sighup(reactor: Any, callback: Callable[[], object]) -> Callable[[], None] | None:
    """
    Make SIGHUP call ``callback`` on the reactor thread, after the handler
    installed before (if it is a Python callable, e.g. the log reopen).

    Only the main thread may set signal handlers; elsewhere nothing is
    installed.

    :return: a function that puts the previous handler back (if ours is
        still installed), or ``None`` if nothing was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGHUP)

    def handler(signum: int, frame: FrameType | None) -> None:
        if callable(previous):
            previous(signum, frame)
        reactor.callFromThread(callback)

    signal.signal(signal.SIGHUP, handler)

    def restore() -> None:
        if signal.getsignal(signal.SIGHUP) is handler:
            signal.signal(signal.SIGHUP,
                          previous if previous is not None else signal.SIG_DFL)

    return restore


class EnvFileReloader:
    """
    What a reload reads: ``pg_status__env_file`` applied over the process
    environment the service started with, as at start.

    :param path: the environment file.
    :param environ: the process environment.
    :ivar source: the file, as the reload's log line names it.
    """

    def __init__(self, path: str, environ: Mapping[str, str]) -> None:
        self.source = path
        self._environ = dict(environ)

    def load(self) -> Config:
        """
        The configuration the file and the environment give now.

        :raise ConfigError: the file cannot be read or the result is invalid.
        """
        from pgstatus.config.environ import load_config
        from pgstatus.config.files import ENV_FILE, read_env_file

        values = read_env_file(self.source)
        values.pop(ENV_FILE, None)
        return load_config({**self._environ, **values})
