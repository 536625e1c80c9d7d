"""
The shipped alert rules: ``promtool check rules`` and ``promtool test
rules`` (as ``make rules`` runs them), a firing case and a runbook section
for every alert, valid scrape configurations in the docs; then the rules on
a real Prometheus server (Debian's package, ``tests/promserver.py``)
scraping a real pg-status (``twistd``, as ``tests/daemon.py`` runs it) that
watches the real topology.

``promtool test rules`` checks every alert against made-up series; the real
server checks the rules against what pg-status really exports, through a
real scrape.

The rules are loaded from a copy whose ``for:`` durations are 1 s: the
shipped ones (30 s to 2 minutes, so that a restart or a blip pages nobody)
would hold the test for more than a minute per alert.  Everything else in
the copy, expressions, labels and annotations, is the shipped text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from daemon import ROOT, Daemon
from pgtopology import PgTopology
from promserver import PrometheusServer, prometheus_binary, wait

RULES_DIR = os.path.join(ROOT, "deploy", "prometheus")
RULES = os.path.join(RULES_DIR, "pg-status.rules.yml")
RULE_TESTS = os.path.join(RULES_DIR, "pg-status.rules.test.yml")
RUNBOOK = os.path.join(ROOT, "docs", "deploy", "alerts.md")
GUIDE = os.path.join(ROOT, "docs", "deploy", "prometheus.md")
#: the job name the shipped PgStatusDown rule expects
JOB = "pg-status"
FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "300"}


def promtool(*args: str, cwd: str = RULES_DIR) -> str:
    """
    Run ``promtool`` (Debian's ``prometheus`` package; never a skip: it is a
    test prerequisite, ``.ci/prometheus-deps``); its output, failing the
    test if it fails.
    """
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("no promtool: run .ci/prometheus-deps (apt-get install prometheus)")
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def alert_names() -> list[str]:
    """The shipped alerts, in file order."""
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [r["alert"] for g in doc["groups"] for r in g["rules"]]


def test_promtool_checks_and_unit_tests_pass() -> None:
    """
    ``promtool check rules`` accepts the rules and every case of
    ``promtool test rules`` passes (what ``make rules`` runs).
    """
    assert "SUCCESS" in promtool("check", "rules", "pg-status.rules.yml")
    assert "SUCCESS" in promtool("test", "rules", "pg-status.rules.test.yml")


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """
    Each alert has a promtool case where it fires and one where it does
    not (before its ``for:``, or on series it must ignore), and no case
    names an alert that does not exist.
    """
    with open(RULE_TESTS) as f:
        doc = yaml.safe_load(f)
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for t in case.get("alert_rule_test", []):
            (fired if t["exp_alerts"] else quiet).add(t["alertname"])
    assert fired == set(alert_names())
    assert quiet == set(alert_names())


def test_every_alert_has_a_runbook_section() -> None:
    """
    The runbook page has a section per alert, named as the alert, in the
    rules' order, each saying what it means, what to check and what to do;
    and no section for an alert that does not exist.
    """
    with open(RUNBOOK) as f:
        text = f.read()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert [s.split("\n", 1)[0] for s in sections] == alert_names()
    for s in sections:
        for part in ("**Means:**", "**Check:**", "**Do:**"):
            assert part in s, (s.split("\n", 1)[0], part)


def test_scrape_configurations_in_the_guide_are_valid(tmp_path: Any) -> None:
    """
    Every Prometheus configuration the guide shows passes ``promtool check
    config`` (with the shipped rules in place of the rule file path), and
    keeps the job name the rules watch.  Debian builds Prometheus without
    Kubernetes service discovery, so a ``kubernetes_sd_configs`` block is
    checked here by hand (pod role, the pod's container port name kept) and
    given to promtool as a static target: its relabelling, the part that
    does the work, is still promtool's to check.
    """
    with open(GUIDE) as f:
        blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
    configs = [yaml.safe_load(b) for b in blocks if "scrape_configs:" in b]
    assert len(configs) == 2
    kubernetes = 0
    for i, config in enumerate(configs):
        assert [j["job_name"] for j in config["scrape_configs"]] == [JOB]
        for job in config["scrape_configs"]:
            sd = job.pop("kubernetes_sd_configs", None)
            if sd is None:
                continue
            kubernetes += 1
            assert [c["role"] for c in sd] == ["pod"] and set(sd[0]) <= {"role", "namespaces"}
            keep = job["relabel_configs"][0]
            assert keep == {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                            "regex": "pg-status", "action": "keep"}, keep
            job["static_configs"] = [{"targets": ["127.0.0.1:8000"]}]
        config["rule_files"] = [RULES]
        path = tmp_path / f"prometheus-{i}.yml"
        path.write_text(yaml.safe_dump(config))
        out = promtool("check", "config", str(path), cwd=str(tmp_path))
        assert "SUCCESS" in out, out
    assert kubernetes == 1


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


@pytest.mark.pg
def test_host_dead_alert_fires_for_a_stopped_replica(guarded_topology: PgTopology,
                                                     pg_status: Daemon,
                                                     prometheus: PrometheusServer) -> None:
    """
    With every host up, Prometheus scrapes pg-status and no host-dead,
    no-master or stalled-checks alert is active, and the last check of
    every host is recent as Prometheus reads it (``timestamp(m) - m``, as
    PgStatusChecksStalled does); once a replica is stopped, PgStatusHostDead
    fires for that host (with the shipped labels and annotations: counted
    by host, no instance) and for no other, while the master stays found
    and the stopped host's failed checks still count as completed.
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
                         "PgStatusNotReady", "PgStatusChecksStalled",
                         "PgStatusSplitBrain"}, prometheus.alerts()
    check_ages(prometheus, {n.host for n in topo.nodes})

    stopped.stop()
    alerts = wait("PgStatusHostDead firing", lambda: firing(prometheus, "PgStatusHostDead"),
                  60, prometheus)
    assert len(alerts) == 1, alerts
    labels = alerts[0]["labels"]
    assert labels == {"alertname": "PgStatusHostDead", "host": stopped.host,
                      "severity": "warning", "job": JOB}, labels
    assert alerts[0]["annotations"]["summary"] == f"PostgreSQL host {stopped.host} is dead"
    assert alerts[0]["annotations"]["description"].startswith("1 pg-status instance(s) ")
    assert not firing(prometheus, "PgStatusNoMaster")
    assert pg_status.get("/master") == (200, topo.primary.host)
    check_ages(prometheus, {n.host for n in topo.nodes})


def check_ages(server: PrometheusServer, hosts: set[str]) -> None:
    """
    Prometheus reads a recent last check for each of ``hosts``: under
    2 s old at the scrape (checks every 200 ms), and a check interval of
    0.2 s.
    """
    ages = server.api("query", query="timestamp(pgstatus_host_last_check_completed_seconds)"
                                     " - pgstatus_host_last_check_completed_seconds")["result"]
    by_host = {r["metric"]["host"]: float(r["value"][1]) for r in ages}
    assert set(by_host) == hosts, ages
    assert all(-1 < a < 2 for a in by_host.values()), by_host
    (interval,) = server.api("query", query="pgstatus_check_interval_seconds")["result"]
    assert float(interval["value"][1]) == 0.2
