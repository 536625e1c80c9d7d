"""
twistd plugin: ``twistd -n pgstatus`` starts the pg-status service.

Kept tiny: ``ServiceMaker`` imports :mod:`pgstatus.tap` only when the
plugin is used.
"""

from twisted.application.service import ServiceMaker

PgStatus = ServiceMaker(
    "pg-status",
    "pgstatus.tap",
    "Poll PostgreSQL hosts; serve their roles and lag over HTTP.",
    "pgstatus",
)
