"""
``twistd pgstatus``: the plugin's :class:`Options` and :func:`makeService`.
The only module that picks the global reactor, and only when it is called
without one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from twisted.python import usage

from pgstatus.config.environ import load_config
from pgstatus.config.files import env_file_path, process_environ, with_env_file
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config, ConfigError
from pgstatus.fdlimit import raise_nofile_limit
from pgstatus.service import PgStatusService


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
                 server_options: Any = None,
                 environ: Mapping[str, str] | None = None) -> PgStatusService:
    """
    Build the real service for ``config``: PostgreSQL probes, the HTTP
    listener on the fast path's transport, reloads from
    ``pg_status__env_file`` when it is set.

    :param reactor: the global reactor (installed here) by default.
    :param server_options: twistd's options, when run by twistd.
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
    return PgStatusService(ConfigProvider(config), reactor, reloader=reloader,
                           server_options=server_options)


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


def makeService(options: Options, reactor: Any = None) -> PgStatusService:
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
        return make_service(config, reactor, server_options=options.parent, environ=environ)
    except ConfigError as e:
        from pgstatus.config.check import refuse_start

        refuse_start(e)
