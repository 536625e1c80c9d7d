"""
The twistd glue: :obj:`observer` for ``twistd --logger`` (handed on as
``pgstatus.logging.twistd.observer``), the observer the tap installs when twistd was
given none, and what reopens its output (on SIGHUP and SIGUSR1, which
:mod:`pgstatus.signals` handles).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable, Mapping
from typing import Any

from twisted.logger import (
    ILogObserver,
)

from pgstatus.config.settings import ConfigError
from pgstatus.logging.observers import LevelFilter, ReopenableFile, make_observer
from pgstatus.logging.syslogging import make_syslog_observer

#: twistd's option that names the log file, as an error about the file names it
LOGFILE_OPTION = "--logfile"


def observer() -> ILogObserver:
    """
    Factory for ``twistd --logger=pgstatus.logging.observer``: stderr in the
    configured level and format.

    Reads the settings with ``pgstatus.config.environ.log_settings``, which
    returns ``(level, fmt)`` and falls back to ``("info", "text")`` for invalid
    values (configuration validation reports them later).
    """
    from pgstatus.config.environ import log_settings
    from pgstatus.config.files import process_environ

    global _factory_observer
    level, fmt = log_settings(process_environ())
    _factory_observer = make_observer(level, fmt)
    return _factory_observer


#: the observer :obj:`observer` made last (twistd's ``--logger``), for reloads
_factory_observer: LevelFilter | None = None


def factory_observer() -> LevelFilter | None:
    """
    The observer that ``twistd --logger=pgstatus.logging.observer`` made,
    if any, so a configuration reload can change its level.
    """
    return _factory_observer


def reopener(obs: ILogObserver | None) -> Callable[[], None] | None:
    """
    What reopens ``obs``'s output (its log file or syslog socket) for log
    rotation, or ``None`` when it has nothing to reopen (stderr).  It only
    flags the observer, which reopens before the next line, so a signal
    handler may call it even while a line is being written:
    :mod:`pgstatus.signals` calls it on SIGHUP and SIGUSR1 (Twisted does
    not handle SIGHUP, whose default action ends the process; the init
    script's ``reload`` sends it after log rotation).
    """
    target = obs.observer if isinstance(obs, LevelFilter) else obs
    request: Callable[[], None] | None = getattr(target, "request_reopen", None)
    return request


def _is_daemon(server_options: Mapping[str, Any]) -> bool:
    return not (server_options.get("nodaemon") or server_options.get("debug"))


def observer_for_twistd(
    server_options: Mapping[str, Any], level: str = "info", fmt: str = "text"
) -> ILogObserver:
    """
    Our observer for twistd's logging options.

    ==============================  ===========================================
    twistd options                  output
    ==============================  ===========================================
    ``--syslog [--prefix=P]``        :obj:`SyslogObserver` to ``/dev/log``, tag P
                                    (twistd's default prefix ``twisted``
                                    becomes ``pg-status``)
    ``--logfile=PATH``               append to PATH (reopened on SIGHUP: see
                                    :func:`reopener`)
    ``-n``, no ``--logfile`` or ``-``  stderr
    daemon, no ``--logfile``         ``twistd.log`` (as twistd does)
    daemon, ``--logfile=-``          exit: "Daemons cannot log to stdout"
    ==============================  ===========================================

    Syslog ignores ``fmt``: its body is always the text form.

    :param server_options: twistd's parsed options (``ServerOptions``).
    :param level: Minimum level name.
    :param fmt: ``text`` or ``json``.
    :raise ConfigError: naming ``--logfile``: the log file cannot be opened
        for appending (as :func:`log_file_error` tells beforehand).
    """
    if server_options.get("syslog"):
        prefix = server_options.get("prefix") or "twisted"
        return make_syslog_observer(
            prefix="pg-status" if prefix == "twisted" else prefix, level=level
        )
    if server_options.get("logfile") == "-" and _is_daemon(server_options):
        sys.exit("Daemons cannot log to stdout, exiting!")
    path = log_file_path(server_options)
    if path is None:
        return make_observer(level, fmt)
    try:
        stream = ReopenableFile(path)
    except OSError as e:
        raise ConfigError(LOGFILE_OPTION, _cannot_append(path, e.strerror or str(e))) from None
    return make_observer(level, fmt, stream)


def log_file_path(server_options: Mapping[str, Any]) -> str | None:
    """
    The file :func:`observer_for_twistd` appends to under these options
    (``--logfile``, or ``twistd.log`` for a daemon without one), or
    ``None`` when it writes to syslog or stderr.
    """
    if server_options.get("syslog"):
        return None
    logfile = server_options.get("logfile") or ""
    if not logfile and _is_daemon(server_options):
        logfile = "twistd.log"
    return logfile if logfile and logfile != "-" else None


def _cannot_append(path: str, why: str) -> str:
    return f"cannot open {path!r} for appending: {why}"


def log_file_error(server_options: Mapping[str, Any] | None) -> ConfigError | None:
    """
    The error :func:`install_observer` would raise for these twistd options
    because the log file cannot be opened for appending, found without
    creating or changing anything (for ``--check-config``): the file must
    be writable, or, if it does not exist, its directory.

    :param server_options: twistd's options (the plugin options'
        ``parent``), or :obj:`None` outside twistd.
    """
    if server_options is None or server_options.get("logger"):
        return None
    path = log_file_path(server_options)
    if path is None:
        return None
    why = _append_problem(path)
    return None if why is None else ConfigError(LOGFILE_OPTION, _cannot_append(path, why))


def _append_problem(path: str) -> str | None:
    """
    Why ``open(path, "a")`` would fail, as its error would say, or ``None``.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        directory = os.path.dirname(os.path.abspath(path))
        try:
            st = os.stat(directory)
        except OSError as e:
            return e.strerror
        if not stat.S_ISDIR(st.st_mode):
            return os.strerror(errno.ENOTDIR)
        return None if os.access(directory, os.W_OK | os.X_OK) else os.strerror(errno.EACCES)
    except OSError as e:
        return e.strerror
    if stat.S_ISDIR(st.st_mode):
        return os.strerror(errno.EISDIR)
    return None if os.access(path, os.W_OK) else os.strerror(errno.EACCES)


def install_observer(
    application: Any,
    server_options: Mapping[str, Any] | None = None,
    level: str = "info",
    fmt: str = "text",
) -> ILogObserver | None:
    """
    Make plain ``twistd pgstatus`` log through our observer.

    twistd's :obj:`AppLogger <twisted.application.app.AppLogger>` takes, in this
    order: the ``--logger`` factory, else the application's ``ILogObserver``
    component, else its own default observer. The plugin's service is added
    to the application before logging starts, so the tap's top-level service
    calls this from ``setServiceParent``::

        class Top(MultiService):
            def __init__(self, server_options):
                super().__init__()
                self._server_options = server_options

            def setServiceParent(self, parent):
                install_observer(parent, self._server_options, "info", "text")
                super().setServiceParent(parent)

    with ``server_options = options.parent`` in ``makeService(options)``
    (:class:`pgstatus.tap.ProcessService`).  It sets no signal handler:
    :func:`reopener` gives what SIGHUP and SIGUSR1 should call.

    Nothing is done if ``--logger`` was given (it wins anyway), if the
    application already has an observer component, or if ``application``
    is not a componentized twistd application (e.g. a parent service in a
    test).

    :param application: The parent passed to ``setServiceParent``.
    :param server_options: twistd's ``ServerOptions`` (the plugin options'
        ``parent``), or :obj:`None` outside twistd.
    :param level: Minimum level name.
    :param fmt: ``text`` or ``json``.
    :return: The installed observer, or :obj:`None`.
    :raise ConfigError: naming ``--logfile``: the log file cannot be opened
        for appending.
    """
    if server_options is None or server_options.get("logger"):
        return None
    get = getattr(application, "getComponent", None)
    if get is None or not hasattr(application, "setComponent"):
        return None
    if get(ILogObserver, None) is not None:
        return None
    obs = observer_for_twistd(server_options, level, fmt)
    application.setComponent(ILogObserver, obs)
    return obs
