"""
The Prometheus Operator example, ``deploy/kubernetes/podmonitor.yaml``, and
the ``PrometheusRule`` the Prometheus guide makes from the shipped rules.

PodMonitor and PrometheusRule are custom resources, outside the Kubernetes
API schemas ``kubernetes-validate`` bundles; they are validated against
the Operator's own schemas, as the models ``cloudcoil.models.
prometheus_operator`` generates from its CRDs (types, enumerations,
patterns such as the scrape interval's), strictly: a document must come
back unchanged from the model, so a field the schema does not know (which
the models would drop) fails too.  Then the PodMonitors are held to the
example pods: each selects pods whose pg-status container has the port it
scrapes, every pod that runs pg-status is scraped exactly once, and every
series gets the labels the rules count by.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFESTS = os.path.join(ROOT, "deploy", "kubernetes")
PODMONITOR = "podmonitor.yaml"
RULES = os.path.join(ROOT, "deploy", "prometheus", "pg-status.rules.yml")
GUIDE = os.path.join(ROOT, "docs", "deploy", "prometheus.md")
#: the job the rules' PgStatusDown watches
JOB = "pg-status"
#: the Kubernetes version test_kubernetes.py validates the examples for
KUBERNETES = "1.29"


def load(name: str) -> list[dict[str, Any]]:
    """The documents of ``deploy/kubernetes/<name>``."""
    with open(os.path.join(MANIFESTS, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def strictly_valid(model: Any, doc: dict[str, Any]) -> None:
    """
    ``doc`` validates against ``model`` and comes back from it unchanged
    (nothing unknown dropped, nothing coerced).
    """
    obj = model.model_validate(doc)
    assert obj.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc


def pods() -> list[tuple[str, dict[str, Any]]]:
    """
    ``(file:deployment, pod template)`` of every Deployment in the other
    examples whose pod runs pg-status (a container or an init container
    called ``pg-status``).
    """
    out = []
    for name in sorted(os.listdir(MANIFESTS)):
        if not name.endswith(".yaml") or name == PODMONITOR:
            continue
        for doc in load(name):
            if doc.get("kind") != "Deployment":
                continue
            template = doc["spec"]["template"]
            if any(c["name"] == "pg-status" for c in containers(template)):
                out.append((f"{name}:{doc['metadata']['name']}", template))
    return out


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def test_documents_are_valid_podmonitors() -> None:
    """Every document is a PodMonitor valid against the Operator's schema."""
    from cloudcoil.models.prometheus_operator.v1 import PodMonitor

    docs = load(PODMONITOR)
    assert len(docs) == 2
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
        strictly_valid(PodMonitor, doc)


def test_strictness_catches_an_unknown_field_and_a_bad_interval() -> None:
    """
    The check above is not a formality: a misspelt field and an interval
    Prometheus would not parse are both refused.
    """
    from cloudcoil.models.prometheus_operator.v1 import PodMonitor
    from pydantic import ValidationError

    doc = load(PODMONITOR)[0]
    endpoint = doc["spec"]["podMetricsEndpoints"][0]
    with pytest.raises(AssertionError):
        strictly_valid(PodMonitor, {**doc, "spec": {**doc["spec"], "podMetricEndpoints": []}})
    bad = {**doc, "spec": {**doc["spec"],
                           "podMetricsEndpoints": [{**endpoint, "interval": "15 seconds"}]}}
    with pytest.raises(ValidationError):
        strictly_valid(PodMonitor, bad)


def test_every_pg_status_pod_is_scraped_once() -> None:
    """
    Each PodMonitor selects at least one example pod, on a port of its
    pg-status container, and every example pod that runs pg-status is
    selected by exactly one of them (none missed, none scraped twice).
    """
    monitors = load(PODMONITOR)
    examples = pods()
    assert {e.split(":")[0] for e, _ in examples} >= {"sidecar.yaml", "follower.yaml"}
    chosen: dict[str, list[str]] = {e: [] for e, _ in examples}
    for m in monitors:
        spec = m["spec"]
        assert set(spec["selector"]) == {"matchLabels"}
        wanted = spec["selector"]["matchLabels"]
        (endpoint,) = spec["podMetricsEndpoints"]
        matched = [(e, t) for e, t in examples
                   if wanted.items() <= t["metadata"]["labels"].items()]
        assert matched, m["metadata"]["name"]
        for e, template in matched:
            (pg_status,) = [c for c in containers(template) if c["name"] == "pg-status"]
            assert endpoint["port"] in [p.get("name") for p in pg_status.get("ports", [])], e
            chosen[e].append(m["metadata"]["name"])
    assert all(len(v) == 1 for v in chosen.values()), chosen


def test_series_get_the_rules_labels() -> None:
    """
    Every endpoint scrapes ``/metrics`` and sets ``job`` to the job the
    rules watch and ``pg_cluster`` to a constant: the labels the rules
    count instances by.
    """
    for m in load(PODMONITOR):
        for endpoint in m["spec"]["podMetricsEndpoints"]:
            assert endpoint["path"] == "/metrics"
            set_to = {r["targetLabel"]: r["replacement"] for r in endpoint["relabelings"]
                      if set(r) == {"targetLabel", "replacement"}}
            assert set_to["job"] == JOB
            assert set_to["pg_cluster"]
    with open(RULES) as f:
        assert f'up{{job="{JOB}"}}' in f.read()


def test_prometheus_rule_from_the_guide() -> None:
    """
    The guide's command that wraps the rules file in a PrometheusRule (run
    here without its ``kubectl apply``) makes a resource valid against the
    Operator's schema whose groups are the rules file's.
    """
    from cloudcoil.models.prometheus_operator.v1 import PrometheusRule

    with open(GUIDE) as f:
        (command,) = [b for b in re.findall(r"```sh\n(.*?)```", f.read(), re.S)
                      if "PrometheusRule" in b]
    assert command.rstrip().endswith("| kubectl apply -f -")
    command = command.rstrip()[:-len("| kubectl apply -f -")]
    out = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    doc = yaml.safe_load(out)
    strictly_valid(PrometheusRule, doc)
    assert (doc["kind"], doc["metadata"]["name"]) == ("PrometheusRule", "pg-status")
    with open(RULES) as f:
        assert doc["spec"] == yaml.safe_load(f)


def test_network_policy_rule_for_prometheus() -> None:
    """
    The guide's ingress rule for Prometheus, added to each NetworkPolicy of
    the examples that guards a pod running pg-status, gives a policy valid
    against the Kubernetes API schema (strictly) that admits the
    PodMonitors' port; and each such pod has such a policy, which without
    the rule does not admit that port from other pods (why the guide says
    to add it).
    """
    import kubernetes_validate

    with open(GUIDE) as f:
        (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
                    if "namespaceSelector" in b]
    (rule,) = yaml.safe_load(block)
    ports = {e["port"] for m in load(PODMONITOR) for e in m["spec"]["podMetricsEndpoints"]}
    assert [p["port"] for p in rule["ports"]] == sorted(ports)
    guarded = set()
    for name in sorted(os.listdir(MANIFESTS)):
        if not name.endswith(".yaml") or name == PODMONITOR:
            continue
        for doc in load(name):
            if doc.get("kind") != "NetworkPolicy":
                continue
            selected = doc["spec"]["podSelector"]["matchLabels"]
            for example, template in pods():
                if example.startswith(name + ":") and \
                        selected.items() <= template["metadata"]["labels"].items():
                    guarded.add(example)
            ingress = doc["spec"].get("ingress", [])
            assert not any(r.get("from") is None and any(p.get("port") in ports
                                                         for p in r.get("ports", []))
                           for r in ingress), (name, doc["metadata"]["name"])
            amended = {**doc, "spec": {**doc["spec"], "ingress": [*ingress, rule]}}
            kubernetes_validate.validate(amended, KUBERNETES, strict=True)
    assert guarded == {e for e, _ in pods()}
