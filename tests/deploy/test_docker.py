"""
The pg-status image as users run it: built from ``docker/Dockerfile``, run
with host networking (testcontainers' generic ``DockerContainer``) against
the real local topology, and against PostgreSQL in a container.

Every container uses host networking and binds free loopback ports.  The
engine and images come from the ``docker_engine`` / ``docker_images``
session fixtures (``tests/dockerengine.py``): without an engine these tests
skip locally with the reason and fail in CI.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from dockerengine import ROOT, Images
from pgtopology import PgTopology, free_port, poll
from testcontainers.core.container import DockerContainer

pytestmark = [pytest.mark.docker, pytest.mark.pg]

HEALTHCHECK = os.path.join(ROOT, "docker", "healthcheck.sh")


def get(url: str) -> tuple[int, str]:
    """GET ``url``: (status, body); connection errors raise ``OSError``."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def pg_status_container(images: Images, env: dict[str, str], port: int) -> DockerContainer:
    """A pg-status container on the host network, API on 127.0.0.1:``port``."""
    container = DockerContainer(images.pg_status).with_kwargs(network_mode="host")
    for k, v in {**env, "pg_status__http_listen_address": "127.0.0.1",
                 "pg_status__http_port": str(port), "pg_status__sleep_ms": "200"}.items():
        container.with_env(k, v)
    return container


@pytest.fixture
def containers() -> Iterator[list[DockerContainer]]:
    """Started containers to remove after the test (with their volumes)."""
    started: list[DockerContainer] = []
    yield started
    for c in started:
        try:
            c.stop()
        except Exception:  # noqa: BLE001 - already removed
            pass


def health(container: DockerContainer) -> str | None:
    container.get_wrapped_container().reload()
    state = container.get_wrapped_container().attrs["State"]
    return (state.get("Health") or {}).get("Status")


def hosts(base: str) -> list[dict[str, Any]]:
    code, body = get(base + "/hosts")
    assert code == 200, (code, body)
    return json.loads(body)


def healthcheck_cpu(port: int) -> tuple[int, float]:
    """
    Run ``docker/healthcheck.sh`` as the image does (bash), against
    127.0.0.1:``port``: its exit status and the CPU seconds it used.
    """
    env = {"PATH": os.environ["PATH"], "pg_status__http_port": str(port)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc = subprocess.run(["/bin/bash", HEALTHCHECK], env=env, capture_output=True,
                        timeout=10).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, cpu


def test_image_against_local_topology(docker_images: Images, pg_topology: PgTopology,
                                       containers: list[DockerContainer]) -> None:
    """
    The image, run with host networking against the real topology: /live,
    /ready, /master and /hosts answer correctly, the image brings no
    HEALTHCHECK of its own and the documented opt-in check
    (``--health-cmd``) turns healthy, the process runs as the numeric
    non-root uid 10001, and ``docker stop`` ends it with exit status 0 in
    under 2 s.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    c = pg_status_container(docker_images, pg_topology.hosts_env(), port)
    c.with_kwargs(network_mode="host", healthcheck={
        "test": ["CMD", "/bin/bash", "/usr/local/lib/pg-status/healthcheck.sh"],
        "interval": 200_000_000, "timeout": 3_000_000_000, "retries": 3})
    c.start()
    containers.append(c)
    poll(lambda: get(base + "/ready") == (200, "OK"), 30, "/ready in the container",
         context=lambda: c.get_wrapped_container().logs().decode())
    assert get(base + "/live") == (200, "OK")
    assert get(base + "/master") == (200, pg_topology.primary.host)
    listed = hosts(base)
    assert [h["host"] for h in listed] == [n.host for n in pg_topology.nodes]
    assert all(h["alive"] for h in listed)
    assert [h["master"] for h in listed] == [True, False, False]

    inspect = c.get_wrapped_container().attrs
    assert inspect["Config"]["User"] == "10001:10001"
    image = c.get_docker_client().client.images.get(docker_images.pg_status)
    assert not image.attrs["Config"].get("Healthcheck"), image.attrs["Config"]
    top = c.get_wrapped_container().top(ps_args="-o pid,uid,gid,comm")
    assert top["Titles"][:3] == ["PID", "UID", "GID"], top
    assert top["Processes"] and all(p[1:3] == ["10001", "10001"] for p in top["Processes"]), top

    poll(lambda: health(c) == "healthy", 30, "the opted-in health check to report healthy",
         interval=0.2)
    # the opt-in check, inside the container, timed by bash
    timed = c.exec(["/bin/bash", "-c", "TIMEFORMAT='%3U %3S'; "
                    "time /bin/bash /usr/local/lib/pg-status/healthcheck.sh"])
    assert timed.exit_code == 0, timed.output
    user, system = (float(x) for x in timed.output.decode().split()[-2:])
    print(f"healthcheck CPU in the container: {(user + system) * 1000:.0f} ms")

    wrapped = c.get_wrapped_container()
    t0 = time.monotonic()
    wrapped.stop(timeout=10)
    took = time.monotonic() - t0
    wrapped.reload()
    logs = wrapped.logs().decode()
    assert wrapped.attrs["State"]["ExitCode"] == 0, logs
    assert took < 2, took
    print(f"docker stop: exit code 0 after {took:.2f} s")
    assert "INFO main: received signal=SIGTERM" in logs
    assert "server stopped" in logs


def test_healthcheck_is_cheap_and_fails_without_server(docker_images: Images,
                                                        pg_topology: PgTopology,
                                                        containers: list[DockerContainer]
                                                        ) -> None:
    """
    The opt-in health check command starts no Python: against a running pg-status
    it exits 0 using at most 5 ms of CPU; against a port nobody listens on it
    exits 1.
    """
    port = free_port()
    c = pg_status_container(docker_images, pg_topology.hosts_env(), port).start()
    containers.append(c)
    base = f"http://127.0.0.1:{port}"
    poll(lambda: get(base + "/live") == (200, "OK"), 30, "/live in the container")
    runs = [healthcheck_cpu(port) for _ in range(5)]
    assert all(rc == 0 for rc, _ in runs), runs
    assert sorted(cpu for _, cpu in runs)[len(runs) // 2] <= 0.005, runs  # the median
    print(f"healthcheck CPU per run: {[round(cpu * 1000, 2) for _, cpu in runs]} ms")
    assert healthcheck_cpu(free_port())[0] == 1


def test_failover_seen_from_container(docker_images: Images, fresh_topology: Any,
                                      containers: list[DockerContainer]) -> None:
    """
    A failover of the topology (primary stopped, replica 1 promoted) is seen
    from inside the container: /master moves to the new primary.
    """
    topo = fresh_topology()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    c = pg_status_container(docker_images, topo.hosts_env(), port).start()
    containers.append(c)
    poll(lambda: get(base + "/master") == (200, topo.primary.host), 30, "the first master")
    new = topo.replicas[0]
    topo.failover(new)
    poll(lambda: get(base + "/master") == (200, new.host), 30, "the new master",
         context=lambda: c.get_wrapped_container().logs().decode()[-2000:])
    old = topo.nodes[0].host

    def seen() -> bool:
        listed = {h["host"]: h for h in hosts(base)}
        return listed[new.host]["master"] and not listed[old]["alive"]

    poll(seen, 30, "/hosts: the new master, the old one dead")


def test_postgres_and_pg_status_containers(docker_images: Images,
                                           containers: list[DockerContainer]) -> None:
    """
    Everything in containers (what a user with Docker runs on a laptop):
    PostgreSQL 15 from the image and pg-status watching it; memory of the
    pg-status container is reported.
    """
    pg_port = free_port()
    pg = (DockerContainer(docker_images.postgres).with_kwargs(network_mode="host")
          .with_env("POSTGRES_PASSWORD", "secret").with_env("PGPORT", str(pg_port))
          .with_command(["postgres", "-c", "listen_addresses=127.0.0.1"]))
    pg.start()
    containers.append(pg)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    c = pg_status_container(docker_images, {
        "pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(pg_port),
        "pg_status__pg_password": "secret"}, port).start()
    containers.append(c)
    poll(lambda: get(base + "/master") == (200, "127.0.0.1"), 60,
         "pg-status to find the containerised master",
         context=lambda: pg.get_wrapped_container().logs().decode()[-2000:])
    assert get(base + "/replica") == (200, "127.0.0.1")  # no replica: the master
    stats = c.get_wrapped_container().stats(stream=False)
    usage = stats["memory_stats"]["usage"]
    cache = stats["memory_stats"].get("stats", {}).get("inactive_file", 0)
    print(f"pg-status container memory: {usage / 2**20:.1f} MiB "
          f"({(usage - cache) / 2**20:.1f} MiB without inactive file cache)")
    assert usage < 200 * 2**20
