"""
The shipped alert rules on a real Prometheus server (Debian's package,
``tests/promserver.py``) scraping a real pg-status (``twistd``, as
``tests/daemon.py`` runs it) that watches the real topology.

``promtool test rules`` (``make rules``) already checks every alert against
made-up series; this checks the rules against what pg-status really
exports, through a real scrape.

The rules are loaded from a copy whose ``for:`` durations are 1 s: the
shipped ones (30 s to 2 minutes, so that a restart or a blip pages nobody)
would hold the test for more than a minute per alert.  Everything else in
the copy, expressions, labels and annotations, is the shipped text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from daemon import ROOT, Daemon
from pgtopology import PgTopology
from promserver import PrometheusServer, prometheus_binary, wait

pytestmark = pytest.mark.pg

RULES = os.path.join(ROOT, "deploy", "prometheus", "pg-status.rules.yml")
#: the job name the shipped PgStatusDown rule expects
JOB = "pg-status"
FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "300"}


def shortened_rules(directory: str) -> str:
    """
    A copy of the shipped rules in ``directory`` with every ``for:`` set to
    1 s (see the module docstring); its path.
    """
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    for group in doc["groups"]:
        for rule in group["rules"]:
            assert "for" in rule, rule  # every shipped alert waits a while
            rule["for"] = "1s"
    path = os.path.join(directory, "pg-status.rules.yml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


@pytest.fixture
def pg_status(guarded_topology: PgTopology) -> Iterator[Daemon]:
    """pg-status watching the topology, checking every 200 ms."""
    daemon = Daemon({**guarded_topology.hosts_env(), **FAST}).start()
    try:
        daemon.wait_ready()
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def prometheus(pg_status: Daemon, tmp_path: Any) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``pg_status`` every second, with the rules loaded."""
    try:
        prometheus_binary()
    except FileNotFoundError as e:
        pytest.fail(str(e))  # never a skip: the package is a test prerequisite
    server = PrometheusServer([f"127.0.0.1:{pg_status.port}"],
                              [shortened_rules(str(tmp_path))], JOB)
    try:
        yield server.start()
    finally:
        server.stop()


def firing(server: PrometheusServer, name: str) -> list[dict[str, Any]]:
    """The firing alerts called ``name``."""
    return [a for a in server.alerts()
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_host_dead_alert_fires_for_a_stopped_replica(guarded_topology: PgTopology,
                                                     pg_status: Daemon,
                                                     prometheus: PrometheusServer) -> None:
    """
    With every host up, Prometheus scrapes pg-status and no host-dead or
    no-master alert is active; once a replica is stopped, PgStatusHostDead
    fires for that host (with the shipped labels and annotations) and for no
    other, while the master stays found.
    """
    topo = guarded_topology
    stopped = topo.replicas[1]

    def all_alive() -> bool:
        result = prometheus.api("query", query="pgstatus_host_alive == 1")["result"]
        return sorted(r["metric"]["host"] for r in result) == sorted(n.host for n in topo.nodes)

    def last_evaluation() -> str:
        (group,) = prometheus.api("rules")["groups"]
        assert all(r["health"] in ("ok", "unknown") for r in group["rules"]), group
        return str(group["lastEvaluation"])

    wait("a scrape with every host alive", all_alive, 30, prometheus)
    # then one more evaluation of the rules, so that they have seen that data
    seen = last_evaluation()
    wait("the next evaluation of the rules", lambda: last_evaluation() != seen, 30,
         prometheus)
    active = {a["labels"]["alertname"] for a in prometheus.alerts()}
    assert not active & {"PgStatusHostDead", "PgStatusNoMaster", "PgStatusDown",
                         "PgStatusNotReady"}, prometheus.alerts()

    stopped.stop()
    alerts = wait("PgStatusHostDead firing", lambda: firing(prometheus, "PgStatusHostDead"),
                  60, prometheus)
    assert len(alerts) == 1, alerts
    labels = alerts[0]["labels"]
    assert labels["host"] == stopped.host, labels
    assert labels["severity"] == "warning"
    assert labels["job"] == JOB
    assert labels["instance"] == f"127.0.0.1:{pg_status.port}"
    assert alerts[0]["annotations"]["summary"] == f"PostgreSQL host {stopped.host} is dead"
    assert not firing(prometheus, "PgStatusNoMaster")
    assert pg_status.get("/master") == (200, topo.primary.host)
