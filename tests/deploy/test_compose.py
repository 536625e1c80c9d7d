"""
The Compose demo (``docker/docker-compose.yml``) brought up for real with
docker-compose: primary, two streaming replicas, HAProxy and pg-status.

It runs with ``docker/docker-compose.hostnet.yml`` over it (local images,
host networking, free loopback ports).  An override cannot remove keys, so
the two that host networking excludes (the proxy's network aliases,
pg-status's published port) are dropped from a copy of the demo file; every
other line of it (entrypoints, init scripts, healthchecks, dependencies,
volumes, environment) is used as written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dockerengine import ROOT, DockerEngine, Images
from pgtopology import free_port, poll
from test_docker import get

pytestmark = [pytest.mark.docker]

DEMO = os.path.join(ROOT, "docker")


def compose_command() -> list[str] | None:
    """docker-compose 1.29 (Debian's), else ``docker compose`` v2, else None."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


class Demo:
    """One run of the demo under its own project name and ports."""

    def __init__(self, engine: DockerEngine, images: Images, workdir: str) -> None:
        self.engine = engine
        self.project = f"pgsdemo{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.env = engine.env(
            POSTGRES_IMAGE=images.postgres, HAPROXY_IMAGE=images.haproxy,
            PG_STATUS_IMAGE=images.pg_status, PG_STATUS_PORT=str(self.port),
            PG_PRIMARY_PORT=str(free_port()), PG_REPLICA_1_PORT=str(free_port()),
            PG_REPLICA_2_PORT=str(free_port()), PROXY_PORT_1=str(free_port("127.0.0.1")),
            PROXY_PORT_2=str(free_port("127.0.0.2")), PROXY_PORT_3=str(free_port("127.0.0.3")),
            PROXY_ADMIN_PORT=str(free_port()))
        with open(os.path.join(DEMO, "docker-compose.yml")) as f:
            demo = yaml.safe_load(f)
        demo["services"]["proxy"].pop("networks")
        demo["services"]["pg-status"].pop("ports")
        #: the engine's networks before the demo (names)
        self.networks_before = engine.run(["network", "ls", "--format", "{{.Name}}"]).stdout.split()
        self.file = os.path.join(workdir, "docker-compose.yml")
        with open(self.file, "w") as f:
            yaml.safe_dump(demo, f)

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [*compose_command(), "--project-directory", DEMO, "-p", self.project,
               "-f", self.file, "-f", os.path.join(DEMO, "docker-compose.hostnet.yml"), *args]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n"
                               f"{out.stdout}{out.stderr}")
        return out

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of this project still in the engine."""
        label = f"label=com.docker.compose.project={self.project}"
        found = {}
        for kind, args in (("containers", ["ps", "-aq"]), ("volumes", ["volume", "ls", "-q"]),
                           ("networks", ["network", "ls", "-q"])):
            out = self.engine.run([*args, "--filter", label]).stdout.split()
            found[kind] = out
        return found


@pytest.fixture
def demo(docker_engine: DockerEngine, docker_images: Images, tmp_path: Any) -> Iterator[Demo]:
    if compose_command() is None:
        message = "docker-compose is not installed (apt-get install docker-compose)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    d = Demo(docker_engine, docker_images, str(tmp_path))
    try:
        yield d
    finally:
        d.compose("down", "-v", "--remove-orphans", timeout=120)
    # host networking only: the demo never created a network
    after = docker_engine.run(["network", "ls", "--format", "{{.Name}}"]).stdout.split()
    assert sorted(after) == sorted(d.networks_before)


def test_compose_demo(demo: Demo) -> None:
    """
    ``up``: no network is created (the engine's list is unchanged while the
    demo runs); /hosts shows three alive hosts, one of them (pg-1, the primary
    behind the proxy) master; stopping the primary's container makes pg-1
    dead and leaves no master; ``down -v`` leaves no container, volume or
    network of the project behind.
    """
    demo.compose("up", "-d", "--no-build", timeout=600)
    base = f"http://127.0.0.1:{demo.port}"
    # while it runs: host networking only, no network of the project's
    running = demo.engine.run(["network", "ls", "--format", "{{.Name}}"]).stdout.split()
    assert sorted(running) == sorted(demo.networks_before), running
    assert demo.leftovers()["networks"] == []

    def hosts() -> list[dict[str, Any]] | None:
        code, body = get(base + "/hosts")
        return json.loads(body) if code == 200 else None

    def all_up() -> bool:
        listed = hosts()
        return bool(listed) and all(h["alive"] for h in listed) \
            and [h["master"] for h in listed] == [True, False, False]

    poll(all_up, 120, "three alive hosts, pg-1 master",
         context=lambda: demo.compose("logs", "--tail=30").stdout)
    listed = hosts()
    assert [h["host"] for h in listed] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert get(base + "/master") == (200, "127.0.0.1")
    assert get(base + "/replica")[1] in ("127.0.0.2", "127.0.0.3")
    assert all(h["lag_bytes"] is not None for h in listed[1:]), listed

    demo.compose("stop", "pg-primary")

    def primary_gone() -> bool:
        listed = hosts()
        return bool(listed) and not listed[0]["alive"] and not any(h["master"] for h in listed)

    poll(primary_gone, 60, "pg-1 dead and no master after stopping the primary")
    assert get(base + "/master")[0] == 404

    demo.compose("down", "-v", "--remove-orphans", timeout=120)
    assert demo.leftovers() == {"containers": [], "volumes": [], "networks": []}
