"""
The metric table: every family ``GET /metrics`` exports, with its type, its
labels, what it means and on which instances it appears.

:class:`~pgstatus.http.metrics.MetricsRenderer` writes each family's
``# HELP`` and ``# TYPE`` lines from this table (:data:`HEADERS`), and the
metrics reference of the documentation is generated from it, so the names,
types and meanings users read are the ones the code exports.  A test holds
the table to real ``/metrics`` answers of a hub and of a follower: the same
families, in the same order, with the same labels.
"""

from __future__ import annotations

from dataclasses import dataclass

#: on every instance
ALL = "all"
#: on instances that poll PostgreSQL themselves (no ``pg_status__follow``):
#: hubs, sidecars, standalone instances
HUB = "hub"
#: on followers (``pg_status__follow``) only
FOLLOWER = "follower"
#: on instances that watch Patroni's leader key (``pg_status__patroni_etcd``)
PATRONI = "patroni"

_HOST = ("host", "index")


@dataclass(frozen=True, slots=True)
class Family:
    """
    One metric family.

    :ivar name: the family's name; a histogram's samples add ``_bucket``
        (with the ``le`` label), ``_sum`` and ``_count``.
    :ivar kind: ``gauge``, ``counter`` or ``histogram``.
    :ivar labels: the labels of its samples (besides a histogram's ``le``).
    :ivar help: what it means: its ``# HELP`` line.
    :ivar scope: :data:`ALL`, :data:`HUB`, :data:`FOLLOWER` or :data:`PATRONI`.
    """

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    scope: str = ALL

    def header(self) -> str:
        """
        The family's ``# HELP`` and ``# TYPE`` lines.
        """
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"


_F = Family

#: every family, in the order ``/metrics`` writes them
METRICS: tuple[Family, ...] = (
    _F("pgstatus_ready", "gauge", (), "1 once every host completed its first check."),
    _F("pgstatus_hosts_reporting_master", "gauge", (),
       "Live hosts that report master (more than 1: a split brain)."),
    _F("pgstatus_host_alive", "gauge", _HOST, "The host is alive."),
    _F("pgstatus_host_possible_dead", "gauge", _HOST, "The last check of the host failed."),
    _F("pgstatus_host_master", "gauge", _HOST,
       "The host is a master (as of its last successful check)."),
    _F("pgstatus_host_selected_master", "gauge", _HOST,
       "The host is the master /master answers with."),
    _F("pgstatus_host_lag_ms", "gauge", _HOST,
       "Replica time lag in milliseconds (absent when unknown)."),
    _F("pgstatus_host_lag_bytes", "gauge", _HOST,
       "Replica WAL lag in bytes (absent when unknown)."),
    _F("pgstatus_host_sync_by_time", "gauge", _HOST,
       "The host is time-synchronous (sync_by_time in /hosts)."),
    _F("pgstatus_host_sync_by_bytes", "gauge", _HOST,
       "The host is byte-synchronous (sync_by_bytes in /hosts)."),
    _F("pgstatus_host_timeline", "gauge", _HOST, "The host's timeline (absent when unknown)."),
    _F("pgstatus_host_consecutive_failures", "gauge", _HOST,
       "Failed checks since the last successful one."),
    _F("pgstatus_host_checks_total", "counter", _HOST, "Checks started."),
    _F("pgstatus_host_extra_checks_total", "counter", _HOST,
       "Out-of-schedule checks for waiting read-your-writes requests."),
    _F("pgstatus_host_connections_opened_total", "counter", _HOST,
       "PostgreSQL connections opened."),
    _F("pgstatus_host_check_duration_seconds", "histogram", _HOST,
       "Duration of completed checks."),
    _F("pgstatus_host_last_check_completed_seconds", "gauge", _HOST,
       "Unix time at which this instance's last check of the host ended, successful or "
       "failed (absent before the first, and while a follower mirrors a hub)."),
    _F("pgstatus_check_interval_seconds", "gauge", (),
       "pg_status__sleep_ms in seconds: a host's checks start this far apart."),
    _F("pgstatus_http_requests_total", "counter", ("route", "code"),
       "HTTP requests answered, by route and status."),
    _F("pgstatus_replica_fallbacks_total", "counter", ("reason",),
       "Replica requests answered with the master, by reason "
       "(no_replica, lag, min_lsn, timeline)."),
    _F("pgstatus_follow_mode", "gauge", ("mode",),
       "Where host states come from, 1 for the current mode: hub (polling, may be "
       "followed), starting (a follower that neither follows nor polls yet), following "
       "(a hub's snapshots) or polling (a follower polling on its own)."),
    _F("pgstatus_follow_followers", "gauge", (), "Followers streaming now.", HUB),
    _F("pgstatus_follow_snapshots_sent_total", "counter", (),
       "Snapshots encoded for followers (one per change, for all).", HUB),
    _F("pgstatus_follow_hub", "gauge", ("url",),
       "1 for the hub whose stream is open or being opened.", FOLLOWER),
    _F("pgstatus_follow_view_age_seconds", "gauge", (),
       "Seconds since the last event (snapshot or heartbeat) from a hub (absent before "
       "the first).", FOLLOWER),
    _F("pgstatus_follow_switches_total", "counter", (),
       "Switches between following a hub and polling on our own.", FOLLOWER),
    _F("pgstatus_follow_snapshots_total", "counter", (), "Snapshots published.", FOLLOWER),
    _F("pgstatus_patroni_store_up", "gauge", (),
       "1 while Patroni's store is read (the watch open, the last read successful).", PATRONI),
    _F("pgstatus_patroni_store_fresh", "gauge", (),
       "1 while the store was read within patroni_ttl: the leader key decides the master "
       "(else patroni_unreadable does).", PATRONI),
    _F("pgstatus_patroni_leader_revision", "gauge", (),
       "The leader key's mod_revision in etcd (0: no leader key).", PATRONI),
    _F("pgstatus_patroni_leader_age_seconds", "gauge", (),
       "Seconds since the leader key was seen to change holder (absent before the first "
       "read).", PATRONI),
    _F("pgstatus_patroni_leader", "gauge", ("member", "address"),
       "1 for the member holding the leader key, with the address of its conn_url (absent "
       "without a leader key).", PATRONI),
)

#: each family's ``# HELP`` and ``# TYPE`` lines, by name
HEADERS: dict[str, str] = {f.name: f.header() for f in METRICS}
