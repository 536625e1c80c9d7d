"""
``twistd pgstatus``: the plugin's :class:`Options` and :func:`makeService`,
and :class:`ProcessService`, what a process adds around the service.  The
only module that picks the global reactor, and only when it is called
without one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from twisted.application.service import MultiService
from twisted.python import usage

from pgstatus.config.environ import load_config
from pgstatus.config.files import env_file_path, process_environ, with_env_file
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config, ConfigError
from pgstatus.fdlimit import raise_nofile_limit
from pgstatus.logging.observers import LevelFilter
from pgstatus.logging.twistd import factory_observer, install_observer, reopener
from pgstatus.memory import settle
from pgstatus.service import PgStatusService
from pgstatus.signals import ProcessSignals


class Options(usage.Options):
    """
    ``twistd pgstatus`` is configured by its ``pg_status__*`` environment
    variables, as the original service is; its one option checks them
    without starting.
    """

    synopsis = "[--check-config]"
    longdesc = (
        "Polls the PostgreSQL hosts named in pg_status__hosts and serves their "
        "roles and replica lag over HTTP. Configured by pg_status__* environment "
        "variables; see the README."
    )
    optFlags = [["check-config", None,
                 "Check the configuration (the environment and pg_status__env_file), "
                 "print every problem and exit: 0 if pg-status would start, 2 if not. "
                 "Nothing listens or connects."]]

    def postOptions(self) -> None:
        """
        With ``--check-config``, check and exit, before twistd does anything
        (no pid file, no log file).  twistd's own options are parsed by
        then, so the log file a start would open is checked too.
        """
        if self["check-config"]:
            from pgstatus.config.check import run_check
            from pgstatus.logging.twistd import log_file_error

            error = log_file_error(self.parent)
            raise SystemExit(run_check(process_environ(), sys.stdout,
                                       () if error is None else (error,)))


def make_service(config: Config, reactor: Any = None,
                 environ: Mapping[str, str] | None = None) -> PgStatusService:
    """
    Build the real service for ``config``: PostgreSQL probes, the HTTP
    listener on the fast path's transport, reloads from
    ``pg_status__env_file`` when it is set.

    :param reactor: the global reactor (installed here) by default.
    :param environ: the process environment ``config`` came from
        (:func:`process_environ` by default); a reload applies the
        environment file over it again.
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    if config.http_listen:
        check_endpoint(reactor, config.http_listen)
    environ = environ if environ is not None else process_environ()
    path = env_file_path(environ)
    reloader = None
    if path is not None:
        from pgstatus.config.reload import EnvFileReloader

        reloader = EnvFileReloader(path, environ)
    return PgStatusService(ConfigProvider(config), reactor, reloader=reloader)


class ProcessService(MultiService):
    """
    The service as a process runs it (``twistd pgstatus``, ``pg-status``):
    :class:`PgStatusService` plus what belongs to the process.

    - Under twistd, our log observer becomes the application's (twistd
      starts logging after the service joins the application: see
      :func:`pgstatus.logging.twistd.install_observer`).  A log file that
      cannot be opened ends the process as a configuration error does (one
      line naming ``--logfile``, exit status 2), before anything listens.
    - The signals: :class:`pgstatus.signals.ProcessSignals`, their one
      owner, stops (after ``pg_status__shutdown_delay_ms``), reloads and
      reopens the log output.
    - Once started, what start-up made is frozen out of the collector's
      work (:func:`pgstatus.memory.settle`).

    :param service: the service.
    :param reactor: the reactor it runs on.
    :param server_options: twistd's options (the plugin options'
        ``parent``), or ``None`` outside twistd.
    :ivar service: the :class:`PgStatusService`.
    :ivar signals: the :class:`~pgstatus.signals.ProcessSignals`, once
        started.
    """

    def __init__(self, service: PgStatusService, reactor: Any,
                 server_options: Any = None) -> None:
        super().__init__()
        self.service = service
        self._reactor = reactor
        self._server_options = server_options
        self._observer: Any = None
        self.signals: ProcessSignals | None = None
        service.setServiceParent(self)

    def setServiceParent(self, parent: Any) -> None:
        """
        Under twistd, make the application log through our observer.
        """
        if self._server_options is not None:
            config = self.service.settings.current
            try:
                self._observer = install_observer(parent, self._server_options,
                                                  config.log_level, config.log_format)
            except ConfigError as e:
                from pgstatus.config.check import refuse_start

                refuse_start(e)
        super().setServiceParent(parent)

    def startService(self) -> None:
        """
        Start the service and the signals' owner (which installs its
        handlers once the reactor runs), then freeze what start-up made.
        """
        svc = self.service
        # the observer a reload reconfigures: ours, or twistd --logger's
        # (made by now: twistd starts logging before it starts the service)
        observer = self._observer or factory_observer()
        if isinstance(observer, LevelFilter):
            svc.log_observer = observer
        if self.signals is None:
            self.signals = ProcessSignals(
                self._reactor, delay_ms=lambda: svc.settings.current.shutdown_delay_ms,
                drain=svc.drain, reload=svc.reload if svc.reload_source is not None else None,
                reopen=reopener(self._observer))
            self.signals.setServiceParent(self)
        super().startService()
        # the process's start-up is over: its objects stay for good
        settle()


def check_endpoint(reactor: Any, description: str) -> None:
    """
    Parse ``pg_status__http_listen`` as the listener will, before anything
    listens.

    :raise ConfigError: it is not an endpoint description this Twisted
        (and its installed extras) can listen on.
    """
    from pgstatus.listening import description_endpoint

    try:
        description_endpoint(reactor, description)
    except ImportError as e:
        raise ConfigError("pg_status__http_listen",
                          f"{description!r} needs a module that is not installed ({e}); "
                          "TLS needs pyOpenSSL: pip install 'pg-status[tls]'") from None
    except Exception as e:
        raise ConfigError("pg_status__http_listen",
                          f"not a Twisted endpoint description: {e}") from None


def makeService(options: Options, reactor: Any = None) -> ProcessService:
    """
    The ``twistd`` entry point: read the environment, build the service.
    A configuration error prints one line naming the variable and exits with
    status 2 before anything listens.

    Runs once per process (``twistd pgstatus`` and ``pg-status`` alike),
    before the service listens: the soft open-files limit is raised here,
    so that the service's connection caps are computed from the raised one.
    """
    raise_nofile_limit()
    environ = process_environ()
    try:
        config = load_config(with_env_file(environ))
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        return ProcessService(make_service(config, reactor, environ=environ), reactor,
                              options.parent)
    except ConfigError as e:
        from pgstatus.config.check import refuse_start

        refuse_start(e)
