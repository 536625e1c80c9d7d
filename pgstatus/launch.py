"""
``pg-status``: the service under twistd, with the command line a container
or a supervisor wants.

``pg-status [twistd options]`` runs ``twistd --nodaemon --pidfile=
[twistd options] pgstatus``: in the foreground, without a pid file.
``pg-status --daemon [twistd options]`` runs ``twistd [twistd options]
pgstatus``, forked into the background with a pid file, as an init script
wants.  ``pg-status --check-config`` checks the configuration and exits
(see :mod:`pgstatus.config.check`).  The service and its exit statuses are
twistd's; only the help, the version and the message for a bad option speak
of ``pg-status``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.python import usage
from twisted.scripts.twistd import ServerOptions, runApp

#: ``pg-status``'s own option: run as a daemon, as ``twistd pgstatus`` does
DAEMON = "--daemon"
#: the plugin's option (``twistd pgstatus --check-config``), handed on after ``pgstatus``
CHECK_CONFIG = "--check-config"


class Options(ServerOptions):
    """
    twistd's options, with this command's usage and version.
    """

    synopsis = "Usage: pg-status [--daemon] [options]"
    longdesc = (
        "Runs pg-status in the foreground, as twistd --nodaemon --pidfile= "
        "[options] pgstatus does, or with --daemon (first) in the background, as "
        "twistd [options] pgstatus does. The other options are twistd's; "
        "the service itself is configured by pg_status__* environment "
        "variables (see the README). With --check-config, it checks them, prints "
        "every problem and exits: 0 if pg-status would start, 2 if not.")

    def opt_version(self) -> None:
        """
        Print version information and exit.
        """
        from pgstatus import __version__

        print(f"pg-status {__version__}")
        super().opt_version()


def twistd_argv(args: Sequence[str]) -> list[str]:
    """
    twistd's command line for ``pg-status [--daemon] [twistd options]``.

    ``--daemon`` counts only as the first argument: elsewhere it could be
    the value of one of twistd's options, and it is left to twistd.
    ``--check-config``, which is no option of twistd's, is handed to the
    plugin wherever it is.

    :param args: the arguments given to ``pg-status``.
    """
    plugin = ["pgstatus", *(a for a in args if a == CHECK_CONFIG)]
    args = [a for a in args if a != CHECK_CONFIG]
    if len(args) > 0 and args[0] == DAEMON:
        return ["twistd", *args[1:], *plugin]
    return ["twistd", "--nodaemon", "--pidfile=", *args, *plugin]


def main(args: Sequence[str] | None = None) -> None:
    """
    The ``pg-status`` command: what ``twisted.application.app.run`` does for
    twistd, with a bad option reported under this command's name (exit
    status 1).

    :param args: the command's arguments; default ``sys.argv[1:]``.
    """
    sys.argv = twistd_argv(sys.argv[1:] if args is None else args)
    config = Options()
    try:
        config.parseOptions(sys.argv[1:])
    except usage.error as e:
        print(config)
        print(f"pg-status: {e}")
        sys.exit(1)
    runApp(config)


if __name__ == "__main__":  # pragma: no cover - python -m pgstatus.launch
    main()
