"""
One logging path for pg-status (see :mod:`pgstatus.logging.formats`): line
formats, the stderr/file and syslog observers, and the twistd glue.
``twistd --logger=pgstatus.logging.observer`` names :obj:`observer` here.
"""

from pgstatus.logging.formats import (
    LEVELS,
    MAX_FIELD_CHARS,
    TRUNCATED,
    component_of,
    format_json,
    format_syslog_body,
    format_text,
)
from pgstatus.logging.observers import (
    LevelFilter,
    ReopenableFile,
    SpecFormatObserver,
    make_observer,
)
from pgstatus.logging.syslogging import SyslogObserver, make_syslog_observer
from pgstatus.logging.twistd import (
    install_observer,
    observer,
    observer_for_twistd,
    reopener,
)

__all__ = [
    "LEVELS",
    "LevelFilter",
    "MAX_FIELD_CHARS",
    "TRUNCATED",
    "SpecFormatObserver",
    "SyslogObserver",
    "ReopenableFile",
    "component_of",
    "format_json",
    "format_syslog_body",
    "format_text",
    "install_observer",
    "make_observer",
    "make_syslog_observer",
    "observer",
    "observer_for_twistd",
    "reopener",
]
