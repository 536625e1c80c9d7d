"""
Reloading the configuration on SIGHUP (an addition of ours).

The SIGHUP handler (:mod:`pgstatus.signals`, which owns every signal)
does no work: it reopens the log output and schedules the reload on the
reactor thread with ``reactor.callFromThread``.  What a reload reads is
here (:class:`EnvFileReloader`), and what it changes is decided here
(:func:`plan_reload`); :meth:`pgstatus.service.PgStatusService.reload`
applies it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

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
