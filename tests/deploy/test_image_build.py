"""
Building the image with ``docker/build.sh``: CA certificates reach the build
through the ``CA_CERTS`` build argument, and a failed build leaves nothing
behind in the engine (no container, no image, dangling or not).

The successful build is the ``docker_images`` fixture's: it builds with
``CA_CERTS`` naming this machine's extra CA certificates, without which pip
cannot reach the package index through the TLS-intercepting proxy here.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from typing import Any

import pytest
from dockerengine import BUILD_SCRIPT, DockerEngine, Images, build_env
from pgtopology import free_port

pytestmark = [pytest.mark.docker]

#: a step the builder ran (not from its cache) and committed as a new image
COMMITTED = re.compile(r"^Removing intermediate container [0-9a-f]+\n ---> ([0-9a-f]+)$", re.M)


def engine_state(engine: DockerEngine) -> dict[str, set[str]]:
    """Every container (running or not) and every image (intermediate included)."""
    return {
        "containers": set(engine.run(["ps", "-aq", "--no-trunc"]).stdout.split()),
        "images": set(engine.run(["image", "ls", "-aq", "--no-trunc"]).stdout.split()),
        "dangling": set(engine.run(["image", "ls", "-q", "--no-trunc",
                                    "--filter", "dangling=true"]).stdout.split()),
    }


def failing_build(engine: DockerEngine, images: Images, **env: str) -> tuple[str, str]:
    """Run ``docker/build.sh`` expecting failure: (stdout, stderr)."""
    tag = f"pg-status-failed-{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        ["bash", BUILD_SCRIPT, "--network", "host"],
        env=build_env(engine, TAG=tag, PYTHON_IMAGE=images.python, PIP_EXTRA_INDEX_URL="",
                      **env),
        capture_output=True, text=True, timeout=900)
    assert out.returncode != 0, out.stdout[-3000:]
    assert engine.run(["image", "inspect", tag], check=False).returncode != 0
    return out.stdout, out.stderr


def self_signed_certificate(directory: Any) -> str:
    """A new CA certificate (PEM file): no earlier build has it in its cache."""
    cert, key = directory / "ca.pem", directory / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN=pg-status test CA {uuid.uuid4().hex}", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return str(cert)


def test_failed_build_leaves_nothing(docker_engine: DockerEngine, docker_images: Images,
                                     tmp_path: Any) -> None:
    """
    A build that fails late (pip cannot reach its index, after the builder
    committed new layers: a certificate no build has seen goes in first)
    leaves the engine as it found it: the layers it committed are gone, no
    container remains, no image is new, none is left dangling.
    """
    before = engine_state(docker_engine)
    stdout, stderr = failing_build(
        docker_engine, docker_images, CA_CERTS=self_signed_certificate(tmp_path),
        PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple/")
    committed = COMMITTED.findall(stdout)
    # the CA layer and the ones after it up to pip: new, so worth cleaning up
    assert len(committed) >= 3, stdout[-3000:]
    steps = re.findall(r"^Step \d+/\d+ : (.*)$", stdout, re.M)
    assert "pip install" in steps[-1], steps
    for layer in committed:
        assert docker_engine.run(["image", "inspect", layer], check=False).returncode != 0, layer
    assert "removed the images it left" in stderr, stderr
    assert engine_state(docker_engine) == before


def test_ca_certs_without_a_certificate_fail_the_build(
        docker_engine: DockerEngine, docker_images: Images, tmp_path: Any) -> None:
    """
    ``CA_CERTS`` naming a file that holds no PEM certificate fails the build
    at the certificate step, with a message saying so, and leaves nothing.
    """
    junk = tmp_path / "junk.crt"
    junk.write_text(f"not a certificate {uuid.uuid4().hex}\n")
    before = engine_state(docker_engine)
    stdout, _ = failing_build(docker_engine, docker_images, CA_CERTS=str(junk))
    assert "CA_CERTS holds no PEM certificate" in stdout
    assert engine_state(docker_engine) == before
