"""
The Kubernetes examples in ``deploy/kubernetes``: schema-valid, consistent
with pg-status's settings, and run as written.

The manifests are checked against the Kubernetes API schemas
(``kubernetes-validate``, strict: no unknown fields) and for the fields the
examples rely on.  Then their pg-status containers run from the image
``docker/Dockerfile`` builds, on the real Docker engine, with the
manifests' environment (Secret values substituted), CPU and memory limits
and security context (``tests/deploy/kubepod.py``), and the probes' paths
are asked on the probes' ports.

What differs from a cluster, and why: the containers use host networking
(no bridge network on these machines), so they listen on 127.0.0.1 and a
free port instead of 0.0.0.0:8000 and the probes are sent to that port; the
example database host names are replaced by the local topology's, and the
hub's Service name by the hub container's address.  The role of the
Secret's credentials is created on the topology, so the checks really log
in with them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes_validate
import pytest
from kubepod import (
    container,
    container_port,
    docker_options,
    environment,
    find,
    http_probe,
    load,
    secret_values,
)
from pgtopology import PgTopology, free_port, poll

from pgstatus.config.table import known_names, setting

#: the Kubernetes version the examples are validated for
KUBERNETES = "1.30"
CREDENTIALS = ("pg_status__pg_user", "pg_status__pg_password")
HTTP_PORT = int(setting("http_port").default)


def docs_of(name: str) -> list[dict[str, Any]]:
    return load(name)


def pg_status_env(docs: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    return environment(container(find(docs, "Deployment", deployment), "pg-status"), docs)


# -- the manifests as files ----------------------------------------------------


@pytest.mark.parametrize("name", ["sidecar.yaml", "follower.yaml"])
def test_manifests_are_valid_kubernetes(name: str) -> None:
    """Every document validates against the API schema, strictly."""
    docs = docs_of(name)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize("name, deployments", [
    ("sidecar.yaml", ["shop"]),
    ("follower.yaml", ["pg-status-hub", "shop"]),
])
def test_pg_status_containers(name: str, deployments: list[str]) -> None:
    """
    Each pg-status container: only variables pg-status reads (a misspelt one
    would be ignored); credentials from the Secret, not written in; liveness
    on /live and readiness on /ready, on the port pg-status listens on; CPU
    and memory requests equal to limits; a non-root user; each Deployment's
    selector matches its pod labels.
    """
    docs = docs_of(name)
    for deployment in deployments:
        d = find(docs, "Deployment", deployment)
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()
        c = container(d, "pg-status")
        env = environment(c, docs)
        pg_vars = {k for k in env if k.lower().startswith("pg_status__")}
        assert pg_vars <= known_names(), pg_vars - known_names()
        plain = {v["name"] for v in c["env"] if "value" in v}
        assert not plain & set(CREDENTIALS), plain
        assert set(CREDENTIALS) <= set(env)
        port = int(env.get("pg_status__http_port", HTTP_PORT))
        assert "pg_status__http_listen_address" not in env  # 0.0.0.0: the kubelet's probes
        assert http_probe(c, "livenessProbe").path == "/live"
        assert http_probe(c, "readinessProbe").path == "/ready"
        assert http_probe(c, "livenessProbe").port == port
        assert http_probe(c, "readinessProbe").port == port
        assert c["resources"]["requests"] == c["resources"]["limits"]
        assert c["securityContext"]["runAsNonRoot"] is True
        assert c["securityContext"]["runAsUser"] != 0


def test_sidecar_gets_a_tenth_of_a_cpu() -> None:
    """The sidecar requests and is limited to 0.1 vCPU."""
    c = container(find(docs_of("sidecar.yaml"), "Deployment", "shop"), "pg-status")
    assert c["resources"]["requests"]["cpu"] == "100m"
    assert c["resources"]["limits"]["cpu"] == "100m"


def test_followers_point_at_the_hub_service() -> None:
    """
    The followers follow the hub Service's name and port; the Service
    selects the hub pods and targets their pg-status port; followers and
    hubs watch the same hosts (a snapshot for another list is refused).
    """
    docs = docs_of("follower.yaml")
    hub = find(docs, "Deployment", "pg-status-hub")
    service = find(docs, "Service", "pg-status-hub")
    follow = urllib.parse.urlsplit(pg_status_env(docs, "shop")["pg_status__follow"])
    (svc_port,) = service["spec"]["ports"]
    assert (follow.scheme, follow.hostname, follow.port) == (
        "http", service["metadata"]["name"], svc_port["port"])
    assert service["spec"]["selector"].items() <= \
        hub["spec"]["template"]["metadata"]["labels"].items()
    hub_c = container(hub, "pg-status")
    target = svc_port["targetPort"]
    hub_env = pg_status_env(docs, "pg-status-hub")
    assert container_port(hub_c, target) == int(hub_env.get("pg_status__http_port", HTTP_PORT))
    assert "pg_status__follow" not in pg_status_env(docs, "pg-status-hub")
    assert pg_status_env(docs, "shop")["pg_status__hosts"] == \
        pg_status_env(docs, "pg-status-hub")["pg_status__hosts"]


# -- the manifests run ---------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    """GET ``url``: (status, body); connection errors raise ``OSError``."""
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class PodContainer:
    """
    One manifest container run on Docker with host networking.

    :ivar port: where it listens (127.0.0.1), standing in for the probes'
        port in the manifest.
    """

    def __init__(self, engine: Any, image: str, c: dict[str, Any], env: dict[str, str],
                 overrides: dict[str, str]) -> None:
        from testcontainers.core.container import DockerContainer

        self.port = free_port()
        self.manifest = c
        self.options = docker_options(c)
        self.container = DockerContainer(image).with_kwargs(network_mode="host",
                                                            **self.options)
        run_env = {**env, **overrides, "pg_status__http_listen_address": "127.0.0.1",
                   "pg_status__http_port": str(self.port)}
        for k, v in run_env.items():
            self.container.with_env(k, v)

    def start(self) -> PodContainer:
        self.container.start()
        return self

    def probe(self, kind: str) -> tuple[int, str]:
        """Ask the path of the manifest's probe ``kind``, as the kubelet would."""
        p = http_probe(self.manifest, kind)
        return get(f"http://127.0.0.1:{self.port}{p.path}")

    def get(self, path: str) -> tuple[int, str]:
        return get(f"http://127.0.0.1:{self.port}{path}")

    def logs(self) -> str:
        return self.container.get_wrapped_container().logs().decode()[-3000:]

    def state(self) -> dict[str, Any]:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return dict(wrapped.attrs["State"])

    def stop(self) -> None:
        self.container.stop()


@pytest.fixture
def pods(docker_images: Any, docker_engine: Any) -> Iterator[Callable[..., PodContainer]]:
    """Factory of started :class:`PodContainer`\\s, all removed after the test."""
    started: list[PodContainer] = []

    def make(c: dict[str, Any], env: dict[str, str], **overrides: str) -> PodContainer:
        pod = PodContainer(docker_engine, docker_images.pg_status, c, env, overrides)
        started.append(pod)
        return pod.start()

    yield make
    for pod in started:
        try:
            pod.stop()
        except Exception:  # noqa: BLE001 - already gone
            pass


@pytest.fixture
def secret_role(pg_topology: PgTopology) -> Iterator[dict[str, str]]:
    """
    The Secret's role, created on the topology (with pg_monitor, as the
    manifest's comment advises) and dropped after the test; the Secret.
    """
    secret = secret_values(find(docs_of("sidecar.yaml"), "Secret", "pg-status-credentials"))
    assert secret == secret_values(find(docs_of("follower.yaml"), "Secret",
                                        "pg-status-credentials"))
    user, password = secret["pg_user"], secret["pg_password"]
    primary = pg_topology.primary
    primary.sql(f'CREATE ROLE "{user}" LOGIN PASSWORD %s', [password])
    primary.sql(f'GRANT pg_monitor TO "{user}"')
    try:
        pg_topology.wait_replicated(primary.value("SELECT pg_current_wal_lsn()::text"))
        yield secret
    finally:
        primary.sql(f'DROP ROLE "{user}"')


def topology_hosts(topo: PgTopology, manifest_env: dict[str, str]) -> dict[str, str]:
    """The manifest's example hosts replaced by the topology's (as many)."""
    assert len(manifest_env["pg_status__hosts"].split(",")) == len(topo.nodes)
    env = topo.hosts_env()
    return {k: env[k] for k in ("pg_status__hosts", "pg_status__pg_port")}


def wait_ready(pod: PodContainer, timeout: float = 60) -> None:
    """Readiness as the kubelet sees it: the probe's path answers 200."""
    poll(lambda: pod.probe("readinessProbe") == (200, "OK"), timeout, "readiness",
         interval=0.2, context=pod.logs)


def assert_within_limits(pod: PodContainer) -> None:
    """Still running, never killed for memory, under the manifest's limits."""
    state = pod.state()
    assert state["Running"] and not state["OOMKilled"], (state, pod.logs())
    stats = pod.container.get_wrapped_container().stats(stream=False)
    usage = stats["memory_stats"]["usage"]
    print(f"memory {usage / 2**20:.1f} MiB of {pod.options['mem_limit'] / 2**20:.0f} MiB")
    assert usage < pod.options["mem_limit"]


@pytest.mark.docker
@pytest.mark.pg
def test_sidecar_probes_answer_as_the_manifest_expects(pg_topology: PgTopology,
                                                       secret_role: dict[str, str],
                                                       pods: Callable[..., PodContainer],
                                                       blackhole: int) -> None:
    """
    The sidecar container as the manifest writes it (0.1 CPU, its memory
    limit, read-only root, uid 10001, the Secret's credentials): liveness
    answers 200 and readiness 200 once the first checks are done; the
    checks log in with the Secret's role (/master finds the primary).  With
    its only host unreachable, the same container is live at once,
    unready until that host's first check times out, then ready although
    /master has nothing to answer: what the manifest's comments say.
    """
    docs = docs_of("sidecar.yaml")
    c = container(find(docs, "Deployment", "shop"), "pg-status")
    env = environment(c, docs)
    assert env["pg_status__pg_user"] == secret_role["pg_user"]
    pod = pods(c, env, **topology_hosts(pg_topology, env))
    poll(lambda: pod.probe("livenessProbe") == (200, "OK"), 60, "liveness", interval=0.2,
         context=pod.logs)
    wait_ready(pod)
    poll(lambda: pod.get("/master") == (200, pg_topology.primary.host), 30,
         "the master, found with the Secret's credentials", context=pod.logs)
    hosts = json.loads(pod.get("/hosts")[1])
    assert [h["alive"] for h in hosts] == [True] * len(pg_topology.nodes), hosts
    assert_within_limits(pod)

    # every host dead: live, then unready for the first check, then ready
    dead = pods(c, env, pg_status__hosts="127.0.0.1", pg_status__pg_port=str(blackhole),
                pg_status__query_timeout_ms="8000")
    poll(lambda: dead.probe("livenessProbe") == (200, "OK"), 60, "liveness, hosts dead",
         interval=0.2, context=dead.logs)
    code, _ = dead.probe("readinessProbe")
    assert code == 503, dead.logs()
    wait_ready(dead)
    assert dead.get("/master")[0] == 404
    assert json.loads(dead.get("/hosts")[1])[0]["alive"] is False
    assert dead.probe("livenessProbe") == (200, "OK")


@pytest.mark.docker
@pytest.mark.pg
def test_follower_and_hub_probes(pg_topology: PgTopology, secret_role: dict[str, str],
                                 pods: Callable[..., PodContainer]) -> None:
    """
    The hub and a follower sidecar as the follower manifest writes them:
    both live and ready, the follower takes its view from the hub (mode
    ``following`` in its /metrics, one follower on the hub's) and answers
    /master from it.
    """
    docs = docs_of("follower.yaml")
    hub_c = container(find(docs, "Deployment", "pg-status-hub"), "pg-status")
    hub_env = environment(hub_c, docs)
    hub = pods(hub_c, hub_env, **topology_hosts(pg_topology, hub_env))
    wait_ready(hub)
    assert hub.probe("livenessProbe") == (200, "OK")

    follower_c = container(find(docs, "Deployment", "shop"), "pg-status")
    env = environment(follower_c, docs)
    # the Service's name and port stand for the hub pod's address
    follower = pods(follower_c, env, **topology_hosts(pg_topology, env),
                    pg_status__follow=f"http://127.0.0.1:{hub.port}")
    wait_ready(follower)
    assert follower.probe("livenessProbe") == (200, "OK")
    poll(lambda: follower.get("/master") == (200, pg_topology.primary.host), 30,
         "the master, from the hub", context=follower.logs)
    metrics = follower.get("/metrics")[1]
    assert 'pgstatus_follow_mode{mode="following"} 1' in metrics, metrics
    poll(lambda: "pgstatus_follow_followers 1\n" in hub.get("/metrics")[1], 30,
         "the hub counting its follower")
    assert_within_limits(hub)
    assert_within_limits(follower)
